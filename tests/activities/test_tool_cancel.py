"""A tool that waits on a socket hears its task's cancel soon, whatever its heartbeat timeout
(``activities.heartbeat.CANCEL_BEAT_S``, ``worker.HEARTBEAT_THROTTLE``): its request is
closed, the server sees it, and the step ends ``unknown`` (real Temporal, Neo4j; the tests'
own HTTP server, ``tests.model_server``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import BaseModel

from agent_tasks.activities.tools import ToolContext, tool
from agent_tasks.contract import AgentSpec, EventKind, ModelSpec, StepState
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker
from tests.agent_tools import SCRIPTS, answer, calls
from tests.conftest import eventually
from tests.model_server import ModelServer, Reply, completion


class Address(BaseModel):
    """Arguments of ``wait_socket``."""

    url: str


@tool("wait_socket", arguments=Address, idempotent=False, heartbeat_s=30, start_to_close_s=120)
async def wait_socket(args: Address, context: ToolContext) -> str:
    """POSTs to ``url`` and returns the answer: it waits on the socket meanwhile."""
    async with httpx.AsyncClient(timeout=None) as client:
        response = await client.post(args.url, json={})
    return response.text


@pytest.fixture
async def queue(services: Services) -> AsyncIterator[str]:
    assert services.graph is not None
    name = f"socket-{uuid.uuid4().hex[:8]}"
    async with build_worker(
        services.client, services.graph, name, tools=[wait_socket], scripts=SCRIPTS
    ):
        yield name


async def test_a_cancel_closes_a_tools_socket(
    services: Services, project_id: str, queue: str
) -> None:
    """pydantic/pydantic-ai#6914 (PR #6965): a tool activity that never heartbeats cannot hear
    its workflow's cancel; here the tool heartbeats (a 30 s heartbeat timeout), and the worker
    used to hold its heartbeats back up to 24 s (0.8 of it), so a cancel waited that long."""
    assert services.graph is not None
    server = ModelServer([Reply(body=completion("late"), delay_s=60)])
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    turns = [calls(("wait_socket", {"url": server.url + "/wait"})), answer("never")]
    goal = json.dumps([t.model_dump(mode="json") for t in turns])
    spec = AgentSpec(tools=["wait_socket"], model=ModelSpec(provider="scripted", model="from-goal"))
    with server.running():
        assert (await history.create_task("t", goal, agent=spec)).recorded

        async def asked() -> bool:
            return len(server.requests) == 1

        await eventually(asked)
        cancelled_at = time.monotonic()
        await history.cancel_task("t")
        final = await history.wait_task("t")
        assert final is not None and final.status.value == "cancelled"

        async def closed() -> bool:
            return server.exchanges[0].closed_early

        await eventually(closed)
    (step,) = (await history.list_steps("t")).steps
    assert step.state is StepState.UNKNOWN
    events = (await history.list_events("t", limit=100)).events
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert "cancelled while the tool ran" in result.payload
    closed_at = server.exchanges[0].closed_at
    assert closed_at is not None
    print(f"cancel -> the tool's socket closed: {closed_at - cancelled_at:.2f} s")
