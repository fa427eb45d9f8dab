"""What a task carries across continue-as-new: ``TaskState``, no event bodies, bounded size.

``TaskState`` is the workflow's input after continue-as-new (``TaskWorkflowInput.carried``), so
its class and field names are in the histories; fields added later must be optional.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import AwareDatetime, BaseModel, Field, JsonValue

from agent_tasks.contract.agent import ToolCall
from agent_tasks.contract.human import ChildRecord, InputAnswer, InputRequest
from agent_tasks.contract.inputs import StepRetry, TaskStart
from agent_tasks.contract.kinds import StepKind, StepState, TaskStatus
from agent_tasks.contract.text import BoundedText


class StepRecord(BaseModel):
    """A step as the workflow keeps it (carried across continue-as-new)."""

    state: StepState
    """The step's current state."""
    kind: StepKind
    """What the step does; fixed when the step is created."""
    result_event_seq: int | None = None
    """Seq of the event holding the result (or the error) of the last attempt."""
    attempt: int = 0
    """Times the step entered ``in_progress``: the attempt number in its idempotency key."""
    updated_at: AwareDatetime
    """Workflow time of the step's last change."""
    changed_write: int = 0
    """The task's write counter when this step last changed (the mirror reads from it)."""
    retry_by: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """Who asked that this ``unknown`` or ``failed`` step run again (``retry_step``); cleared once
    agent code has run it again."""


class StoredRequest(NamedTuple):
    """What the request-id window remembers of one write, carried as ``[digest, first_seq,
    last_seq]``."""

    digest: str
    """``args_digest`` of the write's input."""
    first_seq: int
    """First seq the write assigned (0: none)."""
    last_seq: int
    """Last seq the write assigned (0: none)."""


class RunRange(BaseModel):
    """Writes of an earlier run not yet in the graph store: the mirror copies them from that run (a
    closed run still answers queries) before the current run's own."""

    run_id: str
    """The run that holds the writes."""
    after_seq: int
    """Its events with seq > after_seq ..."""
    up_to_seq: int
    """... and seq <= up_to_seq are not mirrored yet."""
    after_write: int
    """Its steps changed after this write counter are not mirrored yet ..."""
    up_to_write: int
    """... up to this one (the write counter when the run continued-as-new)."""


class AgentRun(BaseModel):
    """An agent's progress, carried across continue-as-new: its budgets' counters and its code's
    state."""

    started_at: AwareDatetime
    """Workflow time the agent started (``Budgets.max_seconds`` counts from here)."""
    rounds: int = 0
    """Model calls so far."""
    tool_calls: int = 0
    """Steps run so far."""
    tokens: int = 0
    """Model tokens so far."""
    state: dict[str, JsonValue] = Field(default_factory=dict)
    """What agent code keeps across continue-as-new (``AgentContext.state``)."""
    run: int = 0
    """Runs of the agent so far: its first start, each ``resume`` and each continuation
    (continue-as-new goes on with the same run)."""
    run_seq: int = 0
    """Seq of the current (or last) run's ``run_started`` note."""
    run_open: bool = False
    """True from a run's start until it finished or failed (a cancelled run was interrupted:
    open)."""
    turn_committed: bool = False
    """True once a step of the current turn ended in a run not rolled back: the turn committed
    something, so it is continued, never replayed. False again once the turn finishes."""
    committed_before_run: bool = False
    """``turn_committed`` when the current run started: what a failed run rolls back to."""
    round_base: int = 0
    """Model calls of the earlier runs, so a resumed run's step names never repeat an earlier
    run's."""
    mistakes: int = 0
    """Model answers in a row the model call could not take (``ModelTurn.mistake``); the agent fails
    at ``MAX_MODEL_MISTAKES``."""
    open_calls: list[ToolCall] = Field(default_factory=list, exclude_if=lambda value: not value)
    """The current turn's tool calls while they run. A run parked on an approval leaves them here
    and the next run resumes them by step name before it calls the model (``RESUME_OPEN_CALLS``)."""
    unknown_calls: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """Digest of a call whose step ended ``unknown`` (``call_digest(tool, arguments, "")``) -> that
    step's name, at most ``MAX_UNKNOWN_CALLS``: a later identical call runs as that step, under its
    key (``SAME_CALL_SAME_KEY``)."""
    claimed_calls: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """The current turn's calls that run as an earlier ``unknown`` step: call's step name -> that
    step's name; cleared with ``open_calls``."""


class TaskState(BaseModel):
    """Everything a task carries across continue-as-new: no event bodies, bounded size."""

    start: TaskStart
    """The fields the task was created with."""
    workflow_id: str
    """The task's workflow id (``task_workflow_id``)."""
    status: TaskStatus = TaskStatus.OPEN
    """Open until finished."""
    result: BoundedText | None = None
    """The result text ``finish_task`` gave."""
    error: BoundedText | None = None
    """The error text ``finish_task`` gave."""
    created_at: AwareDatetime
    """Workflow time of the creation."""
    updated_at: AwareDatetime
    """Workflow time of the last accepted write."""
    last_seq: int = 0
    """Seq of the newest event (0: none yet)."""
    writes: int = 0
    """Accepted writes so far (every update that changed state)."""
    mirrored_write: int = 0
    """Writes already mirrored to the graph store."""
    mirrored_seq: int = 0
    """Events already mirrored to the graph store."""
    mirror_error: str | None = None
    """The last mirror failure, None once the mirror succeeds again."""
    mirror_failures: int = 0
    """Mirror calls failed in a row (retries spent); 0 after a success. Carried, so a long outage's
    pause stays long."""
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    """Step name -> record: the open steps, and every step changed in the current run."""
    closed_steps: str = ""
    """The steps closed in earlier runs, packed as base64 (``workflows.steps.pack_closed``)."""
    requests: dict[str, StoredRequest] = Field(default_factory=dict)
    """``request_key(request_id)`` -> what the write stored, oldest first, at most
    ``REQUEST_WINDOW``."""
    runs: int = 1
    """Runs of the workflow so far (1 + continue-as-new count)."""
    agent_run: AgentRun | None = None
    """The agent's progress (agent tasks, once the agent started)."""
    inputs: list[InputRequest] = Field(default_factory=list)
    """Open input requests, oldest first (at most ``MAX_PENDING_INPUTS``)."""
    early_answers: list[InputAnswer] = Field(default_factory=list)
    """Answers that came before the request they answer (at most ``MAX_EARLY_ANSWERS``)."""
    answered: dict[str, int] = Field(default_factory=dict)
    """Input request id -> seq of the accepted ``input_response`` (the answer, memoized)."""
    closed_inputs: dict[str, str] = Field(default_factory=dict)
    """Input request id -> why it closed without an answer it can take (timed out, task ended); at
    most ``MAX_INPUTS_PER_TASK``."""
    children: dict[str, ChildRecord] = Field(default_factory=dict)
    """Spawn key -> the child task (at most ``MAX_CHILDREN``)."""
    mirror_backlog: list[RunRange] = Field(default_factory=list)
    """Earlier runs' writes the mirror has not copied yet, oldest first (a run continues-as-new
    without waiting for the mirror)."""


class TaskWorkflowInput(BaseModel):
    """The workflow's input: a new task's start, or the state carried by continue-as-new."""

    start: TaskStart | None = None
    """A new task."""
    carried: TaskState | None = None
    """The state of the run that continued-as-new (or that ended, for ``resume``)."""
    spawned: bool = False
    """True for a child its parent's agent spawned (created at its start, with no
    ``create_task``)."""
    resume: bool = False
    """True when ``carried`` is a closed task's state and its agent runs again (``resume``)."""
    continuation: bool = False
    """With ``resume``: continue an interrupted turn (``continue_task``), not replay one."""
    retry: list[StepRetry] = Field(default_factory=list, max_length=16)
    """With ``resume``: steps a person asked to run again (``retry_step`` of a closed task)."""
