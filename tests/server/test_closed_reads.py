"""A closed task is read with every worker of its task queue stopped (``tasklog.reader``): the
client, ``agent-tasks task show`` and ``GET /tasks/{name}`` answer from the workflow's result
and the graph store, with the values that were written; an open task is still read by query."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

import httpx

from agent_tasks.contract import StepState, TaskStatus
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import build_worker
from tests.server.conftest import Api, Project

EVENTS = [
    {"kind": "message", "role": "user", "payload": "find the cheapest flight"},
    {"kind": "tool_call", "name": "search", "call_id": "c1", "payload": '{"to": "Oslo"}'},
    {"kind": "tool_result", "name": "search", "call_id": "c1", "payload": "SK 4021, 89 EUR"},
]


async def test_closed_task_read_with_no_worker(api: Api, project: Project) -> None:
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
