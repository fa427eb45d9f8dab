"""Write inputs (one model per update), their outcome, and query inputs.

Their class and field names reach the histories as JSON, so they stay; new fields are optional (and
left out of the JSON while unset) so old payloads decode and old digests hold.
"""

from __future__ import annotations

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

from agent_tasks.contract.agent import AgentSpec, TokenUsage
from agent_tasks.contract.decisions import CitesInput
from agent_tasks.contract.errors import ErrorCode, refusal
from agent_tasks.contract.kinds import (
    CLOSED_STATUSES,
    EventKind,
    Role,
    StepKind,
    StepState,
    TaskStatus,
)
from agent_tasks.contract.limits import (
    MAX_EVENTS_PER_UPDATE,
    MAX_FULL_LENGTH,
    MAX_GOAL_CHARS,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_VALUE_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_CHARS,
    MAX_SEALED_CHARS,
    MAX_STEPS_PER_UPDATE,
    MAX_TOKEN_COUNT,
    PAGE_LIMIT_MAX,
    STEPS_PAGE_MAX,
)
from agent_tasks.contract.text import (
    BoundedText,
    Name,
    ProjectId,
    ShortText,
    StepName,
    bound_text,
    check_name,
    clean_text,
)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EventInput(_Input):
    """One event to record, its payload cleaned and cut to ``MAX_PAYLOAD_CHARS`` on validation, so a
    multi-MiB payload never leaves the client.

    A sealed event (a client with a key store: ``sealing.seal``) has an empty ``payload``: its
    text travels as AES-GCM ciphertext under its data key (``key_id``), with ``full_length`` and
    ``full_sha256`` of the plain text.
    """

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
    """Characters of the full payload; set by validation, or kept when the payload is already a
    cut."""
    full_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """SHA-256 hex of the full payload as UTF-8; set like ``full_length``."""
    usage: TokenUsage | None = Field(default=None, exclude_if=lambda value: value is None)
    """Model tokens of the call that produced the event (model messages)."""
    sealed: str | None = Field(
        default=None,
        max_length=MAX_SEALED_CHARS,
        pattern=r"^[A-Za-z0-9+/]+={0,2}$",
        exclude_if=lambda value: value is None,
    )
    """The text sealed with the event's data key (base64 of nonce, ciphertext and tag); None:
    plain."""
    key_id: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$",
        exclude_if=lambda value: value is None,
    )
    """Id (a UUID) of the data key in the key store; set with ``sealed``."""
    cites: CitesInput | None = Field(default=None, exclude_if=lambda value: value is None)
    """A decision's citations (kind ``decision`` only)."""

    @model_validator(mode="after")
    def _bound(self) -> Self:
        if self.cites is not None and self.kind is not EventKind.DECISION:
            raise ValueError("only a decision cites events and steps")
        if self.sealed is not None or self.key_id is not None:
            fields = (self.sealed, self.key_id, self.full_length, self.full_sha256)
            if self.payload or None in fields:
                raise ValueError(
                    "a sealed event has sealed, key_id, full_length and full_sha256, and an "
                    "empty payload"
                )
            return self
        kept_cut = (
            self.full_length is not None
            and self.full_sha256 is not None
            and len(self.payload) == MAX_PAYLOAD_CHARS
            and self.full_length > MAX_PAYLOAD_CHARS
            and clean_text(self.payload) == self.payload
        )
        if not kept_cut:
            bounded = bound_text(self.payload)
            self.payload = bounded.text  # plain assignment: validate_assignment is off
            self.full_length = bounded.full_length
            self.full_sha256 = bounded.full_sha256
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


class BranchPoint(_Input):
    """Where a branch starts (``branch_from``): a task of the same project and a seq of its
    log; the branch's log is that task's events 1 to ``seq``."""

    task: Name
    """The source task's name."""
    seq: int = Field(ge=1)
    """The last event copied."""


class StepRetry(_Input):
    """Update ``retry_step``: a person asks that an ``unknown`` or ``failed`` step run again when
    agent code reaches it, recorded as a decision citing the step; an ``unknown`` step keeps its
    idempotency key, a failed one gets a new one."""

    step_name: StepName
    """The step."""
    agent_id: ShortText
    """Who asks (the decision's author)."""
    reason: Annotated[StrictStr, Field(min_length=1, max_length=1_000)]
    """Why (the decision's text)."""
    request_id: StrictStr
    """Request id (1 to 64 characters)."""


class TaskStart(_Input):
    """What creates a task: the start input of update-with-start and the ``create_task`` update's
    input."""

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
    depth: int = Field(default=0, ge=0, exclude_if=lambda value: value == 0)
    """Levels below its root task (0 for a task without a spawning parent)."""
    agent: AgentSpec | None = Field(default=None, exclude_if=lambda value: value is None)
    """The agent that runs the task (an agent task); None for a recorded task."""
    branched_from: BranchPoint | None = Field(default=None, exclude_if=lambda value: value is None)
    """The task and seq this task branches from (``branch_from``)."""

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

    def check_counts(self) -> None:
        """The rule of the events' numbers, checked by the update's validator (a field bound would
        fail old histories on replay).

        Raises:
            ApplicationError: ``number_out_of_range``, naming the event, when a token count passes
                ``MAX_TOKEN_COUNT``.
        """
        for number, event in enumerate(self.events, 1):
            usage = event.usage
            if usage is not None and max(usage.input_tokens, usage.output_tokens) > MAX_TOKEN_COUNT:
                raise refusal(
                    ErrorCode.NUMBER_OUT_OF_RANGE,
                    f"event {number}: a token count is at most {MAX_TOKEN_COUNT} (2**53), the "
                    "largest both graph stores and JSON readers hold exactly",
                )


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
    """Result text, cleaned and cut like a payload on validation."""
    error: BoundedText | None = None
    """Error text, bounded like ``result``."""
    request_id: StrictStr
    """Request id (1 to 64 characters)."""

    @field_validator("result", "error", mode="before")
    @classmethod
    def _bound_text(cls, value: object) -> object:
        return bound_text(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _closing_status(self) -> Self:
        if self.status not in CLOSED_STATUSES:
            raise ValueError("status must be done, failed or cancelled")
        return self


class WriteOutcome(BaseModel):
    """What an accepted write returns, and what a repeated request id returns again."""

    first_seq: int = 0
    """First seq the write assigned (0 when it assigned none)."""
    last_seq: int = 0
    """Last seq the write assigned (0 when it assigned none)."""
    duplicate: bool = False
    """True for the stored outcome of an earlier write with the same request id, or
    (``create_task``) a task that existed with the same goal."""
    created: bool = False
    """``create_task``: True when this request id is the one that created the task."""
    time: AwareDatetime | None = None
    """Workflow time of an event write; None for other writes and a repeated request id."""
    writes: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """``record_events``: the task's write counter once the write was taken (``TaskView.writes``);
    None for other writes and a repeated request id."""


class RequestLookup(BaseModel):
    """Query input: the outcome stored for a request id, if its argument digest matches."""

    request_id: str
    """The request id of the write."""
    digest: str
    """``args_digest`` of the write's input."""


class EventsQuery(BaseModel):
    """Query input: events of the current run after a seq."""

    after_seq: int = 0
    """Events with seq > after_seq."""
    limit: int = Field(default=50, ge=1, le=PAGE_LIMIT_MAX)
    """At most this many events."""
    up_to_seq: int | None = None
    """Stop at this seq (inclusive); None: the newest."""
    max_bytes: int = Field(default=MAX_PAYLOAD_BYTES, ge=1, le=MAX_PAYLOAD_BYTES)
    """Stop before the page's events pass this many bytes of JSON (at least one event is
    returned)."""


class StepsQuery(BaseModel):
    """Query input for steps: a page in name order."""

    state: StepState | None = None
    """Only steps in this state; None: every state."""
    limit: int = Field(default=PAGE_LIMIT_MAX, ge=1, le=STEPS_PAGE_MAX)
    """At most this many steps (and at most ``MAX_PAYLOAD_BYTES`` of JSON)."""
    changed_after_write: int = 0
    """Only steps changed after this write counter (the mirror's watermark)."""
    after_name: str | None = None
    """Only steps whose name sorts after this one (the paging cursor)."""
    step_name: str | None = None
    """Only the step of this name."""
