"""Answers are never lost or misattributed: an answer is bound to one input request (by its
id, or without one only to the request open when it arrives); a request closes with its task
or its timeout, and an answer to a closed one is refused with a code that says why, or, sent
by signal, recorded as late and changes nothing. Against the real dev server and Neo4j."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from pydantic import JsonValue
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_events
from agent_tasks.contract import AgentSpec, Event, EventKind, TaskStatus, TaskView
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.conftest import eventually, mirrored
from tests.workflows.conftest import graph_row


async def view_of(history: ConversationHistory, task: str = "t") -> TaskView:
    view = (await history.get_task(task)).view
    assert view is not None
    return view


async def asking(history: ConversationHistory, input_id: str, task: str = "t") -> TaskView:
    """Wait until the request ``input_id`` is open; returns the view."""

    async def open_() -> bool:
        return input_id in [r.input_id for r in (await view_of(history, task)).pending_inputs]

    await eventually(open_, within=60)
    return await view_of(history, task)


def taken(events: list[Event]) -> dict[str, object]:
    """Request id -> the answer its ``input_response`` event holds (taken answers only)."""
    return {
        e.name or "": json.loads(e.payload)
        for e in events
        if e.kind is EventKind.INPUT_RESPONSE and e.name not in ("rejected", "late")
    }


def named(events: list[Event], name: str) -> list[dict[str, object]]:
    """The payloads (JSON) of the ``input_response`` events named ``name``."""
    return [
        json.loads(e.payload)
        for e in events
        if e.kind is EventKind.INPUT_RESPONSE and e.name == name
    ]


async def test_an_answer_after_its_timeout_is_late_and_changes_nothing(
    agents: ConversationHistory,
) -> None:
    """``q1`` times out after 2 s (with a default), then ``q2`` is asked. An answer naming
    ``q1`` by update is refused ``input_closed``; by signal it is recorded as late; neither
    reaches ``q2``, whose own answer finishes the task."""
    spec = AgentSpec(name="two_questions", tools=["plain_wait"], input={"timeout_s": 2})
    assert (await agents.create_task("t", "two", agent=spec)).recorded
    await asking(agents, "q2")
    refused = await agents.respond("t", "for q1", input_id="q1")
    assert (refused.recorded, refused.error) == (False, ErrorCode.INPUT_CLOSED)
    assert "timed out" in (refused.message or "")
    assert (await agents.submit_input("t", "late for q1", input_id="q1")).recorded

    async def recorded_late() -> bool:
        return bool(named(await all_events(agents, "t"), "late"))

    await eventually(recorded_late)
    assert [r.input_id for r in (await view_of(agents)).pending_inputs] == ["q2"]
    assert (await agents.respond("t", "for q2", input_id="q2")).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.status is TaskStatus.DONE
    assert view.result is not None and json.loads(view.result.text) == ["default", "for q2"]
    events = await all_events(agents, "t")
    assert taken(events) == {"q1": "default", "q2": "for q2"}
    (late,) = named(events, "late")
    assert (late["input_id"], late["answer"]) == ("q1", "late for q1")


async def test_an_answer_without_an_id_goes_only_to_the_request_open_when_it_arrives(
    agents: ConversationHistory,
) -> None:
    """With nothing open, an answer without an id is rejected, not kept for the next
    question; with ``q1`` open it is ``q1``'s, and a second one sent right behind it, racing
    the next question, is ``q2``'s only if ``q2`` was open when it arrived, never ``q1``'s."""
    spec = AgentSpec(name="two_questions", tools=["plain_wait"], input={"before_s": 2})
    assert (await agents.create_task("t", "two", agent=spec)).recorded
    assert (await agents.submit_input("t", "too early")).recorded  # nothing open yet
    await asking(agents, "q1")
    first, second = await asyncio.gather(
        agents.submit_input("t", "first"), agents.submit_input("t", "second")
    )
    assert first.recorded and second.recorded
    await asyncio.sleep(1)
    if (await view_of(agents)).status is not TaskStatus.DONE:  # the second came before q2
        assert (await agents.respond("t", "second again", input_id="q2")).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.result is not None
    answers = json.loads(view.result.text)
    assert answers[0] == "first" and answers[1] in ("second", "second again")
    events = await all_events(agents, "t")
    rejected = [r["answer"] for r in named(events, "rejected")]
    assert rejected[0] == "too early"
    assert ("second" in rejected) == (answers[1] == "second again")


async def test_a_task_that_fails_closes_its_open_requests(
    agents: ConversationHistory, graph: TaskGraph
) -> None:
    """An agent that asked in the background and then failed: its request is closed with the
    task (view and Neo4j), and answers to it are refused ``task_closed``."""
    spec = AgentSpec(name="ask_then_fail")
    assert (await agents.create_task("t", "fail", agent=spec)).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.status is TaskStatus.FAILED and view.pending_inputs == []
    await mirrored(agents, "t")
    row = await graph_row(agents, "t")
    assert (row.status, row.pending_inputs) == (TaskStatus.FAILED, [])
    closed = [e for e in await all_events(agents, "t") if e.name == "input_closed"]
    assert len(closed) == 1 and "failed" in closed[0].payload
    for answer_it in (agents.respond, agents.submit_input):
        refused = await answer_it("t", "too late", input_id="q")
        assert (refused.recorded, refused.error) == (False, ErrorCode.TASK_CLOSED)


async def _answers_while_continuing_as_new(
    env: WorkflowEnvironment, graph: TaskGraph, project_id: str, per_second: float
) -> None:
    """An agent asks 40 questions in a loop and checkpoints after each, on a server that
    suggests continue-as-new at 60 events; the answers come by signal at ``per_second``,
    each naming its question, without waiting for it to be asked."""
    client = env.client
    queue = f"ask-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    count = 40
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        spec = AgentSpec(name="ask_loop", tools=["echo"], input={"questions": count})
        assert (await history.create_task("t", "loop", agent=spec)).recorded
        for i in range(count):
            sent = await history.submit_input("t", i * 7, input_id=f"q{i:03d}")
            assert sent.recorded
            await asyncio.sleep(1 / per_second)
        view = await asyncio.wait_for(history.wait_task("t"), 120)
        events = await all_events(history, "t")
    assert view is not None and view.status is TaskStatus.DONE, view
    assert view.runs >= 2  # it continued as new while the answers came
    assert view.result is not None and json.loads(view.result.text) == [i * 7 for i in range(count)]
    assert taken(events) == {f"q{i:03d}": i * 7 for i in range(count)}
    assert named(events, "rejected") == []


async def test_answers_at_20_a_second_while_the_agent_continues_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    await _answers_while_continuing_as_new(low_limit_env, graph, project_id, 20)


async def test_answers_at_100_a_second_while_the_agent_continues_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    await _answers_while_continuing_as_new(low_limit_env, graph, project_id, 100)


async def test_an_answer_and_a_step_end_in_one_workflow_task(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """The agent runs a step in the background and asks a question; the step's activity
    completes and the answer arrives while no workflow worker runs, so one workflow task
    delivers both. The agent, woken by the answer, sees the step completed (every event that
    workflow task delivered is applied before agent code goes on) and runs the step that
    follows from it."""
    queue = f"batch-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    gate = str(tmp_path / "gate")
    spec = AgentSpec(name="ask_while_stepping", tools=["gated", "echo"], input={"gate": gate})
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS, workflows=False):
        async with build_worker(client, graph, queue, tools=TOOLS, activities=False):
            assert (await history.create_task("t", "both", agent=spec)).recorded
            await asking(history, "go")
            await eventually(lambda: asyncio.to_thread(Path(gate + ".waiting").exists))
        # no workflow worker now: the step ends and the answer comes, both in the history
        await asyncio.to_thread(Path(gate).write_text, "open")

        async def step_ended() -> bool:
            handle = client.get_workflow_handle(history.workflow_id("t"))
            gated, completed = None, set()
            async for event in handle.fetch_history_events():
                attributes = event.activity_task_scheduled_event_attributes
                if attributes.activity_type.name == "tool.gated":
                    gated = event.event_id
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                    completed.add(event.activity_task_completed_event_attributes.scheduled_event_id)
            return gated in completed

        await eventually(step_ended)
        assert (await history.submit_input("t", "yes", input_id="go")).recorded
        async with build_worker(client, graph, queue, tools=TOOLS, activities=False):
            view = await asyncio.wait_for(history.wait_task("t"), 60)
    assert view is not None and view.result is not None
    assert view.result.text == "saw completed; after: ran"


async def test_answers_by_signal_from_one_client_are_taken_in_call_order(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """docs/input-and-children.md: answers sent by one client to one task by signal go in call
    order (the task's lane). Eleven answers the schema refuses, then a valid one, all sent
    without waiting for each other: the log records them in the order sent (each refused one
    ``rejected``, the request staying open), and the last is the answer the agent takes."""
    spec = AgentSpec(
        name="ask_positive", tools=["sync_data", "echo"], input={"log": str(tmp_path / "log")}
    )
    assert (await agents.create_task("t", "ask", agent=spec)).recorded
    await asking(agents, "n")
    answers: list[JsonValue] = [f"x{i}" for i in range(11)] + [7]
    sent = [
        asyncio.create_task(agents.submit_input("t", answer, input_id="n")) for answer in answers
    ]
    assert all(r.recorded for r in await asyncio.gather(*sent))
    final = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert final is not None and final.result is not None
    assert final.result.text == "using 7"
    events = await all_events(agents, "t")
    responses = [e for e in events if e.kind is EventKind.INPUT_RESPONSE]
    assert [e.name for e in responses][:-1] == ["rejected"] * 11
    said = [json.loads(e.payload) for e in responses]
    assert [r["answer"] for r in said[:-1]] + [said[-1]] == answers
