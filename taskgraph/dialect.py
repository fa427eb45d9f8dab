"""The dialects of the graph stores: which store (``GraphKind``) and a statement written once
where Neo4j's Cypher and FalkorDB's OpenCypher agree, or once per store where they differ
(``Statement``, each difference named in a comment beside it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, LiteralString

GraphKind = Literal["neo4j", "falkordb"]
"""The graph stores behind the port (``AGENT_TASKS_GRAPH``)."""

Statement = LiteralString | Mapping[GraphKind, LiteralString]
"""A Cypher statement: one text where the dialects agree, or one per store where they differ
(each difference named in a comment beside it); ``spelled`` picks a store's."""


def spelled(statement: Statement, kind: GraphKind) -> LiteralString:
    """The text of ``statement`` in the dialect of ``kind``."""
    return statement if isinstance(statement, str) else statement[kind]
