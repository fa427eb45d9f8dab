"""The FalkorDB adapter of the graph store's port (``taskgraph.port.GraphStore``): ``FalkorGraph``
on the official client (``falkordb.asyncio``), one graph (a Redis key) of tasks, with Neo4j's graph
model and the store-neutral reads and retention (``docs/graph-stores.md`` has the differences for
users; each is tested in ``tests/taskgraph``).

- **Times**: integer microseconds since the epoch, UTC (``taskgraph.models.epoch_us``): no zoned
  datetime, and ``localdatetime`` keeps whole seconds.
- **No multi-statement transactions**: a batch of pages is several statements, each idempotent, the
  watermarks written by the last, so a batch cut short is never reported as held; the incarnation
  check guards the statement that merges the task node.
- **No locks**: a redacted event node keeps its redaction (the event statement never writes text
  into it), and a redaction punctures a key tree by compare-and-set (``_puncture``).
- **Text**: ``taskgraph.falkordb.text``; the dialect: ``taskgraph.falkordb.cypher``.

Errors leave as the port's (``falkor_error``); every call is bounded by ``FALKOR_QUERY_MS`` and the
client's socket timeouts. An acknowledged write survives a server crash only with ``appendonly yes``
and ``appendfsync always`` (the local stack's), which the key store, API keys, page sessions and
tombstones need.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, LiteralString
from urllib.parse import urlsplit

import redis.exceptions
from falkordb.asyncio import FalkorDB
from falkordb.edge import Edge
from falkordb.exceptions import SchemaVersionMismatchException
from falkordb.node import Node

from agent_tasks.contract import (
    Citations,
    Event,
    EventKind,
    StepView,
    TaskView,
    task_workflow_id,
)
from agent_tasks.contract.errors import (
    GraphAuthError,
    GraphDataError,
    GraphError,
    GraphUnavailable,
    TaskIncarnationError,
)
from agent_tasks.sealing.keys import KeyLookup
from agent_tasks.sealing.keytree import Node as TreeNode
from agent_tasks.sealing.keytree import decode, encode, parse_key_id, puncture
from agent_tasks.sealing.seal import unseal
from agent_tasks.taskgraph.dialect import GraphKind, Statement, spelled
from agent_tasks.taskgraph.falkordb import cypher
from agent_tasks.taskgraph.falkordb.text import read_text, stored_text
from agent_tasks.taskgraph.models import as_datetime, epoch_us, utc
from agent_tasks.taskgraph.page_batches import PageBatches, PageWrite, check_batch
from agent_tasks.taskgraph.properties import event_properties, step_properties, task_properties
from agent_tasks.taskgraph.reads import GraphReads
from agent_tasks.taskgraph.retention import EventLocation, GraphRetention
from agent_tasks.taskgraph.tracing import write_span

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

FALKOR_QUERY_MS = 10_000
"""Milliseconds the server lets one query run (``GRAPH.QUERY ... TIMEOUT``; Neo4j's
``NEO4J_TRANSACTION_TIMEOUT_S`` is the same 10 s)."""
FALKOR_CONNECT_TIMEOUT_S = 5.0
"""Seconds a new connection may take."""
FALKOR_SOCKET_TIMEOUT_S = FALKOR_QUERY_MS / 1000 + 5.0
"""Seconds the client waits for an answer: the query timeout and a margin, so a silent peer
never holds a caller."""
FALKOR_MAX_WRITES = 4
"""The mirror's pages one store object writes at once, by default (as Neo4j's)."""
PUNCTURE_TRIES = 10
"""Compare-and-set attempts of one key tree's puncture before ``GraphUnavailable``: each failure
means another redaction of the tree landed."""


def falkor_error(err: Exception) -> GraphError:
    """The port's error for a client or server error: ``GraphAuthError`` (credentials),
    ``GraphUnavailable`` (lost connection, a timeout), else ``GraphDataError``; the message starts
    with ``FalkorDB``."""
    text = str(err)
    if isinstance(err, redis.exceptions.AuthenticationError) or text.startswith(
        ("NOAUTH", "WRONGPASS", "invalid password", "invalid username-password")
    ):
        return GraphAuthError(f"FalkorDB refused the credentials: {err}")
    if isinstance(err, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return GraphUnavailable(f"FalkorDB unavailable: {err}")
    if isinstance(err, TimeoutError | OSError) or "timed out" in text.lower():
        return GraphUnavailable(f"FalkorDB unavailable: {err}")
    return GraphDataError(f"FalkorDB refused the statement: {err}")


def _value(value: Any) -> Any:
    """A result value as plain Python: a node or relationship as its properties (times as
    datetimes), text as sent (``read_text``), lists and maps element by element."""
    if isinstance(value, str):
        return read_text(value)
    if isinstance(value, Node | Edge):
        props = dict(value.properties)
        return {
            k: (as_datetime(v) if k in cypher.TIME_FIELDS and isinstance(v, int) else _value(v))
            for k, v in props.items()
        }
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    return value


def _param(value: Any) -> Any:
    """A parameter as FalkorDB takes it: a datetime as its microseconds (``epoch_us``), text
    in its stored form (``stored_text``)."""
    if isinstance(value, str):
        return stored_text(value)
    if isinstance(value, datetime):
        return epoch_us(value)
    if isinstance(value, list | tuple):
        return [_param(v) for v in value]
    if isinstance(value, dict):
        return {k: _param(v) for k, v in value.items()}
    return value


def _event_props(event: Event, stamp: dict[str, str]) -> dict[str, Any]:
    """An event node's properties (``taskgraph.properties.event_properties``) with ``time`` in
    microseconds."""
    return event_properties(event) | {"time": epoch_us(event.time)} | stamp


def _shared_row(page: PageWrite) -> dict[str, Any]:
    """A page's row of ``SHARED``: its task, parent and branch source workflow ids, its
    watermarks."""
    view = page.view
    branch = view.branched_from
    return {
        "key": view.workflow_id,
        "parent_key": None
        if view.parent is None
        else task_workflow_id(view.project_id, view.parent),
        "branch_key": None if branch is None else task_workflow_id(view.project_id, branch.task),
        "watermark": max((e.seq for e in page.events), default=0),
        "mirrored_write": page.mirrored_write,
    }


# Long: the FalkorDB adapter of the GraphStore port: its own writes, schema, key store and
# redaction share one client (the store-neutral reads and retention are given it as a runner)
class FalkorGraph:
    """The task graph in one FalkorDB graph (``taskgraph.port.GraphStore``).

    Args:
        url: ``falkor://`` / ``redis://`` (``falkors://`` / ``rediss://`` for TLS), with the
            server's user and password when it has them.
        graph: the graph's name (a Redis key).
        tracer: an OpenTelemetry tracer for the mirror's write spans; None: no OpenTelemetry code.
        max_writes: the mirror's pages this object writes at once.
    """

    kind: GraphKind = "falkordb"
    """The store's dialect (``taskgraph.runner.StatementRunner``)."""

    def __init__(
        self,
        url: str,
        graph: str,
        *,
        tracer: Tracer | None = None,
        max_writes: int = FALKOR_MAX_WRITES,
    ) -> None:
        parts = urlsplit(url)
        self.address = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
        """Where the server is (never its password)."""
        self.graph_name = graph
        self.tracer = tracer
        self._options: dict[str, Any] = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or 6379,
            "username": parts.username or None,
            "password": parts.password or None,
            "ssl": parts.scheme in ("falkors", "rediss"),
            "socket_timeout": FALKOR_SOCKET_TIMEOUT_S,
            "socket_connect_timeout": FALKOR_CONNECT_TIMEOUT_S,
        }
        self._db: Any = None
        self._graph: Any = None
        self._open_lock = asyncio.Lock()
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()
        self._writes = asyncio.Semaphore(max_writes)
        self.reads = GraphReads(self)
        """One task's mirrored state and the cross-task reads (``taskgraph.port.TaskReads``)."""
        self.retention = GraphRetention(self)
        """Finding an event, tombstones, deletion (``taskgraph.port.RetentionStore``)."""

    async def _client(self) -> Any:
        """The client's graph, made on first use, in a thread: the client's constructor asks the
        server whether it is a cluster with a blocking ``INFO``.

        Raises:
            GraphUnavailable, GraphAuthError: the server cannot be reached, or refused.
        """
        if self._graph is None:
            async with self._open_lock:
                if self._graph is None:
                    try:
                        self._db = await asyncio.to_thread(FalkorDB, **self._options)
                    except (redis.exceptions.RedisError, OSError) as err:
                        raise falkor_error(err) from err
                    self._graph = self._db.select_graph(self.graph_name)
        return self._graph

    async def connect(self) -> None:
        """Check that FalkorDB answers, then create the schema (``ensure_schema``).

        Raises:
            GraphUnavailable: FalkorDB cannot be reached.
            GraphAuthError: it refused the credentials.
        """
        await self.ping()
        await self.ensure_schema()

    async def ping(self) -> None:
        """Check that FalkorDB answers (``PING``, bounded by the connect and socket timeouts).

        Raises:
            GraphUnavailable: FalkorDB cannot be reached.
            GraphAuthError: it refused the credentials.
        """
        await self._client()
        try:
            await self._db.connection.ping()
        except (redis.exceptions.RedisError, OSError) as err:
            raise falkor_error(err) from err

    async def close(self) -> None:
        """Close the connections."""
        if self._db is not None:
            await self._db.aclose()

    async def _run(self, query: LiteralString, params: dict[str, Any], *, write: bool) -> Any:
        """The result of one query, sent again when the client held an old view of the schema
        (``SchemaVersionMismatchException``)."""
        sent = {k: _param(v) for k, v in params.items()}
        graph = await self._client()
        run = graph.query if write else graph.ro_query
        try:
            try:
                return await run(query, sent, timeout=FALKOR_QUERY_MS)
            except SchemaVersionMismatchException:
                return await run(query, sent, timeout=FALKOR_QUERY_MS)
        except (redis.exceptions.RedisError, OSError) as err:
            raise falkor_error(err) from err

    async def _rows(
        self, query: Statement, params: dict[str, Any], *, write: bool
    ) -> list[dict[str, Any]]:
        result = await self._run(spelled(query, self.kind), params, write=write)
        names = [column[1] for column in result.header]
        return [dict(zip(names, map(_value, row), strict=True)) for row in result.result_set]

    async def read(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one read statement (``GRAPH.RO_QUERY``)."""
        return await self._rows(query, params, write=False)

    async def write(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one write statement (``GRAPH.QUERY``: atomic)."""
        return await self._rows(query, params, write=True)

    async def records(
        self, statement: Statement, *, write: bool, **params: Any
    ) -> list[dict[str, Any]]:
        """The rows of one statement (``taskgraph.port.RecordStore``)."""
        return await self._rows(statement, params, write=write)

    async def ensure_schema(self) -> None:
        """``init_schema`` once per store object, however many first writes come at once."""
        if self._schema_ready:
            return
        async with self._schema_lock:
            if not self._schema_ready:
                await self.init_schema()

    async def ensure_ready(self) -> None:
        """The schema (``ensure_schema``); FalkorDB needs no warm-up."""
        await self.ensure_schema()

    async def init_schema(self) -> None:
        """Create the indexes (``falkor_cypher.SCHEMA``), then the unique constraints;
        idempotent."""
        for statement in cypher.SCHEMA:
            try:
                await self._run(statement, {}, write=True)
            except GraphDataError as err:
                if "already indexed" not in str(err):
                    raise
        for label, prop in cypher.UNIQUE:
            try:
                await self._db.connection.execute_command(  # the graph exists now
                    "GRAPH.CONSTRAINT",
                    "CREATE",
                    self.graph_name,
                    "UNIQUE",
                    "NODE",
                    label,
                    "PROPERTIES",
                    "1",
                    prop,
                )
            except redis.exceptions.ResponseError as err:
                if "already exists" not in str(err):
                    raise falkor_error(err) from err
            except (redis.exceptions.RedisError, OSError) as err:
                raise falkor_error(err) from err
        self._schema_ready = True

    async def constraints(self) -> list[tuple[str, str, str]]:
        """The graph's unique constraints as ``(label, property, status)``."""
        rows = await self.read("CALL db.constraints()")
        return [
            (str(row["label"]), str(p), str(row["status"]))
            for row in rows
            if row["type"] == "UNIQUE"
            for p in row["properties"]
        ]

    # the key store (taskgraph.neo4j.keys.KeyStore)

    async def put_tree(self, project_id: str, workflow_id: str, tree_id: str, root: bytes) -> None:
        """Store a new key tree of the task ``workflow_id`` (one statement)."""
        await self.ensure_schema()
        await self.write(
            cypher.PUT_TREE,
            tree=tree_id,
            p=project_id,
            task_key=workflow_id,
            nodes=encode([TreeNode(0, 0, root)]),
            now=datetime.now(UTC),
        )

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The data keys of ``key_ids`` (``KeyLookup.keys``); single keys are absent (none stored
        here)."""
        if not key_ids:
            return {}
        lookup = KeyLookup(key_ids)
        trees = await self.read(cypher.KEY_TREES, trees=lookup.parameters()["trees"], p=project_id)
        return lookup.keys(trees, [])

    async def _puncture(self, project_id: str, key: str) -> bool:
        """Destroy the key tree leaf ``key`` by compare-and-set; False for another kind of id or an
        unknown tree.

        Raises:
            GraphUnavailable: ``PUNCTURE_TRIES`` other redactions of the tree kept landing first.
        """
        where = parse_key_id(key)
        if where is None:
            return False
        tree_id, leaf = where
        for _ in range(PUNCTURE_TRIES):
            rows = await self.read(
                "MATCH (k:KeyTree {tree_id: $id}) WHERE k.project_id = $p RETURN k.nodes AS nodes",
                id=tree_id,
                p=project_id,
            )
            if not rows:
                return False
            was = rows[0]["nodes"]
            nodes = encode(puncture(decode(was), leaf))
            done = await self.write(
                cypher.PUNCTURE, id=tree_id, p=project_id, was=was, nodes=nodes, leaf=leaf
            )
            if done[0]["n"]:
                return True
        raise GraphUnavailable(f"FalkorDB: key tree {tree_id} kept changing during a redaction")

    # retention (taskgraph.port.RetentionStore; the rest is taskgraph.retention's)

    async def redact(self, project_id: str, location: EventLocation, agent_id: str) -> list[str]:
        """Empty the event's text (a redacted node keeps its redaction from then on), then
        destroy its key tree leaf (``_puncture``); returns the decisions it affects."""
        rows = await self.write(
            cypher.REDACT, key=location.task_key, p=project_id, seq=location.seq
        )
        if not rows:
            return []
        if rows[0]["key_id"] is not None:
            await self._puncture(project_id, rows[0]["key_id"])
        return sorted(rows[0]["affected"])

    # the mirror's writes (taskgraph.port.MirrorStore)

    async def write_task(
        self,
        view: TaskView,
        events: Sequence[Event],
        steps: Sequence[StepView],
        *,
        mark: str | None = None,
        mirrored_write: int | None = None,
    ) -> None:
        """One mirror page (``taskgraph.port.MirrorStore.write_task``), batched with other tasks'
        pages (``taskgraph.page_batches``) into ``write_pages``; a failed batch is written again
        page by page, so this page's error is its own.

        Raises:
            TaskIncarnationError: the node belongs to another task of this workflow id, or the id
                was deleted (nothing is written).
            GraphIncomplete: a sealed event's key is not in the key store.
        """
        await self.ensure_ready()
        if self._batches is None:
            self._batches = PageBatches(self.write_pages)
        seqs = [e.seq for e in events]
        with write_span(self.tracer, self.kind, self.graph_name, view, seqs, len(steps)):
            await self._batches.write(PageWrite(view, events, steps, mark, mirrored_write))

    _batches: PageBatches | None = None
    """The line of this object's mirror pages (made at the first write, in its event loop)."""

    async def write_pages(self, pages: Sequence[PageWrite]) -> None:
        """Write a batch of pages (one project, a page per task) as a run of statements over all of
        them: task nodes (``TASK``), events and NEXT links, steps, decisions' links, then shared
        nodes and watermarks (``SHARED``); each statement atomic and idempotent, the watermarks
        last.

        Raises:
            TaskIncarnationError: a page's task node belongs to another task of its workflow id, or
                the id was deleted (nothing is written of that page).
            GraphIncomplete: a sealed event's key is not in the key store (nothing written).
            ValueError: pages of two projects, or two pages of one task (nothing written).
        """
        check_batch(pages)
        project = pages[0].view.project_id
        sealed = [e.key_id for p in pages for e in p.events if e.sealed and e.key_id]
        keys = await self.get_keys(project, sealed) if sealed else {}
        opened = [unseal(p.events, keys) for p in pages]  # GraphIncomplete before any write
        tasks = []
        for page in pages:
            props = task_properties(page.view)
            props["created_at"] = epoch_us(page.view.created_at)
            props["updated_at"] = epoch_us(page.view.updated_at)
            tasks.append(props)
        async with self._writes:
            placed = {row["key"] for row in await self.write(cypher.TASK, tasks=tasks)}
            for page in pages:
                if page.view.workflow_id not in placed:
                    raise await self._incarnation(page.view)
            events, pairs, steps, decisions = [], [], [], []
            for page, page_events in zip(pages, opened, strict=True):
                key = page.view.workflow_id
                stamp = {} if page.mark is None else {"rebuild": page.mark}
                events += [_event_props(e, stamp) | {"task_key": key} for e in page_events]
                pairs += [{"key": key, "seq": e.seq} for e in page_events if e.seq > 1]
                steps += [
                    step_properties(s)
                    | {"updated_at": epoch_us(s.updated_at), "task_key": key}
                    | stamp
                    for s in page.steps
                ]
                decisions += [(key, e) for e in page_events if e.kind is EventKind.DECISION]
            if events:
                await self.write(cypher.EVENTS, events=events)
                await self.write(cypher.NEXT, pairs=pairs)
            if steps:
                await self.write(cypher.STEPS, steps=steps)
            if decisions:
                await self._decisions(decisions)
            await self.write(cypher.SHARED, pages=[_shared_row(page) for page in pages])

    async def _incarnation(self, view: TaskView) -> TaskIncarnationError:
        """Why the task node of ``view`` was not written: deleted, or another incarnation."""
        key = view.workflow_id
        found = (await self.read(cypher.INCARNATION, key=key))[0]
        was = found["was"]
        return TaskIncarnationError(
            f"task {key}: "
            + ("the task was deleted" if found["deleted"] else f"created at {as_datetime(was)}")
            + f"; this task was created at {utc(view.created_at).isoformat()}. FalkorDB "
            "keeps the earlier one (its name stays taken) and takes nothing of this one"
        )

    async def _decisions(self, decisions: Sequence[tuple[str, Event]]) -> None:
        """The decisions' label and CITES links (keys joined in the statements:
        ``taskgraph.falkordb.text``)."""
        rows = [{"key": key, "seq": d.seq} for key, d in decisions]
        await self.write(cypher.DECISIONS, decisions=rows)
        event_cites, step_cites = [], []
        for key, d in decisions:
            cites = d.cites or Citations()
            event_cites += [{"key": key, "seq": d.seq, "cited": s} for s in cites.events]
            step_cites += [
                {
                    "key": key,
                    "seq": d.seq,
                    "step": s.name,
                    "state": s.state.value,
                    "attempt": s.attempt,
                }
                for s in cites.steps
            ]
        if event_cites:
            await self.write(cypher.CITES_EVENTS, cites=event_cites)
        if step_cites:
            await self.write(cypher.CITES_STEPS, cites=step_cites)

    async def wipe_project(self, project_id: str) -> int:
        """Delete the project's nodes but the key store and the tombstones (events first,
        ``WIPE_BATCH`` per statement); returns nodes deleted."""
        deleted, batch = 0, cypher.WIPE_BATCH
        while batch:
            rows = await self.write(cypher.WIPE_EVENTS, p=project_id, batch=cypher.WIPE_BATCH)
            batch = rows[0]["n"]
            deleted += batch
        return deleted + int((await self.write(cypher.WIPE_REST, p=project_id))[0]["n"])

    async def drop_unmarked(
        self,
        project_id: str,
        workflow_id: str,
        mark: str,
        *,
        up_to_seq: int | None,
        as_of: datetime | None,
    ) -> int:
        """The end of a rebuild of one task (``taskgraph.port.MirrorStore.drop_unmarked``)."""
        rows = await self.write(
            cypher.DROP_UNMARKED,
            p=project_id,
            key=workflow_id,
            mark=mark,
            upto=up_to_seq,
            as_of=as_of,
        )
        return int(rows[0]["n"])
