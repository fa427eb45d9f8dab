"""Child tasks end cleanly in every order: a spawn whose workflow id is taken raises in the
agent code and the cascade never reaches that other task; a child that ends while its parent
is closed is reconciled when the parent resumes; a parent whose own work is done while its
children run continues as new when suggested instead of spinning; deleting a parent cancels
its running children. Against the real dev server and Neo4j."""

from __future__ import annotations

import asyncio
import json
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_events
from agent_tasks.contract import AgentSpec, EventKind, TaskStatus, TaskView
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.conftest import eventually


async def view_of(history: ConversationHistory, task: str = "t") -> TaskView:
    view = (await history.get_task(task)).view
    assert view is not None
    return view


async def child_results(history: ConversationHistory, task: str = "t") -> list[tuple[str, str]]:
    """(spawn key, status) of the task's ``child_result`` events, in seq order."""
    return [
        (e.name or "", json.loads(e.payload)["status"])
        for e in await all_events(history, task)
        if e.kind is EventKind.CHILD_RESULT
    ]


async def running(history: ConversationHistory, task: str) -> bool:
    description = await history.client.get_workflow_handle(history.workflow_id(task)).describe()
    return description.status is WorkflowExecutionStatus.RUNNING


async def test_a_spawn_whose_id_is_taken_raises_and_the_cascade_spares_that_task(
    agents: ConversationHistory,
) -> None:
    """``t/c0`` exists before ``t`` spawns the child of that key: the spawn raises
    ``SpawnRefused`` naming the taken id (it does not wait for an end that would never
    come); cancelling ``t`` cancels its own child ``t/c1`` and leaves ``t/c0`` running."""
    assert (await agents.create_task("t/c0", "someone else's task")).recorded
    spec = AgentSpec(name="spawn_taken")
    assert (await agents.create_task("t", "two", agent=spec)).recorded

    async def waiting() -> bool:
        return (await view_of(agents)).status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting, within=60)
    view = await view_of(agents)
    assert {k: c.status for k, c in view.children.items()} == {
        "c0": TaskStatus.FAILED,
        "c1": TaskStatus.OPEN,
    }
    assert "already taken" in view.children["c0"].result
    assert (await agents.cancel_task("t")).recorded
    parent = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert parent is not None and parent.status is TaskStatus.CANCELLED
    assert (await view_of(agents, "t/c1")).status is TaskStatus.CANCELLED
    assert (await view_of(agents, "t/c0")).status is TaskStatus.OPEN
    assert await running(agents, "t/c0")
    notes = [e.payload for e in await all_events(agents, "t") if e.kind is EventKind.NOTE]
    assert any("SpawnRefused" in n and "already taken" in n for n in notes)


async def test_a_child_that_ends_while_its_parent_is_closed_is_reconciled_on_resume(
    agents: ConversationHistory,
) -> None:
    """The parent is cancelled without the cascade while its two children run; one child ends
    while the parent is closed (its signal finds no running parent). Resumed, the parent learns
    the children's real states: the ended one is recorded at once, the other when it ends, and
    the agent finishes with both."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded

    async def waiting() -> bool:
        return (await view_of(agents)).status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting, within=60)
    assert (await agents.cancel_task("t", cascade=False)).recorded
    parent = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert parent is not None and parent.status is TaskStatus.CANCELLED
    assert (await agents.finish_task("t/c0", "done", result="zero")).recorded
    ended = await asyncio.wait_for(agents.wait_task("t/c0"), 60)
    assert ended is not None and ended.status is TaskStatus.DONE
    assert (await agents.resume_task("t")).recorded

    async def reconciled() -> bool:
        return await child_results(agents) == [("c0", "done")]

    await eventually(reconciled, within=60)
    assert (await agents.finish_task("t/c1", "failed", error="one")).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.status is TaskStatus.DONE
    assert done.result is not None and done.result.text == "c0=done,c1=failed"
    assert await child_results(agents) == [("c0", "done"), ("c1", "failed")]


async def test_a_parent_done_with_children_running_continues_as_new_instead_of_spinning(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """A parent whose agent ended while 8 children run, past the server's continue-as-new
    suggestion (60 events): it continues as new (no workflow task fails, queries answer),
    and records each child's end once, in whichever run it arrives."""
    client = low_limit_env.client
    queue = f"leave-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        spec = AgentSpec(name="leave_many", input={"children": 8, "notes": 12})
        assert (await history.create_task("t", "leave", agent=spec)).recorded

        async def closed_and_continued() -> bool:
            view = await view_of(history)
            return view.status is TaskStatus.DONE and view.runs >= 2

        await eventually(closed_and_continued, within=60)
        for i in range(8):
            assert (await history.finish_task(f"t/k{i}", "done")).recorded
            assert (await view_of(history)).status is TaskStatus.DONE  # a query answers
        final = await asyncio.wait_for(history.wait_task("t"), 60)
        results = await child_results(history)
        handle = client.get_workflow_handle(history.workflow_id("t"))
        failed_tasks = [
            e
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    assert final.result.text == "left 8"
    assert sorted(results) == [(f"k{i}", "done") for i in range(8)]
    assert failed_tasks == []


async def test_deleting_a_parent_cancels_its_running_children(
    agents: ConversationHistory, client: object, graph: TaskGraph
) -> None:
    """``delete_task`` of a parent whose children run cancels them by the cascade rule (and
    says so in its result) instead of leaving them running with no parent."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded

    async def waiting() -> bool:
        return (await view_of(agents)).status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting, within=60)
    retention = HistoryRetention(agents.client, agents.project_id, "ops", graph=graph)
    deleted = await retention.delete_task("t")
    assert deleted.recorded and sorted(deleted.children_cancelled) == ["t/c0", "t/c1"]
    for key in ("c0", "c1"):
        child = await asyncio.wait_for(agents.wait_task(f"t/{key}"), 60)
        assert child is not None and child.status is TaskStatus.CANCELLED
