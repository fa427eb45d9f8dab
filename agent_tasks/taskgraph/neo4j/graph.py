"""The Neo4j adapter of the graph store's port (``taskgraph.port.GraphStore``): ``TaskGraph``
on the driver's bounded sessions (``driver``, whose errors leave as the port's,
``contract.errors``), with the statements of its schema, its idempotent mirror writes, its
key store and its redaction in modules of their own (``schema``, ``writes``, ``keys``,
``retention``), and the store-neutral reads and retention (``taskgraph.reads``,
``taskgraph.retention``) given its runner.

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

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from neo4j import AsyncDriver, AsyncManagedTransaction
from neo4j.exceptions import DriverError, Neo4jError

from agent_tasks.contract import Event, StepView, TaskView
from agent_tasks.contract.errors import GraphUnavailable
from agent_tasks.taskgraph.dialect import GraphKind, Statement, spelled
from agent_tasks.taskgraph.models import plain, utc
from agent_tasks.taskgraph.neo4j import retention
from agent_tasks.taskgraph.neo4j.driver import NEO4J_MAX_WRITES, Neo4jRunner, bounded, graph_error
from agent_tasks.taskgraph.neo4j.keys import fetch_keys, store_tree
from agent_tasks.taskgraph.neo4j.schema import create_schema
from agent_tasks.taskgraph.neo4j.writes import WIPE_BATCH, batch_writer
from agent_tasks.taskgraph.page_batches import PageBatches, PageWrite, check_batch
from agent_tasks.taskgraph.reads import GraphReads
from agent_tasks.taskgraph.retention import EventLocation, GraphRetention
from agent_tasks.taskgraph.seeds import warm_up_page
from agent_tasks.taskgraph.tracing import write_span

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


class TaskGraph:
    """The task graph in Neo4j, through one async driver (its bounded sessions: ``runner``):
    the schema, the mirror's writes and the clean-ups of a rebuild and a project, the key store
    and the redaction are its own (their statements in ``schema``, ``writes``, ``keys``,
    ``retention``); the store-neutral reads and retention are given its runner (``reads``,
    ``retention``).

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
        self.tracer = tracer
        self.schema_ready = False
        """Whether this object created the schema (``ensure_schema``)."""
        self._lock = asyncio.Lock()
        """Held while the schema is created and while the mirror's statements warm up."""
        self._warm = False
        self._writes = asyncio.Semaphore(max_writes)
        """The mirror's transactions at once."""
        self._batches: PageBatches | None = None
        """The line of this object's mirror pages (made at the first write, in its loop)."""
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
        """Create the constraints and indexes once per graph object, before its first write
        (so a worker can start while Neo4j is down), however many first writes come at once:
        one runs it, the others wait for it (``schema.create_schema``)."""
        if self.schema_ready:
            return
        async with self._lock:
            if not self.schema_ready:
                await self.init_schema()

    async def init_schema(self) -> None:
        """Create the constraints and indexes now (idempotent: ``schema.create_schema``)."""
        await create_schema(self.runner)
        self.schema_ready = True

    async def ensure_ready(self) -> None:
        """Ready this graph object for the mirror's writes, once, however many first writes
        come at once (one does it, the others wait for it): the schema (``ensure_schema``),
        then the mirror's statements planned and run in a transaction rolled back
        (``warm_up_page``).

        A cold Neo4j plans and compiles each statement the first time it runs: many first
        pages at once all ran out of transaction time. Done once, before them, they find the
        plans cached. (A client storing a key tree needs the schema only: ``put_tree`` does
        not wait for this.)
        """
        if self._warm:
            return
        await self.ensure_schema()
        async with self._lock:
            if self._warm:
                return
            view, events = warm_up_page()
            work = batch_writer([PageWrite(view, events, [])])
            async with self.runner.session() as session, await session.begin_transaction() as tx:
                await work(tx)
                await tx.rollback()
            self._warm = True

    async def write_task(
        self,
        view: TaskView,
        events: Sequence[Event],
        steps: Sequence[StepView],
        *,
        mark: str | None = None,
        mirrored_write: int | None = None,
    ) -> None:
        """Merge the task node, ``events`` (with their NEXT links, decisions with their
        citations) and ``steps``, in one transaction of two statements (``_TASK``, which
        also reads the keys of sealed events, then ``_PAGE``) with the pages of other tasks
        of the project that wait meanwhile (``taskgraph.page_batches``; a batch that fails
        is written again page by page, so this page's error is its own), at most
        ``max_writes`` transactions at once per graph object. Idempotent: repeating it changes
        nothing.
        ``mark`` (a rebuild's id) is stamped on the event and step nodes as property
        ``rebuild`` (``drop_unmarked``). ``mirrored_write`` (the last page of a copy that
        reached the run's newest write: ``view.writes``) raises the node's
        ``mirrored_write``, what ``mirror_holds`` reads.

        Sealed events are opened with their keys inside the transaction, once the task node
        is locked (its MERGE and SET), so a redaction, which locks the task node first, is
        never undone: a destroyed key writes the event redacted.

        Raises:
            TaskIncarnationError: the task's node belongs to another task of the same
                workflow id, or the id was deleted (nothing is written).
            GraphIncomplete: a sealed event's key is not in the key store.
        """
        await self.ensure_ready()
        if self._batches is None:
            self._batches = PageBatches(self.write_pages)
        page = PageWrite(view, events, steps, mark, mirrored_write)
        seqs = [e.seq for e in events]
        with write_span(self.tracer, self.kind, self.database, view, seqs, len(steps)):
            await self._batches.write(page)

    async def write_pages(self, pages: Sequence[PageWrite]) -> None:
        """Write ``pages`` (of one project, a page per task: ``taskgraph.page_batches``) in
        one managed transaction (``_TASK``, then ``_PAGE``), all or nothing; ``write_task``
        sends its pages through here.

        Raises:
            TaskIncarnationError: a page's task node belongs to another task of its workflow
                id, or the id was deleted (nothing of the batch is written).
            GraphIncomplete: a sealed event's key is not in the key store.
            ValueError: pages of two projects, or two pages of one task.
        """
        check_batch(pages)
        async with self._writes, self.runner.session() as session:
            await session.execute_write(bounded(batch_writer(pages)))

    async def wipe_project(self, project_id: str) -> int:
        """Delete every node of one project and its relationships, but for what the Temporal
        histories cannot give back (``graph rebuild``): the key store and the tombstones of
        deleted tasks. Events go first, ``WIPE_BATCH`` per transaction (found by the
        ``(project_id, kind)`` index; a corpus deleted in one transaction outgrows Neo4j's
        transaction memory), then the rest in one. Returns nodes deleted."""

        async def events(tx: AsyncManagedTransaction) -> int:
            result = await tx.run(
                "MATCH (n:Event {project_id: $p}) WITH n LIMIT $batch DETACH DELETE n "
                "RETURN count(n) AS n",
                p=project_id,
                batch=WIPE_BATCH,
            )
            return int((await result.single(strict=True))["n"])

        async def rest(tx: AsyncManagedTransaction) -> int:
            result = await tx.run(
                """
                MATCH (n {project_id: $p})
                WHERE NOT n:DataKey AND NOT n:KeyTree AND NOT n:TaskTombstone
                DETACH DELETE n RETURN count(n) AS n
                """,
                p=project_id,
            )
            return int((await result.single(strict=True))["n"])

        deleted, batch = 0, WIPE_BATCH
        while batch:
            async with self.runner.session() as session:  # each batch bounded on its own
                batch = await session.execute_write(bounded(events))
            deleted += batch
        async with self.runner.session() as session:
            return deleted + await session.execute_write(bounded(rest))

    async def drop_unmarked(
        self,
        project_id: str,
        workflow_id: str,
        mark: str,
        *,
        up_to_seq: int | None,
        as_of: datetime | None,
    ) -> int:
        """The end of a rebuild of one task: delete its event and step nodes that the rebuild
        did not write (``mark``), within what the rebuild covered. ``up_to_seq`` and ``as_of``
        None (a closed task: nothing else can be written to it) delete every unmarked one;
        otherwise only events with seq <= ``up_to_seq`` and steps changed at or before
        ``as_of``, since the live mirror may have written newer ones meanwhile. The task node
        stays, with its links to parent and children. Returns nodes deleted."""

        async def work(tx: AsyncManagedTransaction) -> int:
            result = await tx.run(
                """
                MATCH (n {project_id: $p, task_key: $key})
                WHERE (n:Event OR n:Step) AND coalesce(n.rebuild, '') <> $mark
                  AND ($upto IS NULL
                       OR (n:Event AND n.seq <= $upto)
                       OR (n:Step AND n.updated_at <= $as_of))
                DETACH DELETE n
                RETURN count(n) AS n
                """,
                p=project_id,
                key=workflow_id,
                mark=mark,
                upto=up_to_seq,
                as_of=None if as_of is None else utc(as_of),
            )
            record = await result.single(strict=True)
            return int(record["n"])

        async with self.runner.session() as session:
            return await session.execute_write(bounded(work))

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
