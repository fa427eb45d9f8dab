"""Durability against private real servers: a Temporal dev server restarted on its SQLite
file, continue-as-new forced by a lowered server limit with writes in flight, and a Neo4j
stopped during writes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS
from agent_tasks.devstack import Neo4jServer, find_temporal_binary, free_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.driver import open_driver
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.conftest import mirrored


async def dev_server(port: int, db: Path, *extra: str) -> WorkflowEnvironment:
    return await WorkflowEnvironment.start_local(
        port=port,
        data_converter=DATA_CONVERTER,
        dev_server_existing_path=str(find_temporal_binary()),
        dev_server_database_filename=str(db),
        search_attributes=SEARCH_ATTRIBUTE_KEYS,
        dev_server_extra_args=list(extra),
    )


async def test_tasks_survive_a_temporal_dev_server_restart(
    graph: TaskGraph, tmp_path: Path
) -> None:
    port, db, queue = free_port(), tmp_path / "temporal.db", "restart"
    project = f"r-{uuid.uuid4().hex[:8]}"
    env = await dev_server(port, db)
    try:
        history = ConversationHistory(
            env.client, project_id=project, agent_id="a", task_queue=queue
        )
        async with build_worker(env.client, graph, queue):
            await history.create_task("t", "survive")
            await history.record_events(
                "t", [{"kind": "message", "payload": f"m{i}"} for i in range(5)]
            )
            await history.set_step("t", "s", "in_progress")
    finally:
        await env.shutdown()
    env = await dev_server(port, db)
    try:
        history = ConversationHistory(
            env.client, project_id=project, agent_id="a", task_queue=queue
        )
        async with build_worker(env.client, graph, queue):
            view = (await history.get_task("t")).view
            assert view is not None and (view.goal, view.last_seq) == ("survive", 5)
            assert (await history.record_event("t", "message", "after")).seq == 6
            assert (await history.set_step("t", "s", "completed", result_event_seq=6)).recorded
            payloads = [e.payload for e in (await history.list_events("t")).events]
            assert payloads == [f"m{i}" for i in range(5)] + ["after"]
            await mirrored(history, "t")
    finally:
        await env.shutdown()


@pytest.fixture
async def low_limit_env(tmp_path: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A private dev server that suggests continue-as-new after 60 history events."""
    env = await dev_server(
        free_port(),
        tmp_path / "temporal.db",
        "--dynamic-config-value",
        "limit.historyCount.suggestContinueAsNew=60",
    )
    yield env
    await env.shutdown()


async def test_continue_as_new_with_writes_in_flight(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph
) -> None:
    queue, project = "can", f"c-{uuid.uuid4().hex[:8]}"
    client = low_limit_env.client
    history = ConversationHistory(
        client, project_id=project, agent_id="a", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue):
        await history.create_task("t", "long")
        early = await history.record_event("t", "message", "early", request_id="early")

        three_continues = asyncio.Event()

        async def writer(w: int) -> list[tuple[int | None, str]]:
            """Write until the task has continued-as-new three times (at most 200 writes)."""
            written = []
            for i in range(200):
                if three_continues.is_set():
                    break
                text = f"w{w}-{i}"
                result = await history.record_event("t", "message", text, request_id=text)
                assert result.recorded, result
                written.append((result.seq, text))
                view = (await history.get_task("t")).view
                if view is not None and view.runs >= 4:
                    three_continues.set()
            return written

        batches = await asyncio.gather(*(writer(w) for w in range(5)))
        retried = await history.record_event("t", "message", "early", request_id="early")
        await mirrored(history, "t")
        view = (await history.get_task("t")).view
        assert view is not None
        assert view.runs >= 4, view.runs  # continued-as-new at least three times
        total = 1 + sum(len(batch) for batch in batches)
        assert view.last_seq == total
        assert (retried.seq, retried.duplicate) == (early.seq, True)  # window survived
        events = []
        after: int | None = 0
        while after is not None:
            page = await history.list_events("t", after_seq=after, limit=40)
            events += page.events
            after = page.next_after_seq
        assert [e.seq for e in events] == list(range(1, total + 1))
        expected = {seq: text for batch in batches for seq, text in batch}
        expected[early.seq] = "early"
        assert {e.seq: e.payload for e in events} == expected


async def test_neo4j_down_during_200_writes(client: Client, tmp_path: Path) -> None:
    """A private Neo4j is stopped, 200 writes go in, it starts again: the mirror catches up
    with every event once."""
    server = Neo4jServer(tmp_path / "neo4j", free_port(), password="outage-test-password")
    await server.start()
    await server.wait_ready()
    driver = open_driver(server.uri, server.auth())
    graph = TaskGraph(driver)
    await graph.init_schema()
    queue, project = f"outage-{uuid.uuid4().hex[:6]}", f"n-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(client, project_id=project, agent_id="a", task_queue=queue)
    try:
        async with build_worker(client, graph, queue):
            await history.create_task("t", "outage")
            await mirrored(history, "t")
            await server.stop()
            for chunk in range(20):
                results = await asyncio.gather(
                    *(history.record_event("t", "message", f"m{chunk * 10 + i}") for i in range(10))
                )
                assert all(r.recorded for r in results)
            view = (await history.get_task("t")).view
            assert view is not None and view.last_seq == 200 and view.unmirrored_writes > 0
            await server.start()
            await server.wait_ready()
            await mirrored(history, "t", within=240)
        events = await graph.reads.events(project, history.workflow_id("t"), 0, 10**6, 1000)
        assert [e.seq for e in events] == list(range(1, 201))
        assert sorted(e.payload for e in events) == sorted(f"m{i}" for i in range(200))
        counts = await graph.reads.counts(project)
        assert (counts["Event"], counts["NEXT"], counts["HAS_EVENT"]) == (200, 199, 200)
    finally:
        await driver.close()
        await server.stop()
