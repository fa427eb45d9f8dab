"""What an adapter gives the store-neutral ``taskgraph.reads`` and ``taskgraph.retention``: its
dialect and one-statement reads and writes (``StatementRunner``), so a statement the dialects agree
on is written once (Neo4j: ``taskgraph.neo4j.driver.Neo4jRunner``; FalkorDB: ``FalkorGraph``
itself)."""

from __future__ import annotations

from typing import Any, Protocol

from agent_tasks.taskgraph.dialect import GraphKind, Statement


class StatementRunner(Protocol):
    """One-statement reads and writes in the store's dialect. Rows are dicts, a node its properties;
    times come back as the store keeps them (``taskgraph.models.as_datetime`` reads both); a
    datetime parameter is sent as the store keeps times."""

    @property
    def kind(self) -> GraphKind:
        """The store's dialect."""
        ...

    async def read(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one read statement (a managed read transaction where the store has them)."""
        ...

    async def write(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one write statement (a managed write transaction where the store has
        them)."""
        ...
