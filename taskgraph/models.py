"""Typed results and filters of the cross-task reads (no Neo4j driver here).

Each filter is defined once and used by the client, the CLI and ``TaskGraph``: a bad argument
raises pydantic's ``ValidationError`` naming the field, before any query is sent.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from workflows.models import (
    PAGE_LIMIT_MAX,
    Event,
    EventKind,
    ResultValidity,
    StepKind,
    StepState,
    TaskStatus,
)

Limit = Annotated[int, Field(ge=1, le=PAGE_LIMIT_MAX)]
"""A page size: 1 to ``PAGE_LIMIT_MAX``."""


class _Filter(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskFilter(_Filter):
    """Which tasks ``find_tasks`` returns: each filter applies when not None."""

    status: TaskStatus | None = None
    """Only tasks in this status."""
    agent_id: str | None = None
    """Only tasks created by this agent."""
    session_id: str | None = None
    """Only tasks of this session."""
    parent: str | None = None
    """Only children of this task (by name)."""
    after_name: str | None = None
    """The paging cursor: tasks whose name sorts after this one."""
    limit: Limit = 50
    """At most this many tasks."""


class EventFilter(_Filter):
    """Which events ``find_events`` returns (``since`` <= time < ``until``)."""

    kind: EventKind | None = None
    """Only events of this kind."""
    name: str | None = None
    """Only events with this tool name or label."""
    since: AwareDatetime | None = None
    """Inclusive lower bound of the event time (timezone-aware, any offset)."""
    until: AwareDatetime | None = None
    """Exclusive upper bound of the event time (timezone-aware, any offset)."""
    failed_only: bool = False
    """Only results of failed steps (every failed tool call, for example)."""
    limit: Limit = 50
    """At most this many events."""


class StepFilter(_Filter):
    """Which steps ``find_steps`` returns."""

    state: StepState | None = None
    """Only steps in this state."""
    limit: Limit = 50
    """At most this many steps."""


class TaskRow(BaseModel):
    """A task node as the cross-task reads return it."""

    key: str
    """The task's workflow id."""
    project_id: str
    name: str
    goal: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    parent: str | None = None
    metadata: dict[str, str] = {}
    status: TaskStatus | None = None
    """None for a placeholder node (a parent named by a child, not mirrored itself)."""
    result: str | None = None
    error: str | None = None
    last_seq: int = 0
    mirrored_seq: int = 0
    runs: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_json(cls, value: object) -> object:
        return json.loads(value) if isinstance(value, str) else value


class TreeRow(TaskRow):
    """A task in ``task_tree``, with its depth below the root (0 for the root)."""

    depth: int


class EventRow(Event):
    """An event across tasks, with the task it belongs to."""

    task_name: str
    """The name of the event's task."""


class StepRow(BaseModel):
    """A step across tasks, with the task it belongs to."""

    task_name: str
    step_name: str
    state: StepState
    kind: StepKind
    result_event_seq: int | None = None
    attempt: int = 0
    result_validity: ResultValidity
    idempotency_key: str
    updated_at: datetime | None = None


class ToolFailures(BaseModel):
    """Failed tool calls of one tool across a project's tasks."""

    tool: str
    """The tool name (``?`` when the result event has none)."""
    failed: int
    """Failed tool steps."""
    tasks: int
    """Tasks with at least one of them."""


def plain(node: Any) -> dict[str, Any]:
    """Node properties with Neo4j temporal values as Python datetimes."""
    return {
        key: value.to_native() if hasattr(value, "to_native") else value
        for key, value in dict(node).items()
    }
