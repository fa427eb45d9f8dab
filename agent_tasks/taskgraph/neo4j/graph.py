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
from datetime import datetime
from typing import TYPE_CHECKING, Any

from neo4j import AsyncDriver, AsyncManagedTransaction
from neo4j.exceptions import DriverError, Neo4jError

from agent_tasks.contract import Event, StepView, TaskView
from agent_tasks.contract.errors import GraphUnavailable
from agent_tasks.taskgraph.dialect import GraphKind, Statement, spelled
from agent_tasks.taskgraph.models import plain
from agent_tasks.taskgraph.neo4j import retention
from agent_tasks.taskgraph.neo4j.driver import NEO4J_MAX_WRITES, Neo4jRunner, bounded, graph_error
from agent_tasks.taskgraph.neo4j.keys import fetch_keys, store_tree
from agent_tasks.taskgraph.neo4j.schema import Neo4jSchema
from agent_tasks.taskgraph.neo4j.writes import MirrorWrites
from agent_tasks.taskgraph.page_batches import PageWrite
from agent_tasks.taskgraph.reads import GraphReads
from agent_tasks.taskgraph.retention import EventLocation, GraphRetention

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


class TaskGraph:
    """The task graph in Neo4j, through one async driver: the port's methods, each calling the
    part that runs it (``runner``, ``schema``, ``writes``, ``reads``, ``retention``).

    Given an OpenTelemetry ``tracer`` (``telemetry.setup``), each ``write_task`` transaction
    runs in a client span ``neo4j write_task`` with the database semantic conventions
    (``db.system.name``, ``db.namespace``, ``db.operation.name``) and the task's workflow id,
    project id, counts and seq range (``agent_tasks.*``; the range only when events were
    written); without one, no OpenTelemetry code runs.

    Args:
        driver: from ``taskgraph.neo4j.driver.open_driver``.
        database: the Neo4j database.
        tracer: an OpenTelemetry tracer for the mirror's write spans.
        max_writes: the mirror's transactions this object runs at once
            (``Settings.graph_max_writes``).
    """

    kind: GraphKind = "neo4j"
    """The store's dialect (``taskgraph.port.RecordStore``)."""

    def __init__(
        self,
        driver: AsyncDriver,
        database: str = "neo4j",
        tracer: Tracer | None = None,
        max_writes: int = NEO4J_MAX_WRITES,
    ) -> None:
        self.runner = Neo4jRunner(driver, database)
        """The driver's bounded sessions and one-statement transactions."""
        self.schema = Neo4jSchema(self.runner)
        """The constraints and indexes, created once before the first write."""
        self.writes = MirrorWrites(self.runner, self.schema, tracer, max_writes)
        """The mirror's writes and the clean-ups of a rebuild and a project."""
        self.reads = GraphReads(self.runner)
        """One task's mirrored state and the cross-task reads (``taskgraph.port.TaskReads``)."""
        self.retention = GraphRetention(self.runner)
        """Finding an event, tombstones, deletion (``taskgraph.port.RetentionStore``)."""

    @property
    def driver(self) -> AsyncDriver:
        """The driver (the caller's: ``close`` closes it)."""
        return self.runner.driver

    @property
    def database(self) -> str:
        """The Neo4j database."""
        return self.runner.database

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

    async def ensure_schema(self) -> None:
        """Create the constraints and indexes once per graph object (``Neo4jSchema``)."""
        await self.schema.ensure_schema()

    async def ensure_ready(self) -> None:
        """Ready the graph for the mirror's writes, once (``MirrorWrites.ensure_ready``)."""
        await self.writes.ensure_ready()

    async def write_task(
        self,
        view: TaskView,
        events: Sequence[Event],
        steps: Sequence[StepView],
        *,
        mark: str | None = None,
        mirrored_write: int | None = None,
    ) -> None:
        """Merge one page of a task (``MirrorWrites.write_task``: its rules and errors)."""
        await self.writes.write_task(view, events, steps, mark=mark, mirrored_write=mirrored_write)

    async def write_pages(self, pages: Sequence[PageWrite]) -> None:
        """Write a batch of pages in one transaction (``MirrorWrites.write_pages``)."""
        await self.writes.write_pages(pages)

    async def wipe_project(self, project_id: str) -> int:
        """Delete the project's nodes but the key store and the tombstones
        (``MirrorWrites.wipe_project``); returns nodes deleted."""
        return await self.writes.wipe_project(project_id)

    async def drop_unmarked(
        self,
        project_id: str,
        workflow_id: str,
        mark: str,
        *,
        up_to_seq: int | None,
        as_of: datetime | None,
    ) -> int:
        """Delete the task's nodes a rebuild did not write (``MirrorWrites.drop_unmarked``);
        returns nodes deleted."""
        return await self.writes.drop_unmarked(
            project_id, workflow_id, mark, up_to_seq=up_to_seq, as_of=as_of
        )

    async def redact(self, project_id: str, location: EventLocation, agent_id: str) -> list[str]:
        """Empty the event's text and destroy its data key in one transaction
        (``taskgraph.neo4j.retention.redact``); returns the decisions it affects."""
        return await retention.redact(self.runner, project_id, location, agent_id)

    async def records(
        self, statement: Statement, *, write: bool, **params: Any
    ) -> list[dict[str, Any]]:
        """The rows of one statement in a managed transaction (``taskgraph.port.RecordStore``);
        a node becomes the dict of its properties, Neo4j's times Python datetimes."""
        rows = await self.runner.run(spelled(statement, self.kind), params, write=write)
        return [
            plain({name: plain(v) if isinstance(v, dict) else v for name, v in row.items()})
            for row in rows
        ]

    async def put_tree(self, project_id: str, workflow_id: str, tree_id: str, root: bytes) -> None:
        """Store a new key tree of the task ``workflow_id`` in one transaction
        (``taskgraph.neo4j.keys``); a client does this before it sends the first event it
        seals."""

        async def work(tx: AsyncManagedTransaction) -> None:
            await store_tree(tx, project_id, workflow_id, tree_id, root)

        await self.ensure_schema()
        await self.runner.write_work(work)

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The data keys of ``key_ids`` (``taskgraph.neo4j.keys.fetch_keys``)."""
        async with self.runner.session() as session:
            return await session.execute_read(bounded(fetch_keys), project_id, key_ids)
