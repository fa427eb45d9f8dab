"""A session's live stream: every task of a session as Server-Sent Events, its SSE id a cursor
of each task's seq and of the ends it sent (``Last-Event-ID`` resumes each task, and finds the
tasks created while the client was away)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from fastapi.sse import ServerSentEvent

from agent_tasks.broker import (
    Message,
    PageMessage,
    PollMessage,
    RevokedMessage,
    Subscriber,
    session_channel,
)
from agent_tasks.contract import CLOSED_STATUSES
from agent_tasks.server.grants import Gate
from agent_tasks.server.streams import (
    SESSION_TASKS,
    FeedRegistry,
    Pending,
    StreamFilter,
    keep_alive,
    next_items,
)
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.models import TaskRow

CURSOR_TASKS = 2 * SESSION_TASKS
"""Tasks one cursor names at most: those followed, and those closed when it first connected."""


@dataclass
class Cursor:
    """Where a session stream is: the seq each task was passed at, and the tasks whose end was
    sent (or that were closed when the stream first connected) at that seq."""

    seqs: dict[str, int] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)


def cursor_id(cursor: Cursor) -> str:
    """A session stream's SSE id: base64url of JSON ``{"s": {task: seq}, "e": [ended]}``."""
    value = {"s": cursor.seqs, "e": sorted(cursor.ended)}
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def parse_cursor(text: str) -> Cursor | None:
    """The cursor of a session stream's id (or of an earlier version's, a bare
    ``{task: seq}``), None when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    ended: object = []
    if set(value) == {"s", "e"}:
        value, ended = value["s"], value["e"]
    if not isinstance(value, dict) or not isinstance(ended, list):
        return None
    if len(value) > CURSOR_TASKS or not set(ended) <= set(value):
        return None
    if not all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in value.items()):
        return None
    return Cursor(dict(value), set(ended))


def with_task(name: str, data: str) -> str:
    """An event's JSON object ``data`` with the task's name first, as ``"task"``."""
    rest = data[1:].lstrip()
    joiner = "" if rest.startswith("}") else ","
    return '{"task":' + json.dumps(name) + joiner + rest


def start_plan(cursor: Cursor, rows: list[TaskRow], resumed: bool) -> dict[str, int | None]:
    """The tasks a session stream follows at its start, and after which seq (None: from now
    on), given the session's newest tasks (``rows``) and its ``cursor`` (updated): a first
    connection follows the open ones from now and records the closed ones as ended; a
    reconnect resumes each task of its cursor (an ended one only when it has more now)
    and follows every task it does not name (created while the client was away, open or
    ended since) from its first event. An ended task that is not among ``rows`` (the
    session's newest ``SESSION_TASKS``) leaves the cursor, which so names at most
    ``CURSOR_TASKS``."""
    follow: dict[str, int | None] = {}
    by_name = {row.name: row for row in rows}
    for name in [n for n in cursor.ended if n not in by_name]:
        del cursor.seqs[name]  # ended, and older than the session's newest tasks:
        cursor.ended.discard(name)  # never followed again (the cursor stays bounded)
    for name, seq in cursor.seqs.items():
        row = by_name.get(name)
        more = row is None or row.status not in CLOSED_STATUSES or row.last_seq > seq
        if name not in cursor.ended or more:
            follow[name] = seq
    for row in rows:
        if row.name in cursor.seqs or row.status is None:
            continue
        if resumed:
            follow[row.name] = 0
        elif row.status in CLOSED_STATUSES:
            cursor.seqs[row.name] = row.last_seq
            cursor.ended.add(row.name)
        else:
            follow[row.name] = None
    return follow


class SessionStream:
    """The SSE events of every task of a session (module docstring): one ``Pending`` per
    task, joined as the tasks appear.

    Args:
        registry: the feeds.
        history: reads the tasks (the project's).
        subscriber: the broker subscription, for the session's channel (None: no new tasks
            are seen after the connection; reconnect to find them).
        session_id: the session.
        cursor: a reconnect's ``Last-Event-ID`` (None: a first connection).
        stream_filter: what to send.
        keepalive_s: the comment interval.
        gate: vouches for the stream's key before it sends what was written.
    """

    def __init__(
        self,
        registry: FeedRegistry,
        history: ConversationHistory,
        subscriber: Subscriber | None,
        session_id: str,
        cursor: Cursor | None,
        stream_filter: StreamFilter,
        keepalive_s: float,
        gate: Gate,
    ) -> None:
        self.registry = registry
        self.history = history
        self.subscriber = subscriber
        self.channel = session_channel(history.project_id, session_id)
        self.session_id = session_id
        self.resumed = cursor is not None
        self.cursor = cursor or Cursor()
        self.filter = stream_filter
        self.keepalive_s = keepalive_s
        self.gate = gate
        self.signal = asyncio.Event()
        self.new_tasks: deque[str] = deque()

    def _message(self, message: Message) -> None:
        if isinstance(message, RevokedMessage | PageMessage | PollMessage):
            return  # pages never travel on a session's channel
        if message.task not in self.cursor.seqs and message.task not in self.new_tasks:
            self.new_tasks.append(message.task)
            self.signal.set()

    def _passed(self, name: str, seq: int) -> None:
        """The stream has passed task ``name``'s events up to ``seq``."""
        if seq > self.cursor.seqs[name]:
            self.cursor.seqs[name] = seq
            self.cursor.ended.discard(name)  # resumed: more, then a new end

    async def events(self) -> AsyncGenerator[ServerSentEvent, None]:
        """The stream (it ends only when the client leaves).

        Raises:
            GrantEnded: the key or session no longer reads.
        """
        async with contextlib.AsyncExitStack() as stack:
            if self.subscriber is not None:
                await self.subscriber.add(self.channel, self._message)
                stack.callback(self.subscriber.remove, self.channel, self._message)
            rows = await self.history.find_tasks(session_id=self.session_id, limit=SESSION_TASKS)
            streams: dict[str, Pending] = {}

            async def follow(name: str, after_seq: int | None) -> None:
                if name in streams or len(streams) >= SESSION_TASKS:
                    return
                joined = self.registry.listen(self.history, name, after_seq or 0, self.signal)
                feed, listener = await joined.__aenter__()
                if feed.view is None or feed.view.session_id != self.session_id:
                    await joined.__aexit__(None, None, None)  # a cursor's task of another
                    self.cursor.seqs.pop(name, None)  # session, or one that is gone: never
                    self.cursor.ended.discard(name)  # this stream's
                    return
                stack.push_async_exit(joined)
                if after_seq is None:  # open when the stream connected: live from now
                    listener.after_seq = feed.last_seq
                streams[name] = Pending(feed, listener, self.history, self.filter, self.gate)
                self.cursor.seqs[name] = listener.after_seq

            for name, seq in start_plan(self.cursor, rows, self.resumed).items():
                await follow(name, seq)
            yield ServerSentEvent(comment="connected")
            loop = asyncio.get_running_loop()
            while True:
                self.signal.clear()
                while self.new_tasks:
                    await follow(self.new_tasks.popleft(), 0)
                sent = False
                for name, pending in streams.items():
                    for item in await next_items(pending, loop.time()):
                        sent = True
                        if item.event == "update":  # its id: the cursor up to its own seq
                            self._passed(name, int(item.id or 0))
                            item = item.model_copy(
                                update={
                                    "id": cursor_id(self.cursor),
                                    "raw_data": with_task(name, item.raw_data or "{}"),
                                }
                            )
                        yield item
                    self._passed(name, pending.listener.after_seq)  # and those filtered out
                    if name in self.cursor.ended:
                        continue
                    end = await pending.end()
                    if end is not None:
                        self.cursor.seqs[name] = pending.listener.after_seq
                        self.cursor.ended.add(name)
                        sent = True
                        yield end.model_copy(update={"id": cursor_id(self.cursor)})
                if sent:
                    continue
                try:
                    await asyncio.wait_for(self.signal.wait(), self.keepalive_s)
                except TimeoutError:
                    yield keep_alive()
