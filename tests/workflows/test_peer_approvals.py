"""Public bug reports of peer approval and human-in-the-loop tools, and of Temporal on closed
workflows, reproduced against ours (issue 44's hunt): each test names its report, what the
peer did, and what ours must do. Against the local stack, on the agent tests' worker
(``tests.agent_tools``, ``tests.approval_tools``) or a worker a test starts and stops."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from pydantic import JsonValue
from temporalio.client import Client

from agent_tasks.contract import AgentSpec, EventKind, InputRequest, TaskStatus
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.approval_tools import approval_spec, effects, goal
from tests.conftest import eventually
from tests.workflows.test_approval_binding import open_request, person


async def asked(history: ConversationHistory, task: str, input_id: str) -> InputRequest:
    """The task's open request ``input_id``, once it is asked."""
    found: list[InputRequest] = []

    async def waiting() -> bool:
        view = (await history.get_task(task)).view
        found[:] = (
            [] if view is None else [r for r in view.pending_inputs if r.input_id == input_id]
        )
        return bool(found)

    await eventually(waiting)
    return found[0]


async def test_one_persons_two_accepts_at_once_are_one_approval(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """superplanehq/superplane#1785: with two "any user" approvers, one user could fill both
    (a second approval by the same person counted). ``wire`` needs two approvers; ann's two
    accepts sent at once by signal, neither naming a request (a double click), are one
    approval: the first is a decision by ann and opens the second request, the second is
    refused there (``approver_repeated``, recorded rejected), nothing runs until bob."""
    log = tmp_path / "wire.log"
    await agents.create_task(
        "t", goal(("wire", {"log": str(log), "amount": 500})), agent=approval_spec()
    )
    first = await open_request(agents, "t")
    assert first.approval is not None and first.approval.digest is not None
    accept: dict[str, JsonValue] = {"type": "accept", "digest": first.approval.digest}
    ann = person(agents, "ann")
    sent = await asyncio.gather(ann.submit_input("t", accept), ann.submit_input("t", accept))
    assert all(s.recorded for s in sent)

    async def both_seen() -> bool:
        events = (await agents.list_events("t", limit=200)).events
        return any(e.kind is EventKind.INPUT_RESPONSE and e.name == "rejected" for e in events)

    await eventually(both_seen)
    events = (await agents.list_events("t", limit=200)).events
    assert [e.author for e in events if e.kind is EventKind.DECISION] == ["ann"]
    (rejected,) = [e for e in events if e.name == "rejected"]
    assert json.loads(rejected.payload)["error"].startswith("approver_repeated: ")
    second = await open_request(agents, "t")
    assert second.input_id == f"{first.input_id}-2" and effects(log) == []
    assert (await person(agents, "bob").approve("t", second.input_id, "accept")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE
    assert len(effects(log)) == 1


async def test_an_answered_question_answered_again_keeps_its_first_answer(
    agents: ConversationHistory,
) -> None:
    """langchain-ai/langgraph#6663: resuming the same interrupt a second time with another
    value re-ran it with the new value. ``two_questions``: ``q1`` answered 3; a second answer
    to ``q1`` (5) is refused ``input_not_requested`` by update and recorded rejected by
    signal; the agent goes on with 3."""
    await agents.create_task("t", "two questions", agent=AgentSpec(name="two_questions"))
    await asked(agents, "t", "q1")
    assert (await agents.respond("t", 3, input_id="q1")).recorded
    await asked(agents, "t", "q2")
    again = await agents.respond("t", 5, input_id="q1")
    assert (again.recorded, again.error) == (False, ErrorCode.INPUT_NOT_REQUESTED)
    sent = await agents.submit_input("t", 5, input_id="q1", request_id="again-q1")
    assert sent.recorded

    async def seen() -> bool:
        return (await agents.answer_outcome("t", "again-q1")).outcome != "pending"

    await eventually(seen)
    outcome = await agents.answer_outcome("t", "again-q1")
    assert (outcome.outcome, outcome.error) == ("rejected", "input 'q1' was answered already")
    assert (await agents.respond("t", 8, input_id="q2")).recorded
    final = await agents.wait_task("t")
    assert final is not None and final.result is not None
    assert json.loads(final.result.text) == [3, 8]


async def test_the_second_question_of_one_step_is_pending_once_the_first_is_answered(
    agents: ConversationHistory,
) -> None:
    """langchain-ai/langgraph#6956: after a node's first of two interrupts was resumed, the
    state read showed nothing pending (``next`` empty) while the node waited on its second.
    ``two_questions`` asks ``q1`` then ``q2`` in one agent function: once ``q1`` is answered
    the view's pending requests are exactly ``q2``, the task ``awaiting_input``, and the
    graph store's node lists ``q2``."""
    await agents.create_task("t", "two questions", agent=AgentSpec(name="two_questions"))
    await asked(agents, "t", "q1")
    assert (await agents.respond("t", 1, input_id="q1")).recorded
    second = await asked(agents, "t", "q2")
    view = (await agents.get_task("t")).view
    assert view is not None and view.status is TaskStatus.AWAITING_INPUT
    assert [r.input_id for r in view.pending_inputs] == [second.input_id] == ["q2"]
    assert await agents.wait_mirrored("t", 30)
    (row,) = [r for r in await agents.find_tasks(open_inputs=True) if r.name == "t"]
    assert row.pending_inputs == ["q2"]
    assert (await agents.respond("t", 2, input_id="q2")).recorded
    assert (await agents.wait_task("t")) is not None


async def test_an_answer_waiting_for_a_worker_ends_when_its_task_is_terminated(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """temporalio/temporal#6614: update requests pending while their workflow closed were
    not ended, and clients polled on. Ours: an answer by update sent while no worker polls,
    then the task's workflow terminated: before, the client waited out its whole time limit
    and raised ``TaskServiceUnavailable`` ("is a worker polling ...?", 29 s here), a retry of
    which could never succeed; now it returns ``task_closed`` at its next look
    (``CLOSED_CHECK_S``), saying nothing was recorded, and the log holds no answer."""
    queue = f"closing-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="ops", task_queue=queue, graph=graph, timeout_s=30
    )
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        await history.create_task("t", "two questions", agent=AgentSpec(name="two_questions"))
        await asked(history, "t", "q1")
    sent = asyncio.create_task(history.respond("t", 3, input_id="q1"))
    await asyncio.sleep(1.0)
    assert not sent.done()
    await client.get_workflow_handle(history.workflow_id("t")).terminate("an operator's")
    result = await sent
    assert (result.recorded, result.error) == (False, ErrorCode.TASK_CLOSED)
    assert result.message == "task 't' ended (TERMINATED) before it took this write: " + (
        "nothing of it was recorded"
    )
    found = await history.get_task("t")
    assert found.workflow_status == "TERMINATED"
    events = (await history.list_events("t", limit=200)).events
    assert not [e for e in events if e.kind is EventKind.INPUT_RESPONSE]
