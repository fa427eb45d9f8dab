"""Errors say what happened: a model call the API refuses, or a tool that fails, puts the
cause (the provider's HTTP status and message, the tool's error type and message, bounded)
in the task's ``error`` event and view, never only "ActivityError: Activity task failed".
The ``openai`` provider talks to an OpenAI-compatible server of the test's own."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_tasks.cli.importer import all_events
from agent_tasks.contract import AgentSpec, EventKind, ModelSpec, TaskStatus
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from tests.model_server import ModelServer, error
from tests.workflows.conftest import openai_worker


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "This model's maximum context length is 8192 tokens"),
        (401, "Incorrect API key provided"),
        (404, "The model `test-model` does not exist"),
    ],
)
async def test_a_refused_model_call_names_the_status_and_message(
    client: Client, graph: TaskGraph, project_id: str, status: int, message: str
) -> None:
    server = ModelServer([error(status, message)])
    queue = f"refused-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    with server.running():
        worker = await openai_worker(queue, server.url)
        try:
            spec = AgentSpec(model=ModelSpec(provider="openai", model="test-model"))
            assert (await history.create_task("t", "hi", agent=spec)).recorded
            view = await asyncio.wait_for(history.wait_task("t"), 60)
            events = await all_events(history, "t")
        finally:
            worker.kill()
            await worker.wait()
    assert view is not None and view.status is TaskStatus.FAILED and view.error is not None
    expected = f"HTTP {status}: {message}"
    assert expected in view.error.text and "ActivityError" not in view.error.text
    (failure,) = [e for e in events if e.kind is EventKind.ERROR]
    assert expected in failure.payload
    assert len(server.requests) == 1  # a 4xx is not retried


async def test_a_failed_tool_names_its_error_type_and_message(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """Agent code whose third step fails (``RuntimeError("the first run fails")`` in the
    tool): the step's result and the task's error name the type and the message."""
    spec = AgentSpec(name="three_steps", tools=["echo", "sync_data", "fail_first"])
    spec = spec.model_copy(update={"input": {"log": str(tmp_path / "log")}})
    assert (await agents.create_task("t", "three", agent=spec)).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.status is TaskStatus.FAILED and view.error is not None
    assert "RuntimeError: the first run fails" in view.error.text
    events = await all_events(agents, "t")
    results = [e.payload for e in events if e.kind is EventKind.TOOL_RESULT]
    assert "RuntimeError: the first run fails" in results[-1]
