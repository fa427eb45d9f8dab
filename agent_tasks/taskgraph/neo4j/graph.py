"""The Neo4j adapter of the graph store's port (``taskgraph.port.GraphStore``): ``TaskGraph``,
its schema, idempotent mirror writes, reads, retention and the key store of sealed text, each
a module of its own (``taskgraph.neo4j.schema``, ``.writes``, ``.reads``, ``.neo4j_retention``,
``.keys``) on the driver's bounded sessions (``taskgraph.neo4j.driver``), whose errors leave it as
the port's (``contract.errors``).

Graph model (every node carries ``project_id``; keys are unique by constraint)::

    (:Project {project_id})-[:HAS_TASK]->(:Task {key = workflow id})
    (:Task)-[:CREATED_BY]->(:Agent {key = "project/agent"})
    (:Task)-[:IN_SESSION]->(:Session {key = "project/session"})
    (:Task)-[:CHILD_OF]->(:Task)                        child -> parent
    (:Task)-[:HAS_EVENT]->(:Event {key = "workflow id#seq"})
    (:Event)-[:NEXT]->(:Event)                           seq order, no gaps
    (:Event)-[:AUTHORED_BY]->(:Agent)
    (:Task)-[:HAS_STEP]->(:Step {key = "workflow id/step name"})
    (:Step)-[:RESULT]->(:Event)                          the step's result event
    (:Event:Decision)-[:CITES]->(:Event)                 a decision cites an earlier event
    (:Event:Decision)-[:CITES {state, attempt}]->(:Step) ... and a step, as it was then
    (:TaskTombstone {key = workflow id})                 a deleted task: its name stays taken
    (:KeyTree {tree_id, task_key})                       the key store (``taskgraph.neo4j.keys``)

A task node belongs to one task: the mirror refuses to write a task into a node created by
another task of the same workflow id (one whose history was deleted: ``TaskIncarnationError``)
or into a deleted task's id (a ``TaskTombstone``).

Every write is a MERGE on a key, so a repeated batch changes nothing. Every statement is
parameterized and every read is filtered by project id. Times are Neo4j datetimes in UTC;
payloads and tool arguments are strings, so integers of any size, arbitrary JSON and any
Unicode are stored exactly as recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neo4j import AsyncManagedTransaction
from neo4j.exceptions import DriverError, Neo4jError

from agent_tasks.contract.errors import GraphUnavailable
from agent_tasks.taskgraph.dialect import Statement, spelled
from agent_tasks.taskgraph.models import plain
from agent_tasks.taskgraph.neo4j.driver import bounded, graph_error
from agent_tasks.taskgraph.neo4j.keys import fetch_keys, store_tree
from agent_tasks.taskgraph.neo4j.retention import Neo4jRedaction
from agent_tasks.taskgraph.neo4j.writes import MirrorWrites
from agent_tasks.taskgraph.reads import GraphReads
from agent_tasks.taskgraph.retention import GraphRetention


class TaskGraph(MirrorWrites, Neo4jRedaction, GraphReads, GraphRetention):
    """Reads and writes the task graph through one async driver (``taskgraph.neo4j.driver``): the
    schema (``taskgraph.neo4j.schema``), the mirror's writes (``taskgraph.neo4j.writes``), the reads
    (``taskgraph.reads``), and the key store of sealed text (``taskgraph.neo4j.keys.KeyStore``,
    implemented here).

    Given an OpenTelemetry ``tracer`` (``telemetry.setup``), each ``write_task`` transaction
    runs in a client span ``neo4j write_task`` with the database semantic conventions
    (``db.system.name``, ``db.namespace``, ``db.operation.name``) and the task's workflow id,
    project id, counts and seq range (``agent_tasks.*``; the range only when events were
    written); without one, no OpenTelemetry code runs.
    """

    async def connect(self) -> None:
        """Check that Neo4j answers, then create the schema (``ensure_schema``).

        Raises:
            GraphUnavailable: Neo4j cannot be reached.
            GraphAuthError: it refused the credentials.
        """
        await self.ping()
        await self.ensure_schema()

    async def ping(self) -> None:
        """Check that Neo4j answers (the driver's ``verify_connectivity``: one connection,
        no transaction retries).

        Raises:
            GraphUnavailable: Neo4j cannot be reached.
            GraphAuthError: it refused the credentials.
        """
        try:
            await self.driver.verify_connectivity()
        except (Neo4jError, DriverError) as err:
            raise graph_error(err) from err
        except OSError as err:
            raise GraphUnavailable(f"Neo4j unavailable: {err}") from err

    async def close(self) -> None:
        """Close the driver."""
        await self.driver.close()

    async def records(
        self, statement: Statement, *, write: bool, **params: Any
    ) -> list[dict[str, Any]]:
        """The rows of one statement in a managed transaction (``taskgraph.port.RecordStore``);
        a node becomes the dict of its properties, Neo4j's times Python datetimes."""
        rows = await self._run(spelled(statement, self.kind), params, write=write)
        return [
            plain({name: plain(v) if isinstance(v, dict) else v for name, v in row.items()})
            for row in rows
        ]

    async def put_tree(self, project_id: str, workflow_id: str, tree_id: str, root: bytes) -> None:
        """Store a new key tree of the task ``workflow_id`` in one transaction
        (``taskgraph.neo4j.keys``); a client does this before it sends the first event it seals."""

        async def work(tx: AsyncManagedTransaction) -> None:
            await store_tree(tx, project_id, workflow_id, tree_id, root)

        await self.ensure_schema()
        async with self._session() as session:
            await session.execute_write(bounded(work))

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The data keys of ``key_ids`` (``taskgraph.neo4j.keys.fetch_keys``)."""
        async with self._session() as session:
            return await session.execute_read(bounded(fetch_keys), project_id, key_ids)
