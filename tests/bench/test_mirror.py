"""The bench's minimal mirror (``bench.mirror``) writes what the product's mirror writes for the
same events: the same nodes and relationships, and the events' text and seqs as sent."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from bench.bare import BareWorkflow, bare_worker, start_bare
from bench.harness import event_json, transcript
from bench.mirror import MinimalMirror
from tests.conftest import eventually, mirrored

_SHAPE = """
MATCH (p:Project)-[:HAS_TASK]->(t:Task {key: $key})-[:CREATED_BY]->(creator:Agent)
MATCH (t)-[:HAS_EVENT]->(e:Event)-[:AUTHORED_BY]->(author:Agent)
OPTIONAL MATCH (e)-[:NEXT]->(n:Event)
WITH p, t, creator, e, author, n ORDER BY e.seq
RETURN p.project_id AS project, t.mirrored_seq AS mirrored, creator.agent_id AS creator,
       collect([e.seq, e.kind, e.payload, e.full_sha256, author.agent_id, n.seq]) AS events,
       COUNT { (t)--() } AS task_links
"""


async def _shape(graph: TaskGraph, key: str) -> dict[str, Any]:
    records, _, _ = await graph.driver.execute_query(_SHAPE, key=key, database_=graph.database)
    assert len(records) == 1, records
    return dict(records[0])


async def test_the_minimal_mirror_writes_the_nodes_and_links_ours_writes(
    client: Client, graph: TaskGraph, history: ConversationHistory, project_id: str
) -> None:
    events = transcript(5)
    assert (await history.create_task("ours", "compare")).recorded
    assert (await history.record_events("ours", events[:3])).recorded
    assert (await history.record_events("ours", events[3:])).recorded
    await mirrored(history, "ours")

    plain = Client(
        client.service_client, namespace=client.namespace, data_converter=pydantic_data_converter
    )
    queue = f"tests-bare-{uuid.uuid4().hex[:8]}"
    workflow_id = f"{queue}/minimal"
    mirror = MinimalMirror(plain, graph.driver, graph.database, f"{project_id}-m", "agent-1")
    async with bare_worker(plain, queue), mirror.running():
        handle = await start_bare(plain, workflow_id, queue)
        mirror.follow(workflow_id)
        await handle.execute_update(BareWorkflow.append, event_json(events[:3]))
        await handle.execute_update(BareWorkflow.append, event_json(events[3:]))

        async def held() -> bool:
            shape = await _shape(graph, workflow_id) if await _exists(graph, workflow_id) else {}
            return shape.get("mirrored") == 5

        await eventually(held)
        await handle.signal(BareWorkflow.close)

    expected = [  # computed from what was sent: seq, kind, text, its hash, author, next seq
        [seq, e.kind.value, e.payload, e.full_sha256, "agent-1", seq + 1 if seq < 5 else None]
        for seq, e in enumerate(events, 1)
    ]
    ours = await _shape(graph, history.workflow_id("ours"))
    minimal = await _shape(graph, workflow_id)
    assert (ours["project"], minimal["project"]) == (project_id, f"{project_id}-m")
    for shape in (ours, minimal):
        assert (shape["mirrored"], shape["creator"], shape["events"]) == (5, "agent-1", expected)
        # the project, the creating agent and the five events: no other node is linked
        assert shape["task_links"] == 7
    await graph.wipe_project(f"{project_id}-m")


async def _exists(graph: TaskGraph, key: str) -> bool:
    records, _, _ = await graph.driver.execute_query(
        "MATCH (t:Task {key: $key})-[:HAS_EVENT]->() RETURN count(*) AS n",
        key=key,
        database_=graph.database,
    )
    return bool(records[0]["n"])
