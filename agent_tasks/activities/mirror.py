"""The mirror: copies a task run's events, steps and task fields from Temporal to the graph store.

``copy_run`` reads a run's state from a ``RunSource`` in pages (``MirrorPage``: the view first, then
changed steps, then events; bounded by ``MIRROR_PAGE_EVENTS`` and ``MIRROR_PAGE_BYTES``) and writes
each (``GraphStore.write_task``, batched with other tasks' pages: ``taskgraph.page_batches``).
Writes MERGE on stable keys, so a repeated copy changes nothing; the last page sets the node's
``mirrored_write``. It serves the mirror activity (references only; the live run read by query), the
follower (``activities.follow``) and the rebuild (``activities.rebuild``).

Errors at the activity edge (``mirror_failure``): ``GraphUnavailable`` is a retryable, ``BENIGN``
``MirrorUnavailable`` (logged once, at the last of ``MIRROR_ATTEMPTS``); any other ``GraphError`` or
a value the driver cannot send is a refusal of the data, kept in the store (``taskgraph.refusals``)
as a non-retryable ``MirrorRefused``, or ``MirrorDataError`` when the store keeps nothing. A call
whose run is gone raises a ``BENIGN`` ``MirrorRunGone``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import timedelta
from typing import Protocol

from temporalio import activity
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.activities.follow import HistoryPoll, Published, follow
from agent_tasks.activities.heartbeat import heartbeating
from agent_tasks.activities.history_page import applied, history_page
from agent_tasks.broker import (
    Broker,
    Message,
    PageMessage,
    PollMessage,
    Subscriber,
    WrittenMessage,
    channels,
    open_page,
    page_channel,
    project_channel,
)
from agent_tasks.contract import (
    MAX_PAYLOAD_BYTES,
    MIRROR_ACTIVITY,
    Event,
    MirrorInput,
    MirrorOutcome,
    MirrorPage,
    MirrorQuery,
    TaskView,
    model_size,
    project_of,
)
from agent_tasks.contract.errors import (
    MIRROR_DATA_ERROR,
    MIRROR_REFUSED,
    MIRROR_UNAVAILABLE,
    GraphError,
    GraphUnavailable,
)
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.refusals import Refusals
from agent_tasks.workflows.mirroring import MIRROR_RETRY
from agent_tasks.workflows.task import TaskWorkflow

MIRROR_PAGE_EVENTS = 100
"""Events read per query page and written per transaction."""
MIRROR_PAGE_BYTES = MAX_PAYLOAD_BYTES
"""Bytes of JSON per query page, at most (``MAX_PAYLOAD_BYTES``: the query result's budget)."""
MIRROR_ATTEMPTS = MIRROR_RETRY.maximum_attempts
"""The attempts of one mirror call (``MIRROR_RETRY``): the last one's failure is logged."""
PAGE_KEYS_HELD = 4_096
"""Page signing keys a worker keeps (read from the key store once each)."""
MIRROR_RUN_GONE = "MirrorRunGone"
"""The error type of a mirror call whose run the server no longer has (terminated, or past
retention)."""
REFUSED_METRIC = "agent_tasks_mirror_refused"
"""The counter of mirror calls refused for their data (``MirrorRefused``), exported with the SDK's
metrics (``telemetry``)."""
QUERY_TIMEOUT = timedelta(seconds=10)
"""RPC timeout of each query the mirror sends its workflow (answered from the worker's cache)."""


def mirror_failure(err: Exception, where: str) -> ApplicationError:
    """The error the mirror activity raises for ``err``: a retryable ``MirrorUnavailable`` for
    ``GraphUnavailable``, else a non-retryable ``MirrorDataError``; ``where`` names task and
    seqs."""
    if isinstance(err, GraphUnavailable):
        return ApplicationError(
            f"graph store unavailable while mirroring {where}: {err}",
            type=MIRROR_UNAVAILABLE,
            category=ApplicationErrorCategory.BENIGN,
        )
    return ApplicationError(
        f"graph store refused the mirror of {where}: {err}",
        type=MIRROR_DATA_ERROR,
        non_retryable=True,
    )


class RunSource(Protocol):
    """Where ``copy_run`` reads one run's state: the live run by query (``QueriedRun``) or a
    run's ledger rebuilt by replaying its history (``activities.rebuild.ReplayedRun``)."""

    async def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """The next page of the run's state (``pages.mirror_page``)."""
        ...


async def announce(broker: Broker, view: TaskView) -> None:
    """Publish a ``WrittenMessage`` of ``view`` on the task's and project's channels, so streams and
    inboxes read the task."""
    message = WrittenMessage(task=view.name, seq=view.last_seq, status=view.status.value)
    targets = [*channels(view.workflow_id, view.session_id), project_channel(view.project_id)]
    await broker.publish(targets, message)


class AnnouncedRun:
    """A ``RunSource`` that announces each page holding the view and keeps the last such ``view``
    (where a follower's history page starts)."""

    def __init__(self, source: RunSource, broker: Broker | None) -> None:
        self.source = source
        self.broker = broker
        self.view: TaskView | None = None
        """The view of the last page read that held one."""

    async def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """The source's page, announced and kept when it holds the view."""
        page = await self.source.mirror_page(query)
        if page.view is not None:
            self.view = page.view
            if self.broker is not None:
                await announce(self.broker, page.view)
        return page


class QueriedRun:
    """A run read by the ``mirror_page`` query, each bounded by ``QUERY_TIMEOUT`` and answered from
    the worker's cache. A worker that predates the query refuses it and the workflow retries after a
    pause, so a rolling deploy delays the mirror and loses nothing."""

    def __init__(self, client: Client, workflow_id: str, run_id: str) -> None:
        self.handle = client.get_workflow_handle(workflow_id, run_id=run_id)

    async def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """The ``mirror_page`` query, sent again (10 ms doubling to 0.5 s, within ``QUERY_TIMEOUT``)
        while the server's one-query buffer of the run is full (``RESOURCE_EXHAUSTED``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUERY_TIMEOUT.total_seconds()
        delay = 0.01
        while True:
            try:
                return await self.handle.query(
                    TaskWorkflow.mirror_page, query, rpc_timeout=QUERY_TIMEOUT
                )
            except RPCError as err:
                if err.status != RPCStatusCode.RESOURCE_EXHAUSTED or loop.time() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)


async def copy_run(
    source: RunSource,
    graph: GraphStore,
    run: str,
    *,
    after_seq: int = 0,
    up_to_seq: int | None = None,
    after_write: int = 0,
    mark: str | None = None,
) -> MirrorOutcome:
    """Copy events ``after_seq < seq <= up_to_seq`` (None: the newest), the steps changed after
    ``after_write`` and the task node from one run to the graph store, a page per transaction.

    Args:
        source: the run's state.
        graph: where to write.
        run: names the run in errors (``"workflow id run run id"``).
        after_seq, up_to_seq, after_write: what to copy.
        mark: stamped on every event and step node written (``GraphStore.write_task``).

    Raises:
        ApplicationError: ``MirrorDataError`` when the run does not hold the asked events.
        contract.errors.GraphError: from the writes.
        temporalio.service.RPCError: from the queries.
    """
    query = MirrorQuery(
        after_seq=after_seq,
        up_to_seq=up_to_seq,
        after_write=after_write,
        events=MIRROR_PAGE_EVENTS,
        max_bytes=MIRROR_PAGE_BYTES,
    )
    page = await source.mirror_page(query)
    view = page.view
    assert view is not None, "the first page holds the view"
    last = view.last_seq if up_to_seq is None else up_to_seq
    after = max(after_seq, view.run_first_seq - 1)
    whole = last >= view.last_seq  # the copy reaches the view's newest write
    outcome = MirrorOutcome(
        events=0,
        steps=0,
        up_to_seq=last,
        up_to_write=view.writes if whole else None,
        end=page.end,
    )
    if view.writes <= after_write and after >= last and not page.steps:
        return outcome  # nothing new (a follower woken by a history event of no write)
    while True:
        done = page.steps_done and (page.events[-1].seq if page.events else after) >= last
        written = view.writes if done and whole else None
        await graph.write_task(view, page.events, page.steps, mark=mark, mirrored_write=written)
        outcome.steps += len(page.steps)
        outcome.events += len(page.events)
        after = page.events[-1].seq if page.events else after
        if done:
            return outcome
        if page.view is None and page.steps_done and not page.events:
            raise ApplicationError(
                f"{run}: events {after + 1}..{last} are not in the run",
                type=MIRROR_DATA_ERROR,
                non_retryable=True,
            )
        query = query.model_copy(
            update={
                "after_seq": after,
                "up_to_seq": last,
                "after_name": page.steps[-1].step_name if page.steps else query.after_name,
                "with_view": False,
            }
        )
        page = await source.mirror_page(query)


class MirrorActivities:
    """The mirror activity with its dependencies.

    Args:
        client: the worker's Temporal client (queries, the history's long poll).
        graph: the graph store.
        broker: where each copy's first page is announced; None: streams poll the task every
            ``STREAM_POLL_S``.
        followers: calls that may follow their run at once on this worker (each holds an activity
            slot); a follow call past them copies what waits and ends.
    """

    def __init__(
        self,
        client: Client,
        graph: GraphStore,
        broker: Broker | None = None,
        *,
        followers: int = 50,
    ) -> None:
        self.client = client
        self.graph = graph
        self.broker = broker
        self.followers = followers
        self.following = 0
        """Calls following their run now."""
        self.subscriber: Subscriber | None = None
        """The worker's broker subscription while it runs (``listening``): followers take their
        runs' published pages from it."""
        self.page_keys: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        """Page signing keys by project and key id, the most recently used last."""

    @contextlib.asynccontextmanager
    async def listening(self) -> AsyncIterator[None]:
        """While open, followers take their runs' published pages from the broker (none without
        one)."""
        if self.broker is None:
            yield
            return
        self.subscriber = Subscriber(self.broker)
        reading = asyncio.ensure_future(self.subscriber.run())
        try:
            yield
        finally:
            self.subscriber = None
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading

    @activity.defn(name=MIRROR_ACTIVITY)
    async def mirror_task(self, input: MirrorInput) -> MirrorOutcome:
        """Mirror events ``after_seq < seq <= up_to_seq``, the steps changed after ``after_write``
        and the task node, heartbeating; a ``follow`` call goes on (``activities.follow``). Returns
        the counts and how far the graph store holds the run."""
        try:
            return await heartbeating(self._mirror(input))
        except (GraphError, OverflowError, TypeError, ValueError) as err:
            where = f"task {input.workflow_id} seqs {input.after_seq + 1}..{input.up_to_seq}"
            failure = mirror_failure(err, where)
            if failure.type == MIRROR_DATA_ERROR:
                failure = await self._refused(input, failure)
            attempt = activity.info().attempt
            if failure.category is ApplicationErrorCategory.BENIGN and attempt >= MIRROR_ATTEMPTS:
                activity.logger.warning(
                    "%s (attempt %d; the task retries after a pause)", failure.message, attempt
                )
            raise failure from err
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            if details is None or not details.not_found:
                raise
            # the run is gone (terminated, or past retention) while the call waited: nothing
            # is left to copy, and no one to tell; said at DEBUG, not as a failure's traceback
            raise ApplicationError(
                f"task {input.workflow_id} run {input.run_id} is gone: nothing left to mirror",
                type=MIRROR_RUN_GONE,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            ) from None

    async def _refused(self, input: MirrorInput, failure: ApplicationError) -> ApplicationError:
        """The error for a call refused for its data (``failure``, a ``MirrorDataError``):
        ``MirrorRefused`` once the refusal is kept in the store (counted and logged), else
        ``failure`` itself."""
        try:
            held = await Refusals(self.graph).record(
                project_of(input.workflow_id),
                input.workflow_id,
                failure.message,
                after_seq=input.after_seq,
                up_to_seq=input.up_to_seq,
                after_write=input.after_write,
            )
        except GraphError as err:
            activity.logger.warning("%s; the refusal was not kept either: %s", failure, err)
            return failure
        activity.metric_meter().create_counter(
            REFUSED_METRIC, "Mirror calls the graph store refused for their data", "calls"
        ).add(1)
        activity.logger.warning(
            "%s (refused %d times; the task is retried from its history from %s)",
            failure.message,
            held.attempts,
            held.retry_at.isoformat(),
        )
        return ApplicationError(
            f"{failure.message} (kept for a retry: agent-tasks graph health)",
            type=MIRROR_REFUSED,
            non_retryable=True,
        )

    # Long: one mirror call, its copies as closures over the run's source and the view they
    # move (the first copy, the follower's copies from the history, its published pages)
    async def _mirror(self, input: MirrorInput) -> MirrorOutcome:
        source = AnnouncedRun(QueriedRun(self.client, input.workflow_id, input.run_id), self.broker)
        run = f"task {input.workflow_id} run {input.run_id}"

        async def copy(after_seq: int, after_write: int, up_to_seq: int | None) -> MirrorOutcome:
            """One copy: once it returns, the graph store holds the run up to the outcome's
            ``up_to_seq``."""
            return await copy_run(
                source,
                self.graph,
                run,
                after_seq=after_seq,
                up_to_seq=up_to_seq,
                after_write=after_write,
            )

        taken: list[Event] = []
        """Events of published pages taken into ``source.view`` and not yet written."""

        async def take_page(message: PageMessage) -> bool | None:
            """Take a published page into the view (``Published.take``): None unless signed by a
            writer of the project, of this run, and the view's next write."""
            key = await self._page_key(project_of(input.workflow_id), message.key_id)
            write = open_page(message, key)
            view = source.view
            if write is None or view is None or view.agent is not None:
                return None  # an agent task's code writes besides its updates: the history
            if write.run_id != input.run_id:
                return None
            if write.workflow_id != input.workflow_id:
                return None
            if write.outcome.last_seq <= view.last_seq:  # the poll brought it first
                return False
            built = applied(view, [(write.input, write.outcome)])
            if built is None or write.outcome.writes is None:
                return None
            source.view, events = built
            taken.extend(events)
            return True

        async def write_taken() -> MirrorOutcome:
            """Write the view with the taken pages' events (``Published.flush``)."""
            if not taken or source.view is None:
                return MirrorOutcome(events=0, steps=0)
            events = list(taken)
            taken.clear()
            return await self._write_history_page(source.view, events)

        async def follow_copy(
            after_seq: int, after_write: int, history: Sequence[HistoryEvent] | None
        ) -> MirrorOutcome:
            """A follower's copy: built from ``history`` where it can be, else queried."""
            built = None
            if source.view is not None:
                built = await history_page(self.client.data_converter, source.view, history)
            if built is None:
                return await copy(after_seq, after_write, None)
            source.view, events = built
            return await self._write_history_page(source.view, events)

        if not input.follow:
            return await copy(input.after_seq, input.after_write, input.up_to_seq)
        first = await copy(input.after_seq, input.after_write, None)
        if self.following >= self.followers:
            return first.model_copy(update={"history_token": input.history_token})
        self.following += 1
        try:
            poll = HistoryPoll(self.client, input.workflow_id, input.run_id, input.history_token)
            pages = Published(take_page, write_taken)
            async with self._pages(input.workflow_id, pages) as published:
                return await follow(follow_copy, poll, first, published)
        finally:
            self.following -= 1

    @contextlib.asynccontextmanager
    async def _pages(self, workflow_id: str, pages: Published) -> AsyncIterator[Published | None]:
        """``pages`` fed with the task's published pages while open, None without a subscriber; a
        page before the subscription holds is brought by the poll."""
        subscriber = self.subscriber
        if subscriber is None:
            yield None
            return
        channel = page_channel(workflow_id)

        def put(message: Message) -> None:
            if isinstance(message, PageMessage | PollMessage):
                pages.put(message)

        adding = asyncio.ensure_future(subscriber.add(channel, put))
        try:
            yield pages
        finally:
            if adding.done():
                subscriber.remove(channel, put)
            else:
                adding.cancel()  # cancelled, it leaves nothing subscribed
                with contextlib.suppress(asyncio.CancelledError):
                    await adding

    async def _page_key(self, project_id: str, key_id: str) -> bytes | None:
        """The page signing key ``key_id`` of ``project_id`` (kept once read, ``PAGE_KEYS_HELD``);
        None when the store has none."""
        held = (project_id, key_id)
        key = self.page_keys.get(held)
        if key is None:
            try:
                key = (await self.graph.get_keys(project_id, [key_id])).get(key_id)
            except GraphError:  # the poll brings the write; the copy then says why it fails
                return None
            if key is None:
                return None
            self.page_keys[held] = key
            while len(self.page_keys) > PAGE_KEYS_HELD:
                self.page_keys.popitem(last=False)
        self.page_keys.move_to_end(held)
        return key

    async def _write_history_page(self, view: TaskView, events: list[Event]) -> MirrorOutcome:
        """Write ``view`` and its new ``events`` in ``copy_run``'s pages, the last raising the
        node's ``mirrored_write``, announced first; returns the counts and how far the store holds
        the run."""
        if events and self.broker is not None:
            await announce(self.broker, view)
        pages = list(_bounded(events, MIRROR_PAGE_BYTES - model_size(view)))
        for number, page in enumerate(pages, 1):
            written = view.writes if number == len(pages) else None
            await self.graph.write_task(view, page, [], mirrored_write=written)
        return MirrorOutcome(
            events=len(events), steps=0, up_to_seq=view.last_seq, up_to_write=view.writes
        )


def _bounded(events: Sequence[Event], max_bytes: int) -> Iterator[list[Event]]:
    """``events`` in pages of ``MIRROR_PAGE_EVENTS`` and ``max_bytes`` of JSON (one at least), in
    order."""
    page: list[Event] = []
    used = 0
    for event in events:
        size = model_size(event)
        if page and (len(page) == MIRROR_PAGE_EVENTS or used + size > max_bytes):
            yield page
            page, used = [], 0
        page.append(event)
        used += size
    if page:
        yield page
