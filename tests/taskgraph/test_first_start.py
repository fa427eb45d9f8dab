"""Processes starting at once on a fresh graph store all start: the schema (constraints,
indexes) and the warm-up each start runs (``GraphStore.ensure_ready``, as ``open_graph(...,
schema=True)`` runs it for ``serve``, ``dev up`` and every worker) tolerate the others doing
the same at the same moment. Each store here is fresh: a Neo4j of the test's own, a FalkorDB
graph of a new name.

The kind: ``serve`` exited on Neo4j's ``DeadlockDetected`` while a worker created the schema
in the same second (each schema rule ran auto-commit, without the driver's transient retry);
cartography-cncf/cartography#2138 met the same kind on Neo4j (parallel syncs creating one index:
``EquivalentSchemaRuleAlreadyExists`` despite ``IF NOT EXISTS``, which ours took as done
already; the deadlock was not). ``tests/test_worker.py`` has the namespace's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_tasks.config import Settings
from agent_tasks.devstack import free_port
from agent_tasks.devstack.falkordb_server import FalkorDBServer
from agent_tasks.devstack.neo4j_server import Neo4jServer
from agent_tasks.taskgraph.falkordb import cypher
from agent_tasks.taskgraph.falkordb.graph import FalkorGraph
from agent_tasks.taskgraph.neo4j.schema import SCHEMA
from agent_tasks.worker import open_graph

STARTS = 6
"""Processes (here: coroutines, each with a driver of its own) starting at once."""


async def test_processes_starting_at_once_on_a_fresh_neo4j_all_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Neo4jServer(tmp_path / "neo4j", free_port(), password="first-start-password")
    await server.start()
    try:
        await server.wait_ready()
        monkeypatch.setenv("NEO4J_URI", server.uri)
        monkeypatch.setenv("NEO4J_PASSWORD", "first-start-password")
        monkeypatch.setenv("AGENT_TASKS_GRAPH", "neo4j")

        async def start() -> list[str]:
            async with open_graph(Settings(), schema=True) as graph:
                rows = await graph.records("SHOW CONSTRAINTS YIELD name", write=False)
                indexes = await graph.records("SHOW INDEXES YIELD name", write=False)
                return sorted(row["name"] for row in rows + indexes)

        started = await asyncio.gather(*(start() for _ in range(STARTS)), return_exceptions=True)
        failed = [repr(s) for s in started if isinstance(s, BaseException)]
        assert failed == []
        names = {statement.split()[2] for statement in SCHEMA}  # CREATE CONSTRAINT|INDEX name
        last = started[-1]
        assert isinstance(last, list) and names <= set(last)
    finally:
        await server.stop()


async def test_processes_starting_at_once_on_a_fresh_falkordb_graph_all_start(
    falkordb_server: FalkorDBServer,
) -> None:
    graphs = [FalkorGraph(falkordb_server.url, f"first_{free_port()}") for _ in range(1)]
    graphs += [FalkorGraph(falkordb_server.url, graphs[0].graph_name) for _ in range(STARTS - 1)]
    try:
        started = await asyncio.gather(
            *(graph.ensure_ready() for graph in graphs), return_exceptions=True
        )
        assert [repr(s) for s in started if isinstance(s, BaseException)] == []
        held = await graphs[0].constraints()
        assert sorted((label, prop) for label, prop, _ in held) == sorted(cypher.UNIQUE)
        assert {status for _, _, status in held} == {"OPERATIONAL"}
    finally:
        for graph in graphs:
            await graph.close()
