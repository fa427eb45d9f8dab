"""FalkorDB's statements and schema (``taskgraph.falkordb.graph`` runs them): the graph model in
FalkorDB's OpenCypher, each difference from Neo4j's named beside it. Times are integer microseconds
since the epoch; ``$now`` is sent by the client.

The dialect has no composite indexes (a range index per property), no ``EXISTS {}`` (an ``OPTIONAL
MATCH`` and a count), no scoped ``CALL (x) {}`` (``WITH``) and no bytes; a unique constraint needs
an exact-match index first (``SCHEMA`` before ``UNIQUE``).
"""

from __future__ import annotations

from typing import LiteralString

from agent_tasks.taskgraph.dialect import SHARED_NODES

TIME_FIELDS = frozenset(
    {
        "time",
        "created_at",
        "updated_at",
        "deleted_at",
        "detached_at",
        "redacted_at",
        "revoked_at",
        "expires_at",
    }
)
"""Node properties that hold times (integer microseconds here; datetimes when read)."""

SCHEMA: tuple[LiteralString, ...] = (
    "CREATE INDEX FOR (n:Project) ON (n.project_id)",
    "CREATE INDEX FOR (n:Task) ON (n.key)",
    # Neo4j's composite (project_id, name) and (project_id, status, name): a range index per
    # property here (FalkorDB's indexes are single-property; it combines them per query)
    "CREATE INDEX FOR (n:Task) ON (n.project_id, n.name, n.status)",
    "CREATE INDEX FOR (n:Event) ON (n.key, n.id, n.project_id, n.kind, n.time)",
    "CREATE INDEX FOR (n:Step) ON (n.key, n.project_id, n.state)",
    "CREATE INDEX FOR (n:Agent) ON (n.key)",
    "CREATE INDEX FOR (n:Session) ON (n.key)",
    "CREATE INDEX FOR (n:Decision) ON (n.id, n.project_id, n.task_key)",
    "CREATE INDEX FOR (n:TaskTombstone) ON (n.key)",
    "CREATE INDEX FOR (n:KeyTree) ON (n.tree_id, n.task_key)",
    "CREATE INDEX FOR (n:DataKey) ON (n.key_id, n.task_key)",
    "CREATE INDEX FOR (n:ApiKey) ON (n.key_id)",
    "CREATE INDEX FOR (n:PageSession) ON (n.session_id)",
    "CREATE INDEX FOR (n:MirrorRefusal) ON (n.key, n.project_id, n.retry_at)",
)
"""The indexes, created before the constraints (a unique constraint needs one on its property)."""
UNIQUE: tuple[tuple[str, str], ...] = (
    ("Project", "project_id"),
    ("Task", "key"),
    ("Event", "key"),
    ("Event", "id"),
    ("Step", "key"),
    ("Agent", "key"),
    ("Session", "key"),
    ("Decision", "id"),
    ("TaskTombstone", "key"),
    ("KeyTree", "tree_id"),
    ("DataKey", "key_id"),
    ("ApiKey", "key_id"),
    ("PageSession", "session_id"),
    ("MirrorRefusal", "key"),
)
"""Unique constraints (label, property): Neo4j's ``taskgraph.neo4j.schema.SCHEMA`` constraints."""

KEY_TREES: LiteralString = """
UNWIND $trees AS id
MATCH (k:KeyTree {tree_id: id}) WHERE k.project_id = $p
RETURN k.tree_id AS id, k.nodes AS nodes
"""
"""The stored nodes of some key trees (``KeyLookup``); FalkorDB holds no single keys."""

PUT_TREE: LiteralString = """
CREATE (:KeyTree {tree_id: $tree, project_id: $p, task_key: $task_key, nodes: $nodes,
                  created_at: $now})
"""

PUNCTURE: LiteralString = """
MATCH (k:KeyTree {tree_id: $id}) WHERE k.project_id = $p AND k.nodes = $was
SET k.nodes = $nodes,
    k.destroyed = CASE WHEN $leaf IN coalesce(k.destroyed, []) THEN k.destroyed
                       ELSE coalesce(k.destroyed, []) + $leaf END
RETURN count(k) AS n
"""
"""A key tree's puncture, written only if its nodes are still ``$was`` (compare-and-set)."""

TASK: LiteralString = """
UNWIND $tasks AS tk
OPTIONAL MATCH (gone:TaskTombstone {key: tk.key})
OPTIONAL MATCH (old:Task {key: tk.key})
WITH tk, gone, old
WHERE gone IS NULL AND (old IS NULL OR old.created_at IS NULL OR old.created_at = tk.created_at)
MERGE (t:Task {key: tk.key})
WITH t, tk, coalesce(t.writes, -1) <= tk.writes AS newer
FOREACH (_ IN CASE WHEN newer THEN [1] ELSE [] END | SET t += tk)
RETURN t.key AS key
"""
"""A batch's first statement (a page per task): each task node, guarded (no tombstone, no other
incarnation: then no row and nothing written), its properties set only when the view is newer."""

INCARNATION: LiteralString = """
OPTIONAL MATCH (gone:TaskTombstone {key: $key})
OPTIONAL MATCH (old:Task {key: $key})
RETURN gone IS NOT NULL AS deleted, old.created_at AS was
"""

EVENTS: LiteralString = """
UNWIND $events AS ev
MATCH (t:Task {key: ev.task_key})
MERGE (e:Event {key: t.key + '#' + toString(ev.seq)})
WITH t, e, ev, e.kind IS NULL AS fresh, coalesce(e.redacted, false) AS kept
FOREACH (_ IN CASE WHEN kept THEN [] ELSE [1] END | SET e += ev)
SET e.task_key = t.key, e.project_id = t.project_id, e.task_name = t.name
MERGE (t)-[:HAS_EVENT]->(e)
MERGE (a:Agent {key: t.project_id + '/' + ev.author})
  ON CREATE SET a.project_id = t.project_id, a.agent_id = ev.author
FOREACH (_ IN CASE WHEN fresh THEN [1] ELSE [] END | CREATE (e)-[:AUTHORED_BY]->(a))
"""
"""The batch's events, each row naming its task (``task_key``; a redacted node stays redacted),
linked to its author when its node is new or a step result's placeholder."""

NEXT: LiteralString = """
UNWIND $pairs AS pair
MATCH (a:Event {key: pair.key + '#' + toString(pair.seq - 1)})
MATCH (b:Event {key: pair.key + '#' + toString(pair.seq)})
MERGE (a)-[:NEXT]->(b)
"""
"""Each event after its task's first linked from the one before (keys joined here, never in Python:
``taskgraph.falkordb.text``)."""

STEPS: LiteralString = """
UNWIND $steps AS st
MATCH (t:Task {key: st.task_key})
MERGE (s:Step {key: t.key + '/' + st.step_name})
WITH t, s, st WHERE coalesce(s.changed_write, -1) <= st.changed_write
SET s += st, s.task_key = t.key, s.project_id = t.project_id, s.task_name = t.name
MERGE (t)-[:HAS_STEP]->(s)
WITH t, s, st
OPTIONAL MATCH (s)-[old:RESULT]->(previous:Event)
  WHERE previous.seq <> st.result_event_seq OR st.result_event_seq IS NULL
DELETE old
WITH DISTINCT t, s, st WHERE st.result_event_seq IS NOT NULL
MERGE (e:Event {key: t.key + '#' + toString(st.result_event_seq)})
  ON CREATE SET e.project_id = t.project_id, e.task_key = t.key,
                e.task_name = t.name, e.seq = st.result_event_seq
MERGE (s)-[:RESULT]->(e)
"""
"""The batch's steps, each only when not older than its node (``changed_write``)."""

DECISIONS: LiteralString = """
UNWIND $decisions AS d
MATCH (e:Event {key: d.key + '#' + toString(d.seq)})
SET e:Decision
"""
CITES_EVENTS: LiteralString = """
UNWIND $cites AS c
MATCH (d:Event {key: c.key + '#' + toString(c.seq)})
MATCH (x:Event {key: c.key + '#' + toString(c.cited)})
MERGE (d)-[:CITES]->(x)
"""
CITES_STEPS: LiteralString = """
UNWIND $cites AS c
MATCH (d:Event {key: c.key + '#' + toString(c.seq)})
MATCH (x:Step {key: c.key + '/' + c.step})
MERGE (d)-[r:CITES]->(x)
SET r.state = c.state, r.attempt = c.attempt
"""

SHARED: LiteralString = (
    """
UNWIND $pages AS pg
MATCH (t:Task {key: pg.key})
"""
    + SHARED_NODES
    + """
SET t.mirrored_seq = CASE WHEN coalesce(t.mirrored_seq, 0) < pg.watermark THEN pg.watermark
                          ELSE t.mirrored_seq END,
    t.mirrored_write = CASE WHEN coalesce(t.mirrored_write, 0) < coalesce(pg.mirrored_write, 0)
                            THEN pg.mirrored_write ELSE t.mirrored_write END
"""
)
"""The batch's last statement, per page: the shared nodes (``SHARED_NODES``), then the task's
watermarks (never lowered), so a page cut short is never reported as held."""

REDACT: LiteralString = """
MATCH (t:Task {key: $key, project_id: $p})
SET t.redactions = coalesce(t.redactions, 0) + 1
WITH t
MATCH (e:Event {key: $key + '#' + toString($seq)})
SET e.payload = '', e.redacted = true, e.truncated = false
WITH e
OPTIONAL MATCH (d:Decision)-[:CITES]->(e)
WITH e, collect(d.id) AS citing
RETURN citing + CASE WHEN 'Decision' IN labels(e) THEN [e.id] ELSE [] END AS affected,
       e.key_id AS key_id
"""
"""A redaction's first statement (Neo4j's ``REDACT`` without single keys; ``e:Decision`` as a value
is ``'Decision' IN labels(e)``)."""

WIPE_EVENTS: LiteralString = """
MATCH (n:Event {project_id: $p}) WITH n LIMIT $batch DETACH DELETE n RETURN count(n) AS n
"""
WIPE_REST: LiteralString = """
MATCH (n {project_id: $p})
WHERE NOT n:DataKey AND NOT n:KeyTree AND NOT n:TaskTombstone
DETACH DELETE n RETURN count(n) AS n
"""
DROP_UNMARKED: LiteralString = """
MATCH (n {project_id: $p, task_key: $key})
WHERE (n:Event OR n:Step) AND coalesce(n.rebuild, '') <> $mark
  AND ($upto IS NULL
       OR (n:Event AND n.seq <= $upto)
       OR (n:Step AND n.updated_at <= $as_of))
DETACH DELETE n
RETURN count(n) AS n
"""
WIPE_BATCH = 10_000
"""Event nodes ``wipe_project`` deletes per statement."""
