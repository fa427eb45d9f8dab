"""Agent tasks: the registries of agents and tools, the context agent code runs with, and the
ready tool-calling loop.

An agent task is a ``TaskWorkflow`` started with an ``AgentSpec``: its agent runs inside the
workflow, so agent code is workflow code. It must be deterministic (no I/O, no clock, no
random): everything that touches the world goes through its ``AgentContext`` (steps run as
activities, the model call, time from the workflow). Agent functions are registered in this
module's registry when their modules are imported on the worker (and by whatever replays their
histories); this module is passed through the workflow sandbox, so the workflow finds them by
name. Tools are the worker's: each run of an agent asks the worker for the specs of its tools
once, by a local activity, so the history records them and a replay (or a worker deployed
later with other tools) decides every step as it was decided.

Every step writes the ledger in this order: a ``tool_call`` event and the step
``in_progress`` before its activity is scheduled; then a ``tool_result`` event and the step
``completed`` (with ``result_event_seq``) on success, or ``failed`` with the error as the
result event. A tool declared not idempotent runs at most once: when its worker dies while it
runs (a heartbeat or start-to-close timeout) the step ends ``unknown`` with a ``tool_result``
that says so, and nothing runs it again on its own.

An agent keeps its progress in ``AgentRun`` (budget counters and ``state``), carried across
continue-as-new: when Temporal suggests continue-as-new the next ``checkpoint()`` parks the
agent, the task continues as new, and the agent function is called again from the top with
its carried state. Steps are memoized by name: a step already ``completed`` returns its
recorded result without running again (so agent code that starts over, after a checkpoint or a
``resume``, redoes only what did not complete).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
)
from temporalio.workflow import ActivityCancellationType

from workflows.ledger import Ledger
from workflows.models import (
    AgentName,
    AgentRun,
    AgentSpec,
    EventInput,
    EventKind,
    ModelInput,
    ModelTurn,
    Role,
    StepKind,
    StepRecord,
    StepState,
    ToolInput,
    ToolOutput,
    WriteOutcome,
    bound_text,
)
from workflows.steps import idempotency_key

MODEL_ACTIVITY = "model_turn"
"""Activity name of the model call."""
READ_EVENT_ACTIVITY = "read_event"
"""Activity name of the read of one event's payload (a memoized step's result of an earlier
run)."""
TOOL_ACTIVITY_PREFIX = "tool."
"""A tool ``name`` runs as the activity ``tool.{name}``."""
MODEL_START_TO_CLOSE = timedelta(minutes=2)
"""Longest model call."""
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
"""Model calls retry transient errors (HTTP 408/409/429/5xx, with the server's retry-after)."""


class ToolSpec(BaseModel):
    """What the workflow needs to know of a tool to run it as a step (the implementation is
    registered on the worker: ``activities.tools``)."""

    model_config = ConfigDict(frozen=True)

    name: AgentName
    """The tool's name; its activity is ``tool.{name}``."""
    description: str = ""
    """For the model."""
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    """JSON Schema of the arguments (for the model)."""
    idempotent: bool = False
    """True: the tool is retried by its retry policy (with the same idempotency key). False:
    it runs at most once; a worker that dies during it leaves the step ``unknown``."""
    start_to_close_s: float = Field(default=60.0, gt=0)
    """Longest run of one attempt (seconds)."""
    heartbeat_s: float | None = Field(default=None, gt=0)
    """Heartbeat timeout (seconds): a tool that heartbeats is noticed dead this soon (and sees
    its cancellation); None: it does not heartbeat."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts of an idempotent tool (1 s doubling between them)."""

    def retry_policy(self) -> RetryPolicy:
        """The activity's retry policy: ``max_attempts`` if idempotent, else one attempt.
        ``ToolArgumentsInvalid`` is never retried."""
        return RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_attempts=self.max_attempts if self.idempotent else 1,
            non_retryable_error_types=[TOOL_ARGUMENTS_INVALID],
        )


TOOL_ARGUMENTS_INVALID = "ToolArgumentsInvalid"
"""ApplicationError type of a tool call whose arguments fail the tool's model."""

AgentFunction = Callable[["AgentContext"], Awaitable[str]]
"""Agent code: gets the context, returns the final answer (the task ends ``done`` with it)."""

_AGENTS: dict[str, AgentFunction] = {}

TOOL_SPECS_ACTIVITY = "tool_specs"
"""Local activity: the worker's specs of the tools an agent may call (``ToolSpecs``)."""


class ToolSpecs(BaseModel):
    """The specs of an agent's tools, as the worker has them (absent: no such tool)."""

    specs: dict[str, ToolSpec] = Field(default_factory=dict)


def agent(name: str) -> Callable[[AgentFunction], AgentFunction]:
    """Register agent code under ``name`` (decorator). Import the module on the worker."""

    def register(function: AgentFunction) -> AgentFunction:
        _AGENTS[name] = function
        return function

    return register


def agent_function(name: str) -> AgentFunction | None:
    """The agent code registered as ``name``, None when there is none."""
    return _AGENTS.get(name)


class BudgetExceeded(Exception):
    """A budget of the run is spent; the task ends ``failed`` with an ``error`` event."""

    def __init__(self, budget: str, limit: float) -> None:
        super().__init__(f"budget {budget} reached ({limit:g})")
        self.budget = budget


class AgentParked(Exception):
    """Raised by ``checkpoint()`` when the task is to continue-as-new: the agent stops here and
    is called again in the next run."""


class StepOutcome(BaseModel):
    """What a step came to."""

    step_name: str
    state: StepState
    """``completed``, ``failed`` or ``unknown``."""
    text: str
    """The result (completed) or the error (failed, unknown), as recorded."""
    result_event_seq: int

    @property
    def ok(self) -> bool:
        """True when the step completed."""
        return self.state is StepState.COMPLETED


class AgentContext:
    """What agent code runs with: steps, events, the model, budgets and its carried state.

    Args:
        ledger: the task's ledger (the one write path).
        spec: the task's agent spec.
        run: the agent's carried progress.
        tools: the worker's specs of the tools the agent may call (``TOOL_SPECS_ACTIVITY``).
    """

    def __init__(
        self, ledger: Ledger, spec: AgentSpec, run: AgentRun, tools: Mapping[str, ToolSpec]
    ) -> None:
        self.ledger = ledger
        self.spec = spec
        self.run = run
        self.tools = dict(tools)
        self.checkpoint_due = False
        """Set by the workflow when continue-as-new is due: the next ``checkpoint()`` parks."""

    @property
    def state(self) -> dict[str, JsonValue]:
        """What the agent keeps across continue-as-new and ``resume`` (small, JSON)."""
        return self.run.state

    @property
    def input(self) -> dict[str, JsonValue]:
        """The agent's input (``AgentSpec.input``)."""
        return self.spec.input

    async def checkpoint(self) -> None:
        """A point where the agent may stop and start over in the next run (its progress is in
        ``state`` and the ledger). Checks the time budget.

        Raises:
            AgentParked: the task is to continue-as-new.
            BudgetExceeded: ``max_seconds`` has passed.
        """
        self._check_time()
        if self.checkpoint_due:
            raise AgentParked

    async def emit(
        self, text: str, *, kind: EventKind = EventKind.NOTE, name: str | None = None
    ) -> int:
        """Record a progress event; returns its seq."""
        seq: int = self._append(EventInput(kind=kind, name=name, payload=text), "emit").first_seq
        return seq

    async def step(
        self,
        name: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        *,
        call_id: str | None = None,
        kind: StepKind = StepKind.TOOL,
    ) -> StepOutcome:
        """Run ``tool`` as the step ``name`` (memoized: a completed step returns its recorded
        result). A tool this agent may not call, or that no worker registered, fails the step
        with that as its result; so do arguments the tool's model refuses. The loop goes on.

        Raises:
            BudgetExceeded: ``max_tool_calls`` or ``max_seconds`` is spent.
            asyncio.CancelledError: the task was cancelled (the step is left ``unknown``).
        """
        done = self.ledger.step(name)
        if done is not None and done.state is StepState.COMPLETED:
            return await self._recorded(name, done.result_event_seq)
        self._check_time()
        budget = self.spec.budgets.max_tool_calls
        if budget is not None and self.run.tool_calls >= budget:
            raise BudgetExceeded("max_tool_calls", budget)
        self.run.tool_calls += 1
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = EventInput(kind=EventKind.TOOL_CALL, name=tool, call_id=call_id, payload=text)
        call_seq = self._append(call, f"step/{name}/call").first_seq
        record = self._move(name, StepState.IN_PROGRESS, kind=kind)
        spec = self.tools.get(tool)
        if spec is None:
            return self._end(
                name, tool, call_id, StepState.FAILED, f"no tool {tool!r} for this agent"
            )
        info = workflow.info()
        try:
            output = await workflow.execute_activity(
                TOOL_ACTIVITY_PREFIX + tool,
                ToolInput(
                    workflow_id=info.workflow_id,
                    run_id=info.run_id,
                    call_seq=call_seq,
                    step_name=name,
                    idempotency_key=idempotency_key(info.workflow_id, name, record.attempt),
                ),
                result_type=ToolOutput,
                start_to_close_timeout=timedelta(seconds=spec.start_to_close_s),
                heartbeat_timeout=None
                if spec.heartbeat_s is None
                else timedelta(seconds=spec.heartbeat_s),
                retry_policy=spec.retry_policy(),
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                self._end(
                    name,
                    tool,
                    call_id,
                    StepState.UNKNOWN,
                    "cancelled while the tool ran: its effect is unknown",
                )
                raise asyncio.CancelledError from err
            if isinstance(err.cause, TimeoutError) and not spec.idempotent:
                return self._end(
                    name,
                    tool,
                    call_id,
                    StepState.UNKNOWN,
                    f"the tool's worker stopped during the call ({err.cause}): its effect is "
                    "unknown, and it was not run again",
                )
            return self._end(name, tool, call_id, StepState.FAILED, str(err.cause or err))
        result = EventInput(
            kind=EventKind.TOOL_RESULT,
            name=tool,
            call_id=call_id,
            payload=output.text,
            full_length=output.full_length,
            full_sha256=output.full_sha256,
        )
        seq = self._append(result, f"step/{name}/result").first_seq
        self._move(name, StepState.COMPLETED, result_event_seq=seq)
        return StepOutcome(
            step_name=name, state=StepState.COMPLETED, text=output.text, result_event_seq=seq
        )

    async def model_turn(self) -> ModelTurn:
        """Call the model with the task's events so far (by reference: the activity reads them)
        and record its answer as an assistant ``message`` with the token usage.

        Raises:
            BudgetExceeded: ``max_rounds``, ``max_tokens`` or ``max_seconds`` is spent.
        """
        budgets = self.spec.budgets
        self._check_time()
        if budgets.max_rounds is not None and self.run.rounds >= budgets.max_rounds:
            raise BudgetExceeded("max_rounds", budgets.max_rounds)
        if budgets.max_tokens is not None and self.run.tokens >= budgets.max_tokens:
            raise BudgetExceeded("max_tokens", budgets.max_tokens)
        if self.spec.model is None:
            raise ApplicationError("this agent has no model", non_retryable=True)
        info = workflow.info()
        turn: ModelTurn = await workflow.execute_activity(
            MODEL_ACTIVITY,
            ModelInput(
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                up_to_seq=self.ledger.state.last_seq,
                model=self.spec.model,
                tools=self.spec.tools,
            ),
            result_type=ModelTurn,
            start_to_close_timeout=MODEL_START_TO_CLOSE,
            retry_policy=MODEL_RETRY,
        )
        self.run.rounds += 1
        self.run.tokens += turn.usage.input_tokens + turn.usage.output_tokens
        message = EventInput(
            kind=EventKind.MESSAGE, role=Role.ASSISTANT, payload=turn.content, usage=turn.usage
        )
        self._append(message, f"round/{self.run.rounds}")
        return turn

    # ------------------------------------------------------------------ helpers

    def _append(self, event: EventInput, what: str) -> WriteOutcome:
        return self.ledger.append([event], f"{what}/{self.ledger.state.writes}", workflow.now())

    def _move(
        self,
        name: str,
        state: StepState,
        *,
        kind: StepKind | None = None,
        result_event_seq: int | None = None,
    ) -> StepRecord:
        return self.ledger.move_step(
            name,
            state,
            f"step/{name}/{state.value}/{self.ledger.state.writes}",
            workflow.now(),
            kind=kind,
            result_event_seq=result_event_seq,
        )

    def _end(
        self, name: str, tool: str, call_id: str | None, state: StepState, text: str
    ) -> StepOutcome:
        """Record the step's end as ``state`` with ``text`` as its result event."""
        result = EventInput(kind=EventKind.TOOL_RESULT, name=tool, call_id=call_id, payload=text)
        seq = self._append(result, f"step/{name}/result").first_seq
        self._move(name, state, result_event_seq=seq)
        return StepOutcome(
            step_name=name, state=state, text=bound_text(text).text, result_event_seq=seq
        )

    async def _recorded(self, name: str, seq: int | None) -> StepOutcome:
        """The outcome of a step completed before: its result read from this run's events, or
        by an activity from where the task keeps earlier runs' events (a step closed in an
        earlier run is carried without its result seq: the activity finds it by name)."""
        held = [e.payload for e in self.ledger.run_events if e.seq == seq]
        if not held:
            info = workflow.info()
            output = await workflow.execute_activity(
                READ_EVENT_ACTIVITY,
                ToolInput(
                    workflow_id=info.workflow_id,
                    run_id=info.run_id,
                    call_seq=seq or 0,
                    step_name=name,
                    idempotency_key="",
                ),
                result_type=ToolOutput,
                start_to_close_timeout=timedelta(seconds=60),
            )
            held = [output.text]
        return StepOutcome(
            step_name=name, state=StepState.COMPLETED, text=held[0], result_event_seq=seq or 0
        )

    def _check_time(self) -> None:
        limit = self.spec.budgets.max_seconds
        if limit is not None and workflow.now() - self.run.started_at >= timedelta(seconds=limit):
            raise BudgetExceeded("max_seconds", limit)


async def agent_tools(spec: AgentSpec) -> dict[str, ToolSpec]:
    """The worker's specs of the agent's tools, by a local activity (recorded in the history:
    a replay, or a worker deployed later with other tools, gets the same answer). A tool the
    worker lacks is missing (its steps fail with that as their result)."""
    answer: ToolSpecs = await workflow.execute_local_activity(
        TOOL_SPECS_ACTIVITY,
        spec.tools,
        result_type=ToolSpecs,
        start_to_close_timeout=timedelta(seconds=10),
    )
    return answer.specs


def step_name(round_: int, index: int, tool: str) -> str:
    """The tool loop's name of a step: ``r{round:05d}.{index}:{tool}`` with ``/`` and control
    characters replaced by ``_``, cut to 100 characters (a model may name any tool)."""
    name = f"r{round_:05d}.{index}:{tool}"
    return "".join("_" if c == "/" or ord(c) < 32 or 127 <= ord(c) < 160 else c for c in name)[:100]


@agent("tool_loop")
async def tool_loop(ctx: AgentContext) -> str:
    """The ready tool-calling loop: the model answers with tool calls or a final answer; each
    tool call runs as a step and its result goes back to the model with the transcript; the
    final answer (a turn without tool calls) finishes the task ``done``."""
    while True:
        await ctx.checkpoint()
        turn = await ctx.model_turn()
        if not turn.tool_calls:
            return turn.content
        for index, call in enumerate(turn.tool_calls):
            name = step_name(ctx.run.rounds, index, call.name)
            await ctx.step(name, call.name, call.arguments, call_id=call.call_id)
