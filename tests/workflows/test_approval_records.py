"""What an approval leaves in the record (docs/page.md, "Approval before a tool runs"): the log
keeps the tool's own result while only the model's rendering carries the person's notice, an
edit is validated again by the tool's own model when it runs (a custom validator's failure
fails the step), the CLI's ``--accept`` and ``--ignore``, and the activities an approval adds
to the task's Temporal history."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import BaseModel, field_validator
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from typer.testing import CliRunner

from agent_tasks.activities.tools import ToolContext, tool
from agent_tasks.activities.transcript import EDITED
from agent_tasks.cli import app
from agent_tasks.contract import (
    MIRROR_ACTIVITY,
    AgentSpec,
    EventKind,
    InputRequest,
    ModelSpec,
    StepState,
    TaskStatus,
)
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from agent_tasks.workflows.agents import AgentContext, agent
from agent_tasks.workflows.agents.approvals import APPROVAL_ACTIVITY, IGNORED
from agent_tasks.workflows.agents.steps import MODEL_ACTIVITY
from tests.approval_tools import APPROVAL_SCRIPTS, _effect, approval_spec, effects, goal
from tests.workflows.conftest import cli
from tests.workflows.test_approvals import asked, events_of, mail


async def test_the_log_keeps_the_tools_own_result_and_only_the_rendering_has_the_notice(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """An edited call: the ``tool_result`` event holds what the tool returned, word for word;
    the model (``call-then-show`` answers with the chat it was shown) reads the notice that a
    person edited the call, then that same result."""
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec("call-then-show"))
    request = await asked(agents, "t")
    edited = {"log": str(log), "to": "team@example.com", "subject": "deploy"}
    assert (await agents.approve("t", request.input_id, "edit", arguments=edited)).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    tool_said = "sent 'deploy' to team@example.com"
    (result,) = [e for e in await events_of(agents, "t") if e.kind is EventKind.TOOL_RESULT]
    assert result.payload == tool_said
    shown = [m["content"] for m in json.loads(final.result.text) if m["role"] == "tool"]
    assert len(shown) == 1
    assert shown[0].startswith("A person edited this call before it ran: it ran as send_mail")
    assert shown[0].endswith(f"(not as you called it). Its result:\n{tool_said}")
    assert shown[0] != result.payload and EDITED.split(":", 1)[0] not in result.payload


class Note(BaseModel):
    """Arguments of ``send_note``: its validator refuses one address, which no JSON Schema
    says (so an edit to it passes the check on arrival)."""

    log: str
    to: str

    @field_validator("to")
    @classmethod
    def not_blocked(cls, value: str) -> str:
        if value == "blocked@example.com":
            raise ValueError("this address is blocked")
        return value


@tool("send_note", arguments=Note, idempotent=False, description="Send a note.", approval=True)
async def send_note(args: Note, context: ToolContext) -> str:
    """Always asks first; writes a line per run to ``args.log``."""
    _effect(args.log, context, f"note {args.to}")
    return f"noted {args.to}"


@pytest.fixture
async def notes(
    client: Client, graph: TaskGraph, project_id: str
) -> AsyncIterator[ConversationHistory]:
    """A ``ConversationHistory`` on a worker of its own whose only tool is ``send_note``."""
    queue = f"notes-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, graph, queue, tools=[send_note], scripts=APPROVAL_SCRIPTS):
        yield ConversationHistory(
            client, project_id=project_id, agent_id="agent-1", task_queue=queue, graph=graph
        )


async def test_an_edit_a_custom_validator_refuses_is_taken_and_fails_the_step(
    notes: ConversationHistory, tmp_path: Path
) -> None:
    """page.md: the tool's model validates the edited arguments again when the call runs. An
    edit that the answer's JSON Schema takes but the tool's validator refuses is recorded (a
    decision, a second ``tool_call``); the step then fails with the validator's message, the
    tool never runs, and the model reads why."""
    log = tmp_path / "note.log"
    spec = AgentSpec(
        tools=["send_note"], model=ModelSpec(provider="scripted", model="call-then-report")
    )
    call = ("send_note", {"log": str(log), "to": "ops@example.com"})
    await notes.create_task("t", goal(call), agent=spec)
    request = await asked(notes, "t")
    blocked = {"log": str(log), "to": "blocked@example.com"}
    assert (await notes.approve("t", request.input_id, "edit", arguments=blocked)).recorded
    final = await notes.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    assert effects(log) == []
    (step,) = (await notes.list_steps("t")).steps
    assert step.state is StepState.FAILED
    events = await events_of(notes, "t")
    calls = [json.loads(e.payload)["to"] for e in events if e.kind is EventKind.TOOL_CALL]
    assert calls == ["ops@example.com", "blocked@example.com"]
    assert [e.kind for e in events].count(EventKind.DECISION) == 1
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert "arguments of send_note are invalid:" in result.payload
    assert "this address is blocked" in result.payload
    assert "this address is blocked" in final.result.text


@pytest.mark.parametrize(
    "choice", [["--accept"], ["--ignore"], ["--ignore", "--reason", "the list is frozen"]]
)
async def test_the_cli_accepts_and_ignores_an_approval(
    agents: ConversationHistory, tmp_path: Path, choice: list[str]
) -> None:
    """``agent-tasks approve NAME INPUT_ID --accept`` runs the call (one line, under the key the
    request named); ``--ignore`` runs nothing and the step fails, and ``--reason`` with it is
    what the model reads after the ignore notice; each is one decision citing the call, by the
    CLI's ``--agent``."""
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    assert request.approval is not None
    flags = ["--project", agents.project_id, "--agent", "ops-cli", "--json-output"]
    code, out = await cli("approve", "t", request.input_id, *choice, *flags)
    assert code == 0 and out["recorded"] is True, out
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    (step,) = (await agents.list_steps("t")).steps
    key = request.approval.idempotency_key
    if choice == ["--accept"]:
        assert final.result.text == "the tools said: sent 'deploy' to ops@example.com"
        assert effects(log) == [f"{key} mail ops@example.com deploy x1"]
        assert step.state is StepState.COMPLETED and step.idempotency_key == key
    else:
        said = IGNORED if len(choice) == 1 else f"{IGNORED}; their reason: the list is frozen"
        assert final.result.text == f"the tools said: {said}"
        assert effects(log) == [] and step.state is StepState.FAILED
    (decision,) = [e for e in await events_of(agents, "t") if e.kind is EventKind.DECISION]
    assert decision.author == "ops-cli"
    assert decision.cites is not None and decision.cites.events == [request.approval.call_seq]
    # the person's choice as recorded: the reason is kept with it, in the answer's event
    (answered,) = [
        e for e in await events_of(agents, "t") if e.kind is EventKind.INPUT_RESPONSE
    ]  # fmt: skip
    recorded = json.loads(answered.payload)
    assert recorded["type"] == choice[0].removeprefix("--")
    assert recorded.get("text") == (choice[2] if len(choice) == 3 else None)


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        (["--accept", "--reason", "why"], "a reason goes with --ignore"),
        (["--ignore", "--reason", "  "], "an empty reason"),
    ],
)
async def test_the_cli_refuses_a_reason_without_ignore_or_empty(
    agents: ConversationHistory, tmp_path: Path, flags: list[str], refusal: str
) -> None:
    """``--reason`` goes with ``--ignore`` only, and not empty: refused by the CLI (exit 2, the
    reason named), nothing sent: the request stays open and nothing ran."""
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    args = ["approve", "t", request.input_id, *flags, "--project", agents.project_id]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and refusal in result.output, result.output
    view = (await agents.get_task("t")).view
    assert view is not None and [r.input_id for r in view.pending_inputs] == [request.input_id]
    assert effects(log) == []
    assert [e for e in await events_of(agents, "t") if e.kind is EventKind.DECISION] == []


async def activity_types(client: Client, workflow_id: str) -> Counter[str]:
    """How many times each activity type was scheduled in the workflow's (one run) history."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )


async def test_an_approval_costs_one_activity_the_check_and_the_wait(
    agents: ConversationHistory, client: Client, tmp_path: Path
) -> None:
    """page.md: the cost of an approval is one activity (the check) and the wait. ``pay`` of
    500 (asked, accepted) and ``pay`` of 50 (its predicate lets it through unasked) schedule
    the same activities but the mirror's: the check once each, the tool once, the model
    twice; asking, answering and the decision schedule none."""
    log = tmp_path / "pay.log"
    await agents.create_task("asked", goal(("pay", {"log": str(log), "amount": 500})),
                             agent=approval_spec())  # fmt: skip
    request = await asked(agents, "asked")
    assert (await agents.approve("asked", request.input_id, "accept")).recorded
    await agents.create_task("unasked", goal(("pay", {"log": str(log), "amount": 50})),
                             agent=approval_spec())  # fmt: skip
    for task in ("asked", "unasked"):
        final = await agents.wait_task(task)
        assert final is not None and final.status is TaskStatus.DONE
    assert sorted(line.split()[-1] for line in effects(log)) == ["50", "500"]
    counted = {}
    for task in ("asked", "unasked"):
        types = await activity_types(client, agents.workflow_id(task))
        counted[task] = {name: n for name, n in types.items() if name != MIRROR_ACTIVITY}
    assert counted["asked"] == counted["unasked"]
    assert counted["asked"][APPROVAL_ACTIVITY] == 1
    assert counted["asked"]["tool.pay"] == 1
    assert counted["asked"][MODEL_ACTIVITY] == 2


@pytest.mark.parametrize("choice", ["edit", "answer", "ignore"])
async def test_each_choice_is_a_decision_citing_the_call_and_the_model_reads_the_docs_words(
    agents: ConversationHistory, tmp_path: Path, choice: str
) -> None:
    """page.md's table: an edit, an answer instead and an ignore with a reason are each one
    ``decision`` citing the call, by whoever answered; the model reads its call and the
    notice in the page's words; an answer's ``tool_result`` in the log is the text itself."""
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec("call-then-show"))
    request = await asked(agents, "t")
    assert request.approval is not None
    edited = {"log": str(log), "to": "team@example.com", "subject": "deploy"}
    answer = {
        "edit": {"arguments": edited},
        "answer": {"text": "mailed by hand"},
        "ignore": {"text": "not today"},
    }[choice]
    assert (await agents.approve("t", request.input_id, choice, **answer)).recorded  # type: ignore[arg-type]
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    messages = json.loads(final.result.text)
    (assistant,) = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    (called,) = assistant["tool_calls"]
    assert json.loads(called["function"]["arguments"])["to"] == "ops@example.com"
    (shown,) = [m["content"] for m in messages if m["role"] == "tool"]
    expected = {
        "edit": "A person edited this call before it ran: it ran as send_mail with the arguments",
        "answer": "A person answered this call instead of running it: the tool was not run. "
        "Their answer:\nmailed by hand",
        "ignore": "a person chose not to run this call: the tool was not run; their reason: "
        "not today",
    }[choice]
    assert shown.startswith(expected), shown
    events = await events_of(agents, "t")
    (decision,) = [e for e in events if e.kind is EventKind.DECISION]
    assert decision.author == "agent-1"
    assert decision.cites is not None and decision.cites.events == [request.approval.call_seq]
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    if choice == "answer":
        assert result.payload == "mailed by hand"


@agent("note_step")
async def note_step(ctx: AgentContext) -> str:
    """Agent code (not the tool loop) whose one step calls ``send_note``; returns its
    outcome."""
    outcome = await ctx.step("note", "send_note", {"log": ctx.input["log"], "to": "a@b.c"})
    return f"{outcome.state.value}: {outcome.text}"


async def test_agent_codes_own_step_of_an_approval_tool_asks_first(
    notes: ConversationHistory, tmp_path: Path
) -> None:
    """page.md: any agent code's ``ctx.step`` of a tool that needs approval asks, not the tool
    loop's only: nothing runs before the answer, then the accepted call runs under the key the
    request named."""
    log = tmp_path / "note.log"
    spec = AgentSpec(name="note_step", tools=["send_note"], input={"log": str(log)})
    assert (await notes.create_task("t", "one note", agent=spec)).recorded
    request = await asked(notes, "t")
    assert request.approval is not None and request.approval.tool == "send_note"
    assert request.approval.step_name == "note"
    assert effects(log) == [] and (await notes.list_steps("t")).steps == []
    assert (await notes.approve("t", request.input_id, "accept")).recorded
    final = await notes.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    assert final.result.text == "completed: noted a@b.c"
    assert effects(log) == [f"{request.approval.idempotency_key} note a@b.c"]


async def test_the_check_fails_a_call_with_the_message_the_tool_itself_fails_it_with(
    notes: ConversationHistory, tmp_path: Path
) -> None:
    """page.md, step 2: arguments the tool's model refuses fail the step without asking,
    "with the message the tool would fail with". The same refused arguments, once as the
    model's call (refused by the check) and once as a person's edit (refused by the tool when
    it runs), give the same step result."""
    log = tmp_path / "note.log"
    model = ModelSpec(provider="scripted", model="call-then-report")
    spec = AgentSpec(tools=["send_note"], model=model)
    blocked = {"log": str(log), "to": "blocked@example.com"}
    await notes.create_task("checked", goal(("send_note", blocked)), agent=spec)
    await notes.create_task("edited", goal(("send_note", {**blocked, "to": "a@b.c"})), agent=spec)
    request = await asked(notes, "edited")
    assert (await notes.approve("edited", request.input_id, "edit", arguments=blocked)).recorded
    results = {}
    for task in ("checked", "edited"):
        final = await notes.wait_task(task)
        assert final is not None and final.status is TaskStatus.DONE
        events = await events_of(notes, task)
        (result,) = [e.payload for e in events if e.kind is EventKind.TOOL_RESULT]
        results[task] = result
        assert [s.state for s in (await notes.list_steps(task)).steps] == [StepState.FAILED]
    assert "this address is blocked" in results["checked"]
    assert effects(log) == []
    assert results["checked"] == results["edited"]


async def asked_again(history: ConversationHistory, task: str) -> list[InputRequest]:
    """The task's open requests as the view (a query, so a replay on the running worker)
    gives them."""
    view = (await history.get_task(task)).view
    assert view is not None
    return view.pending_inputs


@tool("send_note", arguments=Note, idempotent=False, description="Send a note.", approval=False)
async def send_note_unasked(args: Note, context: ToolContext) -> str:
    """``send_note`` as a later deploy has it: no approval."""
    _effect(args.log, context, f"note {args.to}")
    return f"noted {args.to}"


async def test_a_worker_deployed_later_with_another_predicate_decides_the_call_as_decided(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """page.md, step 2: the predicate's outcome is the check activity's result in the history,
    so a worker deployed later whose ``send_note`` needs no approval replays the asked call as
    asked: the request stays open, the accept is taken and the call runs once, under the key
    the request named."""
    queue = f"notes-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="agent-1", task_queue=queue, graph=graph
    )
    log = tmp_path / "note.log"
    model = ModelSpec(provider="scripted", model="call-then-report")
    spec = AgentSpec(tools=["send_note"], model=model)
    call = ("send_note", {"log": str(log), "to": "ops@example.com"})
    async with build_worker(client, graph, queue, tools=[send_note], scripts=APPROVAL_SCRIPTS):
        assert (await history.create_task("t", goal(call), agent=spec)).recorded
        request = await asked(history, "t")
    assert request.approval is not None
    later = [send_note_unasked]
    async with build_worker(client, graph, queue, tools=later, scripts=APPROVAL_SCRIPTS):
        assert [r.input_id for r in (await asked_again(history, "t"))] == [request.input_id]
        assert (await history.approve("t", request.input_id, "accept")).recorded
        final = await history.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    assert final.result.text == "the tools said: noted ops@example.com"
    assert effects(log) == [f"{request.approval.idempotency_key} note ops@example.com"]
