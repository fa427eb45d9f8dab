"""Approval before a tool runs (``workflows.agents.approvals``): the request with the call, the
four choices and their effects (what ran, under which key, what the model read), the decision
citing the call, the predicate on the arguments, a bad edit refused with nothing recorded, a
call whose arguments or predicate fail, a cancel while the call waits, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from agent_tasks.contract import Event, EventKind, InputRequest, StepState, TaskStatus
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.contract.waits import answer_error, check_schema
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.workflows.agents.approvals import IGNORED, approval_schema, ignored_result
from tests.approval_tools import approval_spec, effects, goal
from tests.conftest import eventually, mirrored
from tests.workflows.conftest import cli


def mail(
    log: Path, to: str = "ops@example.com", subject: str = "deploy"
) -> tuple[str, dict[str, Any]]:
    return "send_mail", {"log": str(log), "to": to, "subject": subject}


async def asked(history: ConversationHistory, task: str) -> InputRequest:
    """The task's open approval request, once it is asked."""
    found: list[InputRequest] = []

    async def waiting() -> bool:
        view = (await history.get_task(task)).view
        assert view is not None
        found[:] = [r for r in view.pending_inputs if r.approval is not None]
        return bool(found)

    await eventually(waiting)
    return found[0]


async def events_of(history: ConversationHistory, task: str) -> list[Event]:
    return (await history.list_events(task, limit=200)).events


async def test_accept_runs_the_call_under_the_key_the_request_named(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    view = (await agents.get_task("t")).view
    assert view is not None and view.status is TaskStatus.AWAITING_INPUT
    approval = request.approval
    assert approval is not None and approval.tool == "send_mail"
    assert request.input_id == f"approve-{approval.call_seq}"
    assert approval.idempotency_key == f"{view.workflow_id}/{approval.step_name}/1"
    assert approval.description == "Sends **deploy** to `ops@example.com` (1 copy)."
    events = await events_of(agents, "t")
    call = next(e for e in events if e.seq == approval.call_seq)
    assert call.kind is EventKind.TOOL_CALL and json.loads(call.payload)["to"] == "ops@example.com"
    assert effects(log) == []  # nothing runs before the answer
    assert (await agents.list_steps("t")).steps == []  # the step starts once approved

    answered = await agents.approve("t", request.input_id, "accept")
    assert answered.recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE
    assert final.result is not None
    assert final.result.text == "the tools said: sent 'deploy' to ops@example.com"
    assert effects(log) == [f"{approval.idempotency_key} mail ops@example.com deploy x1"]
    (step,) = (await agents.list_steps("t")).steps
    assert step.step_name == approval.step_name and step.state is StepState.COMPLETED
    assert step.idempotency_key == approval.idempotency_key
    decisions = [e for e in await events_of(agents, "t") if e.kind is EventKind.DECISION]
    assert len(decisions) == 1 and decisions[0].author == "agent-1"
    assert decisions[0].cites is not None and decisions[0].cites.events == [approval.call_seq]
    assert approval.idempotency_key in decisions[0].payload
    await mirrored(agents, "t")
    (row,) = (await agents.list_decisions("t")).decisions
    assert row.cites.events == [approval.call_seq] and not row.needs_review


async def test_edit_runs_the_edited_arguments_and_a_bad_edit_is_refused(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    before = (await agents.get_task("t")).view
    assert before is not None
    bad = {"log": str(log), "to": "not an address", "subject": "deploy"}
    refused = await agents.approve("t", request.input_id, "edit", arguments=bad)
    assert refused.error is ErrorCode.INPUT_INVALID
    assert refused.message is not None and refused.message.startswith("arguments/to: ")
    missing = await agents.approve("t", request.input_id, "edit")
    assert missing.error is ErrorCode.INPUT_INVALID and "'arguments' is a required" in (
        missing.message or ""
    )
    after = (await agents.get_task("t")).view
    assert after is not None and (after.last_seq, after.writes) == (before.last_seq, before.writes)

    edited: dict[str, JsonValue] = {
        "log": str(log),
        "to": "team@example.com",
        "subject": "deploy",
        "copies": 2,
    }
    assert (await agents.approve("t", request.input_id, "edit", arguments=edited)).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    assert final.result.text == "the tools said: sent 'deploy' to team@example.com"
    assert request.approval is not None
    key = request.approval.idempotency_key
    assert effects(log) == [f"{key} mail team@example.com deploy x2"]
    calls = [e for e in await events_of(agents, "t") if e.kind is EventKind.TOOL_CALL]
    assert [json.loads(c.payload)["to"] for c in calls] == ["ops@example.com", "team@example.com"]
    assert len({c.call_id for c in calls}) == 1  # the edit answers the same call
    (step,) = (await agents.list_steps("t")).steps
    assert step.idempotency_key == key and step.attempt == 1


async def test_answer_instead_is_the_tool_result_and_nothing_runs(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    answered = await agents.approve("t", request.input_id, "answer", text="I mailed them myself")
    assert answered.recorded
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    assert final.result.text == "the tools said: I mailed them myself"
    assert effects(log) == []
    (step,) = (await agents.list_steps("t")).steps
    assert step.state is StepState.COMPLETED and step.result_validity.value == "valid"


async def test_ignore_tells_the_model_and_nothing_runs(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    assert (await agents.approve("t", request.input_id, "ignore")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    assert final.result.text == f"the tools said: {IGNORED}"
    assert effects(log) == []
    (step,) = (await agents.list_steps("t")).steps
    assert step.state is StepState.FAILED
    (decision,) = [e for e in await events_of(agents, "t") if e.kind is EventKind.DECISION]
    assert decision.payload.startswith("ignored the call of 'send_mail'")


async def test_the_predicate_on_the_arguments_decides_whether_to_ask(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = tmp_path / "pay.log"
    small = ("pay", {"log": str(log), "amount": 50})
    large = ("pay", {"log": str(log), "amount": 500})
    await agents.create_task("t", goal(small, large), agent=approval_spec())
    request = await asked(agents, "t")
    assert request.approval is not None
    assert json.loads(
        next(e.payload for e in await events_of(agents, "t") if e.seq == request.approval.call_seq)
    ) == {"log": str(log), "amount": 500}
    assert [line.split()[1:] for line in effects(log)] == [["pay", "50"]]  # ran unasked
    assert request.approval.description == "Pay an amount."  # the tool's description
    assert (await agents.approve("t", request.input_id, "accept")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    assert final.result.text == "the tools said: paid 50 | paid 500"
    requests = [e for e in await events_of(agents, "t") if e.kind is EventKind.INPUT_REQUEST]
    assert len(requests) == 1


async def test_a_call_the_check_refuses_fails_without_asking(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = tmp_path / "x.log"
    invalid = ("send_mail", {"log": str(log), "to": "ops@example.com"})  # no subject
    broken = ("pay_broken", {"log": str(log), "amount": 1})
    await agents.create_task("t", goal(invalid, broken), agent=approval_spec())
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    first, second = final.result.text.removeprefix("the tools said: ").split(" | ")
    assert first.startswith("ToolArgumentsInvalid: arguments of send_mail are invalid:")
    assert "subject" in first
    assert second == (
        "the approval check of pay_broken failed: RuntimeError: the predicate is broken"
    )
    kinds = {e.kind for e in await events_of(agents, "t")}
    assert EventKind.INPUT_REQUEST not in kinds and effects(log) == []
    assert {s.state for s in (await agents.list_steps("t")).steps} == {StepState.FAILED}


async def test_a_cancel_while_the_call_waits_runs_nothing(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    assert (await agents.cancel_task("t")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.CANCELLED
    assert final.closed_inputs == {request.input_id: "task cancelled"}
    late = await agents.approve("t", request.input_id, "accept")
    assert late.error is ErrorCode.TASK_CLOSED
    assert effects(log) == [] and (await agents.list_steps("t")).steps == []


async def test_the_cli_answers_an_approval(agents: ConversationHistory, tmp_path: Path) -> None:
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    project = ["--project", agents.project_id, "--json-output"]
    code, out = await cli("approve", "t", request.input_id, "--edit", "{}", *project)
    assert code == 1 and out["error"] == "input_invalid"
    code, out = await cli("approve", "t", request.input_id, "--answer", "done by hand", *project)
    assert code == 0 and out["recorded"] is True
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    assert final.result.text == "the tools said: done by hand"


def test_the_answer_schema_takes_each_choice_and_the_tools_references() -> None:
    parameters: dict[str, JsonValue] = {
        "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "required": ["item"],
    }
    schema = approval_schema(parameters)
    check_schema(schema)
    assert answer_error(schema, {"type": "accept"}) is None
    assert answer_error(schema, {"type": "ignore"}) is None
    assert answer_error(schema, {"type": "answer", "text": "x"}) is None
    assert answer_error(schema, {"type": "edit", "arguments": {"item": {"n": 1}}}) is None
    assert answer_error(schema, {"type": "edit", "arguments": {"item": {"n": "1"}}}) == (
        "arguments/item/n: '1' is not of type 'integer'"
    )
    assert "is a required property" in (answer_error(schema, {"type": "answer"}) or "")
    assert "is not one of" in (answer_error(schema, {"type": "run"}) or "")
    assert "Additional properties" in (answer_error(schema, {"type": "accept", "x": 1}) or "")


@pytest.mark.parametrize(
    ("choice", "said"),
    [
        (
            {"type": "edit", "arguments": {"to": "team@example.com", "subject": "deploy"}},
            "A person edited this call before it ran: it ran as send_mail with the arguments ",
        ),
        ({"type": "answer", "text": "I mailed them myself"}, "A person answered this call"),
        ({"type": "ignore"}, IGNORED),
    ],
    ids=["edit", "answer", "ignore"],
)
async def test_the_model_keeps_its_call_and_reads_what_a_person_did(
    agents: ConversationHistory, tmp_path: Path, choice: dict[str, Any], said: str
) -> None:
    """After an edit, an answer instead or an ignore, the chat messages the model is next
    shown hold its own call as it made it (the original arguments) and a tool message that
    says what a person did and what ran (LangChain's HITL edit notice, langchain#40463 for
    langchain#33787; openai-agents-python#2658 and microsoft/agent-framework#8503: a model not
    told why re-requested the call). Before, an edit rewrote the model's call to the edited
    arguments and an answer read as the tool's own result."""
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec("call-then-show"))
    request = await asked(agents, "t")
    arguments = choice.get("arguments")
    if arguments is not None:
        arguments = {"log": str(log), **arguments}
    answered = await agents.approve(
        "t", request.input_id, choice["type"], arguments=arguments, text=choice.get("text")
    )
    assert answered.recorded
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    messages = json.loads(final.result.text)
    (assistant,) = [m for m in messages if m["role"] == "assistant"]
    (call,) = assistant["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == mail(log)[1]  # as the model made it
    (tool,) = [m for m in messages if m["role"] == "tool"]
    assert tool["tool_call_id"] == call["id"] and tool["content"].startswith(said)
    ran = effects(log)
    if choice["type"] == "edit":
        assert "team@example.com" in tool["content"]
        assert tool["content"].endswith("sent 'deploy' to team@example.com")
        assert [line.split(" ", 1)[1] for line in ran] == ["mail team@example.com deploy x1"]
    else:
        assert ran == []
    if choice["type"] == "answer":
        assert tool["content"].endswith("I mailed them myself")


async def test_an_ignore_with_a_reason_tells_the_model_why(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """An ignore that gives a reason (``text``): nothing runs, the step ends ``failed`` and the
    model reads that the tool was not run and why (openai-agents-python#2658 and #3359: the
    rejection reason was dropped before the model saw it; microsoft/agent-framework#8503: a
    model not told why asked for the same call again). Before, the reason was dropped."""
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec("call-then-show"))
    request = await asked(agents, "t")
    reason = "the list is wrong: ask me for the right one"
    assert (await agents.approve("t", request.input_id, "ignore", text=reason)).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    (tool,) = [m for m in json.loads(final.result.text) if m["role"] == "tool"]
    assert tool["content"] == ignored_result(reason)
    assert tool["content"].startswith(IGNORED) and tool["content"].endswith(reason)
    assert effects(log) == []
    (step,) = (await agents.list_steps("t")).steps
    assert step.state is StepState.FAILED


def test_the_mail_tools_card_says_one_copy_and_copies() -> None:
    """The approval card of the tests' mail tool (the README's screenshot) read "(1 copies)"."""
    from tests.approval_tools import Mail, mail_description

    one = Mail(log="mail.log", to="ops@example.com", subject="release")
    assert mail_description(one) == "Sends **release** to `ops@example.com` (1 copy)."
    assert mail_description(one.model_copy(update={"copies": 3})).endswith("(3 copies).")
