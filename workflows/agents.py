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
import builtins
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError
from temporalio.workflow import ActivityCancellationType

from workflows.ledger import Ledger, internal_request_id
from workflows.models import (
    CLOSED_STATUSES,
    MAX_CHILDREN,
    MAX_DEPTH,
    AgentName,
    AgentRun,
    AgentSpec,
    ChildRecord,
    EventInput,
    EventKind,
    FailureMode,
    ModelInput,
    ModelTurn,
    Role,
    StepKind,
    StepRecord,
    StepState,
    TaskStart,
    TaskStatus,
    ToolInput,
    ToolOutput,
    WriteOutcome,
    bound_text,
    valid_step_name,
)
from workflows.steps import idempotency_key
from workflows.waits import answer_error, answer_text, check_schema

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


class InputTimeout(Exception):
    """``ask`` waited past its timeout without an answer (and the agent gave no default)."""

    def __init__(self, input_id: str) -> None:
        super().__init__(f"input {input_id!r} was not answered in time")
        self.input_id = input_id


class SpawnRefused(Exception):
    """``spawn`` past a limit: ``MAX_CHILDREN`` children, or ``MAX_DEPTH`` levels."""


class ChildOutcome(BaseModel):
    """How a child task ended."""

    key: str
    """Its spawn key."""
    name: str
    """Its task name."""
    status: TaskStatus
    """``done``, ``failed`` or ``cancelled``."""
    text: str
    """Its result (done) or error text."""


class ChildFailed(Exception):
    """A child spawned with ``mode="propagate"`` did not end ``done``."""

    def __init__(self, outcome: ChildOutcome) -> None:
        super().__init__(
            f"child task {outcome.name!r} ended {outcome.status.value}: {outcome.text}"
        )
        self.outcome = outcome


class AgentHost(Protocol):
    """What the agent's workflow does for its context (status, children)."""

    def set_status(self, status: TaskStatus) -> None:
        """Change the task's status (an event and the search attribute)."""
        ...

    async def start_child(self, start: TaskStart) -> None:
        """Start the child task ``start`` describes (idempotent by its workflow id)."""
        ...


_NO_DEFAULT: Any = object()


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
        host: the task's workflow (status, children).
    """

    def __init__(
        self,
        ledger: Ledger,
        spec: AgentSpec,
        run: AgentRun,
        tools: Mapping[str, ToolSpec],
        host: AgentHost,
    ) -> None:
        self.ledger = ledger
        self.spec = spec
        self.run = run
        self.tools = dict(tools)
        self.host = host
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

    async def ask(
        self,
        input_id: str,
        prompt: str,
        schema: Mapping[str, JsonValue] | type[BaseModel] | None = None,
        *,
        timeout: timedelta | None = None,  # noqa: ASYNC109 (a workflow timer, not asyncio's)
        default: JsonValue = _NO_DEFAULT,
    ) -> JsonValue:
        """Ask a person for input and wait (minutes or weeks) for the answer: status
        ``awaiting_input``, an ``input_request`` event, the open request in the view and Neo4j.
        The answer comes by the ``submit_input`` signal or the ``respond`` update and must
        satisfy ``schema`` (a JSON Schema, or a pydantic model's); an answer that came before
        the request is taken at once. Memoized by ``input_id``: asked again (after a checkpoint
        or a resume) it returns the recorded answer.

        Args:
            input_id: the request's name, unique in the task.
            prompt: what is asked.
            schema: what the answer must satisfy; None: any JSON value.
            timeout: how long to wait (workflow time); None: for ever.
            default: returned when the timeout passes; without one the timeout raises.

        Raises:
            InputTimeout: the timeout passed and no default was given.
            ValueError: ``schema`` is not a valid JSON Schema.
            AgentParked: the task is to continue-as-new (the request stays open).
        """
        state = self.ledger.state
        request = next((r for r in state.inputs if r.input_id == input_id), None)
        if input_id not in state.answered and request is None:
            json_schema = (
                schema.model_json_schema() if isinstance(schema, type) else dict(schema or {})
            )
            check_schema(json_schema)
            if default is not _NO_DEFAULT and (error := answer_error({}, default)) is not None:
                raise ValueError(f"the default: {error}")
            deadline = None if timeout is None else workflow.now() + timeout
            self.host.set_status(TaskStatus.AWAITING_INPUT)
            request = self.ledger.open_input(
                input_id, prompt, json_schema, deadline, workflow.now()
            )
        if input_id not in state.answered:
            assert request is not None
            remaining = None
            if request.deadline is not None:
                remaining = max(request.deadline - workflow.now(), timedelta(0))
            try:
                await workflow.wait_condition(
                    lambda: input_id in state.answered or self.checkpoint_due, timeout=remaining
                )
            except builtins.TimeoutError:
                given = default is not _NO_DEFAULT
                default_json = answer_text(default) if given else None
                self.ledger.close_input(input_id, default_json, workflow.now())
                self._back_in_progress()
                if not given:
                    raise InputTimeout(input_id) from None
            if input_id not in state.answered:
                raise AgentParked
        self._back_in_progress()
        answer: JsonValue = json.loads(await self._payload(input_id, state.answered[input_id]))
        return answer

    async def spawn(
        self,
        key: str,
        goal: str,
        *,
        agent: AgentSpec | None = None,
        mode: FailureMode = "propagate",
    ) -> str:
        """Start a child task (a child workflow of the same type, named ``{this task}/{key}``)
        and return its name; its end comes back by a signal and is recorded as a
        ``child_result`` event. Idempotent by ``key``: spawned again (a retry, a replay, after a
        checkpoint) it starts nothing.

        Args:
            key: the spawn key, unique in the task (1 to 100 characters, no ``/``).
            goal: the child's goal.
            agent: the child's agent; None: a recorded child task (ended from outside).
            mode: what the child's failure does to ``wait_children``.

        Raises:
            SpawnRefused: past ``MAX_CHILDREN`` children or ``MAX_DEPTH`` levels.
        """
        state = self.ledger.state
        known = state.children.get(key)
        if known is not None:
            return known.name
        if not valid_step_name(key):
            raise SpawnRefused(
                f"spawn key {key[:120]!r}: 1 to 100 characters, no '/' and no control characters"
            )
        start = state.start
        if len(state.children) >= MAX_CHILDREN:
            raise SpawnRefused(f"a task spawns at most {MAX_CHILDREN} child tasks")
        if start.depth + 1 > MAX_DEPTH:
            raise SpawnRefused(f"child tasks go at most {MAX_DEPTH} levels deep")
        name = child_name(start.name, key)
        child = TaskStart(
            project_id=start.project_id,
            name=name,
            goal=goal,
            agent_id=start.agent_id,
            session_id=start.session_id,
            parent=start.name,
            request_id=internal_request_id(f"create/{name}"),
            depth=start.depth + 1,
            agent=agent,
        )
        status = TaskStatus.OPEN if agent is None else TaskStatus.QUEUED
        self.ledger.add_child(
            key, ChildRecord(name=child.name, status=status, mode=mode), workflow.now()
        )
        await self.host.start_child(child)
        return child.name

    async def wait_children(
        self, keys: Sequence[str] | None = None, *, first: bool = False
    ) -> list[ChildOutcome]:
        """Wait (status ``awaiting_children``) until every child of ``keys`` (default: all
        spawned) has ended, or with ``first`` until one has; returns the ended ones' outcomes,
        except those spawned with ``mode="ignore"``.

        Raises:
            ChildFailed: an ended child spawned with ``mode="propagate"`` did not end ``done``.
            KeyError: a key names no spawned child.
            AgentParked: the task is to continue-as-new (the children go on; their ends come
                to the next run).
        """
        children = self.ledger.state.children
        wanted = list(children) if keys is None else list(keys)
        missing = [key for key in wanted if key not in children]
        if missing:
            raise KeyError(f"no child spawned with key {missing[0]!r}")

        def ended(key: str) -> bool:
            return children[key].status in CLOSED_STATUSES

        def done() -> bool:
            return (any if first else all)(ended(k) for k in wanted)

        if not done():
            self.host.set_status(TaskStatus.AWAITING_CHILDREN)
            await workflow.wait_condition(lambda: done() or self.checkpoint_due)
            if not done():
                raise AgentParked
        self._back_in_progress()
        outcomes = []
        for key in wanted:
            record = children[key]
            if not ended(key) or record.mode == "ignore":
                continue
            assert record.result_seq is not None  # set with the end
            payload = json.loads(await self._payload(key, record.result_seq))
            outcome = ChildOutcome(
                key=key, name=record.name, status=record.status, text=payload["text"]
            )
            if record.mode == "propagate" and record.status is not TaskStatus.DONE:
                raise ChildFailed(outcome)
            outcomes.append(outcome)
        return outcomes

    # ------------------------------------------------------------------ helpers

    def _back_in_progress(self) -> None:
        """``in_progress`` again once nothing is awaited."""
        waiting = (TaskStatus.AWAITING_INPUT, TaskStatus.AWAITING_CHILDREN)
        if self.ledger.state.status in waiting and not self.ledger.state.inputs:
            self.host.set_status(TaskStatus.IN_PROGRESS)

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
        """The outcome of a step completed before (memoized), its result as recorded."""
        text = await self._payload(name, seq or 0)
        return StepOutcome(
            step_name=name, state=StepState.COMPLETED, text=text, result_event_seq=seq or 0
        )

    async def _payload(self, name: str, seq: int) -> str:
        """The payload of event ``seq``: from this run's events, or by an activity from where
        the task keeps earlier runs' (``seq`` 0: the result of step ``name``, whose earlier run
        carried no result seq: the activity finds it by name)."""
        held = [e.payload for e in self.ledger.run_events if e.seq == seq]
        if held:
            return held[0]
        info = workflow.info()
        output: ToolOutput = await workflow.execute_activity(
            READ_EVENT_ACTIVITY,
            ToolInput(
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                call_seq=seq,
                step_name=name,
                idempotency_key="",
            ),
            result_type=ToolOutput,
            start_to_close_timeout=timedelta(seconds=60),
        )
        return output.text

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


def child_name(parent: str, key: str) -> str:
    """A spawned child's task name: ``{parent}/{key}``, or, when that passes 200 characters,
    its first 183 characters, ``~`` and 16 hex of the full name's SHA-256."""
    name = f"{parent}/{key}"
    if len(name) <= 200:
        return name
    return f"{name[:183]}~{hashlib.sha256(name.encode('utf-8')).hexdigest()[:16]}"


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
