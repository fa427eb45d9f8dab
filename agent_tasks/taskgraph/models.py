"""Typed results and filters of the cross-task reads (no driver here).

Each filter is defined once for the client, the CLI and the graph stores: a bad argument raises
pydantic's ``ValidationError`` naming the field before any query is sent. Every datetime given to
the Neo4j driver goes through ``utc`` first: Cypher orders equal instants in other offsets apart,
and the driver's encoding of a ``ZoneInfo`` datetime crashes CPython (SIGSEGV).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    computed_field,
    field_validator,
)

from agent_tasks.contract import (
    PAGE_LIMIT_MAX,
    STEPS_PAGE_MAX,
    Citations,
    Event,
    EventKind,
    ShortText,
    StepName,
    StepState,
    StepView,
    TaskName,
    TaskStatus,
)

MAX_TREE_DEPTH = 20
"""Deepest level ``task_tree`` follows."""
NEO4J_INT_MAX = 2**63 - 1
"""Largest integer the graph stores keep (64-bit signed): a bound of every seq argument, so a huge
int is refused by name, not by the driver's ``OverflowError``."""

Limit = Annotated[StrictInt, Field(ge=1, le=PAGE_LIMIT_MAX)]
"""A page size: an ``int`` (not a string, not a bool) from 1 to ``PAGE_LIMIT_MAX``."""
Seq = Annotated[StrictInt, Field(ge=0, le=NEO4J_INT_MAX)]
"""A seq cursor: an ``int`` from 0 (before the first event) to ``NEO4J_INT_MAX``."""


def utc(value: datetime) -> datetime:
    """``value`` as the same instant in ``datetime.UTC`` (the module docstring says why).

    Raises:
        ValueError: ``value`` is naive (no time zone).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"datetime {value.isoformat()} has no time zone: give an offset")
    return value.astimezone(UTC)


UtcDatetime = Annotated[AwareDatetime, AfterValidator(utc)]
"""A timezone-aware datetime (naive ones are refused), normalised to UTC."""


class _Filter(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskRead(_Filter):
    """Which task ``get_task`` reads."""

    task: TaskName
    """The task's name (1 to 200 characters)."""


class EventsRead(TaskRead):
    """Which page of one task's events ``list_events`` returns."""

    after_seq: Seq = 0
    """Events with seq > after_seq (0: from the first)."""
    limit: Limit = 50
    """At most this many events."""


class StepsRead(TaskRead):
    """Which page of one task's steps ``list_steps`` returns."""

    state: StepState | None = None
    """Only steps in this state."""
    limit: Annotated[StrictInt, Field(ge=1, le=STEPS_PAGE_MAX)] = PAGE_LIMIT_MAX
    """At most this many steps."""
    after_name: StepName | None = None
    """The paging cursor: steps whose name sorts after this one."""


class TreeRead(TaskRead):
    """How deep ``task_tree`` follows a task's children."""

    depth: Annotated[StrictInt, Field(ge=0, le=MAX_TREE_DEPTH)] = 3
    """Levels of children below the task (0: the task alone)."""


class TaskListFilter(_Filter):
    """Which task names ``list_tasks`` returns from Temporal visibility."""

    status: TaskStatus | None = None
    """Only tasks in this status."""
    limit: Limit = 50
    """At most this many names."""


class TaskFilter(_Filter):
    """Which tasks ``find_tasks`` returns: each filter applies when not None."""

    status: TaskStatus | None = None
    """Only tasks in this status."""
    agent_id: ShortText | None = None
    """Only tasks created by this agent."""
    session_id: ShortText | None = None
    """Only tasks of this session."""
    parent: TaskName | None = None
    """Only children of this task (by name)."""
    name_contains: str | None = Field(default=None, min_length=1, max_length=200)
    """Only tasks whose name contains this text (case-insensitive)."""
    since: UtcDatetime | None = None
    """Only tasks created at or after this time (timezone-aware)."""
    until: UtcDatetime | None = None
    """Only tasks created before this time (timezone-aware)."""
    open_inputs: bool = False
    """Only tasks with an open input request (an approval too)."""
    after_name: TaskName | None = None
    """The paging cursor: tasks whose name sorts after this one."""
    limit: Limit = 50
    """At most this many tasks."""


class EventFilter(_Filter):
    """Which events ``find_events`` returns (``since`` <= time < ``until``)."""

    kind: EventKind | None = None
    """Only events of this kind."""
    name: ShortText | None = None
    """Only events with this tool name or label."""
    since: UtcDatetime | None = None
    """Inclusive lower bound of the event time (timezone-aware, any offset; kept in UTC)."""
    until: UtcDatetime | None = None
    """Exclusive upper bound of the event time (timezone-aware, any offset; kept in UTC)."""
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
    pending_inputs: list[str] = []
    """Ids of the task's open input requests."""
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


class StepRow(StepView):
    """A step across tasks, with the task it belongs to."""

    task_name: str
    """The name of the step's task."""


class DecisionsRead(TaskRead):
    """Which page of one task's decisions ``list_decisions`` returns."""

    after_seq: Seq = 0
    """Decisions recorded as seq > after_seq (0: from the first)."""
    limit: Limit = 50
    """At most this many decisions."""


class StepChange(BaseModel):
    """A step a decision cites that changed after the decision."""

    name: str
    """The step's name."""
    state_then: StepState
    """Its state when the decision was recorded."""
    attempt_then: int
    """Its attempt then."""
    state: StepState
    """Its state now."""
    attempt: int
    """Its attempt now."""


class DecisionRow(BaseModel):
    """A decision as ``list_decisions`` and ``get_decision`` read it, with whether it needs review:
    a cited event redacted, a cited step changed since, or its task deleted while it was kept."""

    id: str
    """The decision's id: its event's id."""
    task_name: str
    """The task it belongs to (a deleted one for a detached decision)."""
    seq: int
    """Its seq in the task's log."""
    statement: str
    """What the agent decided (empty once redacted itself)."""
    author: str
    """The agent that recorded it."""
    time: datetime
    """Workflow time of the decision (UTC)."""
    redacted: bool = False
    """True when the statement itself was redacted."""
    cites: Citations
    """What it cites: event seqs, and steps with their state and attempt then."""
    redacted_events: list[int] = []
    """Seqs of cited events whose text was redacted since."""
    changed_steps: list[StepChange] = []
    """Cited steps that changed since."""
    detached: bool = False
    """True when its task was deleted and the decision kept."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def needs_review(self) -> bool:
        """True when what it rests on changed: ``redacted_events``, ``changed_steps`` or
        ``detached``."""
        return bool(self.redacted_events or self.changed_steps or self.detached)


class ToolFailures(BaseModel):
    """Failed tool calls of one tool across a project's tasks."""

    tool: str
    """The tool name, lower-cased (``?`` when the result event has none)."""
    spellings: list[str] = []
    """The names as the model spelled them (``["Bash", "bash"]``), sorted."""
    failed: int
    """Failed tool steps."""
    tasks: int
    """Tasks with at least one of them."""

    @field_validator("spellings")
    @classmethod
    def _sorted(cls, value: list[str]) -> list[str]:
        return sorted(value)


def plain(node: Any) -> dict[str, Any]:
    """Node properties with the store's temporal values as Python datetimes."""
    return {
        key: value.to_native() if hasattr(value, "to_native") else value
        for key, value in dict(node).items()
    }


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_us(moment: datetime) -> int:
    """Microseconds of an aware ``moment`` since the Unix epoch, exactly (FalkorDB's times).

    Raises:
        ValueError: ``moment`` is naive."""
    since = utc(moment) - _EPOCH
    return (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds


def as_datetime(value: Any) -> datetime:
    """A stored time as an aware UTC datetime, from either store (Neo4j's temporal value, a
    datetime, or FalkorDB's integer microseconds)."""
    if isinstance(value, int):
        return _EPOCH + timedelta(microseconds=value)
    if hasattr(value, "to_native"):
        value = value.to_native()
    if not isinstance(value, datetime):
        raise TypeError(f"not a stored time: {value!r}")
    return utc(value)
