"""The Tasks API of the published task manager for agents: ``TaskManager``, ``TaskEmitter``,
``TaskStatus``, with its names, fields and lifecycle, over this product's tasks.

A facade, not a second store: one task is one ``TaskWorkflow`` (its workflow id the product's
rule, its name the task id), reached through ``starter.ConversationHistory``; every update is
an event in the task's history, mirrored to Neo4j like any other. Code written for the
published API runs with its imports and its client's construction swapped::

    history = starter.ConversationHistory(await starter.connect(), "acme", "worker-1", graph=graph)
    task_manager = TaskManager(history)          # was: TaskManager(redis.from_url(...))
    task = await task_manager.create_task(session_id="session_123", message="What is Redis?")

How the published names map (the choices are ours where the published page is silent):

- ``task_id`` (a ULID): the task's name, a new ULID (``new_task_id``) unless given.
- ``QUEUED`` on creation: a recorded task is ``open`` until its app moves it; it reads as
  ``QUEUED`` here (and ``list_tasks(status=QUEUED)`` finds both).
- ``update(status=...)``: ``queued``, ``in_progress``, ``awaiting_children`` by
  ``ConversationHistory.set_status``; ``done``, ``failed``, ``cancelled`` by ``finish_task``
  (a ``result`` alone means ``done``, an ``error`` alone ``failed``).
- ``update(message=...)``, ``add_update``: a ``note`` event named ``update``, its payload JSON
  ``{"message", "update_type", "metadata"}``, written before the status change of the call.
- ``result`` (a dict): stored as JSON text; a result that is not a JSON object (a task ended
  from elsewhere) reads as ``{"text": ...}``.
- ``updates``: the task's newest ``UPDATES_READ`` events but status notes, oldest first: the
  ``update`` notes as written, other events with their kind mapped (``tool_call``;
  ``reasoning`` as ``reflection``; ``error``; the rest ``info``).
- ``AWAITING_INPUT`` -> ``QUEUED``: ``request_input`` asks (``awaiting_input``),
  ``submit_input`` answers (validated against the request's schema); the task is ``queued``
  once no request is open (``workflows.lifecycle``).
- ``AWAITING_CHILDREN`` -> ``QUEUED``: ``create_task(parent_id=..., spawn_key=...)`` starts a
  child, ``update_status(parent, AWAITING_CHILDREN)`` waits, and the parent is ``queued`` once
  none of its children runs.
- ``prefix``: the project id (``TaskManager(history, prefix="myapp")`` works on ``myapp``).
- ``emit_token``: a ``token`` message on the broker (``broker``), to live streams only.
- ``delete_task``: ``HistoryRetention.delete_task`` (Temporal and Neo4j; needs the graph).

A refused write raises ``TaskRefused`` with the product's ``ErrorCode`` (the published API
raises for a missing task too); reads of a task that is not in the project return None.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, JsonValue

from broker import Broker, TokenMessage, channels
from starter.client import ConversationHistory
from starter.results import WriteResult
from starter.retention import HistoryRetention
from workflows.errors import ErrorCode
from workflows.models import (
    CLOSED_STATUSES,
    MAX_DEPTH,
    PAGE_LIMIT_MAX,
    AgentSpec,
    Event,
    EventKind,
    InputRequest,
    TaskStatus,
    TaskView,
)
from workflows.models.lifecycle import SETTABLE_STATUSES

UPDATES_READ = 200
"""Events ``get_task`` reads into ``updates`` (the newest; older ones: ``list_events``)."""
LIST_READS_AT_ONCE = 8
"""Tasks ``list_tasks`` reads at once."""
UPDATE_NOTE = "update"
"""The name of the ``note`` events that hold the published API's updates."""
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

log = logging.getLogger(__name__)

__all__ = [
    "Task",
    "TaskEmitter",
    "TaskManager",
    "TaskRefused",
    "TaskStatus",
    "TaskUpdate",
    "UpdateType",
    "new_task_id",
]


def new_task_id() -> str:
    """A ULID: 48 bits of Unix time in ms and 80 random bits, 26 characters of Crockford's
    base32, so ids sort by creation time (to the millisecond)."""
    value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


class UpdateType(StrEnum):
    """What an update says (the published API's types)."""

    INFO = "info"
    TOOL_CALL = "tool_call"
    REFLECTION = "reflection"
    ERROR = "error"


_KIND_TYPES = {
    EventKind.TOOL_CALL: UpdateType.TOOL_CALL,
    EventKind.REASONING: UpdateType.REFLECTION,
    EventKind.ERROR: UpdateType.ERROR,
}


class TaskUpdate(BaseModel):
    """A progress update: one event of the task."""

    message: str
    """The text."""
    update_type: UpdateType = UpdateType.INFO
    """What it says."""
    timestamp: datetime
    """Workflow time of its event (UTC)."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    """Given with the update; for other events their ``kind``, ``name`` and ``role``."""
    seq: int
    """Its event's seq (the SSE id of its ``update`` event on a stream)."""


class Task(BaseModel):
    """A task with the published API's fields."""

    task_id: str
    """Its id: the task's name in the project."""
    session_id: str | None
    """Its session."""
    status: TaskStatus
    """Its status (a recorded task's ``open`` reads as ``QUEUED``)."""
    result: dict[str, JsonValue] | None = None
    """Its result, once done."""
    error_message: str | None = None
    """Its error, once failed."""
    updates: list[TaskUpdate] = Field(default_factory=list)
    """Its progress updates, oldest first (the newest ``UPDATES_READ`` events)."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    """Its metadata, with ``message`` (the goal it was created with)."""
    input_request: InputRequest | None = None
    """The oldest open input request."""
    input_response: dict[str, JsonValue] | None = None
    """The answer to the newest answered request (an answer that is not a JSON object as
    ``{"value": ...}``)."""
    parent_id: str | None = None
    """Its parent task."""
    spawn_key: str | None = None
    """Its label in its parent."""
    child_ids: list[str] = Field(default_factory=list)
    """The tasks it spawned."""
    pending_children: int = 0
    """Those that have not ended."""
    depth: int = 0
    """Levels below its root task (0 for a root)."""
    created_at: datetime
    """Workflow time of its creation (UTC)."""
    updated_at: datetime
    """Workflow time of its last write (UTC)."""


class TaskRefused(Exception):
    """A write was refused; nothing was recorded. ``code`` is the product's ``ErrorCode``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message


def _written(result: WriteResult) -> WriteResult:
    if not result.recorded:
        assert result.error is not None
        raise TaskRefused(result.error, result.message or result.error.value)
    return result


def _object(text: str, field: str) -> dict[str, JsonValue]:
    """``text`` as a JSON object, or ``{field: value}`` for any other text or JSON value."""
    try:
        value = json.loads(text)
    except ValueError:
        return {field: text}
    return value if isinstance(value, dict) else {field: value}


def task_update(event: Event) -> TaskUpdate | None:
    """The update an event reads as (None for a status note): an ``update`` note as it was
    written, any other event with its kind mapped to an update type."""
    if event.kind is EventKind.NOTE and event.name == "status":
        return None
    if event.kind is EventKind.NOTE and event.name == UPDATE_NOTE:
        written = _object(event.payload, "message")
        metadata = written.get("metadata")
        kind = written.get("update_type")
        return TaskUpdate(
            message=str(written.get("message", "")),
            update_type=UpdateType(kind) if kind in set(UpdateType) else UpdateType.INFO,
            timestamp=event.time,
            metadata=metadata if isinstance(metadata, dict) else {},
            seq=event.seq,
        )
    about = {"kind": event.kind.value, "name": event.name, "role": event.role}
    return TaskUpdate(
        message=event.payload,
        update_type=_KIND_TYPES.get(event.kind, UpdateType.INFO),
        timestamp=event.time,
        metadata={key: value for key, value in about.items() if value is not None},
        seq=event.seq,
    )


class TaskManager:
    """The published API's task manager over a project's tasks.

    Args:
        client: a ``ConversationHistory``: its project holds the tasks, its agent id writes
            them, its graph serves ``list_tasks(session_id=...)`` and ``delete_task``.
        prefix: another project id for the tasks (the published API's key prefix).
        broker: where ``emit_token`` publishes (None: ``emit_token`` raises ``RuntimeError``).
    """

    def __init__(
        self,
        client: ConversationHistory,
        prefix: str | None = None,
        *,
        broker: Broker | None = None,
    ) -> None:
        if prefix is not None:
            client = ConversationHistory(
                client.client,
                prefix,
                client.agent_id,
                session_id=client.session_id,
                task_queue=client.task_queue,
                graph=client.graph,
                timeout_s=client.timeout_s,
            )
        self.history = client
        self.broker = broker
        self._sessions: dict[str, str | None] = {}

    # ---------------------------------------------------------------- writes

    async def create_task(
        self,
        session_id: str | None = None,
        message: str = "",
        *,
        metadata: Mapping[str, str] | None = None,
        parent_id: str | None = None,
        spawn_key: str | None = None,
        task_id: str | None = None,
        agent: AgentSpec | None = None,
    ) -> Task:
        """Create a task (``QUEUED``) and return it.

        Args:
            session_id: its session.
            message: what it is for (its goal; ``metadata["message"]``).
            metadata: free metadata (at most 16 entries of text); not for a child task.
            parent_id: a parent task run by the app: the new task is its child (started by
                the parent's workflow, ``ConversationHistory.spawn_child``).
            spawn_key: the child's label in its parent (default: its task id).
            task_id: the id (a task name); default a new ULID.
            agent: an agent that runs the task in the worker (an agent task, which moves by
                itself); None: the app runs it.

        Raises:
            TaskRefused: ``task_exists``, ``task_not_found`` (no such parent),
                ``child_limit_reached``, ``run_by_agent`` (a parent run by its agent) ...
            ValueError: ``metadata`` or ``agent`` for a child task.
            pydantic.ValidationError: an argument of the wrong shape.
        """
        task_id = task_id or new_task_id()
        if parent_id is None:
            _written(
                await self.history.create_task(
                    task_id,
                    message,
                    session_id=session_id,
                    metadata=dict(metadata or {}),
                    agent=agent,
                )
            )
        else:
            if metadata or agent is not None:
                raise ValueError("a child task takes no metadata or agent here")
            _written(
                await self.history.spawn_child(
                    parent_id, spawn_key or task_id, task_id, message, session_id=session_id
                )
            )
        return await self._found(task_id)

    async def update(
        self,
        task_id: str,
        status: TaskStatus | str | None = None,
        message: str | None = None,
        result: Mapping[str, JsonValue] | None = None,
        error: str | None = None,
        update_type: UpdateType | str = UpdateType.INFO,
        *,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Task:
        """Change status, add a message, set a result or an error, in one call (the message
        first, then the status or the end). ``result`` without a status ends the task
        ``done``, ``error`` without one ``failed``.

        Raises:
            TaskRefused: the write's refusal (``task_not_found``, ``task_closed``,
                ``run_by_agent`` ...); the message, when one was given, may be recorded.
            ValueError: ``awaiting_input`` (ask with ``request_input``), or an unknown status.
        """
        wanted = None if status is None else TaskStatus(status)
        if wanted is TaskStatus.AWAITING_INPUT:
            raise ValueError("a task awaits input through request_input")
        if message is not None:
            await self.add_update(task_id, message, update_type, metadata=metadata)
        if wanted is None and (result is not None or error is not None):
            wanted = TaskStatus.FAILED if error is not None else TaskStatus.DONE
        if wanted in CLOSED_STATUSES:
            _written(
                await self.history.finish_task(
                    task_id,
                    wanted,
                    result=None if result is None else json.dumps(dict(result)),
                    error=error,
                )
            )
        elif wanted in SETTABLE_STATUSES:
            _written(await self.history.set_status(task_id, wanted))
        elif wanted is TaskStatus.OPEN:
            raise ValueError("open is a recorded task's first status; set queued")
        return await self._found(task_id)

    async def update_status(self, task_id: str, status: TaskStatus | str) -> Task:
        """``update(task_id, status=status)``."""
        return await self.update(task_id, status=status)

    async def add_update(
        self,
        task_id: str,
        message: str,
        update_type: UpdateType | str = UpdateType.INFO,
        *,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> TaskUpdate:
        """Record a progress update (a ``note`` event named ``update``; an agent task takes
        it too) and return it.

        Raises:
            TaskRefused: ``task_not_found``, ``task_closed`` ...
        """
        kind = UpdateType(update_type)
        payload = {"message": message, "update_type": kind.value, "metadata": dict(metadata or {})}
        written = _written(
            await self.history.record_event(
                task_id, EventKind.NOTE, json.dumps(payload), name=UPDATE_NOTE
            )
        )
        assert written.event is not None
        update = task_update(written.event)
        assert update is not None
        return update

    async def set_result(self, task_id: str, result: Mapping[str, JsonValue]) -> Task:
        """End the task ``done`` with ``result``."""
        return await self.update(task_id, status=TaskStatus.DONE, result=result)

    async def set_error(self, task_id: str, error: str) -> Task:
        """End the task ``failed`` with ``error``."""
        return await self.update(task_id, status=TaskStatus.FAILED, error=error)

    async def request_input(
        self,
        task_id: str,
        prompt: str,
        schema: Mapping[str, JsonValue] | None = None,
        *,
        input_id: str | None = None,
    ) -> Task:
        """Ask a person for input: ``AWAITING_INPUT`` with ``input_request`` set, until the
        answer comes (``submit_input``); then ``QUEUED``.

        Args:
            input_id: the request's id in the task (default ``input-`` and 8 random hex).

        Raises:
            TaskRefused: ``input_exists``, ``schema_invalid``, ``input_limit_reached`` ...
        """
        input_id = input_id or f"input-{secrets.token_hex(4)}"
        _written(await self.history.request_input(task_id, input_id, prompt, schema))
        return await self._found(task_id)

    async def submit_input(
        self, task_id: str, response: JsonValue, *, input_id: str | None = None
    ) -> Task:
        """Answer the task's input request (the oldest open one unless ``input_id`` names
        one), validated against its schema on arrival.

        Raises:
            TaskRefused: ``input_not_requested``, ``input_invalid`` (the schema's message),
                ``task_closed`` ...; nothing is recorded then.
            ValueError: an answer over 32,000 characters of JSON, or with NaN.
        """
        _written(await self.history.respond(task_id, response, input_id=input_id))
        return await self._found(task_id)

    async def delete_task(self, task_id: str) -> bool:
        """Delete the task from Temporal and Neo4j (``HistoryRetention.delete_task``); False
        when there was no such task."""
        history = self.history
        retention = HistoryRetention(
            history.client,
            history.project_id,
            history.agent_id,
            task_queue=history.task_queue,
            graph=history.graph,
            timeout_s=history.timeout_s,
        )
        return (await retention.delete_task(task_id)).recorded

    async def emit_token(self, task_id: str, token: str, index: int) -> None:
        """Publish one token of the task to its live streams (never stored).

        Raises:
            RuntimeError: the manager has no broker.
        """
        if self.broker is None:
            raise RuntimeError("emit_token needs a broker: TaskManager(..., broker=Broker(url))")
        if task_id not in self._sessions:
            self._sessions[task_id] = (await self._view(task_id)).session_id
        targets = channels(self.history.workflow_id(task_id), self._sessions[task_id])
        await self.broker.publish(targets, TokenMessage(task=task_id, text=token, index=index))

    # ---------------------------------------------------------------- reads

    async def get_task(self, task_id: str) -> Task | None:
        """The task with its fields, None when it is not in this project."""
        found = await self.history.get_task(task_id)
        if found.view is None:
            return None
        return await self._task(found.view)

    async def list_tasks(
        self,
        status: TaskStatus | str | None = None,
        session_id: str | None = None,
        *,
        limit: int = 50,
    ) -> list[Task]:
        """This project's tasks, newest first: of one status (from Temporal visibility), or of
        one session (from Neo4j, so as far as the mirror has copied them; also of one status
        when both are given), at most ``limit`` (1 to 200)."""
        wanted = None if status is None else TaskStatus(status)
        statuses: Sequence[TaskStatus | None] = [wanted]
        if wanted is TaskStatus.QUEUED:  # a recorded task nobody moved yet is open
            statuses = [TaskStatus.OPEN, TaskStatus.QUEUED]
        names: set[str] = set()
        for one in statuses:
            if session_id is None:
                names |= set(await self.history.list_tasks(one, limit=limit))
            else:
                rows = await self.history.find_tasks(status=one, session_id=session_id, limit=limit)
                names |= {row.name for row in rows}
        gate = asyncio.Semaphore(LIST_READS_AT_ONCE)

        async def read(name: str) -> Task | None:
            async with gate:
                return await self.get_task(name)

        tasks = [t for t in await asyncio.gather(*(read(n) for n in names)) if t is not None]
        tasks.sort(key=lambda t: (t.created_at, t.task_id), reverse=True)
        return tasks[:limit]

    async def _found(self, task_id: str) -> Task:
        task = await self.get_task(task_id)
        if task is None:
            raise TaskRefused(ErrorCode.TASK_NOT_FOUND, f"no task {task_id!r} in this project")
        return task

    async def _view(self, task_id: str) -> TaskView:
        view = (await self.history.get_task(task_id)).view
        if view is None:
            raise TaskRefused(ErrorCode.TASK_NOT_FOUND, f"no task {task_id!r} in this project")
        return view

    async def _task(self, view: TaskView) -> Task:
        after = max(view.last_seq - UPDATES_READ, 0)
        page = await self.history.list_events(view.name, after_seq=after, limit=PAGE_LIMIT_MAX)
        events = page.events
        updates = [u for u in map(task_update, events) if u is not None]
        answers = [e for e in events if e.kind is EventKind.INPUT_RESPONSE and e.name != "rejected"]
        spawn_key, depth = await self._place(view)
        metadata: dict[str, JsonValue] = {**view.metadata, "message": view.goal}
        children = list(view.children.values())
        return Task(
            task_id=view.name,
            session_id=view.session_id,
            status=TaskStatus.QUEUED if view.status is TaskStatus.OPEN else view.status,
            result=None if view.result is None else _object(view.result.text, "text"),
            error_message=None if view.error is None else view.error.text,
            updates=updates,
            metadata=metadata,
            input_request=view.pending_inputs[0] if view.pending_inputs else None,
            input_response=_object(answers[-1].payload, "value") if answers else None,
            parent_id=view.parent,
            spawn_key=spawn_key,
            child_ids=[child.name for child in children],
            pending_children=sum(c.status not in CLOSED_STATUSES for c in children),
            depth=depth,
            created_at=view.created_at,
            updated_at=view.updated_at,
        )

    async def _place(self, view: TaskView) -> tuple[str | None, int]:
        """The task's spawn key in its parent (None for a root, or a child its parent does
        not list: one linked from outside) and its depth (its ancestors, at most
        ``MAX_DEPTH``)."""
        spawn_key = None
        depth = 0
        name, parent = view.name, view.parent
        while parent is not None and depth <= MAX_DEPTH:
            up = (await self.history.get_task(parent)).view
            if up is None:
                break
            if depth == 0:
                spawn_key = next((k for k, c in up.children.items() if c.name == name), None)
            depth += 1
            name, parent = up.name, up.parent
        return spawn_key, depth


class TaskEmitter:
    """Updates of one task without passing its id (the published API's emitter). Updates are
    written in the order of the calls, ``emit_nowait`` ones included (one queue per emitter).

    Args:
        task_manager: the manager of the task.
        task_id: the task.
    """

    def __init__(self, task_manager: TaskManager, task_id: str) -> None:
        self.task_manager = task_manager
        self.task_id = task_id
        self.tokens = 0
        """Tokens emitted so far (the next one's index)."""
        self._queue: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = (
            asyncio.Queue()
        )
        self._writer: asyncio.Task[None] | None = None

    def emit_nowait(
        self,
        message: str,
        *,
        metadata: Mapping[str, JsonValue] | None = None,
        update_type: UpdateType | str = UpdateType.INFO,
    ) -> None:
        """Queue an update and return at once (fire and forget: a refusal is logged)."""
        future = self._enqueue(message, metadata, update_type)
        future.add_done_callback(_log_failure)

    async def emit(
        self,
        message: str,
        metadata: Mapping[str, JsonValue] | None = None,
        update_type: UpdateType | str = UpdateType.INFO,
    ) -> TaskUpdate:
        """Write an update (after those queued before it) and return it.

        Raises:
            TaskRefused: ``task_closed``, ``task_not_found`` ...
        """
        update: TaskUpdate = await self._enqueue(message, metadata, update_type)
        return update

    async def emit_token(self, token: str) -> None:
        """Stream one LLM token to the task's live streams (ephemeral: never stored).

        Raises:
            RuntimeError: the manager has no broker.
        """
        index, self.tokens = self.tokens, self.tokens + 1
        await self.task_manager.emit_token(self.task_id, token, index)

    async def flush(self) -> None:
        """Wait until every queued update is written (or refused)."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((_nothing, done))
        self._start()
        await done

    def _enqueue(
        self,
        message: str,
        metadata: Mapping[str, JsonValue] | None,
        update_type: UpdateType | str,
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def write() -> Awaitable[TaskUpdate]:
            return self.task_manager.add_update(
                self.task_id, message, update_type, metadata=metadata
            )

        self._queue.put_nowait((write, future))
        self._start()
        return future

    def _start(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())

    async def _write_all(self) -> None:
        while not self._queue.empty():
            write, future = self._queue.get_nowait()
            try:
                future.set_result(await write())
            except Exception as err:  # the caller's future holds it
                future.set_exception(err)


async def _nothing() -> None:
    return None


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("an update emitted without waiting was not written: %s", future.exception())
