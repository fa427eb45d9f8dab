"""Input requests: agent code asks a person (``AgentContext.ask``) and the answer comes by the
``submit_input`` signal or the ``respond`` update, against the real Temporal dev server and
Neo4j; the 24-hour waits run in skipped time (fixture ``time_skipping_history``)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from pydantic import JsonValue
from temporalio.client import Client

from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import (
    AgentSpec,
    Event,
    EventKind,
    StepState,
    TaskStatus,
    TaskView,
)
from agent_tasks.contract.errors import ErrorCode, TaskServiceUnavailable
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS, Approval
from tests.conftest import eventually, mirrored
from tests.workflows.conftest import cli

ROOT = Path(__file__).resolve().parents[2]
POSITIVE = {"type": "integer", "minimum": 1}
"""The schema of ``tests.agent_tools.ask_positive``'s question, as its source states it."""


def positive(log: Path, seconds: float = 0) -> AgentSpec:
    return AgentSpec(
        name="ask_positive",
        tools=["sync_data", "echo"],
        input={"log": str(log), "seconds": seconds},
    )


async def view_of(history: ConversationHistory, task: str = "t") -> TaskView:
    view = (await history.get_task(task)).view
    assert view is not None
    return view


async def awaiting(history: ConversationHistory, task: str = "t") -> TaskView:
    """Wait until the task has an open input request; returns its view."""

    async def asked() -> bool:
        return bool((await view_of(history, task)).pending_inputs)

    await eventually(asked, within=60)
    return await view_of(history, task)


def responses(events: list[Event]) -> list[tuple[str | None, object]]:
    """(name, answer) of every ``input_response`` event: the request's id for a taken answer,
    ``rejected`` with the rejected answer for one that failed."""
    out: list[tuple[str | None, object]] = []
    for event in events:
        if event.kind is EventKind.INPUT_RESPONSE:
            value = json.loads(event.payload)
            out.append((event.name, value["answer"] if event.name == "rejected" else value))
    return out


async def history_length(client: Client, history: ConversationHistory, task: str = "t") -> int:
    handle = client.get_workflow_handle(history.workflow_id(task))
    return len((await handle.fetch_history()).events)


async def test_an_answer_sent_twice_before_its_request_and_before_any_worker_is_taken_once(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """The answer comes, twice with one request id, while no worker runs and before the agent
    asked (its first step takes 2 s): it is kept, taken once when the question is asked, and
    the task goes on without waiting."""
    queue = f"early-{uuid.uuid4().hex[:6]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    spec = AgentSpec(name="ask_later", tools=["sync_data"], input={"log": str(tmp_path / "s")})
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        assert (await history.create_task("t", "deploy?", agent=spec)).recorded
        assert (await view_of(history)).pending_inputs == []
    approval: JsonValue = {"approved": True, "reviewer": "ann"}
    for _ in range(2):
        sent = await history.submit_input("t", approval, input_id="approve", request_id="ann-1")
        assert sent.recorded
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        view = await asyncio.wait_for(history.wait_task("t"), 60)
        events = await all_events(history, "t")
    assert view is not None and view.status is TaskStatus.DONE
    assert view.result is not None and json.loads(view.result.text) == approval
    assert responses(events) == [("approve", approval)]
    (asked,) = [e for e in events if e.kind is EventKind.INPUT_REQUEST]
    request = json.loads(asked.payload)
    assert (request["input_id"], request["prompt"]) == ("approve", "Deploy?")
    assert request["schema"] == Approval.model_json_schema()
    assert view.pending_inputs == []


async def test_an_invalid_answer_by_signal_is_rejected_and_one_by_update_is_refused(
    agents: ConversationHistory, client: Client, graph: TaskGraph, tmp_path: Path
) -> None:
    """While the task waits: the request is in the view and in Neo4j; queries write nothing;
    updates that answer nothing or fail the schema are refused with nothing recorded; an
    invalid answer by signal is recorded as rejected and the task keeps waiting; a valid
    answer by update is taken and the task goes on."""
    assert (await agents.create_task("t", "count", agent=positive(tmp_path / "p"))).recorded
    view = await awaiting(agents)
    assert view.status is TaskStatus.AWAITING_INPUT
    (request,) = view.pending_inputs
    assert (request.input_id, request.prompt, request.json_schema) == ("n", "How many?", POSITIVE)
    assert request.deadline is None
    await mirrored(agents, "t")
    (row,) = await agents.find_tasks(status="awaiting_input")
    assert (row.name, row.pending_inputs) == ("t", ["n"])

    before = await history_length(client, agents)
    for _ in range(5):
        assert (await view_of(agents)).last_seq == view.last_seq
    nothing = await agents.respond("t", 3, input_id="other")
    assert (nothing.recorded, nothing.error) == (False, ErrorCode.INPUT_NOT_REQUESTED)
    invalid = await agents.respond("t", 0, input_id="n")
    assert (invalid.recorded, invalid.error) == (False, ErrorCode.INPUT_INVALID)
    assert invalid.message == "the answer: 0 is less than the minimum of 1"
    assert await history_length(client, agents) == before  # refused updates leave no trace
    assert (await view_of(agents)).last_seq == view.last_seq

    assert (await agents.submit_input("t", "abc")).recorded

    async def rejected() -> bool:
        return (await view_of(agents)).last_seq > view.last_seq

    await eventually(rejected)
    still = await view_of(agents)
    assert still.status is TaskStatus.AWAITING_INPUT and len(still.pending_inputs) == 1
    taken = await agents.respond("t", 7)
    assert taken.recorded and taken.first_seq is not None
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.result is not None
    assert (done.status, done.result.text) == (TaskStatus.DONE, "using 7")
    events = await all_events(agents, "t")
    assert responses(events) == [("rejected", "abc"), ("n", 7)]
    assert next(e for e in events if e.seq == taken.first_seq).name == "n"
    statuses = [e.payload for e in events if e.kind is EventKind.NOTE and e.name == "status"]
    assert statuses == ["in_progress", "awaiting_input", "in_progress", "done"]


async def test_three_answers_across_worker_restarts(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """The answers ``abc``, ``-1`` and ``30`` come by signal, each while no worker runs: after
    each restart the query shows the request still open, two answers are recorded rejected,
    the third is taken, and the step before the question ran once."""
    queue = f"restarts-{uuid.uuid4().hex[:6]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    log = tmp_path / "prepare.log"
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        assert (await history.create_task("t", "count", agent=positive(log))).recorded
        await awaiting(history)
    answers: list[JsonValue] = ["abc", -1, 30]
    for sent, answer in enumerate(answers, start=1):
        assert (await history.submit_input("t", answer, request_id=f"answer-{sent}")).recorded
        async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
            if sent < 3:

                async def recorded(count: int = sent) -> bool:
                    try:  # the server may not have seen the new worker's poll yet
                        return len(responses(await all_events(history, "t"))) == count
                    except TaskServiceUnavailable:
                        return False

                await eventually(recorded, within=60)
                view = await view_of(history)
                assert [r.input_id for r in view.pending_inputs] == ["n"]
                assert view.status is TaskStatus.AWAITING_INPUT
            else:
                done = await asyncio.wait_for(history.wait_task("t"), 60)
                assert done is not None and done.result is not None
                assert done.result.text == "using 30"
                events = await all_events(history, "t")
                steps = await all_steps(history, "t")
    assert responses(events) == [("rejected", "abc"), ("rejected", -1), ("n", 30)]
    errors = [json.loads(e.payload)["error"] for e in events if e.name == "rejected"]
    assert errors == [
        "the answer: 'abc' is not of type 'integer'",
        "the answer: -1 is less than the minimum of 1",
    ]
    wid = history.workflow_id("t")
    assert (await asyncio.to_thread(log.read_text)).splitlines() == [f"{wid}/prepare/1"]
    assert [(s.step_name, s.state, s.attempt) for s in steps] == [
        ("prepare", StepState.COMPLETED, 1),
        ("use", StepState.COMPLETED, 1),
    ]


async def test_a_query_while_a_step_runs_answers_and_writes_nothing(
    agents: ConversationHistory, client: Client, tmp_path: Path
) -> None:
    log = tmp_path / "slow.log"
    spec = positive(log, seconds=20)
    assert (await agents.create_task("t", "count", agent=spec)).recorded

    async def running() -> bool:
        return await asyncio.to_thread(log.exists)

    await eventually(running)
    views = [await view_of(agents) for _ in range(5)]
    assert {(v.last_seq, v.status, v.updated_at) for v in views} == {
        (views[0].last_seq, TaskStatus.IN_PROGRESS, views[0].updated_at)
    }
    (step,) = await all_steps(agents, "t")
    assert step.state is StepState.IN_PROGRESS  # the queries came back while it ran
    assert (await agents.cancel_task("t")).recorded
    await asyncio.wait_for(agents.wait_task("t"), 60)


async def test_a_24_hour_wait_times_out_in_skipped_time(
    time_skipping_history: ConversationHistory,
) -> None:
    """Without a default the wait raises ``input_timeout`` (the task fails naming it); with one
    the default is the answer. Both after 24 hours of workflow time."""
    history = time_skipping_history
    bare = AgentSpec(name="ask_timeout")
    with_default = AgentSpec(name="ask_timeout", input={"default": "later"})
    assert (await history.create_task("bare", "wait", agent=bare)).recorded
    assert (await history.create_task("default", "wait", agent=with_default)).recorded
    failed = await asyncio.wait_for(history.wait_task("bare"), 120)
    done = await asyncio.wait_for(history.wait_task("default"), 120)
    assert failed is not None and failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.text == "InputTimeout: input 'wait' was not answered in time"
    assert done is not None and done.result is not None
    assert (done.status, done.result.text) == (TaskStatus.DONE, "answer: later")
    for view in (failed, done):
        assert view.pending_inputs == []
        waited = view.updated_at - view.created_at
        assert waited.total_seconds() >= 24 * 3600
    for task, answers in (("bare", []), ("default", [("wait", "later")])):
        events = await all_events(history, task)
        timeouts = [e.payload for e in events if e.name == "input_timeout"]
        assert (timeouts, responses(events)) == (["wait"], answers)


async def test_answer_from_the_cli(agents: ConversationHistory, tmp_path: Path) -> None:
    """``agent-tasks input NAME --json`` (the README's command): refused with the schema's
    message, then taken."""
    assert (await agents.create_task("t", "count", agent=positive(tmp_path / "p"))).recorded
    await awaiting(agents)

    flags = ("--project", agents.project_id, "--json-output")
    code, refused = await cli("input", "t", "--json", '"many"', *flags)
    assert code != 0 and refused["error"] == "input_invalid"
    code, taken = await cli("input", "t", "--json", "12", *flags)
    assert code == 0 and taken["recorded"] is True
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.result is not None and done.result.text == "using 12"
