"""``prepare_namespace`` and ``agent-tasks setup`` (the compose files' one-shot service) against
a private Temporal dev server: the namespace, its retention and the task search attributes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
    RemoveSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.common import TypedSearchAttributes

from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.contract import TaskStart, TaskStatus
from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS, search_attributes
from agent_tasks.devstack import TemporalDevServer, free_port
from agent_tasks.worker import prepare_namespace

ROOT = Path(__file__).resolve().parents[1]
TASK_ATTRIBUTES = {key.name for key in SEARCH_ATTRIBUTE_KEYS}


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TemporalDevServer]:
    """A private headless dev server: the namespaces registered later have none of the task
    search attributes that it registers at start."""
    async with TemporalDevServer(tmp_path_factory.mktemp("temporal"), free_port()) as dev:
        yield dev


async def _state(client: Client) -> tuple[timedelta, dict[str, str]]:
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=client.namespace), retry=True
    )
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace), retry=True
    )
    attributes = {
        name: IndexedValueType.Name(kind)
        for name, kind in listed.custom_attributes.items()
        if name in TASK_ATTRIBUTES
    }
    return described.config.workflow_execution_retention_ttl.ToTimedelta(), attributes


async def test_setup_command_registers_the_namespace_then_changes_nothing_twice(
    server: TemporalDevServer, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.address,
        "TEMPORAL_NAMESPACE": "agents-prod",
        "AGENT_TASKS_RETENTION_DAYS": "45",
    }
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agent_tasks.cli", "setup"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "namespace 'agents-prod' registered, retention 45 days" in done.stdout
    assert "search attributes added: AgentId, ParentTask, ProjectId, SessionId, TaskStatus" in (
        done.stdout
    )
    assert "Neo4j schema ready" in done.stdout

    client = await Client.connect(server.address, namespace="agents-prod")
    assert await _state(client) == (
        timedelta(days=45),
        dict.fromkeys(TASK_ATTRIBUTES, "INDEXED_VALUE_TYPE_KEYWORD"),
    )
    assert await prepare_namespace(client, timedelta(days=45)) == []
    assert await prepare_namespace(client) == [
        "namespace 'agents-prod' retention 45 days -> 30 days"
    ]
    assert (await _state(client))[0] == timedelta(days=30)


async def test_an_attribute_of_another_type_is_a_clear_error(server: TemporalDevServer) -> None:
    client = await Client.connect(server.address, namespace="typed-otherwise")
    assert await prepare_namespace(client, timedelta(days=1)) != []  # registered
    await client.operator_service.remove_search_attributes(
        RemoveSearchAttributesRequest(namespace="typed-otherwise", search_attributes=["ProjectId"]),
        retry=True,
    )
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace="typed-otherwise",
            search_attributes={"ProjectId": IndexedValueType.INDEXED_VALUE_TYPE_TEXT},
        ),
        retry=True,
    )
    with pytest.raises(ValueError, match="ProjectId of namespace 'typed-otherwise' has type "):
        await prepare_namespace(client, timedelta(days=1))
    _, attributes = await _state(client)
    assert attributes["ProjectId"] == "INDEXED_VALUE_TYPE_TEXT"  # left as it was


async def test_processes_preparing_one_namespace_at_once_all_succeed(
    server: TemporalDevServer,
) -> None:
    """Five first starts at once (``agent-tasks setup`` beside ``dev up``, workers starting
    together; temporalio/temporal#3914 met the kind: a registration script answered "the
    namespace already exists" while workers still read "Namespace default not found"):
    before, all but one failed on ``Namespace "..." already exists`` (``ALREADY_EXISTS``
    from ``register_namespace``); now each succeeds, one of them says it registered the
    namespace, and the namespace is as asked."""
    clients = [await Client.connect(server.address, namespace="at-once") for _ in range(5)]
    done = await asyncio.gather(
        *(prepare_namespace(c, timedelta(days=3)) for c in clients), return_exceptions=True
    )
    assert [d for d in done if isinstance(d, BaseException)] == []
    said = [line for lines in done if isinstance(lines, list) for line in lines]
    assert said.count("namespace 'at-once' registered, retention 3 days") == 1
    assert await _state(clients[0]) == (
        timedelta(days=3),
        dict.fromkeys(TASK_ATTRIBUTES, "INDEXED_VALUE_TYPE_KEYWORD"),
    )
    assert await prepare_namespace(clients[0], timedelta(days=3)) == []


async def test_a_task_starts_at_once_after_its_namespace_is_prepared(
    server: TemporalDevServer,
) -> None:
    """temporalio/temporal#4017: a workflow started right after its search attributes were
    added failed (``INVALID_ARGUMENT: Namespace ... has no mapping defined for search
    attribute``), as did one right after the namespace's registration (hocus-dev/hocus#86:
    "Namespace default is not found"). Ours: ``prepare_namespace`` returns once the namespace
    answers and lists the attributes; a start with every task attribute right after it, on
    a fresh namespace, is taken (held)."""
    client = await Client.connect(
        server.address, namespace="started-at-once", data_converter=DATA_CONVERTER
    )
    assert await prepare_namespace(client, timedelta(days=1)) != []
    start = TaskStart(
        project_id="p", name="t", goal="g", agent_id="a", session_id="s", parent="up",
        request_id="r1",
    )  # fmt: skip
    handle = await client.start_workflow(
        "TaskWorkflow",
        id="started-at-once",
        task_queue="no-worker",
        search_attributes=TypedSearchAttributes(search_attributes(start, TaskStatus.OPEN)),
    )
    described = await handle.describe()
    held = described.typed_search_attributes
    assert {pair.key.name for pair in held} >= TASK_ATTRIBUTES
    await handle.terminate("started")
