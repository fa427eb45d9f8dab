"""What agent code's machinery stands on (``Runner``, shared by ``AgentContext``, ``StepRunner`` and
``Approvals``): the cancellation rule, awaited activities, waits for an answer, and a step's ledger
writes.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from temporalio import workflow

from agent_tasks.contract import (
    AgentRun,
    AgentSpec,
    EventInput,
    EventKind,
    StepKind,
    StepRecord,
    StepState,
    TaskStart,
    TaskStatus,
    ToolInput,
    ToolOutput,
    WriteOutcome,
    bound_text,
)
from agent_tasks.contract.errors import AgentError, AgentTasksControlFlow
from agent_tasks.workflows.agents.registry import McpSessions, ToolSpec
from agent_tasks.workflows.ledger import Ledger
from agent_tasks.workflows.patches import CANCEL_RULE

READ_EVENT_ACTIVITY = "read_event"
"""Activity name of the read of one event's payload (a memoized step's result of an earlier run)."""
_R = TypeVar("_R")


class AgentParked(AgentTasksControlFlow):
    """Raised by ``checkpoint()`` (and by a wait) when the task is to continue-as-new: the
    agent stops here and is called again in the next run."""


class BudgetExceeded(AgentError):
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
        """Start the child task ``start`` describes; None once started, else why not (id taken)."""
        ...


class Runner:
    """The ground of agent code's machinery over the task's ledger.

    Args:
        ledger: the task's ledger (the one write path).
        spec: the task's agent spec.
        run: the agent's carried progress.
        tools: the worker's specs of the tools the agent may call (``TOOL_SPECS_ACTIVITY``).
        host: the task's workflow (status, children, cancellation).
        sessions: the run's stateful MCP sessions; None: a new, empty set.
    """

    def __init__(
        self,
        ledger: Ledger,
        spec: AgentSpec,
        run: AgentRun,
        tools: Mapping[str, ToolSpec],
        host: AgentHost,
        sessions: McpSessions | None = None,
    ) -> None:
        self.ledger = ledger
        self.spec = spec
        self.run = run
        self.tools = dict(tools)
        self.host = host
        self.sessions = McpSessions() if sessions is None else sessions
        """The run's stateful MCP sessions: where a stateful server's calls are scheduled."""
        self.running: set[workflow.ActivityHandle[Any]] = set()
        """The activities agent code awaits now (tools, the model): what a cancel cancels."""
        self.progressed = False
        """True once agent code ran a step or the model in this run; until then ``checkpoint()``
        does not park (``PROGRESS_BEFORE_PARKING``)."""
        self.checkpoint_due = False
        """Set by the workflow when continue-as-new is due: the next ``checkpoint()`` or wait
        parks."""

    def cancelled(self) -> bool:
        """True once a cancel request reached the task (``CANCEL_RULE``), as soon as Temporal
        delivers it, so agent code in the same workflow task starts nothing."""
        if self.host.cancelling:
            return True
        return workflow.cancellation_reason() is not None and workflow.patched(CANCEL_RULE)

    def stop_if_cancelled(self) -> None:
        """Raise ``asyncio.CancelledError`` once the task is cancelled (``cancelled``)."""
        if self.cancelled():
            raise asyncio.CancelledError("the task was cancelled")

    def cancel_running(self) -> None:
        """Cancel the activities agent code awaits: a heartbeating tool sees it at its next
        heartbeat, one that does not runs to its end (its result recorded)."""
        for handle in self.running:
            handle.cancel()

    async def activity(self, handle: workflow.ActivityHandle[_R]) -> _R:
        """Await an activity agent code started, where a cancel can reach it."""
        self.running.add(handle)
        try:
            return await handle
        finally:
            self.running.discard(handle)

    async def wait_answer(
        self,
        input_id: str,
        remaining: timedelta | None = None,
        on_timeout: Callable[[], None] | None = None,
    ) -> None:
        """Wait until the open request ``input_id`` is answered (``remaining``: at most that
        long, then ``on_timeout`` runs).

        Raises:
            AgentParked: continue-as-new is due first (the request stays open).
            asyncio.CancelledError: the task was cancelled.
        """
        state = self.ledger.state
        try:
            await workflow.wait_condition(
                lambda: input_id in state.answered or self.checkpoint_due or self.host.cancelling,
                timeout=remaining,
            )
        except builtins.TimeoutError:
            assert on_timeout is not None
            on_timeout()
        self.stop_if_cancelled()
        if input_id not in state.answered:
            raise AgentParked

    def back_in_progress(self) -> None:
        """``in_progress`` again once nothing is awaited."""
        waiting = (TaskStatus.AWAITING_INPUT, TaskStatus.AWAITING_CHILDREN)
        if self.ledger.state.status in waiting and not self.ledger.state.inputs:
            self.host.set_status(TaskStatus.IN_PROGRESS)

    def append(self, event: EventInput, what: str) -> WriteOutcome:
        """Record ``event`` under a request id of ``what`` and the write count (a replay appends it
        once)."""
        return self.ledger.append([event], f"{what}/{self.ledger.state.writes}", workflow.now())

    def move(
        self,
        name: str,
        state: StepState,
        *,
        kind: StepKind | None = None,
        result_event_seq: int | None = None,
    ) -> StepRecord:
        """Move step ``name`` to ``state`` in the ledger (its kind and result event if given)."""
        return self.ledger.move_step(
            name,
            state,
            f"step/{name}/{state.value}/{self.ledger.state.writes}",
            workflow.now(),
            kind=kind,
            result_event_seq=result_event_seq,
        )

    def end(
        self, name: str, tool: str, call_id: str | None, state: StepState, text: str
    ) -> StepOutcome:
        """Record the step's end as ``state`` with ``text`` as its result event."""
        result = EventInput(
            kind=EventKind.TOOL_RESULT, name=tool or None, call_id=call_id, payload=text
        )
        seq = self.append(result, f"step/{name}/result").first_seq
        self.move(name, state, result_event_seq=seq)
        self.run.turn_committed = True
        return StepOutcome(
            step_name=name, state=state, text=bound_text(text).text, result_event_seq=seq
        )

    async def recorded(self, name: str, state: StepState, seq: int | None) -> StepOutcome:
        """The outcome of a step that ended before as ``state`` (``completed`` or ``unknown``)."""
        text = await self.payload(name, seq or 0)
        return StepOutcome(step_name=name, state=state, text=text, result_event_seq=seq or 0)

    async def payload(self, name: str, seq: int) -> str:
        """The payload of event ``seq``: from this run, or by an activity from where earlier runs'
        events are kept (``seq`` 0: found by step ``name``)."""
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

    def check_time(self) -> None:
        """Raise ``BudgetExceeded`` once ``max_seconds`` of workflow time since the run started
        passed."""
        limit = self.spec.budgets.max_seconds
        if limit is not None and workflow.now() - self.run.started_at >= timedelta(seconds=limit):
            raise BudgetExceeded("max_seconds", limit)
