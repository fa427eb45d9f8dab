"""The context agent code runs with (``AgentContext``): steps and model turns
(``workflows.agents.steps``), progress events, checkpoints, input requests and child tasks.

Progress is carried in ``AgentRun`` across continue-as-new: once it is suggested, the next
``checkpoint()`` parks the agent and the agent function is called again from the top.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, JsonValue
from temporalio import workflow

from agent_tasks.contract import (
    CLOSED_STATUSES,
    MAX_CHILDREN,
    MAX_DEPTH,
    AgentRun,
    AgentSpec,
    ChildEnd,
    ChildRecord,
    EventInput,
    EventKind,
    FailureMode,
    ModelTurn,
    StepKind,
    TaskStart,
    TaskStatus,
    bound_text,
    internal_request_id,
    valid_step_name,
)
from agent_tasks.contract.errors import AgentError
from agent_tasks.contract.waits import answer_error, answer_text, check_schema
from agent_tasks.workflows import children, inbox
from agent_tasks.workflows.agents.approvals import Approvals
from agent_tasks.workflows.agents.registry import McpSessions, ToolSpec
from agent_tasks.workflows.agents.runner import AgentHost, AgentParked, Runner, StepOutcome
from agent_tasks.workflows.agents.steps import StepRunner
from agent_tasks.workflows.ledger import Ledger
from agent_tasks.workflows.patches import PARK_ON_SUGGESTION, PROGRESS_BEFORE_PARKING


class InputTimeout(AgentError):
    """``ask`` waited past its timeout without an answer (and the agent gave no default)."""

    def __init__(self, input_id: str) -> None:
        super().__init__(f"input {input_id!r} was not answered in time")
        self.input_id = input_id


class SpawnRefused(AgentError):
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


class ChildFailed(AgentError):
    """A child spawned with ``mode="propagate"`` did not end ``done``."""

    def __init__(self, outcome: ChildOutcome) -> None:
        super().__init__(
            f"child task {outcome.name!r} ended {outcome.status.value}: {outcome.text}"
        )
        self.outcome = outcome


_NO_DEFAULT: Any = object()


class AgentContext:
    """What agent code runs with: steps, events, the model, budgets and its carried state; every
    public method is declared here, over the step machinery (``StepRunner``) and the ledger.

    Args:
        ledger: the task's ledger (the one write path).
        spec: the task's agent spec.
        run: the agent's carried progress.
        tools: the worker's specs of the tools the agent may call (``TOOL_SPECS_ACTIVITY``).
        host: the task's workflow (status, children).
        sessions: the run's stateful MCP sessions (``Runner``).
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
        """The task's ledger."""
        self.host = host
        """The task's workflow."""
        self._runner = Runner(ledger, spec, run, tools, host, sessions)
        self._steps = StepRunner(self._runner, Approvals(self._runner))
        """The step machinery this context runs steps, approvals and model turns with."""

    @property
    def spec(self) -> AgentSpec:
        """The task's agent spec."""
        return self._runner.spec

    @property
    def run(self) -> AgentRun:
        """The agent's carried progress (budget counters, rounds, ``state``)."""
        return self._runner.run

    @property
    def state(self) -> dict[str, JsonValue]:
        """What the agent keeps across continue-as-new and ``resume`` (small, JSON)."""
        return self.run.state

    @property
    def input(self) -> dict[str, JsonValue]:
        """The agent's input (``AgentSpec.input``)."""
        return self.spec.input

    @property
    def checkpoint_due(self) -> bool:
        """Set by the workflow when continue-as-new is due: the next ``checkpoint()`` or wait
        parks."""
        return self._runner.checkpoint_due

    @checkpoint_due.setter
    def checkpoint_due(self, due: bool) -> None:
        self._runner.checkpoint_due = due

    def cancel_running(self) -> None:
        """Cancel the activities agent code awaits now (the workflow calls it on a cancel)."""
        self._runner.cancel_running()

    async def step(
        self,
        name: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        *,
        call_id: str | None = None,
        kind: StepKind = StepKind.TOOL,
        full_length: int | None = None,
        full_sha256: str | None = None,
    ) -> StepOutcome:
        """Run ``tool`` as the step ``name``, memoized (``StepRunner.step`` has the rules and
        errors)."""
        return await self._steps.step(
            name,
            tool,
            arguments,
            call_id=call_id,
            kind=kind,
            full_length=full_length,
            full_sha256=full_sha256,
        )

    async def retry(
        self,
        name: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        *,
        reason: str,
        call_id: str | None = None,
    ) -> StepOutcome:
        """Run the ``unknown`` or ``failed`` step ``name`` again, citing ``reason``
        (``StepRunner.retry``)."""
        return await self._steps.retry(name, tool, arguments, reason=reason, call_id=call_id)

    async def model_turn(self) -> ModelTurn:
        """Call the model with the task's events so far and record its answer
        (``StepRunner.model_turn``)."""
        return await self._steps.model_turn()

    async def checkpoint(self) -> None:
        """A point where the agent may stop and start over in the next run: it parks once
        continue-as-new is due (or suggested: ``PARK_ON_SUGGESTION``) and it did new work in this
        run. Checks the time budget.

        Raises:
            AgentParked: the task is to continue-as-new.
            BudgetExceeded: ``max_seconds`` has passed.
            asyncio.CancelledError: the task was cancelled.
        """
        self._runner.stop_if_cancelled()
        self._runner.check_time()
        suggested = workflow.info().is_continue_as_new_suggested()
        if not self._runner.checkpoint_due and not (
            suggested and workflow.patched(PARK_ON_SUGGESTION)
        ):
            return
        if not self._runner.progressed and workflow.patched(PROGRESS_BEFORE_PARKING):
            return  # replaying memoized steps: park only after new work, or no run progresses
        raise AgentParked

    async def emit(
        self, text: str, *, kind: EventKind = EventKind.NOTE, name: str | None = None
    ) -> int:
        """Record a progress event; returns its seq.

        Raises:
            asyncio.CancelledError: the task was cancelled.
        """
        self._runner.stop_if_cancelled()
        seq: int = self._runner.append(
            EventInput(kind=kind, name=name, payload=text), "emit"
        ).first_seq
        return seq

    async def ask(
        self,
        input_id: str,
        prompt: str,
        schema: Mapping[str, JsonValue] | type[BaseModel] | None = None,
        *,
        timeout: timedelta | None = None,  # noqa: ASYNC109 (a workflow timer, not asyncio's)
        default: JsonValue = _NO_DEFAULT,
    ) -> JsonValue:
        """Ask a person for input and wait (minutes or weeks): ``awaiting_input``, an
        ``input_request`` event, the request in the view. The answer comes by ``submit_input`` or
        ``respond`` and must satisfy ``schema``; an early answer is taken at once. Memoized by
        ``input_id``: asked again (after a checkpoint or resume) it returns the recorded answer.

        Args:
            input_id: the request's name, unique in the task.
            prompt: what is asked.
            schema: a JSON Schema or a pydantic model; None: any JSON value.
            timeout: how long to wait (workflow time); None: for ever.
            default: returned when the timeout passes; without one the timeout raises.

        Raises:
            InputTimeout: the timeout passed and no default was given.
            ValueError: ``schema`` is not a valid JSON Schema.
            AgentParked: the task is to continue-as-new (the request stays open).
            asyncio.CancelledError: the task was cancelled (the request is closed with it).
        """
        self._runner.stop_if_cancelled()
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
            request = inbox.open_input(
                self.ledger, input_id, prompt, json_schema, deadline, workflow.now()
            )
        if input_id not in state.answered:
            assert request is not None
            remaining = None
            if request.deadline is not None:
                remaining = max(request.deadline - workflow.now(), timedelta(0))

            def timed_out() -> None:
                given = default is not _NO_DEFAULT
                default_json = answer_text(default) if given else None
                inbox.close_input(self.ledger, input_id, default_json, workflow.now())
                self._runner.back_in_progress()
                if not given:
                    raise InputTimeout(input_id)

            await self._runner.wait_answer(input_id, remaining, timed_out)
        self._runner.back_in_progress()
        answer: JsonValue = json.loads(
            await self._runner.payload(input_id, state.answered[input_id])
        )
        return answer

    async def spawn(
        self,
        key: str,
        goal: str,
        *,
        agent: AgentSpec | None = None,
        mode: FailureMode = "propagate",
    ) -> str:
        """Start a child task named ``{this task}/{key}`` and return its name; its end comes back as
        a ``child_result`` event. Idempotent by ``key``.

        Args:
            key: the spawn key, unique in the task (1 to 100 characters, no ``/``).
            goal: the child's goal.
            agent: the child's agent; None: a recorded child task (ended from outside).
            mode: what the child's failure does to ``wait_children``.

        Raises:
            SpawnRefused: past ``MAX_CHILDREN`` or ``MAX_DEPTH``, or the child's workflow id is
                taken (the child is recorded ``failed``, so no wait hangs on it).
            asyncio.CancelledError: the task was cancelled.
        """
        self._runner.stop_if_cancelled()
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
        children.add_child(
            self.ledger, key, ChildRecord(name=child.name, status=status, mode=mode), workflow.now()
        )
        refused = await self.host.start_child(child)
        if refused is not None:
            why = f"could not start: {refused}"
            end = ChildEnd(
                child=child.name,
                status=TaskStatus.FAILED,
                error=bound_text(why),
                request_id=internal_request_id(f"child-start/{child.name}"),
            )
            children.child_ended(self.ledger, end, workflow.now())
            raise SpawnRefused(f"child task {child.name!r} {why}")
        return child.name

    async def wait_children(
        self, keys: Sequence[str] | None = None, *, first: bool = False
    ) -> list[ChildOutcome]:
        """Wait (``awaiting_children``) until every child of ``keys`` (default: all) has ended, or
        with ``first`` one; returns their outcomes, except ``mode="ignore"`` ones.

        Raises:
            ChildFailed: an ended child spawned with ``mode="propagate"`` did not end ``done``.
            KeyError: a key names no spawned child.
            AgentParked: the task is to continue-as-new (the children's ends come to the next run).
            asyncio.CancelledError: the task was cancelled.
        """
        self._runner.stop_if_cancelled()
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
            await workflow.wait_condition(
                lambda: done() or self._runner.checkpoint_due or self.host.cancelling
            )
            self._runner.stop_if_cancelled()
            if not done():
                raise AgentParked
        self._runner.back_in_progress()
        outcomes = []
        for key in wanted:
            record = children[key]
            if not ended(key) or record.mode == "ignore":
                continue
            assert record.result_seq is not None  # set with the end
            payload = json.loads(await self._runner.payload(key, record.result_seq))
            outcome = ChildOutcome(
                key=key, name=record.name, status=record.status, text=payload["text"]
            )
            if record.mode == "propagate" and record.status is not TaskStatus.DONE:
                raise ChildFailed(outcome)
            outcomes.append(outcome)
        return outcomes


def child_name(parent: str, key: str) -> str:
    """A spawned child's task name: ``{parent}/{key}``, or past 200 characters its first 183, ``~``
    and 16 hex of the full name's SHA-256."""
    name = f"{parent}/{key}"
    if len(name) <= 200:
        return name
    return f"{name[:183]}~{hashlib.sha256(name.encode('utf-8')).hexdigest()[:16]}"
