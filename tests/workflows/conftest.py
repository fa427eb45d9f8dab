"""Fixtures of the workflow tests: a worker with the agent test tools and scripted models, a
private dev server that suggests continue-as-new early, and the CLI in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.contract import AgentSpec, Budgets, ModelSpec
from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS
from agent_tasks.devstack import find_temporal_binary, free_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.models import TaskRow
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOL_NAMES, TOOLS
from tests.approval_tools import APPROVAL_SCRIPTS, APPROVAL_TOOLS
from tests.conftest import private_dev_server

ROOT = Path(__file__).resolve().parents[2]
CONTINUE_AS_NEW_AT = "limit.historyCount.suggestContinueAsNew=60"
"""Dynamic config of the private servers here: continue-as-new is suggested at 60 events."""


@pytest.fixture(scope="session")
async def agent_queue(client: Client, graph: TaskGraph) -> AsyncIterator[str]:
    """A worker with the test tools and scripts (``tests.agent_tools``, and those that need
    approval: ``tests.approval_tools``), on its own task queue."""
    queue = f"agents-{uuid.uuid4().hex[:8]}"
    tools, scripts = [*TOOLS, *APPROVAL_TOOLS], {**SCRIPTS, **APPROVAL_SCRIPTS}
    async with build_worker(client, graph, queue, tools=tools, scripts=scripts):
        yield queue


@pytest.fixture
def agents(
    client: Client, graph: TaskGraph, agent_queue: str, project_id: str
) -> ConversationHistory:
    """A ``ConversationHistory`` of a fresh project on the agent worker's task queue."""
    return ConversationHistory(
        client, project_id=project_id, agent_id="agent-1", task_queue=agent_queue, graph=graph
    )


@pytest.fixture
async def low_limit_env() -> AsyncIterator[WorkflowEnvironment]:
    """A private dev server that suggests continue-as-new at 60 history events."""
    env = await private_dev_server(
        lambda: WorkflowEnvironment.start_local(
            port=free_port(),
            data_converter=DATA_CONVERTER,
            dev_server_existing_path=str(find_temporal_binary()),
            search_attributes=SEARCH_ATTRIBUTE_KEYS,
            dev_server_extra_args=["--dynamic-config-value", CONTINUE_AS_NEW_AT],
        )
    )
    yield env
    await env.shutdown()


async def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """Run ``python -m agent_tasks.cli ARGS`` (the ``agent-tasks`` CLI) against the local
    stack; returns its exit code and its output parsed as JSON (pass a JSON output flag).

    Raises:
        AssertionError: it printed nothing (its stderr's tail is the message).
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_tasks.cli",
        *args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert out, err.decode()[-2000:]
    return process.returncode or 0, json.loads(out)


def spec(**budgets: Any) -> AgentSpec:
    """The tool-calling loop with every test tool and the scripted model ``from-goal``."""
    return AgentSpec(
        tools=TOOL_NAMES,
        model=ModelSpec(provider="scripted", model="from-goal"),
        budgets=Budgets(**budgets),
    )


def script(*turns: Any) -> str:
    """A task goal holding its scripted model's turns (``tests.agent_tools.from_goal``)."""
    return json.dumps([t.model_dump(mode="json") for t in turns])


async def graph_row(history: ConversationHistory, task: str) -> TaskRow:
    """The task's node as Neo4j holds it (status, open input requests ...)."""
    rows = {row.name: row for row in await history.find_tasks(limit=200)}
    return rows[task]


async def worker_process(
    queue: str, env: Mapping[str, str] | None = None, *, pages: bool = False
) -> asyncio.subprocess.Process:
    """Start ``python -m tests.agent_worker QUEUE`` (the agent tests' tools) in a process of
    its own, its output discarded, its environment this process's with ``env`` over it: a
    worker a test can kill (SIGKILL) at any point. With ``pages``, it takes published pages
    (it has the broker)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.agent_worker",
        queue,
        *(["--pages"] if pages else []),
        cwd=ROOT,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def openai_worker(queue: str, base_url: str) -> asyncio.subprocess.Process:
    """``worker_process`` whose ``openai`` provider talks to ``base_url`` (the worker's own
    environment: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``)."""
    return await worker_process(queue, {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "test-key"})
