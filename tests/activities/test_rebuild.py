"""``graph rebuild`` of a task that continued-as-new: one history fetch and one in-process
replay per run (no query, so no worker is needed), nothing deleted before its replacement is
written (a rebuild stopped half-way leaves every event readable), and what a rebuild did not
write is dropped at its end, within what it covered. Against a private Temporal dev server
that suggests continue-as-new after 60 history events, and the real Neo4j."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment

from agent_tasks.activities.mirror import copy_run
from agent_tasks.activities.rebuild import RebuildReport, ReplayedRun, rebuild, replay_run
from agent_tasks.cli.replay_check import replay_server
from agent_tasks.contract import (
    Event,
    StepView,
    TaskStart,
    TaskStatus,
    TaskWorkflowInput,
    task_workflow_id,
)
from agent_tasks.contract.handlers import WORKFLOW_TYPE
from agent_tasks.contract.search import search_attributes
from agent_tasks.devstack import free_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.models import StepFilter
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from agent_tasks.workflows import pages
from tests.conftest import eventually, mirrored
from tests.workflows.test_durability import dev_server


@pytest.fixture
async def low_limit_env(tmp_path: Path) -> AsyncIterator[WorkflowEnvironment]:
    env = await dev_server(
        free_port(),
        tmp_path / "temporal.db",
        "--dynamic-config-value",
        "limit.historyCount.suggestContinueAsNew=60",
    )
    yield env
    await env.shutdown()


async def snapshot(
    graph: TaskGraph, history: ConversationHistory, task: str
) -> tuple[list[Event], list[StepView]]:
    events = await graph.reads.events(history.project_id, history.workflow_id(task), 0, 10**9, 1000)
    steps = [
        StepView.model_validate(row.model_dump())
        for row in await graph.reads.find_steps(history.project_id, StepFilter(limit=200))
        if row.task_name == task
    ]
    return events, steps


async def add_node(graph: TaskGraph, cypher: str, **params: object) -> None:
    await graph.driver.execute_query(cypher, params, database_=graph.database)


async def test_rebuild_replays_each_run_once_and_deletes_nothing_before_its_replacement(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph
) -> None:
    client: Client = low_limit_env.client
    queue, project = "rebuild", f"rb-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project, agent_id="a", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue):
        for task in ("done", "open"):
            await history.create_task(task, "many runs")
            for i in range(30):
                seq = (await history.record_event(task, "tool_result", f"{task}-{i}")).seq
                if i % 10 == 0:
                    await history.set_step(task, f"s{i}", "completed", result_event_seq=seq)
        await history.finish_task("done", "done", result="ok")
        for task in ("done", "open"):
            await mirrored(history, task)
        views = {task: (await history.get_task(task)).view for task in ("done", "open")}
        # 33 writes each add at least two history events (an update's accepted and completed;
        # under load several share a workflow task), so the limit of 60 is passed at least
        # once: two runs or more (how many more depends on how the mirror batched)
        assert all(v is not None and v.runs >= 2 and v.last_seq == 30 for v in views.values()), {
            task: (v.runs, v.last_seq, v.status) if v else None for task, v in views.items()
        }
        before = {task: await snapshot(graph, history, task) for task in ("done", "open")}
        counts = await graph.reads.counts(project)
        assert [e.seq for e in before["done"][0]] == list(range(1, 31))

        # A rebuild stopped after its first run: every event is still there, unchanged.
        done_id = history.workflow_id("done")
        first_run = None
        async for execution in client.list_workflows(f"WorkflowId = '{done_id}'"):
            if first_run is None or execution.start_time < first_run.start_time:
                first_run = execution
        assert first_run is not None
        ledger = await replay_run(client, done_id, first_run.run_id)
        assert ledger is not None
        assert 0 < pages.view(ledger).last_seq < 30  # the first run holds only the first seqs
        await copy_run(ReplayedRun(ledger), graph, "first run", mark="stopped-rebuild")
        assert await snapshot(graph, history, "done") == before["done"]
        page = await history.list_events("done", after_seq=0, limit=30)
        assert page.events == before["done"][0]
    # The worker is gone from here on: a query would find no poller; a rebuild replays in
    # this process.

    # Nodes no run holds: gone after a rebuild of the closed task; for the open task, an event
    # past the replayed state (as the live mirror may write meanwhile) stays.
    for key in (done_id, history.workflow_id("open")):
        await add_node(
            graph,
            "CREATE (:Step {key: $key + '/ghost', task_key: $key, project_id: $p,"
            " step_name: 'ghost', updated_at: datetime('2020-01-01T00:00Z')})",
            key=key,
            p=project,
        )
        await add_node(
            graph,
            "CREATE (:Event {key: $key + '#31', task_key: $key, project_id: $p, seq: 31})",
            key=key,
            p=project,
        )

    report = await rebuild(client, graph, project)
    runs = sum(v.runs for v in views.values() if v is not None)
    assert report == RebuildReport(tasks=2, runs=runs, events=60, failed=[])
    assert await snapshot(graph, history, "done") == before["done"]
    assert await snapshot(graph, history, "open") == before["open"]
    after = await graph.reads.counts(project)
    assert after == {**counts, "Event": counts["Event"] + 1}  # the open task's seq 31
    records, _, _ = await graph.driver.execute_query(
        "MATCH (e:Event {project_id: $p, seq: 31}) RETURN e.task_key AS key",
        {"p": project},
        database_=graph.database,
    )
    assert [r["key"] for r in records] == [history.workflow_id("open")]

    # Rebuilding again changes nothing.
    assert await rebuild(client, graph, project, "done") == RebuildReport(
        tasks=1, runs=views["done"].runs if views["done"] else 0, events=30, failed=[]
    )
    assert await graph.reads.counts(project) == after


async def test_a_run_before_its_first_workflow_task_is_passed_over_not_waited_for(
    client: Client, graph: TaskGraph
) -> None:
    """A run whose first workflow task the server holds back (``firstWorkflowTaskBackoff``:
    a continue-as-new right after the run before, or a delayed start) holds only its start
    event until then; temporalio's ``Replayer`` given such a history never returns. ``graph
    rebuild`` met one when a task had just continued as new and hung the rebuild; ``agent-tasks
    replay`` of the server's histories would have hung the same way. Both pass it over: it
    has run no workflow code, so it holds nothing to replay or copy."""
    project, name = f"rb-{uuid.uuid4().hex[:8]}", "delayed"
    start = TaskStart(project_id=project, name=name, goal="later", agent_id="a", request_id="r1")
    workflow_id = task_workflow_id(project, name)
    handle = await client.start_workflow(
        WORKFLOW_TYPE,
        TaskWorkflowInput(start=start),
        id=workflow_id,
        task_queue=f"no-worker-{uuid.uuid4().hex[:8]}",
        start_delay=timedelta(hours=1),
        search_attributes=TypedSearchAttributes(search_attributes(start, TaskStatus.OPEN)),
    )
    try:
        history = await handle.fetch_history()
        started = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        assert [event.event_type for event in history.events] == [started]
        assert await replay_run(client, workflow_id, handle.result_run_id or "") is None

        async def listed() -> bool:
            return [e async for e in client.list_workflows(f"ProjectId = '{project}'")] != []

        await eventually(listed)
        assert await rebuild(client, graph, project) == RebuildReport(
            tasks=1, runs=1, events=0, failed=[]
        )
        assert await graph.reads.counts(project) == {}  # nothing written, nothing waited for
        (result,) = await replay_server(client, project=project)
        assert (result.workflow_id, result.events, result.result) == (workflow_id, 1, "ok")
        assert result.message is not None and "no workflow task yet" in result.message
    finally:
        await handle.terminate("test over")
