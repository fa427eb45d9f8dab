"""Sealed writes against the real Temporal and Neo4j: a writer stores one key tree per task
(one key-store transaction at its first write, none after, whatever the batch), goes on
writing sealed with Neo4j stalled or down, and a first write that cannot store its tree in
time is refused ``key_store_unavailable`` with nothing sent; redacting one event destroys
its key and only its key (its neighbours, sealed by the same tree, still open)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from agent_tasks.cli.importer import import_paths
from agent_tasks.config import Settings
from agent_tasks.devstack import parse_host_port
from agent_tasks.sealing.keytree import decode, parse_key_id
from agent_tasks.sealing.seal import KEY_STORE_WAIT_S, open_text
from agent_tasks.starter import ConversationHistory, ErrorCode, HistoryRetention
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import open_graph
from tests.cli.test_importer import HUMANEVAL
from tests.conftest import mirrored, payload_texts
from tests.starter.test_retention import raw_history, sealed_inputs
from tests.tcp_proxy import TcpProxy
from tests.trajectories.test_trajectories import one_run


async def trees_of(graph: TaskGraph, project_id: str, workflow_id: str) -> int:
    rows = await graph.runner.read(
        "MATCH (k:KeyTree {task_key: $key}) WHERE k.project_id = $p RETURN count(k) AS n",
        key=workflow_id,
        p=project_id,
    )
    return int(rows[0]["n"])


async def test_a_writer_stores_one_key_tree_per_task_whatever_it_writes(
    history: ConversationHistory, graph: TaskGraph
) -> None:
    """Each tree a writer stores is a new ``:KeyTree`` node (one transaction): one per task
    after 20 single writes and a 300-event batch means one transaction, none per write."""
    for task in ("a", "b"):
        assert (await history.create_task(task, "many writes")).recorded
    for i in range(20):
        assert (await history.record_event("a", "message", f"one {i}")).recorded
    batch = [{"kind": "tool_result", "payload": f"batch {i}"} for i in range(300)]
    assert (await history.record_events("a", batch)).recorded  # split into several updates
    assert (await history.record_events("b", batch[:5])).recorded
    for task in ("a", "b"):
        assert await trees_of(graph, history.project_id, history.workflow_id(task)) == 1
    await mirrored(history, "a")
    page = await history.list_events("a", after_seq=18, limit=4)
    assert [e.payload for e in page.events] == ["one 18", "one 19", "batch 0", "batch 1"]
    assert not any(e.redacted for e in page.events)


async def test_writes_go_on_sealed_with_neo4j_stalled_or_down_and_a_first_one_is_refused(
    client: Client, graph: TaskGraph, history: ConversationHistory, settings: Settings
) -> None:
    host, port = parse_host_port(settings.neo4j_uri, 7687)
    for task in ("steady", "stalled-first", "down-first"):
        assert (await history.create_task(task, "through an outage")).recorded
    async with TcpProxy(host, port).running() as proxy:
        through = settings.model_copy(update={"neo4j_uri": f"bolt://127.0.0.1:{proxy.port}"})
        async with open_graph(through) as keys:
            writer = ConversationHistory(
                client, history.project_id, "writer", task_queue=history.task_queue, graph=keys
            )
            assert (await writer.record_event("steady", "message", "before")).recorded
            proxy.hold(new=True)  # stalled: connections open, nothing answers
            asked = (proxy.connections, proxy.sent)
            for i in range(10):
                written = await writer.record_event("steady", "message", f"stalled {i}")
                assert written.recorded and written.event is not None
                assert written.event.key_id is not None  # sealed, never plain
            assert (proxy.connections, proxy.sent) == asked  # not a byte sent to Neo4j
            refused = await asyncio.wait_for(
                writer.record_event("stalled-first", "message", "secret one"),
                KEY_STORE_WAIT_S + 30,  # refused after KEY_STORE_WAIT_S, never left waiting
            )
            assert (refused.recorded, refused.error) == (False, ErrorCode.KEY_STORE_UNAVAILABLE)
            assert proxy.sent > asked[1]  # this one did ask Neo4j for its key tree
            proxy.release()
            await proxy.stop()  # down: nothing listens on its port, the connections closed
            for i in range(5):
                assert (await writer.record_event("steady", "message", f"down {i}")).recorded
            refused = await writer.record_event("down-first", "message", "secret two")
            assert (refused.recorded, refused.error) == (False, ErrorCode.KEY_STORE_UNAVAILABLE)
    # Nothing of the refused writes reached Temporal; everything else reads back opened.
    for task, text in (("stalled-first", "secret one"), ("down-first", "secret two")):
        raw = await raw_history(client, history.workflow_id(task))
        assert text not in payload_texts(raw) and not sealed_inputs(raw)
    assert "stalled 3" not in payload_texts(
        await raw_history(client, history.workflow_id("steady"))
    )
    await mirrored(history, "steady")
    events = (await history.list_events("steady", limit=50)).events
    expected = ["before", *(f"stalled {i}" for i in range(10)), *(f"down {i}" for i in range(5))]
    assert [e.payload for e in events] == expected
    # The refused first write is written once Neo4j answers (here: the test's own graph).
    again = ConversationHistory(
        client, history.project_id, "writer", task_queue=history.task_queue, graph=graph
    )
    assert (await again.record_event("down-first", "message", "secret two")).recorded


async def test_a_redaction_shreds_one_event_and_its_neighbours_still_open(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    await history.create_task("t", "shred one")
    written = [await history.record_event("t", "message", f"text {i}") for i in range(3)]
    ids = [w.event.key_id for w in written if w.event is not None and w.event.key_id]
    assert len(ids) == 3
    where = [parse_key_id(k) for k in ids]
    assert len({w[0] for w in where if w is not None}) == 1  # one tree, three leaves
    await mirrored(history, "t")
    middle = written[1].event
    assert middle is not None and middle.key_id is not None
    retention = HistoryRetention(
        client, history.project_id, "admin", graph=graph, task_queue=history.task_queue
    )
    assert (await retention.redact_event(middle.id)).recorded

    raw = sealed_inputs(await raw_history(client, history.workflow_id("t")))
    keys = await graph.get_keys(history.project_id, ids)
    for i, key_id in enumerate(ids):
        key = keys[key_id]
        if i == 1:
            assert key is None
        else:
            assert key is not None and open_text(raw[key_id], key, key_id) == f"text {i}"
    # What the key store holds of the tree derives no key of the redacted leaf any more.
    (row,) = await graph.runner.read(
        "MATCH (k:KeyTree {task_key: $key}) WHERE k.project_id = $p "
        "RETURN k.nodes AS nodes, k.destroyed AS destroyed",
        key=history.workflow_id("t"),
        p=history.project_id,
    )
    leaf = where[1][1] if where[1] is not None else -1
    assert row["destroyed"] == [leaf]
    assert not any(node.covers(leaf) for node in decode(row["nodes"]))
    events = (await history.list_events("t")).events
    assert [(e.payload, e.redacted) for e in events] == [
        ("text 0", False),
        ("", True),
        ("text 2", False),
    ]


async def test_an_import_waits_for_a_key_store_slower_than_a_write_may(
    client: Client, history: ConversationHistory, graph: TaskGraph
) -> None:
    """An app's first sealed write to a task is refused ``key_store_unavailable`` past
    ``KEY_STORE_WAIT_S``; an import (a batch job) sends its segment again until the key store
    answers (``KEY_STORE_RETRY_S``). Neo4j is made slow to store key trees only (an open
    transaction creating an index on ``:KeyTree`` holds the label's schema lock, so creating a
    tree waits while reads go on) for twice the wait: the import still writes every event of
    the run, sealed, once."""
    run = one_run(HUMANEVAL)
    writer = ConversationHistory(
        client, history.project_id, "importer", task_queue=history.task_queue, graph=graph
    )
    assert (await history.create_task("held-first", "an app's task")).recorded
    async with graph.driver.session() as session:
        lock = await session.begin_transaction()
        await lock.run("CREATE INDEX held_key_trees FOR (k:KeyTree) ON (k.held)")
        importing = asyncio.ensure_future(import_paths(writer, [HUMANEVAL]))
        refused = await history.record_event("held-first", "message", "a first write")
        await asyncio.sleep(KEY_STORE_WAIT_S)  # the import's first attempt is refused too
        assert not importing.done()
        await lock.rollback()
    assert refused.error is ErrorCode.KEY_STORE_UNAVAILABLE  # what the import went through
    (report,) = await asyncio.wait_for(importing, 120)
    assert (report.status, report.error, report.new_events) == ("created", None, len(run.events))
    await mirrored(history, run.name)
    events = (await history.list_events(run.name, limit=len(run.events) + 1)).events
    assert [e.payload for e in events] == [e.payload for e in run.events]
    assert all(e.key_id is not None for e in events)  # sealed, never plain text in its place
