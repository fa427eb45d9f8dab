"""The dialects of the graph stores: which store (``GraphKind``) and a statement written once
where Neo4j's Cypher and FalkorDB's OpenCypher agree, or once per store where they differ
(``Statement``, each difference named in a comment beside it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, LiteralString

GraphKind = Literal["neo4j", "falkordb"]
"""The graph stores behind the port (``AGENT_TASKS_GRAPH``)."""

Statement = LiteralString | Mapping[GraphKind, LiteralString]
"""A Cypher statement: one text where the dialects agree, or one per store; ``spelled`` picks
one."""


def spelled(statement: Statement, kind: GraphKind) -> LiteralString:
    """The text of ``statement`` in the dialect of ``kind``."""
    return statement if isinstance(statement, str) else statement[kind]


SHARED_NODES: LiteralString = """
MERGE (p:Project {project_id: t.project_id})
MERGE (p)-[:HAS_TASK]->(t)
MERGE (a:Agent {key: t.project_id + '/' + t.agent_id})
  ON CREATE SET a.project_id = t.project_id, a.agent_id = t.agent_id
MERGE (t)-[:CREATED_BY]->(a)
FOREACH (s IN CASE WHEN t.session_id IS NULL THEN [] ELSE [t.session_id] END |
  MERGE (se:Session {key: t.project_id + '/' + s})
    ON CREATE SET se.project_id = t.project_id, se.session_id = s
  MERGE (t)-[:IN_SESSION]->(se))
FOREACH (pk IN CASE WHEN pg.parent_key IS NULL THEN [] ELSE [pg.parent_key] END |
  MERGE (pt:Task {key: pk}) ON CREATE SET pt.project_id = t.project_id, pt.name = t.parent
  MERGE (t)-[:CHILD_OF]->(pt))
FOREACH (bk IN CASE WHEN pg.branch_key IS NULL THEN [] ELSE [pg.branch_key] END |
  MERGE (src:Task {key: bk}) ON CREATE SET src.project_id = t.project_id
  MERGE (t)-[b:BRANCHED_FROM]->(src) SET b.seq = t.branched_at_seq)
"""
"""The nodes a project's tasks share (project, agent, session, parent, branch source), merged with a
mirror page in both stores with the task's relationships to them. A clause over ``t`` (the task
node) and ``pg`` (the page's row: ``parent_key``, ``branch_key``, workflow ids or null)."""
