"""The records of the Tasks API (``starter.tasks``): ``Task``, its updates (``TaskUpdate``) and
``UpdateType``, task ids (ULIDs), ``TaskRefused``, and how an event reads as an update."""

from __future__ import annotations

import json
import secrets
import time
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field, JsonValue

from agent_tasks.contract import (
    Event,
    EventKind,
    InputRequest,
    TaskStatus,
)
from agent_tasks.contract.errors import AgentTasksError, ErrorCode
from agent_tasks.starter.results import WriteResult

UPDATES_READ = 200
"""Events ``get_task`` reads into ``updates`` (the newest; older ones: ``list_events``)."""
LIST_READS_AT_ONCE = 8
"""Tasks ``list_tasks`` reads at once."""
UPDATE_NOTE = "update"
"""The name of the ``note`` events that hold the published API's updates."""
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_task_id() -> str:
    """A ULID: 48 bits of Unix ms and 80 random bits in 26 Crockford base32 characters, so ids sort
    by creation time."""
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
    """The answer to the newest answered request (a non-object answer as ``{"value": ...}``)."""
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


class TaskRefused(AgentTasksError):
    """A write was refused; nothing was recorded. ``code`` is the product's ``ErrorCode``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message


def written_or_raise(result: WriteResult) -> WriteResult:
    """``result`` when it was recorded; else its refusal raised as ``TaskRefused``."""
    if not result.recorded:
        assert result.error is not None
        raise TaskRefused(result.error, result.message or result.error.value)
    return result


def json_object(text: str, field: str) -> dict[str, JsonValue]:
    """``text`` as a JSON object, or ``{field: value}`` for any other text or JSON value."""
    try:
        value = json.loads(text)
    except ValueError:
        return {field: text}
    return value if isinstance(value, dict) else {field: value}


def task_update(event: Event) -> TaskUpdate | None:
    """The update an event reads as (None for a status note): an ``update`` note as written, another
    event with its kind mapped."""
    if event.kind is EventKind.NOTE and event.name == "status":
        return None
    if event.kind is EventKind.NOTE and event.name == UPDATE_NOTE:
        written = json_object(event.payload, "message")
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
