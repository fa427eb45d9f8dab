"""The step machinery of agent code: a tool call run as a step (an activity), a model turn,
and the writes they make to the ledger.

Every step writes the ledger in this order: a ``tool_call`` event and the step
``in_progress`` before its activity is scheduled; then a ``tool_result`` event and the step
``completed`` (with ``result_event_seq``) on success, or ``failed`` with the error as the
result event. A tool declared not idempotent runs at most once: when its worker dies while it
runs (a heartbeat or start-to-close timeout) the step ends ``unknown`` with a ``tool_result``
that says so, and nothing runs it again on its own. Steps are memoized by name: a step already
``completed`` returns its recorded result without running again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import timedelta

from pydantic import BaseModel, JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError
from temporalio.workflow import ActivityCancellationType

from workflows.agents.registry import TOOL_ACTIVITY_PREFIX, ToolSpec
from workflows.ledger import Ledger
from workflows.models import (
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
MODEL_START_TO_CLOSE = timedelta(minutes=2)
"""Longest model call."""
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
"""Model calls retry transient errors (HTTP 408/409/429/5xx, with the server's retry-after)."""


class BudgetExceeded(Exception):
    """A budget of the run is spent; the task ends ``failed`` with an ``error`` event."""

    def __init__(self, budget: str, limit: float) -> None:
        super().__init__(f"budget {budget} reached ({limit:g})")
        self.budget = budget


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


class StepRunner:
    """Runs agent code's steps and model turns over the task's ledger (the base of
    ``AgentContext``).

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
