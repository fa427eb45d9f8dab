"""The task model: the pydantic models, enums, limits and error codes of a task ledger.

This module is imported by the workflow (so it is deterministic: stdlib, pydantic and nothing
else) and by the client in ``starter`` (so both sides validate, bound and hash the same way).
Every model crosses Temporal through ``temporalio.contrib.pydantic.pydantic_data_converter``.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

# --------------------------------------------------------------------------------------------
# Limits. Each comes from ../DESIGN.md ("Facts measured on this machine" and its consequences).
# --------------------------------------------------------------------------------------------

MAX_PAYLOAD_CHARS = 32_000
"""An event payload longer than this many characters (code points) is cut to it."""
MAX_EVENTS_PER_UPDATE = 200
"""Events in one ``record_events`` update; the client splits larger batches."""
MAX_UPDATE_BYTES = 1_048_576
"""Serialized size (bytes) the client keeps one update under; the server stalls a workflow on an
update payload over 2 MiB, so a batch is split long before that."""
MAX_STEPS_PER_UPDATE = 200
"""Step writes in one ``set_steps`` update; the client splits larger batches."""
MAX_STEPS_PER_TASK = 500
"""Steps one task may hold (their records are carried across continue-as-new)."""
REQUEST_WINDOW = 2_000
"""How many of a task's most recent writes keep their request id for deduplication."""
MAX_METADATA_ENTRIES = 16
"""Entries in a task's metadata map (values are at most ``MAX_METADATA_VALUE_CHARS``)."""
MAX_METADATA_VALUE_CHARS = 500
MAX_GOAL_CHARS = 4_000
"""Characters of a task goal."""
MAX_FULL_LENGTH = 2**53
"""Largest ``full_length`` an event may claim (a count every JSON reader and Neo4j's 64-bit
integers hold exactly)."""
PAGE_LIMIT_MAX = 200
"""Largest page a read returns (events, steps, tasks)."""

_PROJECT_ID = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Name = Annotated[StrictStr, Field(min_length=1, max_length=200)]
"""A task name: 1 to 200 characters, no control characters (checked by ``check_name``)."""
StepName = Annotated[
    StrictStr, Field(min_length=1, max_length=100, pattern=r"^[^/\x00-\x1f\x7f-\x9f]+$")
]
"""A step name: 1 to 100 characters, no ``/`` and no control characters, so that the step's
idempotency key ``{workflow_id}/{step_name}/{attempt}`` and its Neo4j key read back one way."""
ShortText = Annotated[StrictStr, Field(min_length=1, max_length=128)]
ProjectId = Annotated[StrictStr, Field(pattern=_PROJECT_ID)]
"""1 to 64 characters of ``[A-Za-z0-9_.-]``, starting with a letter or digit (never ``/``)."""


class EventKind(StrEnum):
    """What an event records."""

    message = "message"
    """A chat message (``role`` says whose)."""
    tool_call = "tool_call"
    """A call of a tool (``name`` is the tool, the payload its arguments as text)."""
    tool_result = "tool_result"
    """What a tool returned (``call_id`` links it to its call)."""
    reasoning = "reasoning"
    """Model reasoning kept apart from the message text."""
    input_request = "input_request"
    """The agent asks a person for input."""
    input_response = "input_response"
    """A person's answer to an input request."""
    child_task = "child_task"
    """A child task was spawned (the payload names it)."""
    child_result = "child_result"
    """A child task finished (the payload is its result)."""
    error = "error"
    """An error outside any tool call (a crash, a model API failure)."""
    note = "note"
    """Anything else worth keeping in the log (annotations, imported metadata)."""


class Role(StrEnum):
    """Author role of a message, as in chat transcripts."""

    system = "system"
    user = "user"
    assistant = "assistant"
    tool = "tool"


class StepState(StrEnum):
    """State of a step. Transitions follow ``STEP_TRANSITIONS``."""

    not_started = "not_started"
    in_progress = "in_progress"
    completed = "completed"
    failed = "failed"
    unknown = "unknown"
    """The step may or may not have had its effect (for example the worker died mid-call)."""


class StepKind(StrEnum):
    """What a step does. ``human`` and ``child`` are this project's additions."""

    read = "read"
    write = "write"
    tool = "tool"
    model = "model"
    human = "human"
    """Waits for a person's input."""
    child = "child"
    """Runs a child task."""


class TaskStatus(StrEnum):
    """Status of a task. ``open`` until ``finish_task`` sets one of the other three."""

    open = "open"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"


class ErrorCode(StrEnum):
    """Why a write was refused. A refused write leaves nothing in the history or the state."""

    task_exists = "task_exists"
    """``create_task``: the name exists in this project with another goal."""
    task_not_found = "task_not_found"
    """No task of that name in this project."""
    event_not_found = "event_not_found"
    """``result_event_seq`` names no event of this task."""
    request_id_reused = "request_id_reused"
    """The request id was used before with other arguments."""
    invalid_request_id = "invalid_request_id"
    """A request id must be 1 to 64 characters."""
    task_closed = "task_closed"
    """The task was finished; it takes no more writes."""
    invalid_transition = "invalid_transition"
    """The step cannot move from its state to the asked one (``STEP_TRANSITIONS``)."""
    step_kind_changed = "step_kind_changed"
    """A step keeps the kind it was created with."""
    step_limit_reached = "step_limit_reached"
    """The task already holds ``MAX_STEPS_PER_TASK`` steps."""
    task_busy = "task_busy"
    """The task's history is near Temporal's hard limit while the mirror catches up; retry
    later (see ``HISTORY_BACKPRESSURE_EVENTS``)."""


HISTORY_BACKPRESSURE_EVENTS = 40_000
"""History length at which a task refuses writes with ``task_busy`` (Temporal terminates a run
at 51,200 events; this happens only if Neo4j stays down long enough to delay continue-as-new)."""

DUPLICATE = "duplicate_request"
"""ApplicationError type a validator raises for a repeated request id with the same arguments;
its details carry the stored ``WriteOutcome``. The client turns it into a normal result."""


CONTINUING_AS_NEW = "continuing_as_new"
"""ApplicationError type a validator raises while a task drains before continue-as-new (the
mirror catching up); nothing is written, and the client sends the write again shortly, when
the new run takes it."""


STEP_TRANSITIONS: dict[StepState, frozenset[StepState]] = {
    StepState.not_started: frozenset(
        {StepState.in_progress, StepState.completed, StepState.failed, StepState.unknown}
    ),
    StepState.in_progress: frozenset({StepState.completed, StepState.failed, StepState.unknown}),
    StepState.unknown: frozenset({StepState.in_progress, StepState.completed, StepState.failed}),
    StepState.failed: frozenset({StepState.in_progress}),
    StepState.completed: frozenset(),
}
"""Allowed step transitions, from the current state to the next. A new step may start in any
state. ``completed`` is final; ``failed`` and ``unknown`` may be retried (back to
``in_progress``), and a person may settle an ``unknown`` step as ``completed`` or ``failed``.
Setting a step to the state it is in is refused (``invalid_transition``): a retried write is
made idempotent by its request id, not by repeating the state. Each move into ``in_progress``
starts a new attempt (``StepView.attempt``)."""


class ResultValidity(StrEnum):
    """How far a reader can trust a step's result, as returned by ``list_steps``."""

    valid = "valid"
    """Completed, and ``result_event_seq`` names the event holding the result."""
    no_result = "no_result"
    """Completed without a result event: the effect happened, its output was not recorded."""
    pending = "pending"
    """Not started or in progress: there is no result yet."""
    failed = "failed"
    """Failed: the result event, if any, holds the error, not a result."""
    uncertain = "uncertain"
    """State ``unknown``: the effect may or may not have happened; check before retrying."""


def result_validity(state: StepState, result_event_seq: int | None) -> ResultValidity:
    """Map a step's state and result seq to its ``ResultValidity`` (the table in its docstring)."""
    if state is StepState.completed:
        return ResultValidity.valid if result_event_seq is not None else ResultValidity.no_result
    if state is StepState.failed:
        return ResultValidity.failed
    if state is StepState.unknown:
        return ResultValidity.uncertain
    return ResultValidity.pending


# --------------------------------------------------------------------------------------------
# Pure rules: names, ids, text bounding, argument digests.
# --------------------------------------------------------------------------------------------


def check_name(value: str, field: str) -> str:
    """Return ``value`` if it has no control character, else raise ``ValueError`` naming
    ``field``. Lengths are checked by the pydantic field constraints."""
    if _CONTROL.search(value):
        raise ValueError(f"{field} must not contain control characters")
    return value


def task_workflow_id(project_id: str, name: str) -> str:
    """The workflow id of a task: ``agent-task/{project_id}/{name}``.

    Collision-free: a project id never contains ``/`` (``ProjectId``), so the first ``/`` after
    the prefix ends it and distinct ``(project_id, name)`` pairs give distinct ids.
    """
    return f"agent-task/{project_id}/{name}"


def valid_request_id(request_id: object) -> bool:
    """True for a ``str`` of 1 to 64 characters that encodes to UTF-8 (no lone surrogates):
    the rule behind ``invalid_request_id``."""
    return (
        isinstance(request_id, str)
        and 1 <= len(request_id) <= 64
        and clean_text(request_id) == request_id
    )


def clean_text(text: str) -> str:
    """Return ``text`` as valid Unicode that encodes to UTF-8.

    The one rule for text that is not valid UTF-8: a surrogate pair written as two code points
    is joined into the character it encodes, and every lone surrogate (U+D800 to U+DFFF)
    becomes U+FFFD REPLACEMENT CHARACTER. Everything else is kept as it is. Lengths and hashes
    are then taken of the cleaned text, since the original has no UTF-8 form.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def sha256_hex(text: str) -> str:
    """SHA-256 (lower-case hex, 64 characters) of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def args_digest(model: BaseModel) -> str:
    """A 12-hex-character (48-bit) digest of a write's arguments, ``request_id`` excluded.

    Two writes with one request id are "the same" when their digests match. The JSON is
    canonical (sorted keys, no spaces) so the client and the workflow compute the same value.
    """
    data = model.model_dump(mode="json", exclude={"request_id"})
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def request_key(request_id: str) -> str:
    """The key a request id is remembered under: 16 hex characters (64 bits) of its SHA-256,
    so that the window's size does not depend on how long callers' ids are."""
    return sha256_hex(request_id)[:16]


class BoundedText(BaseModel):
    """Text bounded to ``MAX_PAYLOAD_CHARS``, with the length and hash of the full text."""

    model_config = ConfigDict(frozen=True)

    text: str
    """The text, cut to at most ``MAX_PAYLOAD_CHARS`` characters."""
    full_length: int
    """Length of the full (cleaned) text in characters (code points)."""
    full_sha256: str
    """SHA-256 hex of the full (cleaned) text as UTF-8."""

    @property
    def truncated(self) -> bool:
        """True when ``text`` is shorter than the full text."""
        return self.full_length > len(self.text)


def bound_text(text: str) -> BoundedText:
    """Clean ``text`` (``clean_text``) and cut it to ``MAX_PAYLOAD_CHARS`` characters.

    A Python ``str`` holds code points, so a cut at a code point boundary never splits a
    character's UTF-8 bytes. Returns the cut text with the full text's length and SHA-256.
    """
    full = clean_text(text)
    return BoundedText(
        text=full[:MAX_PAYLOAD_CHARS], full_length=len(full), full_sha256=sha256_hex(full)
    )


# --------------------------------------------------------------------------------------------
# Write inputs (one model per update) and their outcome.
# --------------------------------------------------------------------------------------------


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EventInput(_Input):
    """One event to record. The payload is cleaned and bounded on validation, so a multi-MiB
    payload never leaves the client: only its first ``MAX_PAYLOAD_CHARS`` characters do."""

    kind: EventKind
    """What the event records."""
    role: Role | None = None
    """Whose message it is (messages); None for other kinds if not meaningful."""
    name: ShortText | None = None
    """Tool name for tool calls and results; any short label otherwise."""
    call_id: ShortText | None = None
    """Links a tool_result to its tool_call (the tool call id of the source)."""
    payload: StrictStr = ""
    """The text: message content, tool arguments (JSON text), tool output."""
    full_length: int | None = Field(default=None, ge=0, le=MAX_FULL_LENGTH)
    """Characters of the full payload; set by validation, or kept when the payload is
    already a cut (``len(payload) == MAX_PAYLOAD_CHARS``)."""
    full_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """SHA-256 hex of the full payload as UTF-8; set like ``full_length``."""

    @model_validator(mode="after")
    def _bound(self) -> Self:
        kept_cut = (
            self.full_length is not None
            and self.full_sha256 is not None
            and len(self.payload) == MAX_PAYLOAD_CHARS
            and self.full_length > MAX_PAYLOAD_CHARS
            and clean_text(self.payload) == self.payload
        )
        if not kept_cut:
            bounded = bound_text(self.payload)
            # object.__setattr__: assignment validation would re-run this validator.
            object.__setattr__(self, "payload", bounded.text)
            object.__setattr__(self, "full_length", bounded.full_length)
            object.__setattr__(self, "full_sha256", bounded.full_sha256)
        return self


class StepWrite(_Input):
    """One step change."""

    step_name: StepName
    """The step's name, unique within the task."""
    state: StepState
    """The state to move to."""
    kind: StepKind | None = None
    """The step's kind; required when the step is new, else it must match or be None."""
    result_event_seq: StrictInt | None = Field(default=None, ge=1)
    """Seq of the event holding the step's result; must name an event of the same task."""


class TaskStart(_Input):
    """What creates a task: the start input of update-with-start and the input of the
    ``create_task`` update sent with it."""

    project_id: ProjectId
    """Project that scopes the task."""
    name: Name
    """Task name, unique in the project."""
    goal: Annotated[StrictStr, Field(max_length=MAX_GOAL_CHARS)]
    """What the task is for."""
    agent_id: ShortText
    """Agent that created the task."""
    session_id: ShortText | None = None
    """Session the task belongs to, if any."""
    parent: Name | None = None
    """Name of the parent task in the same project, if this is a child task."""
    metadata: dict[ShortText, Annotated[StrictStr, Field(max_length=MAX_METADATA_VALUE_CHARS)]] = (
        Field(default_factory=dict, max_length=MAX_METADATA_ENTRIES)
    )
    """Free metadata (model, source file, exit status...)."""
    request_id: StrictStr
    """Request id of the creating call (1 to 64 characters)."""

    @model_validator(mode="after")
    def _names(self) -> Self:
        check_name(self.name, "name")
        if self.parent is not None:
            check_name(self.parent, "parent")
        return self


class RecordEventsInput(_Input):
    """Update ``record_events``."""

    agent_id: ShortText
    """Author of the events."""
    events: list[EventInput] = Field(min_length=1, max_length=MAX_EVENTS_PER_UPDATE)
    """Events in order; they get consecutive seqs."""
    request_id: StrictStr
    """Request id (1 to 64 characters)."""


class SetStepsInput(_Input):
    """Update ``set_steps``: applied all or nothing, in order."""

    agent_id: ShortText
    """Who sets the steps."""
    steps: list[StepWrite] = Field(min_length=1, max_length=MAX_STEPS_PER_UPDATE)
    """Step changes in order."""
    request_id: StrictStr
    """Request id (1 to 64 characters)."""


class FinishTaskInput(_Input):
    """Update ``finish_task``."""

    agent_id: ShortText
    """Who finishes the task."""
    status: TaskStatus
    """done, failed or cancelled (``open`` is refused by validation)."""
    result: BoundedText | None = None
    """Result text, cleaned and cut like a payload (a ``str`` is bounded on validation, so a
    long text never leaves the client whole)."""
    error: BoundedText | None = None
    """Error text, bounded like ``result``."""

    @field_validator("result", "error", mode="before")
    @classmethod
    def _bound_text(cls, value: object) -> object:
        return bound_text(value) if isinstance(value, str) else value

    request_id: StrictStr
    """Request id (1 to 64 characters)."""

    @model_validator(mode="after")
    def _closing_status(self) -> Self:
        if self.status is TaskStatus.open:
            raise ValueError("status must be done, failed or cancelled")
        return self


class WriteOutcome(BaseModel):
    """What an accepted write returns, and what a repeated request id returns again."""

    first_seq: int = 0
    """First seq the write assigned (0 when it assigned none)."""
    last_seq: int = 0
    """Last seq the write assigned (0 when it assigned none)."""
    duplicate: bool = False
    """True when this is the stored outcome of an earlier write with the same request id, or
    (``create_task``) the task already existed with the same goal."""
    created: bool = False
    """``create_task``: True when this request id is the one that created the task."""


class RequestLookup(BaseModel):
    """Query input: the outcome stored for a request id, if its argument digest matches."""

    request_id: str
    digest: str


# --------------------------------------------------------------------------------------------
# State and views.
# --------------------------------------------------------------------------------------------


class Event(BaseModel):
    """A recorded event."""

    seq: int
    """Position in the task's log: 1, 2, 3 ... with no gaps, across continue-as-new."""
    kind: EventKind
    role: Role | None = None
    name: str | None = None
    call_id: str | None = None
    payload: str
    """The payload, at most ``MAX_PAYLOAD_CHARS`` characters."""
    full_length: int
    """Characters of the full payload."""
    full_sha256: str
    """SHA-256 hex of the full payload as UTF-8."""
    author: str
    """Agent id of the writer."""
    time: AwareDatetime
    """Workflow time of the write (UTC)."""
    request_id: str
    """Request id of the write that recorded it."""

    @property
    def truncated(self) -> bool:
        """True when the payload was cut."""
        return self.full_length > len(self.payload)


class StepRecord(BaseModel):
    """A step as the workflow keeps it (carried across continue-as-new)."""

    state: StepState
    kind: StepKind
    result_event_seq: int | None = None
    attempt: int = 0
    """Times the step entered ``in_progress``: the attempt number in its idempotency key."""
    updated_at: AwareDatetime
    changed_write: int = 0
    """The task's write counter when this step last changed (the mirror reads from it)."""


class StepView(BaseModel):
    """A step as readers see it."""

    step_name: str
    state: StepState
    kind: StepKind
    result_event_seq: int | None = None
    attempt: int
    updated_at: datetime
    result_validity: ResultValidity
    idempotency_key: str
    """``{workflow_id}/{step_name}/{attempt}``: stable across activity retries and
    continue-as-new; hand it to a tool so an external side effect can be deduplicated."""


class TaskState(BaseModel):
    """Everything a task carries across continue-as-new: no event bodies, bounded size."""

    start: TaskStart
    """The fields the task was created with."""
    workflow_id: str
    status: TaskStatus = TaskStatus.open
    result: BoundedText | None = None
    error: BoundedText | None = None
    created_at: AwareDatetime
    updated_at: AwareDatetime
    last_seq: int = 0
    """Seq of the newest event (0: none yet)."""
    writes: int = 0
    """Accepted writes so far (every update that changed state)."""
    mirrored_write: int = 0
    """Writes already mirrored to Neo4j."""
    mirrored_seq: int = 0
    """Events already mirrored to Neo4j."""
    mirror_error: str | None = None
    """The last non-retryable mirror failure, None once the mirror succeeds again."""
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    requests: dict[str, tuple[str, int, int]] = Field(default_factory=dict)
    """``request_key(request_id)`` -> (args digest, first seq, last seq), oldest first, at most
    ``REQUEST_WINDOW`` entries."""
    runs: int = 1
    """Runs of the workflow so far (1 + continue-as-new count)."""


class TaskWorkflowInput(BaseModel):
    """The workflow's input: a new task's start, or the state carried by continue-as-new."""

    start: TaskStart | None = None
    carried: TaskState | None = None


class TaskView(BaseModel):
    """The task view a query returns: no event bodies."""

    project_id: str
    name: str
    workflow_id: str
    goal: str
    agent_id: str
    session_id: str | None
    parent: str | None
    metadata: dict[str, str]
    status: TaskStatus
    result: BoundedText | None
    error: BoundedText | None
    step_counts: dict[StepState, int]
    """Steps in each state (every state present, zero included)."""
    last_seq: int
    mirrored_seq: int
    """Last seq mirrored to Neo4j; ``last_seq - mirrored_seq`` is the mirror lag."""
    unmirrored_writes: int
    """Writes (events, steps, status) not yet in Neo4j; 0 when the mirror has caught up."""
    mirror_error: str | None
    """The last non-retryable mirror failure, if the mirror is failing."""
    run_first_seq: int
    """First seq kept in the current run (older ones are in Neo4j)."""
    runs: int
    created_at: datetime
    updated_at: datetime


class EventsQuery(BaseModel):
    """Query input: events of the current run after a seq."""

    after_seq: int = 0
    limit: int = Field(default=50, ge=1, le=PAGE_LIMIT_MAX)
    up_to_seq: int | None = None
    """Stop at this seq (inclusive); None: the newest."""
    max_bytes: int = Field(default=MAX_UPDATE_BYTES, ge=1)
    """Stop adding events once the page's payloads pass this many UTF-8 bytes (at least one
    event is returned)."""


class EventsPage(BaseModel):
    """Query result: events of the current run and where the run's log starts."""

    events: list[Event]
    run_first_seq: int
    last_seq: int


class StepsQuery(BaseModel):
    """Query input for steps."""

    state: StepState | None = None
    limit: int = Field(default=PAGE_LIMIT_MAX, ge=1, le=MAX_STEPS_PER_TASK)
    changed_after_write: int = 0
    """Only steps changed after this write counter (the mirror's watermark)."""


def model_size(model: BaseModel) -> int:
    """Bytes of ``model`` as JSON, the size it has as a Temporal payload."""
    return len(model.__pydantic_serializer__.to_json(model))


# --------------------------------------------------------------------------------------------
# The mirror activity's contract (the activity lives in ``activities``; the workflow calls it by
# name so that importing ``workflows`` never loads the Neo4j driver).
# --------------------------------------------------------------------------------------------

MIRROR_ACTIVITY = "mirror_task"
"""Activity name of the Neo4j mirror."""
MIRROR_BATCH_EVENTS = 100
"""Runs recorded before the ``mirror-without-debounce-timer`` patch: the mirror ran once this
many events were waiting..."""
MIRROR_DEBOUNCE_MS = 200
"""...or this many milliseconds (workflow time) after the first waiting write."""
MIRROR_MAX_EVENTS = 500
"""Events one mirror activity call covers at most (it reads them in query pages)."""


class MirrorInput(BaseModel):
    """Input of the mirror activity: references only, never event bodies (the activity reads
    those back from the workflow by query)."""

    workflow_id: str
    """The task's workflow id."""
    run_id: str
    """The run whose state holds the events."""
    after_seq: int
    """Events with seq > after_seq ..."""
    up_to_seq: int
    """... and seq <= up_to_seq are mirrored."""
    after_write: int
    """Steps changed after this write counter are mirrored, with the task node."""


class MirrorOutcome(BaseModel):
    """What one mirror call wrote."""

    events: int
    """Events merged."""
    steps: int
    """Steps merged."""
