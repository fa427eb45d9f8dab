"""A closed task is read with every worker of its task queue stopped (``tasklog.reader``): the
client, ``agent-tasks task show`` and ``GET /tasks/{name}`` answer from the workflow's result
and the graph store, with the values that were written; an open task is still read by query."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import httpx

from agent_tasks.contract import AgentSpec, EventKind, StepState, TaskStatus
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.conftest import eventually
from tests.server.conftest import Api, Project

EVENTS = [
    {"kind": "message", "role": "user", "payload": "find the cheapest flight"},
    {"kind": "tool_call", "name": "search", "call_id": "c1", "payload": '{"to": "Oslo"}'},
    {"kind": "tool_result", "name": "search", "call_id": "c1", "payload": "SK 4021, 89 EUR"},
]


def queue_history(api: Api, project: Project) -> tuple[str, GraphStore, ConversationHistory]:
    """A task queue of the test's own (no worker polls it until the test starts one), the
    graph store, and the project's client on that queue (calls of at most 5 s)."""
    queue = f"closed-{uuid.uuid4().hex[:8]}"
    graph = api.services.graph
    assert graph is not None
    history = ConversationHistory(
        api.services.client,
        project.project_id,
        "tests",
        task_queue=queue,
        graph=graph,
        timeout_s=5,
    )
    return queue, graph, history


async def test_closed_task_read_with_no_worker(api: Api, project: Project) -> None:
    queue, graph, history = queue_history(api, project)
    async with build_worker(api.services.client, graph, queue):
        assert (await history.create_task("done-1", "book a flight")).recorded
        assert (await history.record_events("done-1", EVENTS)).recorded
        assert (await history.set_step("done-1", "search", StepState.COMPLETED)).recorded
        assert (await history.finish_task("done-1", "done", result="SK 4021")).recorded
        assert (await history.create_task("cancel-1", "a task cancelled")).recorded
        assert (await history.cancel_task("cancel-1")).recorded
        assert (await history.create_task("open-1", "still open")).recorded
        await history.wait_task("done-1")
        await history.wait_task("cancel-1")
    # every worker of the queue is stopped: a query of these tasks would wait 5 s and fail
    done = (await history.get_task("done-1")).view
    assert done is not None
    assert done.result is not None and done.result.text == "SK 4021"
    assert (done.status, done.last_seq) == (TaskStatus.DONE, len(EVENTS))
    assert done.step_counts[StepState.COMPLETED] == 1
    page = await history.list_events("done-1")
    assert [e.payload for e in page.events] == [e["payload"] for e in EVENTS]
    assert [e.seq for e in page.events] == [1, 2, 3]
    assert page.next_after_seq is None
    second = await history.list_events("done-1", after_seq=1, limit=1)
    assert ([e.seq for e in second.events], second.next_after_seq) == ([2], 2)
    steps = await history.list_steps("done-1")
    assert [(s.step_name, s.state) for s in steps.steps] == [("search", StepState.COMPLETED)]
    cancelled = (await history.get_task("cancel-1")).view
    assert cancelled is not None and cancelled.status is TaskStatus.CANCELLED

    async with httpx.AsyncClient(base_url=api.url, headers=project.headers, timeout=30) as http:
        got = await http.get("/tasks/done-1")
        assert got.status_code == 200
        assert got.json()["view"]["result"]["text"] == "SK 4021"
        events = (await http.get("/tasks/done-1/events")).json()["events"]
        assert [e["payload"] for e in events] == [e["payload"] for e in EVENTS]

    shown = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_tasks.cli",
        "task",
        "show",
        "done-1",
        "--project",
        project.project_id,
        "--json",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await shown.communicate()
    assert shown.returncode == 0
    assert json.loads(out)["result"]["text"] == "SK 4021"

    # the open task's read is a query, answered only by a worker: none polls, so it fails
    failed = await asyncio.gather(history.get_task("open-1"), return_exceptions=True)
    assert type(failed[0]).__name__ == "TaskServiceUnavailable"
    async with build_worker(api.services.client, graph, queue):
        assert (await history.record_events("open-1", EVENTS[:1])).recorded
        opened = (await history.get_task("open-1")).view
        assert opened is not None and opened.last_seq == 1
        assert opened.status is TaskStatus.OPEN
        assert (await history.finish_task("open-1", "done")).recorded


async def test_every_closed_task_reads_without_a_worker(
    api: Api, project: Project, tmp_path: Path
) -> None:
    """Terminated (the Web UI's Terminate, ``temporal workflow terminate``) and cancelled
    tasks, every worker of their queue stopped (temporalio/temporal#1546, #3821: a query of a
    closed run waits for a worker). The terminated one reads from the graph store what its
    mirror had written before the end (``workflow_status`` TERMINATED says the view is not the
    task's end), its events too, over the client and HTTP; before, each read waited for a
    worker and failed (503 after the client's time limit). The cancelled agent task reads its
    whole view (its agent, its run, the request its cancel closed) from the graph store;
    before, the read waited ``CANCELLED_VIEW_WAIT`` for a replay and then gave the store's
    view without them. With a worker running a closed task is read the same way (``source``
    ``neo4j``: no query)."""
    queue, graph, history = queue_history(api, project)
    agent = AgentSpec(name="ask_positive", input={"log": str(tmp_path / "sync.log")})
    async with build_worker(api.services.client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        assert (await history.create_task("stopped", "terminated mid-way")).recorded
        assert (await history.record_events("stopped", EVENTS)).recorded
        assert (await history.set_step("stopped", "search", StepState.IN_PROGRESS)).recorded
        assert await history.wait_mirrored("stopped", 30)
        handle = api.services.client.get_workflow_handle(history.workflow_id("stopped"))
        await handle.terminate("an operator's terminate")
        assert (await history.create_task("asked", "cancelled while asking", agent=agent)).recorded

        async def asking() -> bool:
            view = (await history.get_task("asked")).view
            return view is not None and bool(view.pending_inputs)

        await eventually(asking)
        assert (await history.cancel_task("asked")).recorded
        await history.wait_task("asked")
        running = await history.get_task("asked")
        assert running.source == "neo4j" and running.workflow_status == "CANCELED"

    stopped = await history.get_task("stopped")
    assert (stopped.found, stopped.source, stopped.workflow_status) == (True, "neo4j", "TERMINATED")
    assert stopped.view is not None
    assert (stopped.view.status, stopped.view.last_seq) == (TaskStatus.OPEN, len(EVENTS))
    assert stopped.view.step_counts[StepState.IN_PROGRESS] == 1
    page = await history.list_events("stopped")
    assert [e.payload for e in page.events] == [e["payload"] for e in EVENTS]
    steps = await history.list_steps("stopped")
    assert [(s.step_name, s.state) for s in steps.steps] == [("search", StepState.IN_PROGRESS)]
    async with httpx.AsyncClient(base_url=api.url, headers=project.headers, timeout=30) as http:
        got = await http.get("/tasks/stopped")
        assert got.status_code == 200, got.text
        assert got.json()["workflow_status"] == "TERMINATED"
        events = await http.get("/tasks/stopped/events")
        assert events.status_code == 200, events.text
        assert [e["seq"] for e in events.json()["events"]] == [1, 2, 3]

    cancelled = await history.get_task("asked")
    assert (cancelled.source, cancelled.workflow_status) == ("neo4j", "CANCELED")
    view = cancelled.view
    assert view is not None and view.status is TaskStatus.CANCELLED
    assert view.agent is not None and view.agent.name == "ask_positive"
    assert view.agent_run is not None and view.agent_run.run == 1
    assert view.closed_inputs == {"n": "task cancelled"} and view.pending_inputs == []
    assert (view.unmirrored_writes, view.mirrored_seq) == (0, view.last_seq)
    logged = (await history.list_events("asked", limit=200)).events
    assert [e.seq for e in logged] == list(range(1, view.last_seq + 1))
    closed = [e.payload for e in logged if e.kind is EventKind.NOTE and e.name == "input_closed"]
    assert [json.loads(c)["input_id"] for c in closed] == ["n"]
