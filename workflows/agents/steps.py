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
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError
from temporalio.workflow import ActivityCancellationType

from workflows.agents.registry import TOOL_ACTIVITY_PREFIX, ToolSpec
from workflows.errors import failure_text
from workflows.ledger import Ledger
from workflows.models import (
    MAX_PAYLOAD_CHARS,
    AgentRun,
    AgentSpec,
    EventInput,
    EventKind,
    ModelInput,
    ModelTurn,
    Role,
    StepKind,
    StepRecord,
    StepRetry,
    StepState,
    TaskStart,
    TaskStatus,
    ToolInput,
    ToolOutput,
    WriteOutcome,
    bound_text,
    internal_request_id,
)
from workflows.steps import idempotency_key

UNKNOWN_STAYS_UNKNOWN = "unknown-stays-unknown"
"""Patch id: a step that ended ``unknown`` and is reached again returns its ``unknown``
outcome; it runs again only when someone asked (``AgentContext.retry``, ``retry_step``). Runs
recorded before it ran such a step again under its old key."""
TOOL_CALL_BOUNDS = "tool-call-bounds"
"""Patch id: a call that names no tool, or whose arguments pass the payload bound, fails its
step without running (the model hears why); runs recorded before it failed the task on an
empty name and passed cut arguments to the tool."""
PROGRESS_BEFORE_PARKING = "progress-before-parking"
"""Patch id: ``checkpoint()`` parks the agent for continue-as-new only after it did new work in
the run. Agent code memoized by step name starts over from the top in each run, reading each
memoized result (an activity apiece); when those reads alone passed the history length at
which Temporal suggests continue-as-new, every run parked before any new step and the task
continued as new for ever without progress."""
PARK_ON_SUGGESTION = "park-on-suggestion"
"""Patch id: ``checkpoint()`` parks once Temporal suggests continue-as-new, read from the run's
own info, not only once the run loop has set ``checkpoint_due``. The loop sets the flag between
its mirror calls, so while one call was slow (a Neo4j write taking a second, or held up to
``MIRROR_DRAIN_WAIT`` by a stall) a fast agent went on well past the suggestion, and a short task
could end in its first run, its history hundreds of events past it."""
CANCEL_RULE = "one-cancellation-rule"
"""Patch id: after a cancel request no step, model call or wait of the agent starts or goes on
(``AgentContext.cancelled``); the workflow cancels what runs and waits for it to end
(``TaskWorkflow._cancelled``). Runs recorded before it cancelled the agent's asyncio task."""
_R = TypeVar("_R")

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


class AgentHost(Protocol):
    """What the agent's workflow does for its context (status, children, cancellation)."""

    cancelling: bool
    """True once the workflow has begun to cancel the task (``TaskWorkflow._cancelled``)."""

    def set_status(self, status: TaskStatus) -> None:
        """Change the task's status (an event and the search attribute)."""
        ...

    async def start_child(self, start: TaskStart) -> str | None:
        """Start the child task ``start`` describes; returns None once started, else why it
        could not start (its workflow id is taken by another task)."""
        ...


class StepRunner:
    """Runs agent code's steps and model turns over the task's ledger (the base of
    ``AgentContext``).

    Args:
        ledger: the task's ledger (the one write path).
        spec: the task's agent spec.
        run: the agent's carried progress.
        tools: the worker's specs of the tools the agent may call (``TOOL_SPECS_ACTIVITY``).
        host: the task's workflow (status, children, cancellation).
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
        self.running: set[workflow.ActivityHandle[Any]] = set()
        """The activities agent code awaits now (tools, the model): what a cancel cancels."""
        self.progressed = False
        """True once agent code did new work in this run (ran a step or the model): until
        then it only replays what earlier runs memoized, and ``checkpoint()`` does not park
        (``PROGRESS_BEFORE_PARKING``)."""

    def cancelled(self) -> bool:
        """True once a cancel request reached the task (the one cancellation rule,
        ``CANCEL_RULE``): read as soon as Temporal delivers the request, before the workflow
        has run anything for it, so agent code that goes on in the same workflow task starts
        nothing."""
        if self.host.cancelling:
            return True
        return workflow.cancellation_reason() is not None and workflow.patched(CANCEL_RULE)

    def _stop_if_cancelled(self) -> None:
        """Raise ``asyncio.CancelledError`` once the task is cancelled (``cancelled``)."""
        if self.cancelled():
            raise asyncio.CancelledError("the task was cancelled")

    def cancel_running(self) -> None:
        """Cancel the activities agent code awaits (the workflow's cancel): a tool that
        heartbeats sees it at its next heartbeat, one that does not runs to its end (its
        result is recorded); the model call is dropped at once."""
        for handle in self.running:
            handle.cancel()

    async def _activity(self, handle: workflow.ActivityHandle[_R]) -> _R:
        """Await an activity agent code started, where a cancel can reach it."""
        self.running.add(handle)
        try:
            return await handle
        finally:
            self.running.discard(handle)

    async def retry(
        self,
        name: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        *,
        reason: str,
        call_id: str | None = None,
    ) -> StepOutcome:
        """Run the ``unknown`` or ``failed`` step ``name`` again, explicitly: a ``decision``
        event by this agent citing the step (``reason``), then the step as ``step`` runs it:
        an ``unknown`` one under its old idempotency key (its effect may have happened: the
        tool must be able to tell), a failed one as a new attempt. Nothing else runs an
        ``unknown`` step again.

        Raises:
            ApplicationError: ``invalid_transition`` (the step is not ``unknown`` or
                ``failed``), ``step_not_found``.
            asyncio.CancelledError: the task was cancelled.
        """
        self._stop_if_cancelled()
        retry = StepRetry(
            step_name=name,
            agent_id=self.ledger.state.start.agent_id,
            reason=reason,
            request_id=internal_request_id(f"retry/{name}/{self.ledger.state.writes}"),
        )
        self.ledger.retry_step(retry, workflow.now())
        return await self.step(name, tool, arguments, call_id=call_id)

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
            asyncio.CancelledError: the task was cancelled: before the step (it does not
                start), or while it ran (a tool that saw the cancel leaves the step
                ``unknown``; one that ended anyway is recorded with its result first).
        """
        self._stop_if_cancelled()
        done = self.ledger.step(name)
        if done is not None and done.state is StepState.COMPLETED:
            return await self._recorded(name, done.state, done.result_event_seq)
        if (
            done is not None
            and done.state is StepState.UNKNOWN
            and done.retry_by is None
            and workflow.patched(UNKNOWN_STAYS_UNKNOWN)
        ):
            return await self._recorded(name, done.state, done.result_event_seq)
        self._check_time()
        budget = self.spec.budgets.max_tool_calls
        if budget is not None and self.run.tool_calls >= budget:
            raise BudgetExceeded("max_tool_calls", budget)
        self.run.tool_calls += 1
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = EventInput(
            kind=EventKind.TOOL_CALL, name=tool or None, call_id=call_id, payload=text
        )
        call_seq = self._append(call, f"step/{name}/call").first_seq
        record = self._move(name, StepState.IN_PROGRESS, kind=kind)
        refused = _refused_call(tool, text)
        if refused is not None and workflow.patched(TOOL_CALL_BOUNDS):
            return self._end(name, tool, call_id, StepState.FAILED, refused)
        spec = self.tools.get(tool)
        if spec is None:
            return self._end(
                name, tool, call_id, StepState.FAILED, f"no tool {tool!r} for this agent"
            )
        info = workflow.info()
        self.progressed = True
        try:
            output = await self._activity(
                workflow.start_activity(
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
            return self._end(name, tool, call_id, StepState.FAILED, failure_text(err))
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
        self.run.turn_committed = True
        self._stop_if_cancelled()  # it ran to its end after the cancel: recorded, no more
        return StepOutcome(
            step_name=name, state=StepState.COMPLETED, text=output.text, result_event_seq=seq
        )

    async def model_turn(self) -> ModelTurn:
        """Call the model with the task's events so far (by reference: the activity reads them)
        and record its answer as an assistant ``message`` with the token usage.

        Raises:
            BudgetExceeded: ``max_rounds``, ``max_tokens`` or ``max_seconds`` is spent.
            asyncio.CancelledError: the task was cancelled (before the call, or during it: the
                call is dropped and nothing of it is recorded).
        """
        self._stop_if_cancelled()
        budgets = self.spec.budgets
        self._check_time()
        if budgets.max_rounds is not None and self.run.rounds >= budgets.max_rounds:
            raise BudgetExceeded("max_rounds", budgets.max_rounds)
        if budgets.max_tokens is not None and self.run.tokens >= budgets.max_tokens:
            raise BudgetExceeded("max_tokens", budgets.max_tokens)
        if self.spec.model is None:
            raise ApplicationError("this agent has no model", non_retryable=True)
        info = workflow.info()
        self.progressed = True
        try:
            turn: ModelTurn = await self._activity(
                workflow.start_activity(
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
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError("the task was cancelled") from err
            raise
        self._stop_if_cancelled()  # the answer came with the cancel: not recorded
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
        result = EventInput(
            kind=EventKind.TOOL_RESULT, name=tool or None, call_id=call_id, payload=text
        )
        seq = self._append(result, f"step/{name}/result").first_seq
        self._move(name, state, result_event_seq=seq)
        self.run.turn_committed = True
        return StepOutcome(
            step_name=name, state=state, text=bound_text(text).text, result_event_seq=seq
        )

    async def _recorded(self, name: str, state: StepState, seq: int | None) -> StepOutcome:
        """The outcome of a step that ended before as ``state`` (memoized: ``completed`` or
        ``unknown``), its result as recorded."""
        text = await self._payload(name, seq or 0)
        return StepOutcome(step_name=name, state=state, text=text, result_event_seq=seq or 0)

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


def _refused_call(tool: str, arguments: str) -> str | None:
    """Why a tool call is not run (its step fails with this as its result, which the model
    reads), or None: a call that names no tool, or whose arguments are longer than an event
    holds (``MAX_PAYLOAD_CHARS``: they would reach the tool cut)."""
    if not tool:
        return "the call names no tool: call one of the tools offered, by name"
    if len(arguments) > MAX_PAYLOAD_CHARS:
        return (
            f"the call's arguments are {len(arguments):,} characters; a tool call's arguments "
            f"are at most {MAX_PAYLOAD_CHARS:,}: the tool was not run"
        )
    return None
