"""What the store-neutral parts of the graph store (``taskgraph.reads``, ``taskgraph.retention``)
need of an adapter: its dialect and one-statement reads and writes (``StatementRunner``). Each
adapter implements ``_read`` and ``_write`` on its driver (Neo4j: ``taskgraph.neo4j.driver``;
FalkorDB: ``taskgraph.falkordb.graph``), so a statement the dialects agree on is written once."""

from __future__ import annotations

from typing import Any

from agent_tasks.taskgraph.dialect import GraphKind, Statement


class StatementRunner:
    """One-statement reads and writes in the store's dialect (``Statement``: one text, or one
    per store). Rows are dicts; a node is the dict of its properties; times come back as
    aware datetimes (Neo4j's temporal values) or, from FalkorDB, as they are stored (integer
    microseconds, ``taskgraph.models.as_datetime`` reads both); a datetime parameter is sent
    as the store keeps times."""

    kind: GraphKind
    """The store's dialect."""

    async def _read(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one read statement."""
        raise NotImplementedError

    async def _write(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one write statement."""
        raise NotImplementedError
