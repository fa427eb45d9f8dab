"""A session's live stream: every task of a session as Server-Sent Events, its SSE id a cursor
of each followed task's seq (``Last-Event-ID`` resumes each)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping

from fastapi.sse import ServerSentEvent

from broker import Message, RevokedMessage, Subscriber, session_channel
from starter.client import ConversationHistory
from starter.http.streams import (
    SESSION_TASKS,
    FeedRegistry,
    Pending,
    StreamFilter,
    end_event,
    keep_alive,
    next_items,
)
from workflows.models import CLOSED_STATUSES


def cursor_id(cursor: Mapping[str, int]) -> str:
    """A session stream's SSE id: every followed task's seq, as base64url of JSON."""
    text = json.dumps(dict(cursor), separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def parse_cursor(text: str) -> dict[str, int] | None:
    """The cursor of a session stream's id, None when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or len(value) > SESSION_TASKS:
        return None
    if not all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in value.items()):
        return None
    return value


class SessionStream:
    """The SSE events of every task of a session (module docstring): one ``Pending`` per
    task, joined as the tasks appear.

    Args:
        registry: the feeds.
        history: reads the tasks (the project's).
        subscriber: the broker subscription, for the session's channel (None: no new tasks
            are seen after the connection; reconnect to find them).
        session_id: the session.
        cursor: the seq each task was passed at (a reconnect's ``Last-Event-ID``).
        stream_filter: what to send.
        keepalive_s: the comment interval.
    """

    def __init__(
        self,
        registry: FeedRegistry,
        history: ConversationHistory,
        subscriber: Subscriber | None,
        session_id: str,
        cursor: Mapping[str, int],
        stream_filter: StreamFilter,
        keepalive_s: float,
    ) -> None:
        self.registry = registry
        self.history = history
        self.subscriber = subscriber
        self.channel = session_channel(history.project_id, session_id)
        self.session_id = session_id
        self.cursor = dict(cursor)
        self.filter = stream_filter
        self.keepalive_s = keepalive_s
        self.signal = asyncio.Event()
        self.new_tasks: deque[str] = deque()
        self.ended: set[str] = set()

    def _message(self, message: Message) -> None:
        if isinstance(message, RevokedMessage):
            return
        if message.task not in self.cursor and message.task not in self.new_tasks:
            self.new_tasks.append(message.task)
            self.signal.set()

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """The stream (it ends only when the client leaves)."""
        async with contextlib.AsyncExitStack() as stack:
            if self.subscriber is not None:
                await self.subscriber.add(self.channel, self._message)
                stack.callback(self.subscriber.remove, self.channel, self._message)
            rows = await self.history.find_tasks(session_id=self.session_id, limit=SESSION_TASKS)
            streams: dict[str, Pending] = {}

            async def follow(name: str, after_seq: int | None) -> None:
                if name in streams or len(streams) >= SESSION_TASKS:
                    return
                feed, listener = await stack.enter_async_context(
                    self.registry.listen(self.history, name, after_seq or 0, self.signal)
                )
                if after_seq is None:  # open when the stream connected: live from now
                    listener.after_seq = feed.last_seq
                streams[name] = Pending(feed, listener, self.history, self.filter)
                self.cursor[name] = listener.after_seq

            for name, seq in self.cursor.items():
                await follow(name, seq)
            for row in rows:
                if row.status not in CLOSED_STATUSES:
                    await follow(row.name, None)
            yield ServerSentEvent(comment="connected")
            loop = asyncio.get_running_loop()
            while True:
                self.signal.clear()
                while self.new_tasks:
                    await follow(self.new_tasks.popleft(), 0)
                sent = False
                for name, pending in streams.items():
                    for item in await next_items(pending, loop.time()):
                        self.cursor[name] = pending.listener.after_seq
                        sent = True
                        if item.event == "update":
                            item = item.model_copy(update={"id": cursor_id(self.cursor)})
                        yield item
                    feed = pending.feed
                    if name not in self.ended and feed.ended and feed.view is not None:
                        if pending.listener.after_seq >= feed.last_seq:
                            self.ended.add(name)
                            sent = True
                            yield end_event(feed.view, cursor_id(self.cursor))
                if sent:
                    continue
                try:
                    await asyncio.wait_for(self.signal.wait(), self.keepalive_s)
                except TimeoutError:
                    yield keep_alive()
