"""The mirror's follower: one mirror call that keeps a task's current run in the graph store while
it is written to (``MirrorInput.follow``; policy and numbers in ``workflows.mirroring``, described
in ``docs/graph-stores.md``).

It long-polls the run's history (``wait_new_event``) for each new workflow task and copies what it
wrote in one transaction per page, built from the history where it can be
(``activities.history_page``), else read by the ``mirror_page`` query; at most once per
``MIRROR_FOLLOW_AGE``, waited out before the next poll so back-to-back writes share it. Pages the
writers publish (``broker.PageMessage``) are copied as they come, and the history then polled only
every ``MIRROR_FOLLOW_GAP``. It ends idle, at ``MIRROR_FOLLOW_MAX``, at the run's end, or at the
worker's shutdown, returning how far it got and its history position. Nothing here adds to the run's
history.
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
"""The RPC timeout of a long poll is its wait plus this (the server answers just before it)."""

Copy = Callable[[int, int, Sequence[HistoryEvent] | None], Awaitable[MirrorOutcome]]
"""Copies what the run holds after a seq and a write counter, given the history events since the
last copy (None: unknown)."""


class Published:
    """The pages published for the followed run and the writers' word to poll
    (``broker.PollMessage``), queued (at most ``PAGES_WAITING``; more are dropped, the poll brings
    them). ``take`` says whether a page now waits (True), is held already (False) or is not taken
    (None: unsigned, another run's, or out of order); ``flush`` writes what waits."""

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
    """The long poll of one run's history from a position (the server's continuation token as
    base64, ``MirrorInput.history_token``; empty: the first event).
    """

    def __init__(self, client: Client, workflow_id: str, run_id: str, token: str | None) -> None:
        self.client = client
        self.execution = WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
        self.token = base64.b64decode(token) if token else b""
        self.events: list[HistoryEvent] | None = []
        """The history events the last ``grew`` brought (None: the position was reset)."""

    @property
    def position(self) -> str:
        """Where the poll is, as base64 text."""
        return base64.b64encode(self.token).decode("ascii")

    async def grew(self, wait: timedelta) -> int:
        """Wait up to ``wait`` for the history to grow; returns the bytes of the events added (0:
        none), keeps them in ``events`` and moves past them. A token the server refuses restarts
        from the first event (returns 1, ``events`` None). Retried as the SDK's own calls
        (``retry=True``), since a poll on a recycled connection fails CANCELLED.

        Raises:
            temporalio.service.RPCError: the server failed otherwise, or after the client's retries.
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
    """What a follower has copied so far: the last outcome and the counts; one copy at a time
    (``lock``)."""

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
        """Count a copy's ``outcome`` at loop time ``now``: it becomes the last unless it reaches
        less far, and a run's end, once seen, stays."""
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
    """Follow the run from ``first`` (the opening copy's outcome) until idle, past the bound, ended
    and copied, or the worker shuts down (a copy in flight is then dropped), copying ``published``
    pages as they come; returns the last copy's outcome with the counts and the poll's position.

    Raises:
        the errors of ``copy``, ``published.take`` and ``.flush``, and ``HistoryPoll.grew``.
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
    ``MIRROR_FOLLOW_AGE``, until cancelled."""
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
    """Seconds the follower has left (loop time) before ``MIRROR_FOLLOW_IDLE`` or
    ``MIRROR_FOLLOW_MAX``."""
    now = asyncio.get_running_loop().time()
    return min(
        MIRROR_FOLLOW_IDLE.total_seconds() - (now - followed.idle_since),
        MIRROR_FOLLOW_MAX.total_seconds() - (now - started),
    )
