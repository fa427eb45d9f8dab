"""The mirror's follower: one mirror call that keeps a task's current run in Neo4j for as long
as the run is written to (``MirrorInput.follow``; the policy and its numbers are in
``workflows.mirroring``).

It copies what waits, then waits for the run's next workflow task by a long poll of the run's
own history (``GetWorkflowExecutionHistory`` with ``wait_new_event``: the server answers when
the history grows, which is when a workflow task that took a write completes), and copies again
what the new history events wrote, one Neo4j transaction per page: the page built from those
events where they carry it (``activities.history_page``: the ``record_events`` updates' inputs
and results), else read by the ``mirror_page`` query. It copies at most once per
``MIRROR_FOLLOW_AGE``, and waits out the rest of that age before its next long poll, not after
it: a lone write (its follower already polling) is in Neo4j a transaction after its
acknowledgement, and writes back to back share the next poll and its copy, which brings every
event that came meanwhile (a wait after the poll would copy only what the poll brought, a
cadence late). Where the run's writers publish their pages (``broker.PageMessage``: a
``record_events`` write Temporal took, signed), the follower copies each as it comes
(``Published``) and long-polls the history only every ``MIRROR_FOLLOW_GAP``, for what no page
brought (any other write, a signal, the run's end, a page lost), or at once when a page does
not follow what it holds: so many writers cost the server one poll per task and gap, not one
per write. It ends when the run has been idle for ``MIRROR_FOLLOW_IDLE``, when it has followed
for ``MIRROR_FOLLOW_MAX``, when the run ends (``MirrorPage.end``) and everything is copied, or
when its worker shuts down; its outcome tells the workflow how far Neo4j holds the run, and
where in the history it stopped reading (``MirrorOutcome.history_token``), so that the next
follower does not read the history from its first event again.

Nothing here adds to the run's history: the long poll and the query are reads, the waits are
on the worker's clock, and heartbeats are not history events.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.broker import PageMessage, PollMessage
from agent_tasks.contract import MirrorOutcome
from agent_tasks.workflows.mirroring import (
    MIRROR_FOLLOW_AGE,
    MIRROR_FOLLOW_GAP,
    MIRROR_FOLLOW_IDLE,
    MIRROR_FOLLOW_MAX,
)

POLL_LONGEST = timedelta(seconds=20)
"""One long poll of the history at most (the server answers empty when nothing came)."""
POLL_MARGIN = timedelta(seconds=1)
"""The RPC timeout of a long poll is its wait plus this: the server answers a little before
the caller's deadline."""

Copy = Callable[[int, int, Sequence[HistoryEvent] | None], Awaitable[MirrorOutcome]]
"""Copies what the run holds after a seq and a write counter, given the history events that
came since the last copy (None: unknown; ``activities.history_page``)."""


class Published:
    """The pages published for the followed run, and its writers' word to poll now
    (``broker.PollMessage``), as they come (``queue``, at most ``PAGES_WAITING``: one past
    them is dropped, the poll brings its write); how a page is taken (``take``: True when its
    write now waits to be written, False when the follower holds it already, None when it is
    not signed by a writer of the task, is of another run, or does not follow what the
    follower holds), and how what waits is written (``flush``: what it wrote)."""

    Take = Callable[[PageMessage], Awaitable[bool | None]]
    Flush = Callable[[], Awaitable[MirrorOutcome]]

    def __init__(self, take: Take, flush: Flush) -> None:
        self.queue: asyncio.Queue[PageMessage | PollMessage] = asyncio.Queue(PAGES_WAITING)
        self.take = take
        self.flush = flush

    def put(self, message: PageMessage | PollMessage) -> None:
        """Queue ``message`` (dropped when the queue is full)."""
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(message)


PAGES_WAITING = 1_000
"""Published pages (and words to poll) a follower holds waiting, at most."""


class HistoryPoll:
    """The long poll of one run's history from a position (the server's continuation
    token, carried as base64 text: ``MirrorInput.history_token``; empty: the first event).

    Args:
        client: the Temporal client.
        workflow_id, run_id: the run.
        token: where to start.
    """

    def __init__(self, client: Client, workflow_id: str, run_id: str, token: str | None) -> None:
        self.client = client
        self.execution = WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
        self.token = base64.b64decode(token) if token else b""
        self.events: list[HistoryEvent] | None = []
        """The history events the last ``grew`` brought, in order (None: the position was
        reset, what came is unknown)."""

    @property
    def position(self) -> str:
        """Where the poll is, as base64 text."""
        return base64.b64encode(self.token).decode("ascii")

    async def grew(self, wait: timedelta) -> int:
        """Wait up to ``wait`` for the history to grow past the position; returns the bytes
        of the events added (0: none came), keeps them (``events``) and moves the position
        past them. A position the server refuses (another server version's token) starts
        again from the first event (returns 1, ``events`` None). The poll is retried as the
        SDK's own calls are (``retry=True``): a poll sent as its connection is recycled (the
        frontend's GOAWAY after ``frontend.keepAliveMaxConnectionAge``) fails with CANCELLED
        otherwise, and ends the mirror call.

        Raises:
            temporalio.service.RPCError: the server failed otherwise, or still failed after
                the client's retries (``temporalio.client.RetryConfig``).
        """
        request = GetWorkflowExecutionHistoryRequest(
            namespace=self.client.namespace,
            execution=self.execution,
            next_page_token=self.token,
            wait_new_event=True,
            skip_archival=True,
        )
        try:
            response = await self.client.workflow_service.get_workflow_execution_history(
                request, timeout=wait + POLL_MARGIN, retry=True
            )
        except RPCError as err:
            if err.status != RPCStatusCode.INVALID_ARGUMENT or not self.token:
                raise
            self.token = b""
            self.events = None
            return 1
        if response.next_page_token:
            self.token = response.next_page_token
        self.events = list(response.history.events)
        return response.history.ByteSize() if self.events else 0


class _Followed:
    """What a follower has copied so far: the last copy's outcome and the counts of all; one
    copy at a time (``lock``: the poll's and the pages')."""

    def __init__(self, first: MirrorOutcome) -> None:
        self.last = first
        self.events, self.steps = first.events, first.steps
        self.lock = asyncio.Lock()
        self.poll_now = asyncio.Event()
        """Set when a page did not follow, or a writer said to poll: the poll goes at once."""
        self.heard_at = float("-inf")
        """When the last page came (the loop's clock)."""
        self.idle_since = 0.0

    def add(self, outcome: MirrorOutcome, now: float) -> None:
        """Count a copy's ``outcome`` (at loop time ``now``): it becomes the last unless it
        reaches less far than the last (a page copied after a poll had brought its write),
        and a run's end, once seen, stays."""
        reach = (outcome.up_to_write or 0, outcome.up_to_seq or 0)
        if reach >= (self.last.up_to_write or 0, self.last.up_to_seq or 0):
            self.last = outcome.model_copy(update={"end": outcome.end or self.last.end})
        self.events += outcome.events
        self.steps += outcome.steps
        if outcome.events or outcome.steps:
            self.idle_since = now


async def follow(
    copy: Copy, poll: HistoryPoll, first: MirrorOutcome, published: Published | None = None
) -> MirrorOutcome:
    """Follow the run from ``first`` (the outcome of the copy the call began with) until it
    is idle, the bound has passed, it ends with everything copied, or the worker shuts down
    (the module docstring: a copy in flight then is dropped, since the worker no longer
    answers the run's queries), copying the pages of ``published`` as they come; returns the
    last whole copy's outcome with the counts of all of them and the poll's position.

    Raises:
        the errors of ``copy``, of ``published.take`` and ``.flush``, and of
        ``HistoryPoll.grew``.
    """
    followed = _Followed(first)
    running = [asyncio.ensure_future(_follow(copy, poll, followed, published))]
    if published is not None:
        running.append(asyncio.ensure_future(_take_pages(published, followed)))
    shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    try:
        await asyncio.wait([*running, shutdown], return_when=asyncio.FIRST_COMPLETED)
        for done in running:
            if done.done():
                done.result()
    finally:
        for waiting in (*running, shutdown):
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
    if published is not None and not shutdown.done():  # what was taken and not yet written
        followed.add(await published.flush(), asyncio.get_running_loop().time())
    return followed.last.model_copy(
        update={
            "events": followed.events,
            "steps": followed.steps,
            "history_token": poll.position,
        }
    )


async def _take_pages(published: Published, followed: _Followed) -> None:
    """Take each published page as it comes and write what waits at most once per
    ``MIRROR_FOLLOW_AGE`` (a page after a quiet cadence at once), until cancelled."""
    loop = asyncio.get_running_loop()
    flushed_at = float("-inf")
    waiting = False
    while True:
        due = flushed_at + MIRROR_FOLLOW_AGE.total_seconds() - loop.time()
        if waiting and due <= 0:
            async with followed.lock:
                followed.add(await published.flush(), loop.time())
            flushed_at, waiting = loop.time(), False
            continue
        try:
            message = await asyncio.wait_for(published.queue.get(), due if waiting else None)
        except TimeoutError:
            continue
        if isinstance(message, PollMessage):  # its write's effect may come a workflow task
            followed.heard_at = float("-inf")  # later: polls at the cadence until a page
            followed.poll_now.set()
            continue
        async with followed.lock:
            taken = await published.take(message)
        if taken is None:
            followed.poll_now.set()
            continue
        followed.heard_at = loop.time()
        waiting = waiting or taken


async def _follow(
    copy: Copy, poll: HistoryPoll, followed: _Followed, published: Published | None
) -> None:
    loop = asyncio.get_running_loop()
    started = followed.idle_since = copied_at = loop.time()
    while not followed.last.end:
        # the cadence: a copy per MIRROR_FOLLOW_AGE at most, waited for before the poll;
        # while pages come, a poll per MIRROR_FOLLOW_GAP, or at once for a page that did not
        # follow
        while not followed.poll_now.is_set():  # the gap again once a page came meanwhile
            gap = MIRROR_FOLLOW_AGE
            if loop.time() - followed.heard_at < MIRROR_FOLLOW_GAP.total_seconds():
                gap = MIRROR_FOLLOW_GAP
            wait = min(copied_at + gap.total_seconds() - loop.time(), _left(followed, started))
            if wait <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(followed.poll_now.wait(), wait)
        if followed.poll_now.is_set():
            followed.poll_now.clear()
            age = copied_at + MIRROR_FOLLOW_AGE.total_seconds() - loop.time()
            await asyncio.sleep(min(age, _left(followed, started)))
        left = _left(followed, started)
        if left <= 0:
            return
        grown = await poll.grew(timedelta(seconds=min(left, POLL_LONGEST.total_seconds())))
        if not grown:
            continue
        copied_at = loop.time()
        followed.idle_since = max(followed.idle_since, copied_at)
        async with followed.lock:
            if published is not None:  # pages taken first: the copy finds their writes held
                followed.add(await published.flush(), loop.time())
            last = followed.last
            outcome = await copy(last.up_to_seq or 0, last.up_to_write or 0, poll.events)
            followed.add(outcome, loop.time())


def _left(followed: _Followed, started: float) -> float:
    """Seconds the follower has left (loop time): until it has been idle for
    ``MIRROR_FOLLOW_IDLE`` or has followed for ``MIRROR_FOLLOW_MAX``."""
    now = asyncio.get_running_loop().time()
    return min(
        MIRROR_FOLLOW_IDLE.total_seconds() - (now - followed.idle_since),
        MIRROR_FOLLOW_MAX.total_seconds() - (now - started),
    )
