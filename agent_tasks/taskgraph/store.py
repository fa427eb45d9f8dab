"""The factory of the graph store's port: ``build_graph_store`` picks the adapter from
configuration, each imported only when chosen (a FalkorDB user never loads the Neo4j driver). The
settings come from the caller (``GraphSettings``); ``worker.build_graph_store`` reads them from the
environment.

>>> store = build_graph_store("falkordb", Settings())   # "neo4j", a URI, or None
>>> await store.connect()
>>> ...
>>> await store.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import SecretStr

from agent_tasks.taskgraph.port import GraphKind, GraphStore

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

NEO4J_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")
"""URI schemes of Neo4j (``+s``: TLS; ``+ssc``: TLS with a self-signed certificate)."""
FALKORDB_SCHEMES = ("falkor", "falkors", "redis", "rediss")
"""URL schemes of FalkorDB (``falkors``, ``rediss``: TLS)."""


class GraphSettings(Protocol):
    """What the factory reads of the settings (``config.Settings``)."""

    graph: GraphKind
    neo4j_uri: str
    neo4j_database: str
    graph_max_writes: int
    falkordb_url: SecretStr
    falkordb_graph: str

    def neo4j_auth(self) -> tuple[str, str]:
        """Neo4j's ``(user, password)``."""
        ...


def graph_kind(kind_or_uri: str) -> GraphKind:
    """The store ``kind_or_uri`` names: ``neo4j``, ``falkordb``, or a URI's scheme
    (``NEO4J_SCHEMES``, ``FALKORDB_SCHEMES``).

    Raises:
        ValueError: neither a kind nor a URI of a known scheme (the message lists them).
    """
    if kind_or_uri in ("neo4j", "falkordb"):
        return "neo4j" if kind_or_uri == "neo4j" else "falkordb"
    scheme, sep, _ = kind_or_uri.partition("://")
    if sep and scheme in NEO4J_SCHEMES:
        return "neo4j"
    if sep and scheme in FALKORDB_SCHEMES:
        return "falkordb"
    raise ValueError(
        f"unknown graph store {kind_or_uri.split('@')[-1]!r}: give 'neo4j', 'falkordb', or a URI "
        f"whose scheme is one of {', '.join(NEO4J_SCHEMES + FALKORDB_SCHEMES)}"
    )


def build_graph_store(
    kind_or_uri: str | None,
    settings: GraphSettings,
    *,
    tracer: Tracer | None = None,
) -> GraphStore:
    """A graph store, not connected yet (``await store.connect()``; ``await store.close()``).

    Args:
        kind_or_uri: ``"neo4j"`` or ``"falkordb"`` (the address from ``settings``), a URI (Neo4j
            with ``settings``' credentials, or FalkorDB), or None: ``settings.graph``.
        settings: credentials, database or graph name, the mirror's bound of concurrent writes.
        tracer: an OpenTelemetry tracer for the mirror's write spans (``telemetry.setup``).

    Raises:
        ValueError: an unknown kind or scheme (``graph_kind``).
        Neo4jPasswordMissing: Neo4j chosen, and no password set or generated.
    """
    kind = graph_kind(settings.graph if kind_or_uri is None else kind_or_uri)
    uri = kind_or_uri if kind_or_uri and "://" in kind_or_uri else None
    if kind == "neo4j":
        from agent_tasks.taskgraph.neo4j.driver import open_driver
        from agent_tasks.taskgraph.neo4j.graph import TaskGraph

        driver = open_driver(uri or settings.neo4j_uri, settings.neo4j_auth())
        return TaskGraph(driver, settings.neo4j_database, tracer, settings.graph_max_writes)
    from agent_tasks.taskgraph.falkordb.graph import FalkorGraph

    url = uri or settings.falkordb_url.get_secret_value()
    return FalkorGraph(
        url, settings.falkordb_graph, tracer=tracer, max_writes=settings.graph_max_writes
    )
