"""Neo4j's part of redaction and deletion (``taskgraph.port.RetentionStore``, the results in
``taskgraph.retention``).

- ``redact``: in one transaction that first locks the task node (so no mirror write of the
  same task interleaves: ``TaskGraph.write_task``), empties the event's payload (its seq,
  length and hash stay), destroys its data key (its key tree's leaf punctured; a single key of
  before loses its bytes, its ``DataKey`` node kept as a tombstone) and returns the decisions
  that cite it.
- ``tombstone``: a ``TaskTombstone`` node keeps a deleted task's name taken for ever; written
  before anything is deleted, and locking the task node, so from then on the mirror refuses
  to write the task (``TaskIncarnationError``) and a new task of that name is refused.
- ``delete_task_nodes``: the task's decisions (deleted, or kept and detached), events, steps,
  key trees (and single data keys of before) and node, in transactions of at most
  ``DELETE_BATCH`` nodes (a large task in one transaction outgrows Neo4j's transaction
  memory).
"""

from __future__ import annotations

from typing import Any, LiteralString

from neo4j import AsyncManagedTransaction

from taskgraph.driver import GraphSession
from taskgraph.keys import destroy_leaf
from taskgraph.retention import DELETE_BATCH, EventLocation, GraphDeletion, NameState

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
"""A redaction's first statement: the task node locked (so no mirror write of the task
interleaves), the event's text emptied, a single data key of before destroyed (its node kept
as the tombstone); returns the decisions citing the event and its key id."""


class GraphRetention(GraphSession):
    """Redaction and deletion in Neo4j (``taskgraph.port.RetentionStore``)."""

    async def find_event(self, project_id: str, event_id: str) -> EventLocation | None:
        """The event with id ``event_id`` in ``project_id`` as Neo4j has it, None when Neo4j has
        no such event (yet: the mirror copies an event tens of milliseconds after its write)."""
        rows = await self._read(
            """
            MATCH (e:Event {id: $id}) WHERE e.project_id = $p
            RETURN e.task_key AS task_key, e.task_name AS task_name, e.seq AS seq,
                   e.key_id AS key_id, coalesce(e.redacted, false) AS redacted
            """,
            id=event_id,
            p=project_id,
        )
        return EventLocation.model_validate(rows[0]) if rows else None

    async def redact(self, project_id: str, location: EventLocation, agent_id: str) -> list[str]:
        """Remove the text of the event at ``location`` from Neo4j and destroy its data key (a
        key tree's leaf punctured: ``taskgraph.keys.destroy_leaf``), in one transaction; returns
        the ids of the decisions that cite it (and its own, when it is a decision)."""

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

        return await self._write_work(work)

    async def name_state(self, project_id: str, workflow_id: str) -> NameState:
        """Whether a task of this workflow id was deleted, or is in Neo4j (the checks of
        ``create_task`` before it starts a workflow)."""
        rows = await self._read(
            """
            OPTIONAL MATCH (x:TaskTombstone {key: $key})
            OPTIONAL MATCH (t:Task {key: $key, project_id: $p}) WHERE t.status IS NOT NULL
            RETURN x IS NOT NULL AS deleted, t IS NOT NULL AS mirrored
            """,
            key=workflow_id,
            p=project_id,
        )
        return NameState.model_validate(rows[0])

    async def tombstone(self, project_id: str, workflow_id: str, name: str, agent_id: str) -> bool:
        """Keep the name of a task being deleted taken for ever; returns False when it was
        tombstoned before (a repeated deletion)."""
        rows = await self._write(
            """
            OPTIONAL MATCH (old:TaskTombstone {key: $key})
            MERGE (x:TaskTombstone {key: $key})
              ON CREATE SET x.project_id = $p, x.name = $name, x.deleted_at = datetime(),
                            x.deleted_by = $agent
            WITH old, x
            OPTIONAL MATCH (t:Task {key: $key, project_id: $p})
            SET t.deleted_at = x.deleted_at, x.created_at = coalesce(x.created_at, t.created_at)
            RETURN old IS NULL AS new
            """,
            key=workflow_id,
            p=project_id,
            name=name,
            agent=agent_id,
        )
        return bool(rows[0]["new"])

    async def _in_batches(self, query: LiteralString, **params: Any) -> int:
        """Run ``query`` (which deletes at most ``$batch`` nodes and returns their count as
        ``n``) until it deletes none; returns the total."""
        total = 0
        while True:
            rows = await self._write(query, batch=DELETE_BATCH, **params)
            if not rows[0]["n"]:
                return total
            total += rows[0]["n"]

    async def delete_task_nodes(
        self, project_id: str, workflow_id: str, *, include_decisions: bool
    ) -> GraphDeletion:
        """Delete a tombstoned task's nodes: its decisions (or, with ``include_decisions``
        False, keep them: no longer events, no relationships, ``detached_at`` set), events, steps,
        data keys and the task node. The project, agent and session nodes stay (shared).

        Events and steps are found by key prefix (the uniqueness constraints' indexes) and checked
        by ``task_key``, since a task name may contain ``#`` or ``/``.
        """
        params = {"p": project_id, "key": workflow_id}
        rows = await self._read(
            "MATCH (d:Decision {project_id: $p, task_key: $key}) RETURN collect(d.id) AS ids",
            **params,
        )
        decisions = sorted(rows[0]["ids"])
        if not include_decisions:
            await self._write(
                """
                MATCH (d:Decision:Event {project_id: $p, task_key: $key})
                CALL (d) { MATCH (d)-[r]-() DELETE r }
                REMOVE d:Event
                SET d.detached_at = datetime(), d.key_id = NULL
                """,
                **params,
            )
        events = await self._in_batches(
            """
            MATCH (e:Event) WHERE e.key STARTS WITH $key + '#' AND e.task_key = $key
            WITH e LIMIT $batch DETACH DELETE e RETURN count(*) AS n
            """,
            **params,
        )
        steps = await self._in_batches(
            """
            MATCH (s:Step) WHERE s.key STARTS WITH $key + '/' AND s.task_key = $key
            WITH s LIMIT $batch DETACH DELETE s RETURN count(*) AS n
            """,
            **params,
        )
        keys = await self._in_batches(
            """
            MATCH (k {task_key: $key}) WHERE (k:KeyTree OR k:DataKey) AND k.project_id = $p
            WITH k LIMIT $batch DELETE k RETURN count(*) AS n
            """,
            **params,
        )
        await self._write("MATCH (t:Task {key: $key, project_id: $p}) DETACH DELETE t", **params)
        return GraphDeletion(events=events, steps=steps, keys=keys, decisions=decisions)
