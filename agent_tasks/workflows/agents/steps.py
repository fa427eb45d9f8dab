"""The step machinery of agent code: a tool call run as a step (an activity), a model turn, and
their ledger writes.

A step writes a ``tool_call`` event and ``in_progress`` before its activity is scheduled, then a
``tool_result`` and ``completed`` or ``failed``. A tool not declared idempotent runs at most once: a
dead worker leaves the step ``unknown``, never run again on its own. Steps are memoized by name.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import timedelta

from pydantic import JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError
from temporalio.workflow import ActivityCancellationType

from agent_tasks.contract import (
    MAX_PAYLOAD_CHARS,
    EventInput,
    EventKind,
    ModelInput,
    ModelTurn,
    Role,
    StepKind,
    StepRetry,
    StepState,
    ToolInput,
    ToolOutput,
    internal_request_id,
)
from agent_tasks.contract.errors import failure_text
from agent_tasks.workflows import retries
from agent_tasks.workflows.agents.approvals import Approvals, call_digest
from agent_tasks.workflows.agents.registry import MCP_SESSION_LOST, OUTCOME_UNKNOWN, mcp_offers
from agent_tasks.workflows.agents.runner import BudgetExceeded, Runner, StepOutcome
from agent_tasks.workflows.patches import (
    MODEL_CALL_CANCEL,
    TOOL_APPROVAL,
    TOOL_CALL_BOUNDS,
    UNKNOWN_STAYS_UNKNOWN,
)
from agent_tasks.workflows.steps import idempotency_key

MODEL_HEARTBEAT = timedelta(seconds=10)
"""Heartbeat timeout of the model call: a dead worker's call is retried (after a cancel: given up)
this soon."""
MODEL_ACTIVITY = "model_turn"
"""Activity name of the model call."""
MODEL_START_TO_CLOSE = timedelta(minutes=2)
"""Longest model call, in runs recorded before ``MODEL_CALL_CANCEL``."""
MODEL_LONGEST_CALL = timedelta(minutes=10)
"""Longest attempt of a model call (``MODEL_CALL_CANCEL``): a long answer streams for minutes
(16,000 tokens at 50 a second is over 5); a dead worker is noticed by ``MODEL_HEARTBEAT``."""
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
"""Model calls retry transient errors (HTTP 408/409/429/5xx, with the server's retry-after)."""
MAX_MODEL_MISTAKES = 3
"""Model answers in a row the call could not take (``ModelTurn.mistake``) after which the agent
fails (``ModelAnswerUnusable``): the model was told each time."""
MAX_UNKNOWN_CALLS = 64
"""Calls ended ``unknown`` a run remembers for a later identical call (``AgentRun.unknown_calls``,
carried: 64 entries stay under 12 KiB); past it the oldest is left out."""


class StepRunner:
    """Runs agent code's steps and model turns over the agent's ``runner``, asking ``approvals``
    before a call of a tool that needs approval.
    """

    def __init__(self, runner: Runner, approvals: Approvals) -> None:
        self.runner = runner
        self.approvals = approvals

    async def retry(
        self,
        name: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        *,
        reason: str,
        call_id: str | None = None,
    ) -> StepOutcome:
        """Run the ``unknown`` or ``failed`` step ``name`` again: a ``decision`` citing it
        (``reason``), then ``step``; an ``unknown`` one keeps its idempotency key, a failed one is a
        new attempt. Nothing else runs an ``unknown`` step again.

        Raises:
            ApplicationError: ``invalid_transition`` (not ``unknown`` or ``failed``),
                ``step_not_found``.
            asyncio.CancelledError: the task was cancelled.
        """
        self.runner.stop_if_cancelled()
        retry = StepRetry(
            step_name=name,
            agent_id=self.runner.ledger.state.start.agent_id,
            reason=reason,
            request_id=internal_request_id(f"retry/{name}/{self.runner.ledger.state.writes}"),
        )
        retries.retry_step(self.runner.ledger, retry, workflow.now())
        return await self.step(name, tool, arguments, call_id=call_id)

    # Long: one tool step in workflow order: memo, call event, approval, the activity, its end;
    # patch gates tie it
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
        """Run ``tool`` as the step ``name``, memoized (a completed step returns its recorded
        result). A tool not allowed or not registered, or refused arguments, fail the step and the
        loop goes on; a tool needing approval is asked about first (``workflows.agents.approvals``).
        ``full_length`` and ``full_sha256`` describe the text ``arguments`` were cut from.

        Raises:
            BudgetExceeded: ``max_tool_calls`` or ``max_seconds`` is spent.
            AgentParked: the task is to continue-as-new while the call waits for approval.
            asyncio.CancelledError: the task was cancelled (a tool that saw it leaves the step
                ``unknown``; one that ended anyway is recorded first).
        """
        self.runner.stop_if_cancelled()
        done = self.runner.ledger.step(name)
        if done is not None and done.state is StepState.COMPLETED:
            return await self.runner.recorded(name, done.state, done.result_event_seq)
        if (
            done is not None
            and done.state is StepState.UNKNOWN
            and done.retry_by is None
            and workflow.patched(UNKNOWN_STAYS_UNKNOWN)
        ):
            return await self.runner.recorded(name, done.state, done.result_event_seq)
        spec = self.runner.tools.get(tool)
        asked = self.approvals.approval_of(name)
        refused = None
        sent = None  # the call's arguments when this run records it; else read back by seq
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        identity: str | None = call_digest(tool, text, "")  # None: the call run was edited
        if asked is not None and asked.approval is not None:  # asked in an earlier run
            call_seq = asked.approval.call_seq
        else:
            self.runner.check_time()
            budget = self.runner.spec.budgets.max_tool_calls
            if budget is not None and self.runner.run.tool_calls >= budget:
                raise BudgetExceeded("max_tool_calls", budget)
            self.runner.run.tool_calls += 1
            call, length = _call_event(tool, call_id, text, full_length, full_sha256)
            call_seq = self.runner.append(call, f"step/{name}/call").first_seq
            refused = _refused_call(tool, length)
            sent = text
        ended: tuple[StepState, str] | None = None
        if (
            spec is not None
            and spec.approval
            and refused is None
            and workflow.patched(TOOL_APPROVAL)
        ):
            approved_seq, ended = await self.approvals.approved(
                name, spec, call_id, call_seq, asked
            )
            if approved_seq != call_seq:  # edited: the tool reads the edited call by its seq
                call_seq, sent, identity = approved_seq, None, None
        record = self.runner.move(name, StepState.IN_PROGRESS, kind=kind)
        if ended is not None:
            return self.runner.end(name, tool, call_id, *ended)
        if refused is not None and workflow.patched(TOOL_CALL_BOUNDS):
            return self.runner.end(name, tool, call_id, StepState.FAILED, refused)
        if spec is None:
            return self.runner.end(
                name, tool, call_id, StepState.FAILED, f"no tool {tool!r} for this agent"
            )
        info = workflow.info()
        self.runner.progressed = True
        server = None if spec.mcp is None else spec.mcp.server
        try:  # a stateful server's calls go to its session's worker (opened at first use)
            session = {} if server is None else await self.runner.sessions.options(server)
        except ActivityError as err:
            return self.runner.end(name, tool, call_id, StepState.FAILED, failure_text(err))
        try:
            output = await self.runner.activity(
                workflow.start_activity(
                    spec.activity(),
                    ToolInput(
                        workflow_id=info.workflow_id,
                        run_id=info.run_id,
                        call_seq=call_seq,
                        step_name=name,
                        idempotency_key=idempotency_key(info.workflow_id, name, record.attempt),
                        arguments=sent,
                        mcp=spec.mcp,
                    ),
                    result_type=ToolOutput,
                    start_to_close_timeout=timedelta(seconds=spec.start_to_close_s),
                    heartbeat_timeout=None
                    if spec.heartbeat_s is None
                    else timedelta(seconds=spec.heartbeat_s),
                    retry_policy=spec.retry_policy(),
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    **session,
                )
            )
        except ActivityError as err:
            if server is not None and self.runner.sessions.lost(server, err):
                return self.runner.end(
                    name,
                    tool,
                    call_id,
                    StepState.FAILED,
                    f"{MCP_SESSION_LOST}: the session of MCP server {server.name!r} was lost "
                    f"({err.cause}): the call did not run, and the server's state from earlier "
                    "calls is gone; the next call opens a new session",
                )
            if isinstance(err.cause, CancelledError):
                self._remember_unknown(name, identity)
                self.runner.end(
                    name,
                    tool,
                    call_id,
                    StepState.UNKNOWN,
                    "cancelled while the tool ran: its effect is unknown",
                )
                raise asyncio.CancelledError from err
            lost = isinstance(err.cause, ApplicationError) and err.cause.type == OUTCOME_UNKNOWN
            if (isinstance(err.cause, TimeoutError) and not spec.idempotent) or lost:
                self._remember_unknown(name, identity)
                return self.runner.end(
                    name,
                    tool,
                    call_id,
                    StepState.UNKNOWN,
                    f"the tool's worker or connection stopped during the call ({err.cause}): "
                    "its effect is unknown, and it was not run again",
                )
            return self.runner.end(name, tool, call_id, StepState.FAILED, failure_text(err))
        result = EventInput(
            kind=EventKind.TOOL_RESULT,
            name=tool,
            call_id=call_id,
            payload=output.text,
            full_length=output.full_length,
            full_sha256=output.full_sha256,
        )
        seq = self.runner.append(result, f"step/{name}/result").first_seq
        self.runner.move(name, StepState.COMPLETED, result_event_seq=seq)
        self.runner.run.turn_committed = True
        self.runner.stop_if_cancelled()  # it ran to its end after the cancel: recorded, no more
        return StepOutcome(
            step_name=name, state=StepState.COMPLETED, text=output.text, result_event_seq=seq
        )

    def _remember_unknown(self, name: str, identity: str | None) -> None:
        """Remember that step ``name``, of the call ``identity`` (``call_digest`` without a key;
        None: an edited call), ended ``unknown`` (``AgentRun.unknown_calls``)."""
        if identity is None:
            return
        known = self.runner.run.unknown_calls
        known.pop(identity, None)
        known[identity] = name
        while len(known) > MAX_UNKNOWN_CALLS:
            known.pop(next(iter(known)))

    # Long: one model call in workflow order: budgets, the activity, its cancel, the answer's
    # record, and a mistake shown to the model; mostly docstring
    async def model_turn(self) -> ModelTurn:
        """Call the model with the task's events so far (the activity reads them) and record its
        answer as an assistant ``message`` with its usage. An answer it could not take
        (``ModelTurn.mistake``) is recorded with a user message saying why, and the model is called
        again; each call counts against the budgets.

        Raises:
            BudgetExceeded: ``max_rounds``, ``max_tokens`` or ``max_seconds`` is spent.
            ApplicationError: non-retryable ``ModelAnswerUnusable`` after ``MAX_MODEL_MISTAKES``.
            asyncio.CancelledError: the task was cancelled (the call's HTTP request is closed and
                nothing of it recorded).
        """
        self.runner.stop_if_cancelled()
        budgets = self.runner.spec.budgets
        self.runner.check_time()
        if budgets.max_rounds is not None and self.runner.run.rounds >= budgets.max_rounds:
            raise BudgetExceeded("max_rounds", budgets.max_rounds)
        if budgets.max_tokens is not None and self.runner.run.tokens >= budgets.max_tokens:
            raise BudgetExceeded("max_tokens", budgets.max_tokens)
        if self.runner.spec.model is None:
            raise ApplicationError("this agent has no model", non_retryable=True)
        info = workflow.info()
        self.runner.progressed = True
        waits = workflow.patched(MODEL_CALL_CANCEL)
        try:
            turn: ModelTurn = await self.runner.activity(
                workflow.start_activity(
                    MODEL_ACTIVITY,
                    ModelInput(
                        workflow_id=info.workflow_id,
                        run_id=info.run_id,
                        up_to_seq=self.runner.ledger.state.last_seq,
                        model=self.runner.spec.model,
                        tools=self.runner.spec.tools,
                        mcp_tools=mcp_offers(self.runner.tools),
                    ),
                    result_type=ModelTurn,
                    start_to_close_timeout=MODEL_LONGEST_CALL if waits else MODEL_START_TO_CLOSE,
                    heartbeat_timeout=MODEL_HEARTBEAT if waits else None,
                    retry_policy=MODEL_RETRY,
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                    if waits
                    else ActivityCancellationType.TRY_CANCEL,
                )
            )
        except ActivityError as err:
            # waiting for the cancel, the call may end otherwise (its worker died): cancelled
            if isinstance(err.cause, CancelledError) or (waits and self.runner.cancelled()):
                raise asyncio.CancelledError("the task was cancelled") from err
            raise
        self.runner.stop_if_cancelled()  # the answer came with the cancel: not recorded
        self.runner.run.rounds += 1
        self.runner.run.tokens += turn.usage.input_tokens + turn.usage.output_tokens
        message = EventInput(
            kind=EventKind.MESSAGE,
            role=Role.ASSISTANT,
            payload=turn.content,
            usage=turn.usage,
            full_length=turn.content_full_length,  # set when the call cut a longer answer
            full_sha256=turn.content_sha256,
        )
        self.runner.append(message, f"round/{self.runner.run.rounds}")
        if turn.mistake is None:
            self.runner.run.mistakes = 0
            return turn
        self.runner.run.mistakes += 1
        if self.runner.run.mistakes >= MAX_MODEL_MISTAKES:
            raise ApplicationError(
                f"the model's answer could not be taken {self.runner.run.mistakes} times in a row; "
                f"the last time: {turn.mistake}",
                type="ModelAnswerUnusable",
                non_retryable=True,
            )
        shown = EventInput(kind=EventKind.MESSAGE, role=Role.USER, payload=turn.mistake)
        self.runner.append(shown, f"round/{self.runner.run.rounds}/mistake")
        return await self.model_turn()


def _call_event(
    tool: str, call_id: str | None, text: str, full_length: int | None, full_sha256: str | None
) -> tuple[EventInput, int]:
    """The ``tool_call`` event of a call whose arguments are ``text``, and the arguments' length;
    for a cut (``full_length``) the full text's length and SHA-256."""
    kind, name = EventKind.TOOL_CALL, tool or None
    if full_length is None or full_length <= len(text):
        return EventInput(kind=kind, name=name, call_id=call_id, payload=text), len(text)
    cut = EventInput(
        kind=kind,
        name=name,
        call_id=call_id,
        payload=text[:MAX_PAYLOAD_CHARS],
        full_length=full_length,
        full_sha256=full_sha256,
    )
    return cut, full_length


def _refused_call(tool: str, length: int) -> str | None:
    """Why a tool call is not run (its step's result, for the model), or None: it names no tool, or
    its arguments (``length`` characters) pass ``MAX_PAYLOAD_CHARS``."""
    if not tool:
        return "the call names no tool: call one of the tools offered, by name"
    if length > MAX_PAYLOAD_CHARS:
        return (
            f"the call's arguments are {length:,} characters; a tool call's arguments "
            f"are at most {MAX_PAYLOAD_CHARS:,}: the tool was not run"
        )
    return None
