"""Steps at any fan-out: an agent task that runs 480 CPU-heavy steps at once (``fan_out`` of
``burn``, each a few ms of the worker's CPU on its event loop) completes every one exactly
once, no step's activity is retried, and the worker logs neither a full query buffer (a step
reads its arguments from its input, never by query) nor a deadlock warning. Real Temporal and
Neo4j, the session's worker process."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_tasks.contract import AgentSpec, StepState, TaskStatus
from agent_tasks.contract.mirror import MIRROR_ACTIVITY
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS

STEPS = 480


@pytest.mark.load
async def test_480_cpu_heavy_steps_at_once_run_exactly_once(
    client: Client,
    graph: TaskGraph,
    project_id: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = f"fanout-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id, "a", task_queue=queue, graph=graph, timeout_s=600
    )
    log = tmp_path / "burn.log"
    spec = AgentSpec(
        name="fan_out",
        tools=["burn"],
        input={"steps": STEPS, "log": str(log), "rounds": 10_000},
    )
    caplog.set_level(logging.WARNING)
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        assert (await history.create_task("fan", "burn at once", agent=spec)).recorded
        view = await history.wait_task("fan")
    assert view is not None and view.status is TaskStatus.DONE
    assert view.result is not None and view.result.text == str(STEPS)
    assert view.step_counts[StepState.COMPLETED] == STEPS
    runs = log.read_text(encoding="utf-8").splitlines()
    assert len(runs) == STEPS and len(set(runs)) == STEPS  # each step ran once
    events = (await client.get_workflow_handle(history.workflow_id("fan")).fetch_history()).events
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    retried = [
        (scheduled[a.scheduled_event_id], a.attempt, a.last_failure.message)
        for e in events
        if e.HasField("activity_task_started_event_attributes")
        for a in [e.activity_task_started_event_attributes]
        if a.attempt > 1
    ]
    # No step was retried. The mirror's write may be: its heartbeat (MIRROR_HEARTBEAT) can
    # starve while the synchronous burns hold the worker's event loop, and its writes are MERGEs.
    assert [r for r in retried if r[0] != MIRROR_ACTIVITY] == []
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "query buffer is full" not in logged
    assert "deadlock" not in logged.lower()
