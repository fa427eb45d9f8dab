"""What reads return: events, steps and the task view (query results, never carried)."""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel, Field

from agent_tasks.contract.agent import AgentSpec, TokenUsage
from agent_tasks.contract.decisions import Citations
from agent_tasks.contract.human import ChildRecord, InputRequest
from agent_tasks.contract.inputs import BranchPoint, EventInput
from agent_tasks.contract.kinds import (
    EventKind,
    ResultValidity,
    Role,
    StepKind,
    StepState,
    TaskStatus,
)
from agent_tasks.contract.state import AgentRun, RunRange
from agent_tasks.contract.text import BoundedText, event_id


class Event(BaseModel):
    """A recorded event."""

    id: str
    """Stable id (``event_id``): the handle of ``redact_event`` and of a decision's citations."""
    seq: int
    """Position in the task's log: 1, 2, 3 ... with no gaps, across continue-as-new."""
    kind: EventKind
    """What the event records."""
    role: Role | None = None
    """Whose message it is."""
    name: str | None = None
    """Tool name or label."""
    call_id: str | None = None
    """Links a tool result to its call."""
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
    usage: TokenUsage | None = Field(default=None, exclude_if=lambda value: value is None)
    """Model tokens of the call that produced the event (model messages)."""
    sealed: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The sealed text as the workflow holds it; readers get the opened ``payload`` and None
    here."""
    key_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """Id of the event's data key (None: plain text, which no redaction removes from the
    history)."""
    redacted: bool = False
    """True once ``redact_event`` removed the text (``full_length`` and ``full_sha256`` stay)."""
    cites: Citations | None = Field(default=None, exclude_if=lambda value: value is None)
    """A decision's citations (kind ``decision``)."""

    @property
    def truncated(self) -> bool:
        """True when the payload was cut (False for a redacted or still sealed event)."""
        return self.sealed is None and not self.redacted and self.full_length > len(self.payload)

    @classmethod
    def recorded(
        cls,
        item: EventInput,
        *,
        workflow_id: str,
        seq: int,
        author: str,
        time: datetime,
        request_id: str,
        cites: Citations | None = None,
    ) -> Event:
        """The event ``item`` becomes when recorded as ``seq`` of ``workflow_id`` by ``author`` at
        ``time``, ``cites`` as the ledger records them (``workflows.decisions.cite``)."""
        assert item.full_length is not None and item.full_sha256 is not None
        return cls(
            id=event_id(workflow_id, seq),
            seq=seq,
            kind=item.kind,
            role=item.role,
            name=item.name,
            call_id=item.call_id,
            payload=item.payload,
            full_length=item.full_length,
            full_sha256=item.full_sha256,
            author=author,
            time=time,
            request_id=request_id,
            usage=item.usage,
            sealed=item.sealed,
            key_id=item.key_id,
            cites=cites,
        )


class StepView(BaseModel):
    """A step as readers see it."""

    step_name: str
    """The step's name, unique in its task."""
    state: StepState
    """Its state."""
    kind: StepKind
    """What it does."""
    result_event_seq: int | None = None
    """Seq of the event holding its result (or error)."""
    attempt: int
    """Times it entered ``in_progress``."""
    updated_at: datetime
    """Workflow time of its last change (UTC)."""
    result_validity: ResultValidity
    """How far its result can be trusted (``workflows.steps.result_validity``)."""
    idempotency_key: str
    """``{workflow_id}/{step_name}/{attempt}``, stable across retries and continue-as-new: hand it
    to a tool so a side effect can be deduplicated."""
    changed_write: int = 0
    """The task's write counter at the step's last change."""

    @property
    def name(self) -> str:
        """The step's name (``step_name``)."""
        return self.step_name


class TaskView(BaseModel):
    """The task view a query returns: no event bodies."""

    project_id: str
    """The task's project."""
    name: str
    """The task's name."""
    workflow_id: str
    """Its workflow id."""
    goal: str
    """What it is for."""
    agent_id: str
    """The agent that created it."""
    session_id: str | None
    """Its session, if any."""
    parent: str | None
    """Its parent task's name, if any."""
    metadata: dict[str, str]
    """Free metadata."""
    status: TaskStatus
    """open, done, failed or cancelled."""
    result: BoundedText | None
    """The result text of a finished task."""
    error: BoundedText | None
    """The error text of a finished task."""
    step_counts: dict[StepState, int]
    """Steps in each state (every state present, zero included)."""
    last_seq: int
    """Seq of the newest event."""
    mirrored_seq: int
    """Last seq the task knows is in the graph store: while writes come, up to
    ``MIRROR_FOLLOW_IDLE`` behind it (``wait_mirrored`` reads the store)."""
    unmirrored_writes: int
    """Writes the task does not know are in the graph store yet; 0 once the mirror caught up."""
    mirror_error: str | None
    """The last mirror failure, if the mirror is failing."""
    mirror_failures: int = 0
    """Mirror calls failed in a row (0 while the mirror works)."""
    run_first_seq: int
    """First seq kept in the current run (older ones are in the graph store)."""
    runs: int
    """Runs so far (1 + continue-as-new count)."""
    mirror_backlog: list[RunRange] = []
    """Earlier runs' writes not in the graph store yet (their events are read from those runs)."""
    agent: AgentSpec | None = None
    """What runs the task (agent tasks)."""
    agent_run: AgentRun | None = None
    """The agent's progress: budget counters and its kept state (agent tasks)."""
    pending_inputs: list[InputRequest] = []
    """Open input requests (id, prompt, schema, deadline), oldest first."""
    children: dict[str, ChildRecord] = {}
    """The child tasks its agent spawned, by spawn key."""
    branched_from: BranchPoint | None = None
    """The task and seq this task branched from (``branch_from``), if any."""
    closed_inputs: dict[str, str] = {}
    """Input requests closed without an answer they can take, by id: why (``timed out``...); an
    answer to one is refused ``input_closed``."""
    writes: int = 0
    """Accepted writes so far: the view's version. The graph store applies a mirrored view only if
    it is not older than the node's, so a late attempt never undoes a newer one."""
    created_at: datetime
    """Workflow time of the creation (UTC)."""
    updated_at: datetime
    """Workflow time of the last accepted write (UTC)."""

    @property
    def last_event_seq(self) -> int:
        """Seq of the newest event (``last_seq``)."""
        return self.last_seq


class StepsPage(BaseModel):
    """Query result: a page of the steps this run holds, in name order."""

    steps: list[StepView]
    """The page."""
    next_after_name: str | None = None
    """The cursor of the next page (the last name here); None when this run holds no more."""
    earlier: bool = False
    """True when the task also has steps closed in an earlier run, kept in the graph store."""
    run_first_write: int = 0
    """The write counter when this run started: step nodes changed at or before it are earlier
    runs'."""
    mirror_backlog: list[RunRange] = []
    """Earlier runs' writes not in the graph store yet (``TaskView.mirror_backlog``)."""


class EventsPage(BaseModel):
    """Query result: events of the current run and where the run's log starts."""

    events: list[Event]
    """The page, in seq order."""
    run_first_seq: int
    """First seq of the current run (older seqs are in the graph store)."""
    last_seq: int
    """The task's newest seq."""
    mirrored_seq: int = 0
    """Events up to this seq are in the graph store."""
    mirror_backlog: list[RunRange] = []
    """Earlier runs' writes not in the graph store yet (``TaskView.mirror_backlog``)."""
