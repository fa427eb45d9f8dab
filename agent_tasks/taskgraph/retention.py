"""The graph store's part of redaction and deletion (``starter.retention.HistoryRetention``):
``GraphRetention``, the store-neutral ``RetentionStore``; each adapter's ``redact`` is its own.

- ``tombstone``: a ``TaskTombstone`` keeps a deleted task's name taken for ever; written first, so
  the mirror refuses the task (``TaskIncarnationError``) and so does ``create_task``.
- ``delete_task_nodes``: the task's decisions (deleted, or kept and detached), events, steps, key
  trees and node, ``DELETE_BATCH`` nodes at a time (a large task in one transaction outgrows Neo4j's
  transaction memory).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, LiteralString

from pydantic import BaseModel

from agent_tasks.taskgraph.dialect import Statement
from agent_tasks.taskgraph.models import epoch_us
from agent_tasks.taskgraph.runner import StatementRunner

DELETE_BATCH = 5_000
"""Nodes deleted per transaction (or per statement, in a store without transactions)."""


class EventLocation(BaseModel):
    """Where an event id points: its task and seq, and whether its text can be redacted."""

    task_key: str
    """The task's workflow id."""
    task_name: str
    """The task's name."""
    seq: int
    """The event's seq."""
    key_id: str | None
    """Its data key (None: a plain-text event)."""
    redacted: bool
    """True when it was redacted already."""


class NameState(BaseModel):
    """What the graph store knows of a task name (``name_state``)."""

    deleted: bool
    """A task of that name was deleted (``TaskTombstone``)."""
    mirrored: bool
    """A task of that name is in the graph store."""


class GraphDeletion(BaseModel):
    """What ``delete_task_nodes`` removed."""

    events: int = 0
    """Event nodes deleted (decisions deleted with them included)."""
    steps: int = 0
    """Step nodes deleted."""
    keys: int = 0
    """Key store nodes destroyed (key trees, and single data keys of before)."""
    decisions: list[str] = []
    """Ids of the task's decisions (deleted, or kept and detached)."""


_TOMBSTONE: Statement = {
    # the time: Neo4j's datetime(); FalkorDB's $now, microseconds (``taskgraph.falkordb.graph``)
    "neo4j": """
OPTIONAL MATCH (old:TaskTombstone {key: $key})
MERGE (x:TaskTombstone {key: $key})
  ON CREATE SET x.project_id = $p, x.name = $name, x.deleted_at = datetime(),
                x.deleted_by = $agent
WITH old, x
OPTIONAL MATCH (t:Task {key: $key, project_id: $p})
SET t.deleted_at = x.deleted_at, x.created_at = coalesce(x.created_at, t.created_at)
RETURN old IS NULL AS new
""",
    "falkordb": """
OPTIONAL MATCH (old:TaskTombstone {key: $key})
MERGE (x:TaskTombstone {key: $key})
  ON CREATE SET x.project_id = $p, x.name = $name, x.deleted_at = $now,
                x.deleted_by = $agent
WITH old, x
OPTIONAL MATCH (t:Task {key: $key, project_id: $p})
SET t.deleted_at = x.deleted_at, x.created_at = coalesce(x.created_at, t.created_at)
RETURN old IS NULL AS new
""",
}
"""A deleted task's tombstone (``GraphRetention.tombstone``)."""

_DETACH: Statement = {
    # a subquery per row: Neo4j's scoped CALL (d) { ... }; FalkorDB's CALL { WITH d ... };
    # removing a label of a node of a unique constraint's label: both allow it
    # the time: Neo4j's datetime(); FalkorDB's $now, microseconds
    "neo4j": """
MATCH (d:Decision:Event {project_id: $p, task_key: $key})
CALL (d) { MATCH (d)-[r]-() DELETE r }
REMOVE d:Event
SET d.detached_at = datetime(), d.key_id = NULL
""",
    "falkordb": """
MATCH (d:Decision:Event {project_id: $p, task_key: $key})
OPTIONAL MATCH (d)-[r]-()
DELETE r
WITH DISTINCT d
REMOVE d:Event
SET d.detached_at = $now, d.key_id = NULL
""",
}
"""A deleted task's decisions kept: detached from everything, no longer events."""


class GraphRetention:
    """Finding an event, tombstones and deletion, in either store, run on the adapter's
    statement runner; each adapter has its own ``redact`` (``taskgraph.port.GraphStore``).

    Args:
        runner: the adapter's one-statement reads and writes (``StatementRunner``).
    """

    def __init__(self, runner: StatementRunner) -> None:
        self.runner = runner

    async def find_event(self, project_id: str, event_id: str) -> EventLocation | None:
        """The event ``event_id`` of ``project_id`` as the store has it; None when it has none (yet:
        the mirror copies it tens of milliseconds after its write)."""
        rows = await self.runner.read(
            """
            MATCH (e:Event {id: $id}) WHERE e.project_id = $p
            RETURN e.task_key AS task_key, e.task_name AS task_name, e.seq AS seq,
                   e.key_id AS key_id, coalesce(e.redacted, false) AS redacted
            """,
            id=event_id,
            p=project_id,
        )
        return EventLocation.model_validate(rows[0]) if rows else None

    async def name_state(self, project_id: str, workflow_id: str) -> NameState:
        """Whether a task of this workflow id was deleted, or is in the store (``create_task``'s
        checks)."""
        rows = await self.runner.read(
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
        """Keep the name of a task being deleted taken for ever; False when tombstoned before."""
        rows = await self.runner.write(
            _TOMBSTONE,
            key=workflow_id,
            p=project_id,
            name=name,
            agent=agent_id,
            now=epoch_us(datetime.now(UTC)),
        )
        return bool(rows[0]["new"])

    async def _in_batches(self, query: LiteralString, **params: Any) -> int:
        """Run ``query`` (deleting at most ``$batch`` nodes, returning ``n``) until it deletes none;
        returns the total."""
        total = 0
        while True:
            rows = await self.runner.write(query, batch=DELETE_BATCH, **params)
            if not rows[0]["n"]:
                return total
            total += rows[0]["n"]

    async def delete_task_nodes(
        self, project_id: str, workflow_id: str, *, include_decisions: bool
    ) -> GraphDeletion:
        """Delete a tombstoned task's decisions (or, without ``include_decisions``, keep them
        detached: no longer events, no relationships, ``detached_at`` set), events, steps, data keys
        and node; the shared nodes stay.

        Events and steps are found by key prefix and checked by ``task_key`` (a name may hold ``#``
        or ``/``); the prefix is in parentheses since FalkorDB reads ``STARTS WITH $key + '#' AND
        ...`` as a prefix of ``$key + ('#' AND ...)``.
        """
        params = {"p": project_id, "key": workflow_id}
        rows = await self.runner.read(
            "MATCH (d:Decision {project_id: $p, task_key: $key}) RETURN collect(d.id) AS ids",
            **params,
        )
        decisions = sorted(rows[0]["ids"])
        if not include_decisions:
            await self.runner.write(_DETACH, now=epoch_us(datetime.now(UTC)), **params)
        events = await self._in_batches(
            """
            MATCH (e:Event) WHERE e.key STARTS WITH ($key + '#') AND e.task_key = $key
            WITH e LIMIT $batch DETACH DELETE e RETURN count(*) AS n
            """,
            **params,
        )
        steps = await self._in_batches(
            """
            MATCH (s:Step) WHERE s.key STARTS WITH ($key + '/') AND s.task_key = $key
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
        await self.runner.write(
            "MATCH (t:Task {key: $key, project_id: $p}) DETACH DELETE t", **params
        )
        return GraphDeletion(events=events, steps=steps, keys=keys, decisions=decisions)
