"""The mirror: copies a task run's events, steps and task fields from Temporal to Neo4j.

``copy_run`` reads one run's state from a ``RunSource`` in pages (``MirrorPage``: the view on
the first, the steps changed after a write counter, then the events of a seq range; each page
bounded by count, ``MIRROR_PAGE_EVENTS``, and bytes, ``MIRROR_PAGE_BYTES``) and writes each
page (``GraphStore.write_task``: with the pages of other tasks that wait meanwhile, in one
transaction, ``taskgraph.page_batches``). A mirror call of a few events is one query and one
page (it was three queries, view, steps and events, each a server hop and a workflow
activation on the worker); a follower's later copies of ``record_events`` writes need no
query at all (``activities.history_page``).
Writes are MERGEs on stable keys, so repeating a copy changes nothing; the last page of a
copy that reached the run's newest write also sets the task node's ``mirrored_write`` (every
write up to it is in Neo4j). It serves the mirror activity (whose input carries references
only: task, run, seq range, write watermark; it reads the live run by query), the call that
follows a run (``activities.follow``: a copy per new workflow task of the run) and the rebuild
of Neo4j from the Temporal histories (``activities.rebuild``, which replays each run's history
once).

Error mapping at the activity edge (``mirror_failure``): the graph store's errors that may pass
(``taskgraph.errors.GraphUnavailable``, to which each adapter maps its driver's: for Neo4j a
deadlock, an unavailable server, a leader switch, an expired session, a transaction that ran
out of time) raise a retryable ``ApplicationError`` of type ``MirrorUnavailable``, retried by
the workflow's retry policy. It is of category ``BENIGN``
(the SDK logs its attempts at DEBUG, with no traceback: a loaded Neo4j that answers on the
next attempt is the mirror working as designed); the last attempt of a call
(``MIRROR_ATTEMPTS``) logs one WARNING line, and the task's view says why it waits
(``mirror_error``). Any other graph store error (``GraphError``), and a
value the driver cannot send (``OverflowError``, ``TypeError``, ``ValueError``), is a refusal
of the data: the activity keeps it in the store (``taskgraph.refusals``, from which a worker
retries the task from its history later: ``activities.refusals``) and raises a non-retryable
``ApplicationError`` of type ``MirrorRefused``, with which a finished task closes; when the
store keeps nothing either, a ``MirrorDataError`` (the task stays open and calls again after a
pause). Each message names the task and the seq range. A call cancelled because its run is
gone (its heartbeat found the workflow terminated while it waited) raises a non-retryable,
``BENIGN`` ``MirrorRunGone``: no warning with a traceback for a terminate.
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
"""The error type of a mirror call whose run the server no longer has (its heartbeat found it
gone: terminated while the call waited, or past retention)."""
REFUSED_METRIC = "agent_tasks_mirror_refused"
"""The counter of mirror calls the graph store refused for their data (``MirrorRefused``),
exported with the SDK's metrics (``telemetry``; ``OTEL_METRICS_EXPORTER``)."""
QUERY_TIMEOUT = timedelta(seconds=10)
"""RPC timeout of each query the mirror sends to its workflow (answered by the worker that
runs the activity, from its cache, in milliseconds)."""


def mirror_failure(err: Exception, where: str) -> ApplicationError:
    """The error the mirror activity raises for ``err`` (the module's error mapping): a
    retryable ``MirrorUnavailable`` for a graph store error that may pass
    (``GraphUnavailable``), else a non-retryable ``MirrorDataError``; ``where`` names the
    task and seqs in the message."""
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
    """Publish a ``WrittenMessage`` of ``view`` on the task's channels and its project's:
    streams and inboxes wake and read the task (the word carries no event)."""
    message = WrittenMessage(task=view.name, seq=view.last_seq, status=view.status.value)
    targets = [*channels(view.workflow_id, view.session_id), project_channel(view.project_id)]
    await broker.publish(targets, message)


class AnnouncedRun:
    """A ``RunSource`` that announces (``announce``) each page it reads with the task's view
    (the first page of each copy) and keeps the last such view (``view``: where a follower's
    page built from the history starts, ``activities.history_page``)."""

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
    """A run read by the ``mirror_page`` query, each bounded by ``QUERY_TIMEOUT``. For the run
    the mirror activity serves: its worker answers from its cache. (A query to a closed run
    replays its whole history on a worker: ``rebuild`` replays once instead.) A worker that
    predates the query refuses it; the mirror call then fails and the workflow retries it
    after a pause (``mirror_pause``), so a rolling deploy delays Neo4j and loses nothing."""

    def __init__(self, client: Client, workflow_id: str, run_id: str) -> None:
        self.handle = client.get_workflow_handle(workflow_id, run_id=run_id)

    async def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """The ``mirror_page`` query, sent again (from 10 ms, doubling to 0.5 s, within
        ``QUERY_TIMEOUT``) while the server turns it away as busy: a query that comes while a
        workflow task of the run is in flight waits in a buffer of the server's, which holds
        one ("consistent query buffer is full", ``RESOURCE_EXHAUSTED``)."""
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
    """Copy events ``after_seq < seq <= up_to_seq`` (None: the run's newest when the copy
    starts), the steps changed after ``after_write``, and the task node, from one run to
    Neo4j, one page per transaction (``MirrorPage``: the view on the first page; the steps
    first, then the events).

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
    """The mirror activity with its dependencies: a Temporal client (to query the workflow
    and follow its history), the task graph (to write Neo4j), and the broker to tell streams
    of new events.

    Args:
        client: the worker's Temporal client.
        graph: the task graph.
        broker: where each copy's first page is announced (``AnnouncedRun``); None: streams
            find new events by reading the task every ``STREAM_POLL_S``.
        followers: calls that may follow their run at once on this worker
            (``activities.follow``; each holds an activity slot while it follows); a follow
            call past them copies what waits and ends, as a call per batch did.
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
        """The worker's subscription to the broker while it runs (``listening``): followers
        take their runs' published pages from it."""
        self.page_keys: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        """Page signing keys by project and key id, the most recently used last."""

    @contextlib.asynccontextmanager
    async def listening(self) -> AsyncIterator[None]:
        """While open, followers take their runs' published pages (``broker.PageMessage``)
        from the broker; without a broker, nothing."""
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
        """Mirror events ``after_seq < seq <= up_to_seq``, the steps changed after
        ``after_write``, and the task node, heartbeating (``heartbeating``); a ``follow``
        call goes on with what the run takes next (``activities.follow``). Returns the
        counts written and how far Neo4j holds the run."""
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
        """The error for a call the store refused for its data (``failure``, a
        ``MirrorDataError``): ``MirrorRefused`` once the refusal is kept in the store
        (``taskgraph.refusals``: a worker retries the task from its history later), counted
        (``REFUSED_METRIC``) and logged; ``failure`` itself when the store keeps nothing
        either (the task then stays open and its mirror calls again after a pause)."""
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
            """One copy: once it returns, Neo4j holds the run up to ``up_to_seq`` of the
            outcome (the place to tell others that the log grew)."""
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
            """Take a published page into the view (``Published.take``): None unless it is
            signed by a writer of the project, of this run, and the view's next write."""
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
        """``pages`` fed with the task's published pages while open (``page_channel``), None
        without a subscriber. The subscription is not waited for: a page before it holds is
        brought by the poll."""
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
        """The page signing key ``key_id`` of ``project_id`` from the key store (kept once
        read, ``PAGE_KEYS_HELD``); None when the store has no such key."""
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
        """Write ``view`` and its new ``events`` (``history_page``) in pages of
        ``copy_run``'s bounds, the last one raising the node's ``mirrored_write``, announced
        first as ``copy_run``'s are; returns what was written and how far Neo4j holds the
        run."""
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
    """``events`` in pages of at most ``MIRROR_PAGE_EVENTS`` and ``max_bytes`` of JSON (one
    event at least), in order."""
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
