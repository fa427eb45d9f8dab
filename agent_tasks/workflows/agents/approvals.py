"""Approval before a tool runs: the rules and texts of an approval request (``StepRunner.step`` runs
them; the person's side is in ``docs/agent-tasks.md``).

A tool registered with ``approval`` (``activities.tools.tool``) is asked about before its call is
scheduled:

1. The ``tool_call`` event is recorded with the model's arguments.
2. The worker checks the call (``APPROVAL_ACTIVITY``): the arguments against the tool's model
   (invalid: the step fails without asking) and the tool's predicate; its result is in the history,
   so a replay or a later worker decides the call as it was decided.
3. An input request ``approve-{call seq}`` names the tool, step, call, the key the approved call
   runs with (``workflows.steps.next_attempt``) and the description; its answer's schema is
   ``approval_schema``. The task is ``awaiting_input``; a cancel closes it and runs nothing.
4. The answer is recorded as a ``decision`` citing the call (``decision_statement``), then:
   ``accept`` runs the call; ``edit`` records a second ``tool_call`` with the person's arguments and
   runs it (``EDITED``); ``answer`` completes the step with the answer (``ANSWERED``); ``ignore``
   fails it with ``IGNORED`` and the reason, if any.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError

from agent_tasks.contract import (
    APPROVAL_DESCRIPTION_CHARS,
    MAX_PAYLOAD_CHARS,
    ApprovalAsk,
    ApprovalChoice,
    CitesInput,
    Event,
    EventInput,
    EventKind,
    InputRequest,
    RecordEventsInput,
    StepState,
    TaskStatus,
    ToolInput,
    internal_request_id,
)
from agent_tasks.contract.errors import AgentError
from agent_tasks.workflows import inbox
from agent_tasks.workflows.agents.registry import ToolSpec
from agent_tasks.workflows.agents.runner import Runner
from agent_tasks.workflows.patches import APPROVAL_BOUND, IGNORE_REASON
from agent_tasks.workflows.steps import idempotency_key, next_attempt

APPROVAL_ACTIVITY = "tool_approval"
"""Activity: the worker's check of a call of a tool that needs approval (``ApprovalCheck``)."""
APPROVAL_CHECK_TIMEOUT = timedelta(seconds=30)
"""Longest run of the check (it reads the call back and runs the tool's predicate)."""
APPROVAL_CHECK_RETRY = RetryPolicy(maximum_attempts=5)
"""The check is retried when the worker cannot read the call back; a predicate that raises fails the
step."""
IGNORED = "a person chose not to run this call: the tool was not run"
"""The result of an ignored call (the model reads it)."""


APPROVAL_EXPIRED = inbox.EXPIRED
"""Why an approval request closed when its expiry passed unanswered (``closed_inputs``)."""


class ApprovalCheck(BaseModel):
    """The worker's check of a call before it is asked about (``APPROVAL_ACTIVITY``)."""

    needed: bool = False
    """Ask a person (the tool's predicate said so, or it always asks)."""
    description: str = ""
    """Markdown for the person."""
    error: str | None = None
    """The arguments fail the tool's model: the step fails with this, nobody is asked."""
    digest: str | None = None
    """The call's digest (``call_digest``); None from older workers."""


class ApprovalExpired(AgentError):
    """The expiry of an approval request passed before enough decisions came."""


def call_digest(tool: str, arguments: str, key: str) -> str:
    """The digest a person approves a call by: SHA-256 hex of canonical JSON ``{"arguments",
    "idempotency_key", "tool"}``, the arguments parsed from ``arguments`` (text that is not JSON
    counts as a string). Another key (a new attempt) gives another digest."""
    try:
        parsed: JsonValue = json.loads(arguments or "{}")
    except ValueError:
        parsed = arguments
    canonical = json.dumps(
        {"arguments": parsed, "idempotency_key": key, "tool": tool},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def expired_result(deadline: datetime) -> str:
    """The result of a call whose approval request expired at ``deadline`` (the model reads it)."""
    return (
        f"the approval request expired at {deadline.isoformat()} without the decisions it "
        "needed: the tool was not run"
    )


def ignored_result(reason: str) -> str:
    """The result of a call a person ignored giving ``reason`` (the model reads it)."""
    return f"{IGNORED}; their reason: {reason}"


def approval_input_id(call_seq: int) -> str:
    """The input id of the approval request of the call recorded as ``call_seq``."""
    return f"approve-{call_seq}"


def approval_prompt(tool: str) -> str:
    """The request's prompt."""
    return f"Run the tool {tool!r}?"


def approval_schema(
    parameters: dict[str, JsonValue], ask: ApprovalAsk | None = None
) -> dict[str, Any]:
    """The JSON Schema of an approval's answer (``ApprovalChoice``) for a tool whose argument schema
    is ``parameters``: ``type`` ``accept``, ``edit`` (``arguments`` satisfying ``parameters``, its
    ``$defs`` moved to the root), ``answer`` (``text``) or ``ignore``. With ``digest`` the answer
    must carry it; a call needing several approvers takes no ``edit``."""
    arguments = {k: v for k, v in parameters.items() if k != "$defs"} or {"type": "object"}
    several = ask is not None and ask.approvers > 1
    choices = ["accept", "answer", "ignore"] if several else ["accept", "edit", "answer", "ignore"]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "type": {
                "enum": choices,
                "description": "accept: run it; edit: run it with these arguments; answer: "
                "this text is its result, it does not run; ignore: it does not run",
            },
            "arguments": arguments,
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_PAYLOAD_CHARS},
        },
        "required": ["type"],
        "additionalProperties": False,
        "allOf": [
            {
                "if": {"properties": {"type": {"const": wanted}}},
                "then": {"required": [field]},
            }
            for wanted, field in (("edit", "arguments"), ("answer", "text"))
        ],
    }
    if ask is not None and ask.digest is not None:
        schema["properties"]["digest"] = {
            "type": "string",
            "description": "the digest of the call the person was shown",
        }
        schema["required"] = ["type", "digest"]
    if "$defs" in parameters:
        schema["$defs"] = parameters["$defs"]
    return schema


def decision_statement(choice: ApprovalChoice, ask: ApprovalAsk) -> str:
    """The decision's text for ``choice`` about the call ``ask`` describes."""
    call = f"the call of {ask.tool!r} (seq {ask.call_seq}, step {ask.step_name!r})"
    if choice.type == "accept" and len(ask.approved_by) + 1 < ask.approvers:
        return (
            f"approved {call} ({len(ask.approved_by) + 1} of {ask.approvers} approvals): it "
            f"runs once {ask.approvers} people approved it"
        )
    if choice.type == "accept":
        return f"approved {call}: it runs under {ask.idempotency_key}"
    if choice.type == "edit":
        return f"approved {call} with edited arguments: it runs under {ask.idempotency_key}"
    if choice.type == "answer":
        return f"answered {call} instead of running it"
    return f"ignored {call}: it was not run"


class Approvals:
    """The approval of a call before it runs, over the agent's ``runner`` (``StepRunner`` asks
    it)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def approval_of(self, name: str) -> InputRequest | None:
        """The open approval request of step ``name``, asked before this run continued as new."""
        found = (
            r
            for r in self.runner.ledger.state.inputs
            if r.approval and r.approval.step_name == name
        )
        return next(found, None)

    def _ask_approval(
        self, input_id: str, spec: ToolSpec, ask: ApprovalAsk, deadline: datetime | None
    ) -> InputRequest:
        """Open the approval request ``input_id`` about ``ask``'s call (``awaiting_input``)."""
        self.runner.host.set_status(TaskStatus.AWAITING_INPUT)
        return inbox.open_input(
            self.runner.ledger,
            input_id,
            approval_prompt(spec.name),
            approval_schema(spec.parameters, ask),
            deadline,
            workflow.now(),
            approval=ask,
        )

    async def _approval_answer(self, asked: InputRequest) -> Event:
        """Wait for the answer to ``asked`` (until its deadline, if any) and return its
        ``input_response`` event.

        Raises:
            ApprovalExpired: the deadline passed first (the request is closed ``expired``).
            AgentParked: the task is to continue-as-new (the request stays open).
            asyncio.CancelledError: the task was cancelled.
        """
        remaining = None
        if asked.deadline is not None:
            remaining = max(asked.deadline - workflow.now(), timedelta(0))

        def expire() -> None:
            inbox.close_input(
                self.runner.ledger, asked.input_id, None, workflow.now(), reason=APPROVAL_EXPIRED
            )
            self.runner.back_in_progress()
            raise ApprovalExpired(asked.input_id)

        await self.runner.wait_answer(asked.input_id, remaining, expire)
        self.runner.back_in_progress()
        answer_seq = self.runner.ledger.state.answered[asked.input_id]
        return next(e for e in self.runner.ledger.run_events if e.seq == answer_seq)

    # Long: one approval in workflow order: the worker's check, the request, the wait, the decision,
    # the choice
    async def approved(
        self,
        name: str,
        spec: ToolSpec,
        call_id: str | None,
        call_seq: int,
        asked: InputRequest | None,
    ) -> tuple[int, tuple[StepState, str] | None]:
        """Ask a person about the call recorded as ``call_seq`` (``asked``: a request open already)
        and record the choice. Returns the seq of the call to run (the edited one for ``edit``) and,
        when it does not run, the state and result its step ends with.

        An expiry (``approval_expires_s``) closes the request ``expired`` and fails the step
        (``expired_result``); a tool with ``approvers`` over 1 is asked again until that many
        distinct people accepted, while an ``answer`` or ``ignore`` decides at once.

        Raises:
            AgentParked: the task is to continue-as-new (the request stays open).
            asyncio.CancelledError: the task was cancelled (the request is closed with it).
        """
        if asked is None:
            info = workflow.info()
            attempt = next_attempt(self.runner.ledger.step(name))
            key = idempotency_key(info.workflow_id, name, attempt)
            self.runner.progressed = True
            try:
                check: ApprovalCheck = await self.runner.activity(
                    workflow.start_activity(
                        APPROVAL_ACTIVITY,
                        ToolInput(
                            workflow_id=info.workflow_id,
                            run_id=info.run_id,
                            call_seq=call_seq,
                            step_name=name,
                            idempotency_key=key,
                            mcp=spec.mcp,
                        ),
                        result_type=ApprovalCheck,
                        start_to_close_timeout=APPROVAL_CHECK_TIMEOUT,
                        retry_policy=APPROVAL_CHECK_RETRY,
                    )
                )
            except ActivityError as err:
                if isinstance(err.cause, CancelledError):
                    raise asyncio.CancelledError("the task was cancelled") from err
                raise
            self.runner.stop_if_cancelled()
            if check.error is not None:
                return call_seq, (StepState.FAILED, check.error)
            if not check.needed:
                return call_seq, None
            bound = workflow.patched(APPROVAL_BOUND)
            ask = ApprovalAsk(
                tool=spec.name,
                step_name=name,
                call_seq=call_seq,
                call_id=call_id,
                idempotency_key=key,
                description=check.description[:APPROVAL_DESCRIPTION_CHARS],
                digest=check.digest if bound else None,
                approvers=spec.approvers if bound else 1,
            )
            expires = spec.approval_expires_s if bound else None
            deadline = None if expires is None else workflow.now() + timedelta(seconds=expires)
            asked = self._ask_approval(approval_input_id(call_seq), spec, ask, deadline)
        while True:
            try:
                answer = await self._approval_answer(asked)
            except ApprovalExpired:
                assert asked.deadline is not None
                return call_seq, (StepState.FAILED, expired_result(asked.deadline))
            choice = ApprovalChoice.model_validate_json(answer.payload)
            shown = asked.approval
            assert shown is not None
            decision = EventInput(
                kind=EventKind.DECISION,
                payload=decision_statement(choice, shown),
                cites=CitesInput(events=[call_seq]),
            )
            self.runner.ledger.record_events(
                RecordEventsInput(
                    agent_id=answer.author,
                    events=[decision],
                    # approval/{call seq} for the first request (as before), then .../{n}
                    request_id=internal_request_id(
                        f"approval/{asked.input_id.removeprefix('approve-')}"
                    ),
                ),
                workflow.now(),
            )
            if choice.type != "accept" or len(shown.approved_by) + 1 >= shown.approvers:
                break
            more = shown.model_copy(update={"approved_by": [*shown.approved_by, answer.author]})
            next_id = f"{approval_input_id(call_seq)}-{len(more.approved_by) + 1}"
            asked = self._ask_approval(next_id, spec, more, asked.deadline)
        if choice.type == "edit":
            edited = EventInput(
                kind=EventKind.TOOL_CALL,
                name=spec.name,
                call_id=call_id or f"call_{call_seq}",
                payload=json.dumps(choice.arguments),
            )
            return self.runner.append(edited, f"step/{name}/edited").first_seq, None
        if choice.type == "answer":
            return call_seq, (StepState.COMPLETED, choice.text or "")
        if choice.type == "ignore":
            if choice.text and workflow.patched(IGNORE_REASON):
                return call_seq, (StepState.FAILED, ignored_result(choice.text))
            return call_seq, (StepState.FAILED, IGNORED)
        return call_seq, None
