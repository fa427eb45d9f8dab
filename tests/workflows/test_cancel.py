"""One cancellation rule, wherever the cancel lands (the table in docs/agent-tasks.md): during
the model call, a tool with and without heartbeats, right after the start, while the agent
waits for input or for children, while the task continues as new. Each case asserts the same
end everywhere (the view, the ``TaskStatus`` search attribute, Neo4j and Temporal's own
status) and reads the history: no step and no model call is scheduled after the cancel
request. Against the real dev server and Neo4j; the model is the ``openai`` provider talking
to an OpenAI-compatible server of the test's own that holds the call open."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import (
    AgentSpec,
    EventKind,
    ModelSpec,
    StepState,
    TaskStatus,
    TaskView,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS, answer, calls
from tests.conftest import eventually, mirrored
from tests.model_server import ModelServer, Reply, completion
from tests.workflows.conftest import graph_row, openai_worker, script, spec, worker_process

AGENT_ACTIVITIES = ("model_turn", "read_event")
"""Activity types that only a running agent schedules (besides its tools, ``tool.*``)."""


async def scheduled_after_cancel(client: Client, workflow_id: str) -> list[str]:
    """The activity types the task scheduled after its cancel request (every run of it),
    other than the mirror: what the agent started after the request."""
    handle = client.get_workflow_handle(workflow_id)
    after = False
    found: list[str] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
            after = True
        elif after and event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            if name.startswith("tool.") or name in AGENT_ACTIVITIES:
                found.append(name)
    assert after, "the history holds no cancel request"
    return found


async def cancelled_everywhere(
    history: ConversationHistory, client: Client, graph: TaskGraph, task: str = "t"
) -> TaskView:
    """Wait for the task's end and check it is ``cancelled`` in the view, the search
    attribute, Neo4j and Temporal, with no open input request and nothing the agent started
    after the cancel request; returns the final view."""
    view = await asyncio.wait_for(history.wait_task(task), 120)
    assert view is not None and view.status is TaskStatus.CANCELLED
    assert view.pending_inputs == []
    description = await client.get_workflow_handle(history.workflow_id(task)).describe()
    assert description.status is not None and description.status.name == "CANCELED"
    assert description.search_attributes["TaskStatus"] == ["cancelled"]
    await mirrored(history, task)
    row = await graph_row(history, task)
    assert (row.status, row.pending_inputs) == (TaskStatus.CANCELLED, [])
    assert await scheduled_after_cancel(client, history.workflow_id(task)) == []
    events = await all_events(history, task)
    assert (events[-1].kind, events[-1].name, events[-1].payload) == (
        EventKind.NOTE,
        "status",
        "cancelled",
    )
    return view


async def file_exists(path: str) -> bool:
    return await asyncio.to_thread(Path(path).exists)


@pytest.mark.parametrize(
    ("tool", "seconds", "state", "result"),
    [
        ("charge_card", 300, StepState.UNKNOWN, "effect is unknown"),
        ("plain_wait", 4, StepState.COMPLETED, "waited 4 s"),
    ],
    ids=["tool-with-heartbeats", "tool-without-heartbeats"],
)
async def test_cancel_during_a_tool(
    agents: ConversationHistory,
    client: Client,
    graph: TaskGraph,
    tmp_path: Path,
    tool: str,
    seconds: int,
    state: StepState,
    result: str,
) -> None:
    """A tool that heartbeats sees its cancellation and its step ends ``unknown``; one that
    does not heartbeat cannot be told, so the task waits for it: its step is recorded with
    its real result (its effect happened) and the agent does not go on to the next model
    call (the script's second turn would call a tool again)."""
    log = str(tmp_path / "effect.log")
    turns = [calls((tool, {"log": log, "seconds": seconds})), calls(("echo", {"text": "no"}))]
    assert (await agents.create_task("t", script(*turns, answer("never")), agent=spec())).recorded
    await eventually(lambda: file_exists(log))
    assert (await agents.cancel_task("t")).recorded
    await cancelled_everywhere(agents, client, graph)
    (step,) = await all_steps(agents, "t")
    assert step.state is state
    events = {e.seq: e for e in await all_events(agents, "t")}
    assert result in events[step.result_event_seq or 0].payload
    assert sum(e.kind is EventKind.TOOL_CALL for e in events.values()) == 1


async def test_cancel_right_after_the_start(
    agents: ConversationHistory, client: Client, graph: TaskGraph, tmp_path: Path
) -> None:
    """A cancel sent as soon as the task is created (it lands during the agent's first
    workflow tasks: the lookup of its tools, the first model call): nothing runs after it."""
    log = str(tmp_path / "never.log")
    goal = script(calls(("sync_data", {"log": log, "seconds": 30})), answer("never"))
    for name in ("a", "b", "c"):
        assert (await agents.create_task(name, goal, agent=spec())).recorded
        assert (await agents.cancel_task(name)).recorded
    for name in ("a", "b", "c"):
        await cancelled_everywhere(agents, client, graph, name)


async def test_cancel_while_waiting_for_input_closes_the_request(
    agents: ConversationHistory, client: Client, graph: TaskGraph, tmp_path: Path
) -> None:
    """The open request is closed with the task (an ``input_closed`` note naming why), and
    answers to it are refused with ``task_closed``, by update and by signal."""
    positive = AgentSpec(
        name="ask_positive", tools=["sync_data", "echo"], input={"log": str(tmp_path / "sync.log")}
    )
    assert (await agents.create_task("t", "count", agent=positive)).recorded

    async def asked() -> bool:
        view = (await agents.get_task("t")).view
        return view is not None and bool(view.pending_inputs)

    await eventually(asked, within=60)
    assert (await agents.cancel_task("t")).recorded
    await cancelled_everywhere(agents, client, graph)
    closed = [e for e in await all_events(agents, "t") if e.name == "input_closed"]
    assert [e.kind for e in closed] == [EventKind.NOTE]
    assert '"input_id": "n"' in closed[0].payload and "cancelled" in closed[0].payload
    for answer_it in (agents.respond, agents.submit_input):
        refused = await answer_it("t", 3, input_id="n")
        assert (refused.recorded, refused.error and refused.error.value) == (False, "task_closed")


async def test_cancel_while_waiting_for_children(
    agents: ConversationHistory, client: Client, graph: TaskGraph
) -> None:
    """The cascade cancels each running child, whose end comes back ``cancelled``; the parent
    ends ``cancelled`` everywhere, and so does each child."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded

    async def waiting() -> bool:
        view = (await agents.get_task("t")).view
        return view is not None and view.status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting, within=60)
    assert (await agents.cancel_task("t")).recorded
    await cancelled_everywhere(agents, client, graph)
    for key in ("c0", "c1"):
        child = await asyncio.wait_for(agents.wait_task(f"t/{key}"), 60)
        assert child is not None and child.status is TaskStatus.CANCELLED


@pytest.fixture
async def model_server() -> AsyncIterator[ModelServer]:
    """The test's OpenAI-compatible server; its first answer takes 60 s (the call is held
    open), a later one is a final answer."""
    server = ModelServer([Reply(body=completion("late"), delay_s=60), Reply(body=completion("x"))])
    with server.running():
        yield server


async def test_cancel_during_the_model_call(
    client: Client, graph: TaskGraph, project_id: str, model_server: ModelServer
) -> None:
    """The model call is held open by the server: the cancel ends the task ``cancelled``,
    not ``failed`` with an ``ActivityError``, and nothing is recorded of the call."""
    queue = f"model-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    worker = await openai_worker(queue, model_server.url)
    try:
        model = ModelSpec(provider="openai", model="test-model")
        assert (await history.create_task("t", "hi", agent=AgentSpec(model=model))).recorded

        async def calling() -> bool:
            return bool(model_server.requests)

        await eventually(calling, within=60)
        assert (await history.cancel_task("t")).recorded
        view = await cancelled_everywhere(history, client, graph)
        events = await all_events(history, "t")
    finally:
        worker.kill()
        await worker.wait()
    assert view.error is None
    messages = [e for e in events if e.kind is EventKind.MESSAGE]
    assert [m.payload for m in messages] == ["hi"]  # the held call's answer never arrived
    assert len(model_server.requests) == 1


async def test_cancel_while_the_task_continues_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """An agent that checkpoints every round continues as new every few rounds (the server
    suggests it at 60 events); a cancel sent while it does lands between runs or while a run
    drains, and ends the task the same way."""
    client = low_limit_env.client
    queue = f"can-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        spec_ = AgentSpec(name="counter", tools=["echo"], input={"rounds": 10_000})
        for name in ("a", "b"):
            assert (await history.create_task(name, "count", agent=spec_)).recorded

        async def continued() -> bool:
            views = [(await history.get_task(n)).view for n in ("a", "b")]
            return all(v is not None and v.runs >= 2 for v in views)

        await eventually(continued, within=90)
        for name in ("a", "b"):
            assert (await history.cancel_task(name)).recorded
        for name in ("a", "b"):
            view = await cancelled_everywhere(history, client, graph, name)
            assert view.runs >= 2


async def test_cancel_of_a_task_that_ended_while_its_children_run_keeps_its_status(
    agents: ConversationHistory, client: Client, graph: TaskGraph
) -> None:
    """The agent ``leave`` ends ``done`` while its two recorded children still run (its
    workflow stays open for their ends). A cancel then (``cancel_task``, the same request as
    ``temporal workflow cancel``) is recorded without changing its status: a
    ``cancel_after_end`` note, the children cancelled, and the task ``done`` in the view, the
    search attribute, Neo4j and Temporal (``COMPLETED``). Before the ``cancel-after-end``
    patch Temporal said ``CANCELED`` while the rest said ``done``. Peers: dbos-transact-py#767
    (a cancel racing the end is lost silently), kube-HPC/hkube#4 (a cancel of a finished run
    answered OK)."""
    spec_ = AgentSpec(name="leave")
    assert (await agents.create_task("t", "leave two", agent=spec_)).recorded

    async def done_and_open() -> bool:
        view = (await agents.get_task("t")).view
        return view is not None and view.status is TaskStatus.DONE

    await eventually(done_and_open, within=60)
    handle = client.get_workflow_handle(agents.workflow_id("t"))
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    assert (await agents.cancel_task("t")).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 120)
    assert view is not None and view.status is TaskStatus.DONE
    assert view.result is not None and view.result.text == "left"
    description = await handle.describe()
    assert description.status is WorkflowExecutionStatus.COMPLETED
    assert description.search_attributes["TaskStatus"] == ["done"]
    await mirrored(agents, "t")
    assert (await graph_row(agents, "t")).status is TaskStatus.DONE
    events = await all_events(agents, "t")
    (note,) = [e for e in events if e.kind is EventKind.NOTE and e.name == "cancel_after_end"]
    assert note.payload == '{"status": "done"}'
    ends = sorted(
        (e.name, json.loads(e.payload)["status"])
        for e in events
        if e.kind is EventKind.CHILD_RESULT
    )
    assert ends == [("a", "cancelled"), ("b", "cancelled")]
    for key in ("a", "b"):
        child = await asyncio.wait_for(agents.wait_task(f"t/{key}"), 60)
        assert child is not None and child.status is TaskStatus.CANCELLED
    # a second cancel finds the workflow closed: refused, nothing changed
    again = await agents.cancel_task("t")
    assert again.error is ErrorCode.TASK_CLOSED


async def test_the_cascade_reaches_a_child_when_the_parents_worker_died(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """A parent waits for a child agent that runs short steps, both on a worker in a process
    of its own. The worker is killed (SIGKILL), the parent cancelled while no worker runs (its
    workflow task waits for one): the child's history holds its own cancel request already
    (the cascade sent by ``cancel_task``, not only by the parent's next workflow task). Then a
    new worker starts: the child starts no step after the cancel and ends ``cancelled``, and
    so does the parent. Before, the child had no cancel request until the parent's workflow
    task ran on another worker, and ran its next steps meanwhile (1 run of 11 to ``done``).
    Peers: tinyhumansai/opencompany#675, elastic/kibana#250526 (a cancelled parent's child
    runs on), dbos-transact-java#423 (cancel children)."""
    queue = f"cascade-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    log = tmp_path / "ticks.log"
    parent = AgentSpec(name="ticking_parent", input={"log": str(log), "ticks": 40, "seconds": 0.3})
    process = await worker_process(queue)
    try:
        assert (await history.create_task("t", "tick", agent=parent)).recorded

        async def ticking() -> bool:
            text = await asyncio.to_thread(lambda: log.read_text() if log.exists() else "")
            return len(text.splitlines()) >= 2

        await eventually(ticking, within=60)
    finally:
        process.kill()  # SIGKILL: no shutdown of any kind
        await process.wait()
    assert (await history.cancel_task("t")).recorded
    child = client.get_workflow_handle(history.workflow_id("t/c"))
    types = [e.event_type async for e in child.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED in types
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        ended = await asyncio.wait_for(history.wait_task("t/c"), 120)
        assert ended is not None and ended.status is TaskStatus.CANCELLED
        assert await scheduled_after_cancel(client, history.workflow_id("t/c")) == []
        top = await asyncio.wait_for(history.wait_task("t"), 120)
        assert top is not None and top.status is TaskStatus.CANCELLED
    ticks = len(log.read_text(encoding="utf-8").splitlines())
    assert ticks < 40


async def test_cancel_without_cascade_of_a_task_that_ended_leaves_it_waiting_for_its_children(
    agents: ConversationHistory, client: Client
) -> None:
    """``cascade=False`` on a task that ended ``done`` while its children run: the note is
    recorded, the children run on, and the task waits for their ends as before (still open),
    then completes ``done`` once they ended."""
    assert (await agents.create_task("t", "leave two", agent=AgentSpec(name="leave"))).recorded

    async def done() -> bool:
        view = (await agents.get_task("t")).view
        return view is not None and view.status is TaskStatus.DONE

    await eventually(done, within=60)
    assert (await agents.cancel_task("t", cascade=False)).recorded

    async def noted() -> bool:
        events = await all_events(agents, "t")
        return any(e.kind is EventKind.NOTE and e.name == "cancel_after_end" for e in events)

    await eventually(noted)
    handle = client.get_workflow_handle(agents.workflow_id("t"))
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    for key in ("a", "b"):
        child = (await agents.get_task(f"t/{key}")).view
        assert child is not None and child.status is TaskStatus.OPEN
        assert (await agents.finish_task(f"t/{key}", "done")).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.status is TaskStatus.DONE
    assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
    ends = [str(e.name) for e in await all_events(agents, "t") if e.kind is EventKind.CHILD_RESULT]
    assert sorted(ends) == ["a", "b"]


async def test_cancel_while_its_children_are_being_started(
    agents: ConversationHistory, client: Client, graph: TaskGraph
) -> None:
    """A cancel sent right after the create of a parent that spawns three children: it lands
    before, during or between the child starts (``start_child_workflow`` in flight). The
    parent ends ``cancelled`` everywhere, and every child it started ends ``cancelled``.
    Peer: temporalio/sdk-python#1445 (a cancel during ``start_child_workflow`` was swallowed
    and the workflow ran on), temporalio/sdk-python#1751 (a cancel with a child in flight
    wedged the workflow task)."""
    fanout = AgentSpec(name="fanout", input={"children": 3})
    assert (await agents.create_task("t", "three", agent=fanout)).recorded
    assert (await agents.cancel_task("t")).recorded
    view = await cancelled_everywhere(agents, client, graph)
    for child in view.children.values():
        ended = await asyncio.wait_for(agents.wait_task(child.name), 60)
        assert ended is not None and ended.status is TaskStatus.CANCELLED, child.name


async def test_cancel_of_a_recorded_task_that_ended_with_a_child_running_keeps_it_failed(
    history: ConversationHistory, client: Client, graph: TaskGraph
) -> None:
    """The same rule for a task its app records, ended ``failed`` while the child it spawned
    runs: the cancel is recorded, the child cancelled, and the task ``failed`` in the view,
    the search attribute, Neo4j and Temporal (``COMPLETED``)."""
    assert (await history.create_task("p", "parent")).recorded
    assert (await history.spawn_child("p", "k", "p/k", "child")).recorded
    assert (await history.finish_task("p", "failed", error="gave up")).recorded
    handle = client.get_workflow_handle(history.workflow_id("p"))
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    assert (await history.cancel_task("p")).recorded
    view = await asyncio.wait_for(history.wait_task("p"), 120)
    assert view is not None and view.status is TaskStatus.FAILED
    description = await handle.describe()
    assert description.status is WorkflowExecutionStatus.COMPLETED
    assert description.search_attributes["TaskStatus"] == ["failed"]
    await mirrored(history, "p")
    assert (await graph_row(history, "p")).status is TaskStatus.FAILED
    child = await asyncio.wait_for(history.wait_task("p/k"), 60)
    assert child is not None and child.status is TaskStatus.CANCELLED
