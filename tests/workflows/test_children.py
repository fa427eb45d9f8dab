"""Child tasks: agent code spawns child tasks (child workflows of the same type) and their ends
come back by the ``child_ended`` signal, against the real Temporal dev server and Neo4j."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_events
from agent_tasks.contract import AgentSpec, EventKind, TaskStatus, TaskView
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.conftest import eventually, mirrored
from tests.workflows.conftest import cli

ROOT = Path(__file__).resolve().parents[2]


async def view_of(history: ConversationHistory, task: str = "t") -> TaskView:
    view = (await history.get_task(task)).view
    assert view is not None
    return view


async def spawned(history: ConversationHistory, count: int, task: str = "t") -> TaskView:
    """Wait until the task has spawned ``count`` children; returns its view."""

    async def all_there() -> bool:
        return len((await view_of(history, task)).children) == count

    await eventually(all_there, within=60)
    return await view_of(history, task)


async def child_results(history: ConversationHistory, task: str = "t") -> list[tuple[str, str]]:
    """(spawn key, status) of the task's ``child_result`` events, in seq order."""
    events = await all_events(history, task)
    return [
        (e.name or "", json.loads(e.payload)["status"])
        for e in events
        if e.kind is EventKind.CHILD_RESULT
    ]


async def test_three_children_whose_last_two_end_10_ms_apart(agents: ConversationHistory) -> None:
    """All three ends are recorded (a failed one collected as a value), then the parent goes on;
    while it waits its status is ``awaiting_children`` with the children in its view."""
    fanout = AgentSpec(name="fanout", input={"children": 3})
    assert (await agents.create_task("t", "three", agent=fanout)).recorded
    view = await spawned(agents, 3)
    assert {k: (c.name, c.status) for k, c in view.children.items()} == {
        f"c{i}": (f"t/c{i}", TaskStatus.OPEN) for i in range(3)
    }
    assert (await agents.finish_task("t/c0", "done", result="zero")).recorded

    async def waiting() -> bool:
        return (await view_of(agents)).status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting)

    async def end_c2_10_ms_later() -> None:
        await asyncio.sleep(0.01)
        assert (await agents.finish_task("t/c2", "failed", error="broke")).recorded

    await asyncio.gather(agents.finish_task("t/c1", "done"), end_c2_10_ms_later())
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.result is not None
    assert (done.status, done.result.text) == (TaskStatus.DONE, "c0=done,c1=done,c2=failed")
    results = await child_results(agents)
    assert sorted(results) == [("c0", "done"), ("c1", "done"), ("c2", "failed")]
    assert {k: c.status for k, c in done.children.items()} == {
        "c0": TaskStatus.DONE,
        "c1": TaskStatus.DONE,
        "c2": TaskStatus.FAILED,
    }
    events = {e.seq: e for e in await all_events(agents, "t")}
    assert json.loads(events[done.children["c2"].result_seq or 0].payload) == {
        "child": "t/c2",
        "status": "failed",
        "text": "broke",
    }


async def test_a_parent_that_continues_as_new_while_its_children_run(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """On a server that suggests continue-as-new at 60 events, a parent spawns 12 children,
    continues-as-new while they run, and still records every child's end once."""
    client = low_limit_env.client
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue="can", graph=graph
    )
    async with build_worker(client, graph, "can", tools=TOOLS, scripts=SCRIPTS):
        fanout = AgentSpec(name="fanout", input={"children": 12})
        assert (await history.create_task("t", "twelve", agent=fanout)).recorded
        await spawned(history, 12)

        async def continued() -> bool:
            return (await view_of(history)).runs >= 2

        await eventually(continued, within=60)
        ends = [history.finish_task(f"t/c{i}", "done") for i in range(12)]
        assert all(r.recorded for r in await asyncio.gather(*ends))
        done = await asyncio.wait_for(history.wait_task("t"), 120)
        results = await child_results(history)
    assert done is not None and done.result is not None
    assert done.result.text == ",".join(f"c{i}=done" for i in range(12))
    assert sorted(results) == sorted((f"c{i}", "done") for i in range(12))
    assert done.runs >= 2


async def test_a_tree_5_deep_and_refused_past_it(agents: ConversationHistory) -> None:
    """Each level spawns one child running the same agent: levels 1 to 5 start, the sixth is
    refused and the refusal comes back up as each level's result. The tree is the same from
    the workflow, from Neo4j and from the CLI."""
    assert (await agents.create_task("t", "deep", agent=AgentSpec(name="deep"))).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 120)
    refusal = "refused: child tasks go at most 5 levels deep"
    assert done is not None and done.result is not None
    assert (done.status, done.result.text) == (TaskStatus.DONE, refusal)
    names = ["t" + "/down" * level for level in range(6)]
    for parent, child in itertools.pairwise(names):
        view = await view_of(agents, parent)
        assert {k: (c.name, c.status) for k, c in view.children.items()} == {
            "down": (child, TaskStatus.DONE)
        }
    assert (await view_of(agents, names[-1])).children == {}
    for name in names:
        await mirrored(agents, name)
    tree = await agents.task_tree("t", depth=10)
    assert [(row.depth, row.name, row.parent) for row in tree] == [
        (level, name, names[level - 1] if level else None) for level, name in enumerate(names)
    ]
    code, rows = await cli("tree", "t", "--depth", "10", "--project", agents.project_id, "--json")
    assert code == 0 and [row["name"] for row in rows] == names


async def test_a_fan_out_of_32_and_the_33rd_refused(agents: ConversationHistory) -> None:
    assert (await agents.create_task("t", "wide", agent=AgentSpec(name="wide"))).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 180)
    assert done is not None and done.result is not None
    assert done.result.text == "32 children; refused: a task spawns at most 32 child tasks"
    keys = [f"k{i:02d}" for i in range(32)]
    assert sorted(await child_results(agents)) == [(k, "done") for k in keys]
    await mirrored(agents, "t")
    tree = await agents.task_tree("t", depth=1)
    assert sorted(row.name for row in tree) == ["t"] + [f"t/{k}" for k in keys]


async def test_a_parent_never_completes_before_it_recorded_every_childs_end(
    agents: ConversationHistory, client: Client
) -> None:
    """An agent that spawns two children and ends at once: the task is ``done`` but its
    workflow runs on until both ends are recorded."""
    assert (await agents.create_task("t", "leave", agent=AgentSpec(name="leave"))).recorded
    await spawned(agents, 2)

    async def closed() -> bool:
        return (await view_of(agents)).status is TaskStatus.DONE

    await eventually(closed)
    handle = client.get_workflow_handle(agents.workflow_id("t"))
    assert (await agents.finish_task("t/a", "done")).recorded
    await eventually(lambda: _results_are(agents, [("a", "done")]))
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    assert (await agents.finish_task("t/b", "cancelled")).recorded
    final = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert final is not None and final.result is not None and final.result.text == "left"
    assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
    assert await child_results(agents) == [("a", "done"), ("b", "cancelled")]


async def _results_are(history: ConversationHistory, expected: list[tuple[str, str]]) -> bool:
    return await child_results(history) == expected


@pytest.mark.parametrize("cascade", [True, False], ids=["cascade", "no-cascade"])
async def test_cancelling_a_parent(agents: ConversationHistory, cascade: bool) -> None:
    """Cancelling a parent cancels its children, each reporting ``cancelled`` back before the
    parent ends; with ``cascade=False`` (``--no-cascade``) they keep running."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await spawned(agents, 2)
    assert (await agents.cancel_task("t", cascade=cascade)).recorded
    parent = await asyncio.wait_for(agents.wait_task("t"), 120)
    assert parent is not None and parent.status is TaskStatus.CANCELLED
    children = [await view_of(agents, f"t/c{i}") for i in range(2)]
    if cascade:
        assert [c.status for c in children] == [TaskStatus.CANCELLED] * 2
        assert sorted(await child_results(agents)) == [("c0", "cancelled"), ("c1", "cancelled")]
    else:
        assert [c.status for c in children] == [TaskStatus.OPEN] * 2
        assert await child_results(agents) == []
        assert (await agents.finish_task("t/c0", "done")).recorded  # its parent has ended
        ended = await asyncio.wait_for(agents.wait_task("t/c0"), 60)
        assert ended is not None and ended.status is TaskStatus.DONE
        assert (await agents.cancel_task("t/c1")).recorded


async def test_a_parent_named_at_creation_must_exist(agents: ConversationHistory) -> None:
    refused = await agents.create_task("c", "orphan", parent="nobody")
    assert (refused.recorded, refused.error) == (False, ErrorCode.PARENT_NOT_FOUND)
    assert (await agents.get_task("c")).view is None  # nothing stored
    assert (await agents.create_task("p", "parent")).recorded
    assert (await agents.create_task("c", "child", parent="p")).recorded
    assert (await view_of(agents, "c")).parent == "p"


async def test_the_readme_agent_asks_then_spawns(agents: ConversationHistory) -> None:
    """The README's ``release`` agent, answered and ended from Python as the README shows."""
    spec = AgentSpec(name="release", tools=["echo"])
    assert (await agents.create_task("release", "ship it", agent=spec)).recorded

    async def asked() -> bool:
        return bool((await view_of(agents, "release")).pending_inputs)

    await eventually(asked)
    assert (await agents.respond("release", 3)).recorded
    assert (await agents.submit_input("release", 3, request_id="ops-42")).recorded
    view = await spawned(agents, 2, "release")
    assert [c.name for c in view.children.values()] == ["release/eu", "release/us"]
    assert (await view_of(agents, "release/eu")).goal == "deploy 3 replicas to eu"
    assert (await agents.finish_task("release/eu", "done")).recorded
    # eu ends before us is finished, so the parent hears of them in that order
    assert (await asyncio.wait_for(agents.wait_task("release/eu"), 60)) is not None
    assert (await agents.finish_task("release/us", "failed", error="quota")).recorded
    done = await asyncio.wait_for(agents.wait_task("release"), 60)
    assert done is not None and done.result is not None
    assert done.result.text == "eu: done, us: failed"
    events = await all_events(agents, "release")
    kinds = [(e.kind, e.name) for e in events if e.kind.value.startswith(("input", "child"))]
    rejected = [json.loads(e.payload) for e in events if e.name == "rejected"]
    assert [k for k in kinds if k[1] != "rejected"] == [
        (EventKind.INPUT_REQUEST, "replicas"),
        (EventKind.INPUT_RESPONSE, "replicas"),
        (EventKind.CHILD_TASK, "eu"),
        (EventKind.CHILD_TASK, "us"),
        (EventKind.CHILD_RESULT, "eu"),
        (EventKind.CHILD_RESULT, "us"),
    ]
    # the signal after the update found nothing open: rejected, never kept for a later request
    assert [(r["answer"], "no input request is open" in r["error"]) for r in rejected] == [
        (3, True)
    ]
