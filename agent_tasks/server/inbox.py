"""The inbox of a project: every open input request and approval of its tasks, newest first,
and its live stream.

**Where it comes from.** Neo4j names the tasks with an open request (the task node's
``pending_inputs``; ``find_tasks(open_inputs=True)``, at most ``INBOX_TASKS``); each task's
view (a Temporal query) gives its open requests as the workflow holds them (prompt, schema,
deadline, approval), and one page of events their ``input_request`` events (when asked) and
an approval's call (its arguments). So an item is exactly what the task will take an answer
for, and an answered or closed request is gone from the next read.

**Live** (``InboxStream``): the stream sends every item as ``ask``, then ``ready``; then, on the
mirror's word on the project's channel (``broker.project_channel``) that a task that asks (its
status ``awaiting_input``) or one shown wrote something, it reads that task again and sends
each new request as ``ask`` and each one gone as ``closed`` (``{"task", "input_id"}``), for
every viewer alike. Without a broker, and every ``INBOX_REFRESH_S`` with one (a lost word), it
reads the whole inbox again. An item's ``id`` is not set: a reconnect sends the inbox afresh.

An approval's description is Markdown; ``description_html`` is it rendered by ``markdown-it-py``
with raw HTML off (escaped) and its link checks (no ``javascript:`` or ``data:`` links), so the
page may show it as HTML.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Iterable
from datetime import datetime

from fastapi.sse import ServerSentEvent
from markdown_it import MarkdownIt
from pydantic import BaseModel, JsonValue

from agent_tasks.broker import Message, Subscriber, WrittenMessage, project_channel
from agent_tasks.contract import InputRequest, TaskStatus
from agent_tasks.server.grants import Gate
from agent_tasks.starter.client import ConversationHistory

INBOX_TASKS = 200
"""Tasks with open requests one inbox read covers (the most recently named by Neo4j)."""
INBOX_REFRESH_S = 30.0
"""Seconds between whole reads of a live inbox that has a broker (one without: every
``STREAM_POLL_S``)."""
_MARKDOWN = MarkdownIt("commonmark", {"html": False})


class ApprovalItem(BaseModel):
    """The call an approval request asks about."""

    tool: str
    step_name: str
    call_seq: int
    call_id: str | None = None
    idempotency_key: str
    """The key the approved call runs with."""
    arguments: str
    """The call's arguments as the model made them (JSON text)."""
    description: str
    """Markdown."""
    description_html: str
    """The description rendered (raw HTML escaped)."""
    digest: str | None = None
    """The call's digest (``ApprovalAsk.digest``): the page sends it back with the decision,
    so a decision about a call that changed since it was shown is refused ``approval_stale``.
    None for requests asked before digests."""
    approvers: int = 1
    """Distinct people who accept the call before it runs."""
    approved_by: list[str] = []
    """Who accepted it so far."""


class InboxItem(BaseModel):
    """One open input request or approval of a task."""

    task: str
    """The task's name."""
    input_id: str
    prompt: str
    json_schema: dict[str, JsonValue]
    """What the answer must satisfy (JSON Schema)."""
    asked_seq: int
    """Seq of the ``input_request`` event."""
    asked_at: datetime
    """When it was asked (workflow time, UTC)."""
    deadline: datetime | None = None
    """When the task stops waiting; None: never."""
    approval: ApprovalItem | None = None
    """Set for an approval of a tool call."""


class Inbox(BaseModel):
    """``GET /inbox``: the open requests, newest first."""

    items: list[InboxItem]


async def task_items(history: ConversationHistory, name: str) -> list[InboxItem]:
    """The open requests of task ``name`` (none when it has none or is not found)."""
    view = (await history.get_task(name)).view
    if view is None:
        return []
    return list(
        await asyncio.gather(*(_item(history, name, request) for request in view.pending_inputs))
    )


async def _item(history: ConversationHistory, name: str, request: InputRequest) -> InboxItem:
    first = request.asked_seq if request.approval is None else request.approval.call_seq
    page = await history.list_events(name, after_seq=first - 1, limit=request.asked_seq - first + 1)
    by_seq = {event.seq: event for event in page.events}
    asked = by_seq[request.asked_seq]
    approval = None
    if request.approval is not None:
        ask = request.approval
        approval = ApprovalItem(
            tool=ask.tool,
            step_name=ask.step_name,
            call_seq=ask.call_seq,
            call_id=ask.call_id,
            idempotency_key=ask.idempotency_key,
            arguments=by_seq[ask.call_seq].payload,
            description=ask.description,
            description_html=_MARKDOWN.render(ask.description),
            digest=ask.digest,
            approvers=ask.approvers,
            approved_by=list(ask.approved_by),
        )
    return InboxItem(
        task=name,
        input_id=request.input_id,
        prompt=request.prompt,
        json_schema=request.json_schema,
        asked_seq=request.asked_seq,
        asked_at=asked.time,
        deadline=request.deadline,
        approval=approval,
    )


def newest_first(items: Iterable[InboxItem]) -> list[InboxItem]:
    """``items`` ordered newest first (by when asked, then task and seq)."""
    return sorted(items, key=lambda i: (i.asked_at, i.task, i.asked_seq), reverse=True)


async def inbox_items(history: ConversationHistory) -> list[InboxItem]:
    """The project's open requests, newest first (the module's docstring)."""
    rows = await history.find_tasks(open_inputs=True, limit=INBOX_TASKS)
    found = await asyncio.gather(*(task_items(history, row.name) for row in rows))
    return newest_first(item for items in found for item in items)


def _ask(item: InboxItem) -> ServerSentEvent:
    return ServerSentEvent(raw_data=item.model_dump_json(), event="ask")


def _closed(task: str, input_id: str) -> ServerSentEvent:
    data = json.dumps({"task": task, "input_id": input_id})
    return ServerSentEvent(raw_data=data, event="closed")


class InboxStream:
    """A live inbox (the module's docstring).

    Args:
        history: the project's client.
        subscriber: the process's broker subscription (None: read every ``poll_s``).
        keepalive_s: seconds between keep-alive comments.
        poll_s: seconds between whole reads without a broker.
        gate: vouches for the stream's key before it sends what it read.
    """

    def __init__(
        self,
        history: ConversationHistory,
        subscriber: Subscriber | None,
        keepalive_s: float,
        poll_s: float,
        gate: Gate,
    ) -> None:
        self.gate = gate
        self.history = history
        self.subscriber = subscriber
        self.keepalive_s = keepalive_s
        self.refresh_s = INBOX_REFRESH_S if subscriber is not None else poll_s
        self.shown: dict[tuple[str, str], InboxItem] = {}
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        self.channel = project_channel(history.project_id)

    def _message(self, message: Message) -> None:
        if not isinstance(message, WrittenMessage):
            return
        shown = any(task == message.task for task, _ in self.shown)
        if shown or message.status == TaskStatus.AWAITING_INPUT.value:
            self.dirty.add(message.task)
            self.wake.set()

    def _changes(
        self, tasks: Iterable[str] | None, items: list[InboxItem]
    ) -> list[ServerSentEvent]:
        """The events that turn what is shown into ``items`` (for ``tasks``; None: all)."""
        fresh = {(i.task, i.input_id): i for i in items}
        gone = [k for k in self.shown if (tasks is None or k[0] in tasks) and k not in fresh]
        out = [_closed(*key) for key in gone]
        for key in gone:
            del self.shown[key]
        for key, item in fresh.items():
            if key not in self.shown:
                self.shown[key] = item
                out.append(_ask(item))
        return out

    async def _read(self, tasks: set[str] | None) -> list[ServerSentEvent]:
        """The changes of ``tasks`` (None: the whole inbox), once the gate vouched for the
        stream's key after they were read.

        Raises:
            GrantEnded: the key or session no longer reads.
        """
        if tasks is None:
            items = await inbox_items(self.history)
        else:
            found = await asyncio.gather(*(task_items(self.history, t) for t in tasks))
            items = [i for task_found in found for i in task_found]
        await self.gate.allow(asyncio.get_running_loop().time())
        return self._changes(tasks, items)

    async def events(self) -> AsyncGenerator[ServerSentEvent, None]:
        """``ask`` for each open request, ``ready``, then ``ask`` and ``closed`` as they
        change, with keep-alive comments.

        Raises:
            GrantEnded: the key or session no longer reads.
        """
        if self.subscriber is not None:
            await self.subscriber.add(self.channel, self._message)
        try:
            yield ServerSentEvent(comment="connected")
            for event in reversed(await self._read(None)):
                yield event
            yield ServerSentEvent(raw_data=json.dumps({"items": len(self.shown)}), event="ready")
            loop = asyncio.get_running_loop()
            refresh_at = loop.time() + self.refresh_s
            while True:
                timeout = min(self.keepalive_s, max(0.0, refresh_at - loop.time()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout)
                self.wake.clear()
                if loop.time() >= refresh_at:
                    self.dirty.clear()
                    refresh_at = loop.time() + self.refresh_s
                    changes = await self._read(None)
                elif self.dirty:
                    tasks, self.dirty = self.dirty, set()
                    changes = await self._read(tasks)
                else:
                    yield ServerSentEvent(comment="keep-alive")
                    continue
                for event in changes:
                    yield event
        finally:
            if self.subscriber is not None:
                self.subscriber.remove(self.channel, self._message)
