"""The Tasks API of the published task manager for agents (``TaskManager``, ``TaskEmitter``,
``TaskStatus``) over this product's tasks (``docs/agent-tasks.md``).

A facade, not a second store: one task is one ``TaskWorkflow`` named by its task id, reached through
``ConversationHistory``; every update is an event. Code written for the published API runs with its
imports and client swapped::

    history = starter.ConversationHistory(await starter.connect(), "acme", "worker-1", graph=graph)
    task_manager = TaskManager(history)
    task = await task_manager.create_task(session_id="session_123", message="What is Redis?")

Our choices where the published page is silent:

- ``task_id``: a new ULID unless given; a recorded task's ``open`` reads as ``QUEUED``.
- ``update(status=...)``: ``set_status``, or ``finish_task`` for an end (a ``result`` alone means
  ``done``, an ``error`` alone ``failed``); ``update(message=...)`` and ``add_update``: a ``note``
  named ``update`` (``{"message", "update_type", "metadata"}``), written first.
- ``result``: stored as JSON text; a non-object result reads as ``{"text": ...}``.
- ``updates``: the newest ``UPDATES_READ`` events but status notes, other kinds mapped.
- ``AWAITING_INPUT`` and ``AWAITING_CHILDREN`` go back to ``QUEUED`` once nothing is waited for
  (``workflows.lifecycle``).
- ``prefix``: the project id; ``emit_token``: the broker only; ``delete_task``:
  ``HistoryRetention.delete_task``.

A refused write raises ``TaskRefused`` with the ``ErrorCode``; reading a missing task returns None.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Mapping, Sequence

from pydantic import JsonValue

from agent_tasks.broker import Broker, TokenMessage, channels
from agent_tasks.contract import (
    CLOSED_STATUSES,
    MAX_DEPTH,
    PAGE_LIMIT_MAX,
    AgentSpec,
    EventKind,
    TaskStatus,
    TaskView,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.contract.lifecycle import SETTABLE_STATUSES
from agent_tasks.starter.arguments import checked, invalid
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.starter.task_emitter import TaskEmitter
from agent_tasks.starter.task_records import (
    LIST_READS_AT_ONCE,
    UPDATE_NOTE,
    UPDATES_READ,
    Task,
    TaskRefused,
    TaskUpdate,
    UpdateType,
    json_object,
    new_task_id,
    task_update,
    written_or_raise,
)

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
                broker=client.broker,
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
            parent_id: a parent task run by the app: the new task is its child
                (``ConversationHistory.spawn_child``).
            spawn_key: the child's label in its parent (default: its task id).
            task_id: the id (a task name); default a new ULID.
            agent: an agent that runs the task in the worker; None: the app runs it.

        Raises:
            TaskRefused: ``task_exists``, ``task_not_found`` (no such parent),
                ``child_limit_reached``, ``run_by_agent`` ...
            pydantic.ValidationError: an argument of the wrong shape, or ``metadata`` or ``agent``
                for a child task.
        """
        meta: dict[str, str] | None = checked(metadata, dict[str, str] | None, "metadata")
        task_id = task_id or new_task_id()
        if parent_id is None:
            written_or_raise(
                await self.history.create_task(
                    task_id,
                    message,
                    session_id=session_id,
                    metadata=meta,
                    agent=agent,
                )
            )
        else:
            if meta or agent is not None:
                raise invalid("parent_id", parent_id, "a child task takes no metadata or agent")
            written_or_raise(
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
        """Change status, add a message, set a result or an error, in one call (the message first).
        ``result`` without a status ends the task ``done``, ``error`` without one ``failed``.

        Raises:
            TaskRefused: the write's refusal (``task_not_found``, ``task_closed``, ``run_by_agent``
                ...); a given message may be recorded already.
            pydantic.ValidationError: an argument of the wrong shape, or the status
                ``awaiting_input`` (use ``request_input``) or ``open``.
        """
        wanted = checked(status, TaskStatus | None, "status")
        result = checked(result, dict[str, JsonValue] | None, "result")
        if wanted is TaskStatus.AWAITING_INPUT:
            raise invalid("status", status, "a task awaits input through request_input")
        if wanted is TaskStatus.OPEN:
            raise invalid("status", status, "open is a recorded task's first status; set queued")
        if message is not None:
            await self.add_update(task_id, message, update_type, metadata=metadata)
        if wanted is None and (result is not None or error is not None):
            wanted = TaskStatus.FAILED if error is not None else TaskStatus.DONE
        if wanted in CLOSED_STATUSES:
            written_or_raise(
                await self.history.finish_task(
                    task_id,
                    wanted,
                    result=None if result is None else json.dumps(result),
                    error=error,
                )
            )
        elif wanted in SETTABLE_STATUSES:
            written_or_raise(await self.history.set_status(task_id, wanted))
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
        """Record a progress update (a ``note`` named ``update``) and return it.

        Raises:
            TaskRefused: ``task_not_found``, ``task_closed`` ...
        """
        kind = checked(update_type, UpdateType, "update_type")
        extra = checked(metadata, dict[str, JsonValue] | None, "metadata")
        payload = {"message": message, "update_type": kind.value, "metadata": extra or {}}
        written = written_or_raise(
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
        """Ask a person for input: ``AWAITING_INPUT`` with ``input_request`` set until answered
        (``submit_input``), then ``QUEUED``; ``input_id`` defaults to ``input-`` and 8 random hex.

        Raises:
            TaskRefused: ``input_exists``, ``schema_invalid``, ``input_limit_reached`` ...
        """
        input_id = input_id or f"input-{secrets.token_hex(4)}"
        written_or_raise(await self.history.request_input(task_id, input_id, prompt, schema))
        return await self._found(task_id)

    async def submit_input(
        self, task_id: str, response: JsonValue, *, input_id: str | None = None
    ) -> Task:
        """Answer the task's input request (the oldest open one unless ``input_id`` names one),
        validated against its schema on arrival.

        Raises:
            TaskRefused: ``input_not_requested``, ``input_invalid``, ``task_closed`` ...
            pydantic.ValidationError: an answer over 32,000 characters of JSON, or with NaN.
        """
        written_or_raise(await self.history.respond(task_id, response, input_id=input_id))
        return await self._found(task_id)

    async def delete_task(self, task_id: str) -> bool:
        """Delete the task (``HistoryRetention.delete_task``); False when there was no such task."""
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
        """This project's tasks, newest first: of one status (Temporal visibility) or one session
        (the graph store, as far as mirrored; with a status too), at most ``limit`` (1 to 200).

        Raises:
            pydantic.ValidationError: an argument of the wrong shape.
        """
        wanted = checked(status, TaskStatus | None, "status")
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
            result=None if view.result is None else json_object(view.result.text, "text"),
            error_message=None if view.error is None else view.error.text,
            updates=updates,
            metadata=metadata,
            input_request=view.pending_inputs[0] if view.pending_inputs else None,
            input_response=json_object(answers[-1].payload, "value") if answers else None,
            parent_id=view.parent,
            spawn_key=spawn_key,
            child_ids=[child.name for child in children],
            pending_children=sum(c.status not in CLOSED_STATUSES for c in children),
            depth=depth,
            created_at=view.created_at,
            updated_at=view.updated_at,
        )

    async def _place(self, view: TaskView) -> tuple[str | None, int]:
        """The task's spawn key in its parent (None for a root or a task linked from outside) and
        its depth (at most ``MAX_DEPTH``)."""
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
