"""The Neo4j adapter of the graph store's port (``taskgraph.port.GraphStore``): ``TaskGraph`` on the
driver's bounded sessions (``driver``), with its schema, writes, key store and redaction in
``schema``, ``writes``, ``keys`` and ``retention``, and the store-neutral ``taskgraph.reads`` and
``taskgraph.retention`` given its runner.

The graph model is drawn in ``docs/graph-stores.md`` ("The graph"): every node carries
``project_id``, keys are unique by constraint, and a task node belongs to one task (the mirror
refuses another incarnation of its workflow id, or a tombstoned one: ``TaskIncarnationError``).
Every write MERGEs on a key and every read is parameterized and filtered by project. Times are
datetimes in UTC; payloads are strings, stored exactly as recorded.
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
    """The task graph in Neo4j through one async driver: its own schema, mirror writes, clean-ups,
    key store and redaction, and the store-neutral reads and retention on its runner. With a
    ``tracer``, each ``write_task`` transaction runs in a span (``taskgraph.tracing.write_span``).

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
        """Check that Neo4j answers (``verify_connectivity``: one connection, no retries).

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
        """Create the constraints and indexes once per graph object, before its first write (so a
        worker starts while Neo4j is down); concurrent first writes wait for one
        (``schema.create_schema``)."""
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
        """Ready this object for the mirror's writes once: the schema, then the mirror's statements
        planned in a transaction rolled back (``warm_up_page``), since a cold Neo4j compiling many
        first pages at once ran out of transaction time. ``put_tree`` needs the schema only.
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
        """Merge the task node, ``events`` (NEXT links, decisions' citations) and ``steps`` in one
        transaction (``_TASK``, which reads sealed events' keys, then ``_PAGE``), batched with other
        tasks' pages (``taskgraph.page_batches``; a failed batch is written again page by page), at
        most ``max_writes`` at once; idempotent. ``mark`` stamps the nodes (``drop_unmarked``);
        ``mirrored_write`` raises the node's. Sealed events are opened after the task node is
        locked, so a redaction (which locks it first) is never undone.

        Raises:
            TaskIncarnationError: the node belongs to another task of this workflow id, or the id
                was deleted (nothing is written).
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
        """Delete every node of the project but what the histories cannot give back (the key store,
        the tombstones): events first, ``WIPE_BATCH`` per transaction (one would outgrow Neo4j's
        transaction memory), then the rest. Returns nodes deleted."""

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
        """The end of a rebuild of one task: delete its event and step nodes not stamped ``mark``;
        with ``up_to_seq`` and ``as_of`` (an open task) only those at or before them, since the live
        mirror may have written newer ones. The task node stays. Returns nodes deleted."""

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
        """The rows of one statement in a managed transaction (``taskgraph.port.RecordStore``)."""
        rows = await self.runner.run(spelled(statement, self.kind), params, write=write)
        return [
            plain({name: plain(v) if isinstance(v, dict) else v for name, v in row.items()})
            for row in rows
        ]

    async def put_tree(self, project_id: str, workflow_id: str, tree_id: str, root: bytes) -> None:
        """Store a new key tree of the task ``workflow_id`` in one transaction, before a client
        sends the first event it seals."""

        async def work(tx: AsyncManagedTransaction) -> None:
            await store_tree(tx, project_id, workflow_id, tree_id, root)

        await self.ensure_schema()
        await self.runner.write_work(work)

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The data keys of ``key_ids`` (``taskgraph.neo4j.keys.fetch_keys``)."""
        async with self.runner.session() as session:
            return await session.execute_read(bounded(fetch_keys), project_id, key_ids)
