"""Live streams of tasks as Server-Sent Events: the events a task records, its model tokens,
and its end.

**Where events come from.** A stream's ``update`` events come from the task's ledger
(``ConversationHistory.list_events``: the workflow, and Neo4j for earlier runs), never from the
broker: a ``TaskFeed`` per task and server process reads each new page once for every stream of
the task (one ``events`` query a page), and wakes when the broker says the task's log grew (the
mirror activity's ``WrittenMessage``) or every ``STREAM_POLL_S`` without a word (then, and when
the word says the task closed, it reads the task's view too, which says whether it ended). So
a stream that was away, a lost message or a broker outage costs latency, never an event.
``token`` events come from the broker only (ephemeral: nothing stores them); a stream that was
away misses them.

**Order and resume.** ``update`` events come in seq order, each once, with the seq as the SSE
``id``; a reconnect with ``Last-Event-ID: N`` (what a browser's ``EventSource`` sends) resumes
after seq N, with no gap and no duplicate. A ``token`` carries no ``id`` (the browser keeps the
last update's) and comes after the event its model call read up to (``TokenMessage.after_seq``)
and before the next, holding at most ``TOKEN_HOLD_S`` for that event. The last event is one of
``done``, ``failed``, ``cancelled`` (data: the task's final view) once the task is closed and
every event was sent; then the stream ends. Comments (``: keep-alive``) every ``keepalive_s``
keep proxies from closing an idle stream.

**Back-pressure.** Nothing a stream does slows the worker, the broker or another stream: the
feed never waits for a stream (it keeps the task's newest ``FEED_EVENTS`` events in a ring and
sets each stream's wake-up flag), a stream's tokens wait in a queue of ``TOKENS_QUEUED`` (the
oldest dropped beyond it), and a stream whose client reads slowly (the socket's buffer full)
only stops pulling: when it reads again, what fell out of the ring it reads from the ledger
itself. So one stream holds at most its token queue and the socket's buffers.

A session's stream (``SessionStream``) merges the streams of the session's tasks: those open
when it connects (live from then on) and those the broker names later (from their first event);
its ``id`` is a cursor of every task's seq (``cursor_id``), so a reconnect resumes each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from fastapi.sse import ServerSentEvent

from agent_tasks.broker import Message, Subscriber, TokenMessage, WrittenMessage, task_channel
from agent_tasks.contract import CLOSED_STATUSES, PAGE_LIMIT_MAX, Event, EventKind, TaskView
from agent_tasks.server.grants import Gate
from agent_tasks.starter.client import ConversationHistory

STREAM_POLL_S = 2.0
"""How often a feed reads its task without a word from the broker (seconds)."""
FEED_EVENTS = 1_000
"""Events a feed keeps for its streams (a stream further behind reads the ledger itself)."""
TOKENS_QUEUED = 1_024
"""Tokens a stream keeps for a client that reads slowly (the oldest are dropped)."""
TOKEN_HOLD_S = 5.0
"""How long a token waits for the event it comes after before it is sent anyway (seconds).
Normally milliseconds; a query that meets a workflow task in flight waits for it, which took
over a second now and then on a busy 2-core machine."""
SESSION_TASKS = 64
"""Tasks one session stream follows (the newest; a cursor names at most these)."""

log = logging.getLogger(__name__)


class TaskFeed:
    """One task's new events, read from its ledger once for every stream of it in a process.

    Args:
        history: reads the task (its project's).
        name: the task.
        subscriber: the process's broker subscription (None: no broker; the feed reads every
            ``poll_s``).
        poll_s: the read interval without a word from the broker.
    """

    def __init__(
        self,
        history: ConversationHistory,
        name: str,
        subscriber: Subscriber | None,
        poll_s: float = STREAM_POLL_S,
    ) -> None:
        self.history = history
        self.name = name
        self.subscriber = subscriber
        self.poll_s = poll_s
        self.channel = task_channel(history.workflow_id(name))
        self.ring: deque[tuple[Event, str]] = deque(maxlen=FEED_EVENTS)
        """The newest events, each with its JSON (made once for every stream)."""
        self.last_seq = 0
        """The newest seq read."""
        self.view: TaskView | None = None
        """The task's view at the last read."""
        self.listeners: set[TaskListener] = set()
        self.wake = asyncio.Event()
        self.started = asyncio.Event()
        """Set once the feed has read the task for the first time."""
        self.task: asyncio.Task[None] | None = None
        self.full = True
        """The next read reads the view too."""
        self.read_at = 0.0
        """When the newest read of the view or a page ended (loop time)."""

    @property
    def ended(self) -> bool:
        """True once the task is closed and every event of it was read."""
        return (
            self.view is not None
            and self.view.status in CLOSED_STATUSES
            and self.last_seq >= self.view.last_seq
        )

    def first_held(self) -> int:
        """The oldest seq in the ring (``last_seq + 1`` when it is empty)."""
        return self.ring[0][0].seq if self.ring else self.last_seq + 1

    async def start(self) -> None:
        """Subscribe and read the task once (``started``), then keep reading in a task."""
        if self.subscriber is not None:
            await self.subscriber.add(self.channel, self._message)
        self.task = asyncio.create_task(self._run())
        await self.started.wait()

    async def stop(self) -> None:
        """Unsubscribe and stop reading."""
        if self.subscriber is not None:
            self.subscriber.remove(self.channel, self._message)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def _message(self, message: Message) -> None:
        if isinstance(message, WrittenMessage):
            if message.status in CLOSED_STATUSES:
                self.full = True  # read the view too: the end is near
                self.wake.set()
            elif message.seq > self.last_seq:
                self.wake.set()
            return
        if not isinstance(message, TokenMessage):
            return
        for listener in self.listeners:
            listener.token(message)
        if message.after_seq is not None and message.after_seq > self.last_seq:
            self.wake.set()  # the event it comes after is not read yet

    async def _run(self) -> None:
        self.full = True
        while True:
            self.wake.clear()
            full, self.full = self.full, False
            try:
                await self._read(full)
            except Exception as err:  # a read failed (Temporal away): try again later
                log.warning("stream of task %r: read failed: %s", self.name, err)
                self.full = True
            self.started.set()
            for listener in self.listeners:
                listener.notify()
            if self.ended:
                return
            try:
                await asyncio.wait_for(self.wake.wait(), self.poll_s)
            except TimeoutError:
                self.full = True

    async def _read(self, full: bool) -> None:
        """Read the new events (one query a page); with ``full`` (the first read, a poll, the
        broker's word of a closed task) the view first, which says whether the task ended."""
        loop = asyncio.get_running_loop()
        if full or self.view is None:
            self.view = (await self.history.get_task(self.name)).view
            self.read_at = loop.time()
            if self.view is None:
                return
        while True:
            page = await self.history.list_events(
                self.name, after_seq=self.last_seq, limit=PAGE_LIMIT_MAX
            )
            self.read_at = loop.time()
            if page.events:
                self.ring.extend((e, e.model_dump_json()) for e in page.events)
                self.last_seq = page.events[-1].seq
                for listener in self.listeners:
                    listener.notify()
            if not page.events or page.next_after_seq is None:
                return


class TaskListener:
    """One stream's place in a feed: its cursor, its queued tokens and its wake-up flag.

    Args:
        after_seq: the last seq the stream has passed.
        also: another flag to set with this one's (a session stream waits on one for all its
            tasks).
    """

    def __init__(self, after_seq: int, also: asyncio.Event | None = None) -> None:
        self.after_seq = after_seq
        """The last seq this stream has passed (sent or filtered out)."""
        self.tokens: deque[tuple[TokenMessage, float]] = deque(maxlen=TOKENS_QUEUED)
        """Tokens not sent yet, with when they came (loop time)."""
        self.signal = asyncio.Event()
        self.also = also

    def notify(self) -> None:
        """Wake the stream (never waits)."""
        self.signal.set()
        if self.also is not None:
            self.also.set()

    def token(self, message: TokenMessage) -> None:
        """Queue a token (never waits; the oldest is dropped past ``TOKENS_QUEUED``)."""
        self.tokens.append((message, asyncio.get_running_loop().time()))
        self.notify()


class FeedRegistry:
    """The feeds of one server process, by workflow id: made for the first stream of a task,
    stopped after its last one leaves."""

    def __init__(self, subscriber: Subscriber | None, poll_s: float = STREAM_POLL_S) -> None:
        self.subscriber = subscriber
        self.poll_s = poll_s
        self.feeds: dict[str, TaskFeed] = {}
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def listen(
        self,
        history: ConversationHistory,
        name: str,
        after_seq: int,
        also: asyncio.Event | None = None,
    ) -> AsyncIterator[tuple[TaskFeed, TaskListener]]:
        """Join the feed of task ``name`` with a listener after ``after_seq`` (``also``: see
        ``TaskListener``)."""
        key = history.workflow_id(name)
        listener = TaskListener(after_seq, also)
        async with self._lock:
            feed = self.feeds.get(key)
            if feed is None:
                feed = TaskFeed(history, name, self.subscriber, self.poll_s)
                try:
                    await feed.start()
                except BaseException:  # cancelled (the client left) or failed: no half feed
                    await feed.stop()
                    raise
                self.feeds[key] = feed
            feed.listeners.add(listener)
        try:
            yield feed, listener
        finally:
            feed.listeners.discard(listener)
            if not feed.listeners:
                async with self._lock:
                    if not feed.listeners and self.feeds.get(key) is feed:
                        del self.feeds[key]
                        await feed.stop()

    async def close(self) -> None:
        """Stop every feed."""
        for feed in list(self.feeds.values()):
            await feed.stop()
        self.feeds.clear()


@dataclass(frozen=True)
class StreamFilter:
    """What a stream sends: ``update`` events of these kinds (None: all), and tokens or not."""

    kinds: frozenset[EventKind] | None = None
    tokens: bool = True

    def wants(self, event: Event) -> bool:
        """True when ``event`` goes out as an ``update``."""
        return self.kinds is None or event.kind in self.kinds


def update_event(event: Event, data: str, event_id: str | None = None) -> ServerSentEvent:
    """An ``update``: the event as JSON (``data``), its seq (or ``event_id``) as the SSE id."""
    return ServerSentEvent(
        event="update", raw_data=data, id=str(event.seq) if event_id is None else event_id
    )


def token_event(message: TokenMessage) -> ServerSentEvent:
    """A ``token``: its text, index, task and ``after_seq``; no SSE id."""
    return ServerSentEvent(event="token", raw_data=message.model_dump_json(exclude={"type"}))


def end_event(view: TaskView, event_id: str | None = None) -> ServerSentEvent:
    """``done``, ``failed`` or ``cancelled`` with the task's final view."""
    return ServerSentEvent(event=view.status.value, raw_data=view.model_dump_json(), id=event_id)


def keep_alive() -> ServerSentEvent:
    """A comment line, ignored by clients, that keeps the connection busy."""
    return ServerSentEvent(comment="keep-alive")


@dataclass
class Pending:
    """What a stream of one task has to send next, in order."""

    feed: TaskFeed
    listener: TaskListener
    history: ConversationHistory
    filter: StreamFilter
    gate: Gate
    """Vouches for the stream's key before it sends what was written (``grants``)."""

    async def events(self) -> tuple[list[tuple[Event, str]], float]:
        """The events after the cursor that are known, each with its JSON: from the ring, or
        (for a stream that fell behind it) from the ledger; and when they were read (loop
        time)."""
        after = self.listener.after_seq
        if after + 1 < self.feed.first_held() and after < self.feed.last_seq:
            page = await self.history.list_events(
                self.feed.name, after_seq=after, limit=PAGE_LIMIT_MAX
            )
            read_at = asyncio.get_running_loop().time()
            return [(e, e.model_dump_json()) for e in page.events], read_at
        return [(e, data) for e, data in self.feed.ring if e.seq > after], self.feed.read_at

    async def end(self) -> ServerSentEvent | None:
        """The task's end event (its final view) once the task is closed and every event was
        passed and every token sent; None before. The stream's key is checked first.

        Raises:
            GrantEnded: the key or session no longer reads.
        """
        feed = self.feed
        if not feed.ended or self.listener.after_seq < feed.last_seq or self.listener.tokens:
            return None
        assert feed.view is not None
        await self.gate.allow(feed.read_at)
        return end_event(feed.view)

    def due_token(self, now: float, upcoming: int | None) -> TokenMessage | None:
        """The first queued token, if it is due before the event ``upcoming`` (or no event
        is known to come): its event was passed, it has no place, or it waited long enough."""
        if not self.listener.tokens:
            return None
        message, came = self.listener.tokens[0]
        place = message.after_seq
        if place is None or place <= self.listener.after_seq:
            return message
        if upcoming is not None and upcoming <= place:
            return None  # send that event first
        if now - came >= TOKEN_HOLD_S:
            return message
        return None


async def task_stream(
    registry: FeedRegistry,
    history: ConversationHistory,
    name: str,
    after_seq: int,
    stream_filter: StreamFilter,
    keepalive_s: float,
    gate: Gate,
) -> AsyncGenerator[ServerSentEvent, None]:
    """The SSE events of one task after ``after_seq`` until its end (module docstring); what
    was written is sent only while ``gate`` vouches for the stream's key.

    Raises:
        GrantEnded: the key or session no longer reads.
    """
    async with registry.listen(history, name, after_seq) as (feed, listener):
        pending = Pending(feed, listener, history, stream_filter, gate)
        yield ServerSentEvent(comment="connected")
        loop = asyncio.get_running_loop()
        while True:
            listener.signal.clear()
            sent = False
            for item in await next_items(pending, loop.time()):
                sent = True
                yield item
            end = await pending.end()
            if end is not None:
                yield end
                return
            if sent:
                continue
            wait = keepalive_s
            if listener.tokens:  # a held token is due within TOKEN_HOLD_S
                wait = min(wait, TOKEN_HOLD_S)
            try:
                await asyncio.wait_for(listener.signal.wait(), wait)
            except TimeoutError:
                if not listener.tokens:
                    yield keep_alive()


async def next_items(pending: Pending, now: float) -> list[ServerSentEvent]:
    """What the stream sends now, in order: updates and tokens interleaved by the tokens'
    places; the listener's cursor and token queue advance as they are taken. Updates are
    given only once the stream's gate vouched for its key after they were read.

    Raises:
        GrantEnded: the key or session no longer reads.
    """
    items: list[ServerSentEvent] = []
    listener = pending.listener
    events, read_at = await pending.events()
    if any(pending.filter.wants(event) for event, _ in events):
        await pending.gate.allow(read_at)
    for event, data in events:
        while (token := pending.due_token(now, event.seq)) is not None:
            listener.tokens.popleft()
            if pending.filter.tokens:
                items.append(token_event(token))
        listener.after_seq = event.seq
        if pending.filter.wants(event):
            items.append(update_event(event, data))
    while (token := pending.due_token(now, None)) is not None:
        listener.tokens.popleft()
        if pending.filter.tokens:
            items.append(token_event(token))
    return items
