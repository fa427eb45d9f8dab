"""Approvals bound to what they approve (``workflows.agents.approvals``, the
``approval-bound-to-call`` patch): the request names the digest of the exact call and a
decision naming another is refused ``approval_stale``; a request that expires closes
``expired`` and the model reads it; a tool that needs two approvers runs after two distinct
people accepted, each decision by its author. Against the local stack, on the agent tests'
worker (``tests.approval_tools``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_events
from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.contract import (
    AgentSpec,
    Event,
    EventKind,
    InputRequest,
    Role,
    StepState,
    TaskStatus,
    ToolInput,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.approval_tools import (
    APPROVAL_SCRIPTS,
    APPROVAL_TOOLS,
    approval_spec,
    effects,
    goal,
)
from tests.conftest import eventually
from tests.workflows.conftest import cli


def expected_digest(tool: str, arguments: dict[str, Any], key: str) -> str:
    """The digest as the docs define it, computed here: SHA-256 of the canonical JSON of the
    tool, the arguments and the key."""
    canonical = json.dumps(
        {"tool": tool, "idempotency_key": key, "arguments": arguments},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


async def open_request(
    history: ConversationHistory, task: str, input_id: str | None = None
) -> InputRequest:
    """The task's open approval request (``input_id``: that one), once it is asked."""
    found: list[InputRequest] = []

    async def waiting() -> bool:
        view = (await history.get_task(task)).view
        assert view is not None
        found[:] = [
            r
            for r in view.pending_inputs
            if r.approval is not None and input_id in (None, r.input_id)
        ]
        return bool(found)

    await eventually(waiting)
    return found[0]


async def scheduled_inputs(
    history: ConversationHistory, task: str, activity: str
) -> list[ToolInput]:
    """The inputs of the task's activities of type ``activity``, decoded from its Temporal
    history as a worker decodes them."""
    handle = history.client.get_workflow_handle(history.workflow_id(task))
    found: list[ToolInput] = []
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        scheduled = event.activity_task_scheduled_event_attributes
        if scheduled.activity_type.name == activity:
            (decoded,) = await DATA_CONVERTER.decode(scheduled.input.payloads, [ToolInput])
            found.append(decoded)
    return found


def person(history: ConversationHistory, name: str) -> ConversationHistory:
    """The same project's client as the person ``name`` (the decision's author)."""
    return ConversationHistory(
        history.client,
        project_id=history.project_id,
        agent_id=name,
        task_queue=history.task_queue,
        graph=history.graph,
    )


async def event_count(history: ConversationHistory, task: str) -> int:
    return len((await history.list_events(task, limit=200)).events)


async def test_the_request_names_the_calls_digest_and_a_stale_decision_is_refused(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """The request's digest is the call's (computed here from the call's tool, arguments and
    key); an answer without one, or naming another call's, is refused with nothing recorded
    (``input_invalid``, ``approval_stale``); by signal the stale one is recorded rejected and
    the request stays open; the right digest runs the call once."""
    log = tmp_path / "mail.log"
    arguments = {"log": str(log), "to": "ops@example.com", "subject": "deploy"}
    await agents.create_task("t", goal(("send_mail", arguments)), agent=approval_spec())
    request = await open_request(agents, "t")
    ask = request.approval
    assert ask is not None and ask.approvers == 1 and request.deadline is None
    assert ask.digest == expected_digest("send_mail", arguments, ask.idempotency_key)
    other = expected_digest(
        "send_mail", {**arguments, "to": "all@example.com"}, ask.idempotency_key
    )
    before = await event_count(agents, "t")
    unbound = await agents.respond("t", {"type": "accept"}, input_id=request.input_id)
    assert unbound.error is ErrorCode.INPUT_INVALID and "'digest'" in (unbound.message or "")
    stale = await agents.approve("t", request.input_id, "accept", digest=other)
    assert (stale.recorded, stale.error) == (False, ErrorCode.APPROVAL_STALE)
    assert other[:12] in (stale.message or "") and ask.digest[:12] in (stale.message or "")
    assert await event_count(agents, "t") == before  # refused in the validator: nothing
    signalled = await agents.submit_input(
        "t", {"type": "accept", "digest": other}, input_id=request.input_id
    )
    assert signalled.recorded

    async def rejected() -> bool:
        events = (await agents.list_events("t", limit=200)).events
        return any(e.kind is EventKind.INPUT_RESPONSE and e.name == "rejected" for e in events)

    await eventually(rejected)
    assert (await open_request(agents, "t")).input_id == request.input_id  # still open
    assert effects(log) == []
    shown = await agents.approve("t", request.input_id, "accept", digest=ask.digest[:12])
    assert shown.recorded, shown
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE
    assert effects(log) == [f"{ask.idempotency_key} mail ops@example.com deploy x1"]
    # what ran is what was approved (pydantic-ai#6968: the approver saw the model's arguments
    # while the tool ran rewritten ones): the tool activity's input, as the history holds it
    ran = await scheduled_inputs(agents, "t", "tool.send_mail")
    assert [
        expected_digest("send_mail", json.loads(i.arguments or ""), i.idempotency_key) for i in ran
    ] == [ask.digest]


async def test_an_expired_request_closes_and_the_model_reads_it(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """``page_oncall`` expires its requests after 2 s (a workflow timer): unanswered, the
    request closes (its ``input_timeout``), the call does not run, no decision is recorded, the
    step fails and the model reads that the request expired; an answer after it runs nothing."""
    log = tmp_path / "page.log"
    arguments = {"log": str(log), "to": "oncall@example.com", "subject": "disk full"}
    await agents.create_task("t", goal(("page_oncall", arguments)), agent=approval_spec())
    request = await open_request(agents, "t")
    assert request.deadline is not None and request.approval is not None
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    assert "the approval request expired at" in final.result.text
    assert "the tool was not run" in final.result.text
    (step,) = (await agents.list_steps("t")).steps
    assert step.state is StepState.FAILED
    events = (await agents.list_events("t", limit=200)).events
    closed = [e.payload for e in events if e.kind is EventKind.ERROR and e.name == "input_timeout"]
    assert closed == [request.input_id]
    assert not [e for e in events if e.kind is EventKind.DECISION]
    late = await agents.approve("t", request.input_id, "accept")
    assert (late.recorded, late.error) == (False, ErrorCode.TASK_CLOSED)
    assert effects(log) == []


async def test_a_call_that_needs_two_approvers_runs_after_two_distinct_people_accepted(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """``wire`` needs two approvers: ann's accept is a decision by ann and a second request
    naming her (nothing runs yet); her second accept is refused ``approver_repeated``; bob's
    accept runs the call once, under the key the first request named."""
    log = tmp_path / "wire.log"
    ann, bob = person(agents, "ann"), person(agents, "bob")
    await agents.create_task(
        "t", goal(("wire", {"log": str(log), "amount": 500})), agent=approval_spec()
    )
    first = await open_request(agents, "t")
    ask = first.approval
    assert ask is not None and (ask.approvers, ask.approved_by) == (2, [])
    assert first.deadline is not None  # wire's requests expire after an hour
    choices = first.json_schema["properties"]["type"]["enum"]  # type: ignore[index,call-overload]
    assert choices == ["accept", "answer", "ignore"]  # an edited call would need its own approvals
    assert (await ann.approve("t", first.input_id, "accept")).recorded
    second = await open_request(agents, "t", f"{first.input_id}-2")
    assert second.approval is not None and second.approval.approved_by == ["ann"]
    assert second.approval.digest == ask.digest and second.deadline == first.deadline
    view = (await agents.get_task("t")).view
    assert view is not None and view.status is TaskStatus.AWAITING_INPUT
    assert effects(log) == []
    again = await ann.approve("t", second.input_id, "accept")
    assert (again.recorded, again.error) == (False, ErrorCode.APPROVER_REPEATED)
    assert (await bob.approve("t", second.input_id, "accept")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE
    assert effects(log) == [f"{ask.idempotency_key} wire 500"]
    events = (await agents.list_events("t", limit=200)).events
    decisions = [e for e in events if e.kind is EventKind.DECISION]
    assert [d.author for d in decisions] == ["ann", "bob"]
    assert "1 of 2 approvals" in decisions[0].payload
    assert ask.idempotency_key in decisions[1].payload


async def test_one_person_under_two_spellings_is_one_approver(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """``wire`` needs two approvers (palantir/policy-bot#33: approvals counted by a login's
    spelling let one person approve twice). After ann's accept, the same person as ``"Ann "``
    is refused ``approver_repeated`` by update, and as ``"ANN"`` in full-width letters with a
    zero-width space is recorded ``rejected`` by signal, the request still open and nothing
    run; bob's accept runs the call once. Before the fix both counted as a second person and
    the call ran on ann's word alone."""
    log = tmp_path / "wire.log"
    await agents.create_task(
        "t", goal(("wire", {"log": str(log), "amount": 500})), agent=approval_spec()
    )
    first = await open_request(agents, "t")
    assert first.approval is not None and first.approval.digest is not None
    assert (await person(agents, "ann").approve("t", first.input_id, "accept")).recorded
    second = await open_request(agents, "t", f"{first.input_id}-2")
    again = await person(agents, "Ann ").approve("t", second.input_id, "accept")
    assert (again.recorded, again.error) == (False, ErrorCode.APPROVER_REPEATED)
    assert "'Ann ' accepted this call already (as 'ann'" in (again.message or "")
    wide = "\uff21\uff2e\u200b\uff2e"  # ANN in full-width letters, a zero-width space inside
    accept: dict[str, JsonValue] = {"type": "accept", "digest": first.approval.digest}
    signalled = await person(agents, wide).submit_input("t", accept, input_id=second.input_id)
    assert signalled.recorded

    async def rejected() -> list[Event]:
        events = (await agents.list_events("t", limit=200)).events
        return [e for e in events if e.kind is EventKind.INPUT_RESPONSE and e.name == "rejected"]

    async def any_rejected() -> bool:
        return bool(await rejected())

    await eventually(any_rejected)
    (refusal,) = await rejected()
    assert refusal.author == wide
    assert json.loads(refusal.payload)["error"].startswith("approver_repeated: ")
    assert (await open_request(agents, "t")).input_id == second.input_id  # still open
    assert effects(log) == []
    assert (await person(agents, "bob").approve("t", second.input_id, "accept")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE
    assert effects(log) == [f"{first.approval.idempotency_key} wire 500"]
    events = (await agents.list_events("t", limit=200)).events
    assert [d.author for d in events if d.kind is EventKind.DECISION] == ["ann", "bob"]


async def test_an_old_clients_accept_without_the_digest_is_refused_where_it_can_read_it(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """The answer's shape changed (``approval-bound-to-call``: the digest is required). A
    client written before it: by update it is refused ``input_invalid`` naming the field; by
    signal it is told ``recorded`` (delivered), and ``answer_outcome`` of its request id reads
    ``rejected`` with the same reason from the task's log, the request still open; the accept
    with the digest then reads ``taken``."""
    log = tmp_path / "mail.log"
    arguments = {"log": str(log), "to": "ops@example.com", "subject": "old client"}
    await agents.create_task("t", goal(("send_mail", arguments)), agent=approval_spec())
    request = await open_request(agents, "t")
    assert request.approval is not None and request.approval.digest is not None
    old: dict[str, JsonValue] = {"type": "accept"}
    by_update = await agents.respond("t", old, input_id=request.input_id)
    assert (by_update.recorded, by_update.error) == (False, ErrorCode.INPUT_INVALID)
    assert "'digest' is a required property" in (by_update.message or "")
    assert (await agents.answer_outcome("t", "old-1")).outcome == "pending"
    sent = await agents.submit_input("t", old, input_id=request.input_id, request_id="old-1")
    assert sent.recorded  # delivered: a signal says nothing of its fate

    async def decided() -> bool:
        return (await agents.answer_outcome("t", "old-1")).outcome != "pending"

    await eventually(decided)
    outcome = await agents.answer_outcome("t", "old-1")
    assert (outcome.found, outcome.outcome, outcome.input_id) == (
        True,
        "rejected",
        request.input_id,
    )
    assert "'digest' is a required property" in (outcome.error or "")
    assert outcome.event is not None and outcome.event.request_id == "old-1"
    assert (await open_request(agents, "t")).input_id == request.input_id  # still open
    assert effects(log) == []
    new: dict[str, JsonValue] = {"type": "accept", "digest": request.approval.digest}
    assert (
        await agents.submit_input("t", new, input_id=request.input_id, request_id="new-1")
    ).recorded
    await agents.wait_task("t")
    taken = await agents.answer_outcome("t", "new-1")
    assert (taken.outcome, taken.input_id, taken.error) == ("taken", request.input_id, None)
    assert len(effects(log)) == 1
    assert not (await agents.answer_outcome("missing", "new-1")).found


async def test_the_cli_approves_the_call_it_was_shown(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """``agent-tasks approve --digest``: another call's digest is refused ``approval_stale``
    (exit 1), the shown one's first 12 characters accept the call."""
    log = tmp_path / "mail.log"
    arguments = {"log": str(log), "to": "ops@example.com", "subject": "deploy"}
    await agents.create_task("t", goal(("send_mail", arguments)), agent=approval_spec())
    request = await open_request(agents, "t")
    assert request.approval is not None and request.approval.digest is not None
    project = ["--project", agents.project_id, "--json-output"]
    code, out = await cli(
        "approve", "t", request.input_id, "--accept", "--digest", "f" * 64, *project
    )
    assert (code, out["error"]) == (1, "approval_stale")
    shown = request.approval.digest[:12]
    code, out = await cli("approve", "t", request.input_id, "--accept", "--digest", shown, *project)
    assert code == 0 and out["recorded"] is True
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE
    assert len(effects(log)) == 1


async def test_a_decision_about_one_call_never_decides_the_next(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """A decision re-delivered after its call was decided (langgraph#8837: a consumed resume
    value auto-answers a later interrupt; auxilia#307's review: older decisions resume the
    wrong tool calls) names no request, so it binds to the oldest open one, the next call's:
    its digest is the first call's, so it is refused ``approval_stale`` (by update) or
    recorded rejected (by signal), and the next call waits for its own decision."""
    log = tmp_path / "mail.log"
    first = {"log": str(log), "to": "ops@example.com", "subject": "one"}
    second = {"log": str(log), "to": "ops@example.com", "subject": "two"}
    calls = [("send_mail", first), ("send_mail", second)]
    await agents.create_task("t", goal(*calls), agent=approval_spec())
    asked = await open_request(agents, "t")
    assert asked.approval is not None and asked.approval.digest is not None
    decision: dict[str, JsonValue] = {"type": "accept", "digest": asked.approval.digest}
    assert (await agents.respond("t", decision, input_id=asked.input_id)).recorded
    following = await open_request(agents, "t")  # the update took the first: the second's
    assert following.input_id != asked.input_id
    assert following.approval is not None and following.approval.digest != decision["digest"]
    again = await agents.respond("t", decision)  # no input id: the oldest open request
    assert (again.recorded, again.error) == (False, ErrorCode.APPROVAL_STALE)
    assert (await agents.submit_input("t", decision)).recorded  # by signal: rejected

    async def rejected() -> bool:
        events = (await agents.list_events("t", limit=200)).events
        return any(e.kind is EventKind.INPUT_RESPONSE and e.name == "rejected" for e in events)

    await eventually(rejected)
    assert (await open_request(agents, "t")).input_id == following.input_id
    assert [line.split(" ", 1)[1] for line in effects(log)] == ["mail ops@example.com one x1"]
    assert (await agents.approve("t", following.input_id, "ignore")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE
    assert len(effects(log)) == 1


async def test_two_approvers_and_an_expiry_fail_closed(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """``deploy`` needs two approvers within 3 s: ann accepts, nobody else does; the request
    expires, nothing runs and the model reads it (conductai#1558's two-person rule with a
    timeout that fails closed)."""
    log = tmp_path / "deploy.log"
    arguments = {"log": str(log), "to": "ops@example.com", "subject": "v2"}
    await agents.create_task("t", goal(("deploy", arguments)), agent=approval_spec())
    first = await open_request(agents, "t")
    assert (await person(agents, "ann").approve("t", first.input_id, "accept")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    assert "the approval request expired at" in final.result.text
    events = (await agents.list_events("t", limit=200)).events
    decisions = [e for e in events if e.kind is EventKind.DECISION]
    assert [d.author for d in decisions] == ["ann"] and "1 of 2 approvals" in decisions[0].payload
    closed = [e.payload for e in events if e.kind is EventKind.ERROR and e.name == "input_timeout"]
    assert closed == [f"{first.input_id}-2"]
    assert effects(log) == []


async def continued_as_new_while_asked(
    env: WorkflowEnvironment, graph: TaskGraph, project_id: str, agent: AgentSpec, goal_text: str
) -> tuple[InputRequest, str, list[Event]]:
    """On ``env`` (continue-as-new suggested at 60 events): ann accepts the task's ``wire``,
    stale answers by signal (each recorded rejected) grow the run until it continues as new
    while the second request waits; then ann's second accept (refused) and bob's. Returns the
    first request, the task's final status ("still waiting" a minute after bob's accept) and
    its events."""
    client = env.client
    queue = f"bound-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="ops", task_queue=queue, graph=graph
    )
    ann, bob = person(history, "ann"), person(history, "bob")
    async with build_worker(client, graph, queue, tools=APPROVAL_TOOLS, scripts=APPROVAL_SCRIPTS):
        await history.create_task("t", goal_text, agent=agent)
        first = await open_request(history, "t")
        assert (await ann.approve("t", first.input_id, "accept")).recorded
        second = await open_request(history, "t", f"{first.input_id}-2")
        stale: dict[str, JsonValue] = {"type": "accept", "digest": "0" * 64}
        for _ in range(30):  # about 4 history events each: past the 60 of the suggestion
            assert (await bob.submit_input("t", stale, input_id=second.input_id)).recorded

        async def continued() -> bool:
            view = (await history.get_task("t")).view
            return view is not None and view.runs >= 2

        await eventually(continued, within=60)
        waiting = await open_request(history, "t", second.input_id)
        assert waiting.approval is not None and waiting.approval.approved_by == ["ann"]
        again = await ann.approve("t", second.input_id, "accept")
        assert (again.recorded, again.error) == (False, ErrorCode.APPROVER_REPEATED)
        assert (await bob.approve("t", second.input_id, "accept")).recorded
        try:
            done = await asyncio.wait_for(history.wait_task("t"), 60)
            status = "" if done is None else done.status.value
        except TimeoutError:
            status = "still waiting"
        events = await all_events(history, "t")
    return first, status, events


async def test_the_approvals_so_far_survive_continue_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """Agent code's step of ``wire`` waits on its second request while the run continues as
    new: the next run waits on the same request, which still names ann (her second accept is
    refused ``approver_repeated``); bob's accept runs the call once, under the first
    request's key."""
    log = tmp_path / "wire.log"
    agent = AgentSpec(
        name="wire_once", tools=["wire"], input={"args": {"log": str(log), "amount": 500}}
    )
    first, status, events = await continued_as_new_while_asked(
        low_limit_env, graph, project_id, agent, "wire once"
    )
    assert first.approval is not None
    assert status == "done"
    assert effects(log) == [f"{first.approval.idempotency_key} wire 500"]
    decisions = [e for e in events if e.kind is EventKind.DECISION]
    assert [d.author for d in decisions] == ["ann", "bob"]


async def test_the_tool_loop_resumes_a_call_asked_before_continue_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """The tool loop parked for continue-as-new while its ``wire`` call waits on its second
    request (ann accepted, two approvers) resumes that call in its next run before it calls
    the model (``resume-open-calls``): the same request still names ann, bob's accept runs
    the call once under the first request's key, and the model is asked once before the
    call's result and once after it (its answer reports the wire)."""
    log = tmp_path / "wire.log"
    text = goal(("wire", {"log": str(log), "amount": 500}))
    first, status, events = await continued_as_new_while_asked(
        low_limit_env, graph, project_id, approval_spec(), text
    )
    assert first.approval is not None
    assert status == "done"
    assert effects(log) == [f"{first.approval.idempotency_key} wire 500"]
    calls = [e for e in events if e.kind is EventKind.TOOL_CALL]
    assert [c.name for c in calls] == ["wire"]
    requests = [e for e in events if e.kind is EventKind.INPUT_REQUEST]
    assert len(requests) == 2  # ann's request and the second one, no request of a new call
    decisions = [e for e in events if e.kind is EventKind.DECISION]
    assert [d.author for d in decisions] == ["ann", "bob"]
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    asked = [e.seq for e in events if e.kind is EventKind.MESSAGE and e.role is Role.ASSISTANT]
    assert len([seq for seq in asked if seq < result.seq]) == 1
    assert len([seq for seq in asked if seq > result.seq]) == 1
    assert result.payload == "wired 500"


async def test_the_calls_of_a_resumed_turn_that_ended_before_continue_as_new_stay_ended(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """One turn of three calls: a ``pay`` of 5 (run unasked), a call of a tool that does not
    exist (failed) and a ``wire`` that waits for its second approver while the run continues
    as new. The next run resumes only the ``wire``: the pay's effect happens once, the failed
    call is not called again (one ``tool_call`` event each), and the model reads three
    results."""
    log = tmp_path / "effects.log"
    args = {"log": str(log), "amount": 5}
    text = goal(("pay", args), ("no_such_tool", {}), ("wire", {**args, "amount": 500}))
    first, status, events = await continued_as_new_while_asked(
        low_limit_env, graph, project_id, approval_spec(), text
    )
    assert first.approval is not None
    assert status == "done"
    pay_key = effects(log)[0].split(" ")[0]
    assert effects(log) == [f"{pay_key} pay 5", f"{first.approval.idempotency_key} wire 500"]
    calls = [e.name for e in events if e.kind is EventKind.TOOL_CALL]
    assert calls == ["pay", "no_such_tool", "wire"]
    results = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert [r.payload for r in results][::2] == ["paid 5", "wired 500"]
    assert "no tool 'no_such_tool'" in results[1].payload
