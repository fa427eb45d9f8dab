"""Neo4j's redaction (``GraphStore.redact``; the rest of retention is ``taskgraph.retention``): one
transaction that locks the task node (so no mirror write interleaves), empties the payload (seq,
length and hash stay), destroys its data key and returns the decisions citing it.
"""

from __future__ import annotations

from typing import LiteralString

from neo4j import AsyncManagedTransaction

from agent_tasks.taskgraph.neo4j.driver import Neo4jRunner
from agent_tasks.taskgraph.neo4j.keys import destroy_leaf
from agent_tasks.taskgraph.retention import EventLocation

_REDACT: LiteralString = """
MATCH (t:Task {key: $key, project_id: $p})
SET t.redactions = coalesce(t.redactions, 0) + 1
WITH t
MATCH (e:Event {key: $key + '#' + toString($seq)})
OPTIONAL MATCH (k:DataKey {key_id: e.key_id})
SET e.payload = '', e.redacted = true, e.truncated = false,
    k.redacted_at = datetime(), k.redacted_by = $agent, k.event_id = e.id, k.seq = e.seq
REMOVE k.key
WITH e
OPTIONAL MATCH (d:Decision)-[:CITES]->(e)
WITH e, collect(d.id) AS citing
RETURN citing + CASE WHEN e:Decision THEN [e.id] ELSE [] END AS affected, e.key_id AS key_id
"""
"""A redaction's first statement: the task node locked, the text emptied, a single key's bytes
removed (its node kept as the tombstone); returns the citing decisions and the key id."""


async def redact(
    runner: Neo4jRunner, project_id: str, location: EventLocation, agent_id: str
) -> list[str]:
    """Remove the text of the event at ``location`` and destroy its data key
    (``taskgraph.neo4j.keys.destroy_leaf``) in one transaction; returns the ids of the decisions
    citing it (its own too, when a decision)."""

    async def work(tx: AsyncManagedTransaction) -> list[str]:
        result = await tx.run(
            _REDACT, key=location.task_key, p=project_id, seq=location.seq, agent=agent_id
        )
        record = await result.single()
        if record is None:
            return []
        if record["key_id"] is not None:
            await destroy_leaf(tx, project_id, record["key_id"])
        return sorted(record["affected"])

    return await runner.write_work(work)
