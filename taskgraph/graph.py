"""The Neo4j graph of tasks: schema, idempotent mirror writes, and cross-task reads.

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
    (:DataKey {key_id})                                  the key store (``taskgraph.keys``)

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
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, LiteralString

from neo4j import (
    AsyncDriver,
    AsyncGraphDatabase,
    AsyncManagedTransaction,
    AsyncSession,
    unit_of_work,
)
from neo4j.exceptions import ServiceUnavailable

from taskgraph.keys import KEY_SCHEMA, fetch_keys, store_keys
from taskgraph.models import (
    DecisionRow,
    EventFilter,
    EventRow,
    StepFilter,
    StepRow,
    TaskFilter,
    TaskRow,
    ToolFailures,
    TreeRead,
    TreeRow,
    plain,
    utc,
)
from taskgraph.sealing import unseal
from workflows.models import (
    PAGE_LIMIT_MAX,
    BoundedText,
    Citations,
    Event,
    EventKind,
    StepState,
    StepView,
    TaskView,
    bound_text,
    event_id,
    task_workflow_id,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

SCHEMA: tuple[LiteralString, ...] = (
    "CREATE CONSTRAINT project_key IF NOT EXISTS FOR (n:Project) REQUIRE n.project_id IS UNIQUE",
    "CREATE CONSTRAINT task_key IF NOT EXISTS FOR (n:Task) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT event_key IF NOT EXISTS FOR (n:Event) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT step_key IF NOT EXISTS FOR (n:Step) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT agent_key IF NOT EXISTS FOR (n:Agent) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT session_key IF NOT EXISTS FOR (n:Session) REQUIRE n.key IS UNIQUE",
    "CREATE INDEX task_project_name IF NOT EXISTS FOR (n:Task) ON (n.project_id, n.name)",
    "CREATE INDEX task_project_status IF NOT EXISTS FOR (n:Task) ON (n.project_id, n.status)",
    "CREATE INDEX event_project_kind IF NOT EXISTS FOR (n:Event) ON (n.project_id, n.kind)",
    "CREATE INDEX event_project_time IF NOT EXISTS FOR (n:Event) ON (n.project_id, n.time)",
    "CREATE INDEX step_project_state IF NOT EXISTS FOR (n:Step) ON (n.project_id, n.state)",
    "CREATE CONSTRAINT event_id IF NOT EXISTS FOR (n:Event) REQUIRE n.id IS UNIQUE",
    "CREATE CONSTRAINT decision_id IF NOT EXISTS FOR (n:Decision) REQUIRE n.id IS UNIQUE",
    "CREATE INDEX decision_task IF NOT EXISTS FOR (n:Decision) ON (n.project_id, n.task_key)",
    "CREATE CONSTRAINT tombstone_key IF NOT EXISTS FOR (n:TaskTombstone) REQUIRE n.key IS UNIQUE",
    *KEY_SCHEMA,
)
"""Constraints and indexes, created before the first write (all single-property uniqueness
constraints and range indexes, which Neo4j Community has)."""

_TASK: LiteralString = """
MERGE (p:Project {project_id: $t.project_id})
MERGE (t:Task {key: $t.key})
WITH p, t, t.created_at AS was
SET t += $t
MERGE (p)-[:HAS_TASK]->(t)
MERGE (a:Agent {key: $t.project_id + '/' + $t.agent_id})
  ON CREATE SET a.project_id = $t.project_id, a.agent_id = $t.agent_id
MERGE (t)-[:CREATED_BY]->(a)
FOREACH (s IN CASE WHEN $t.session_id IS NULL THEN [] ELSE [$t.session_id] END |
  MERGE (se:Session {key: $t.project_id + '/' + s})
    ON CREATE SET se.project_id = $t.project_id, se.session_id = s
  MERGE (t)-[:IN_SESSION]->(se))
FOREACH (pk IN CASE WHEN $parent_key IS NULL THEN [] ELSE [$parent_key] END |
  MERGE (pt:Task {key: pk}) ON CREATE SET pt.project_id = $t.project_id, pt.name = $t.parent
  MERGE (t)-[:CHILD_OF]->(pt))
WITH was
OPTIONAL MATCH (gone:TaskTombstone {key: $t.key})
RETURN was, gone IS NOT NULL AS deleted
"""

_EVENTS: LiteralString = """
MATCH (t:Task {key: $task_key})
UNWIND $events AS ev
MERGE (e:Event {key: $task_key + '#' + toString(ev.seq)})
SET e += ev, e.task_key = $task_key, e.project_id = t.project_id, e.task_name = t.name
MERGE (t)-[:HAS_EVENT]->(e)
MERGE (a:Agent {key: t.project_id + '/' + ev.author})
  ON CREATE SET a.project_id = t.project_id, a.agent_id = ev.author
MERGE (e)-[:AUTHORED_BY]->(a)
"""

_NEXT: LiteralString = """
UNWIND $seqs AS s
MATCH (a:Event {key: $task_key + '#' + toString(s - 1)})
MATCH (b:Event {key: $task_key + '#' + toString(s)})
MERGE (a)-[:NEXT]->(b)
"""

_WATERMARK: LiteralString = """
MATCH (t:Task {key: $task_key})
SET t.mirrored_seq = CASE WHEN coalesce(t.mirrored_seq, 0) < $seq THEN $seq
                          ELSE t.mirrored_seq END
"""

_DECISIONS: LiteralString = """
UNWIND $decisions AS d
MATCH (e:Event {key: $task_key + '#' + toString(d.seq)})
SET e:Decision
WITH e, d
CALL (e, d) {
  UNWIND d.events AS s
  MATCH (c:Event {key: $task_key + '#' + toString(s)})
  MERGE (e)-[:CITES]->(c)
}
CALL (e, d) {
  UNWIND d.steps AS st
  MATCH (x:Step {key: $task_key + '/' + st.name})
  MERGE (e)-[r:CITES]->(x)
  SET r.state = st.state, r.attempt = st.attempt
}
"""

_STEPS: LiteralString = """
MATCH (t:Task {key: $task_key})
UNWIND $steps AS st
MERGE (s:Step {key: $task_key + '/' + st.step_name})
SET s += st, s.task_key = $task_key, s.project_id = t.project_id, s.task_name = t.name
MERGE (t)-[:HAS_STEP]->(s)
WITH t, s, st
OPTIONAL MATCH (s)-[old:RESULT]->(previous:Event)
  WHERE previous.seq <> st.result_event_seq OR st.result_event_seq IS NULL
DELETE old
WITH t, s, st WHERE st.result_event_seq IS NOT NULL
MERGE (e:Event {key: $task_key + '#' + toString(st.result_event_seq)})
  ON CREATE SET e.project_id = t.project_id, e.task_key = $task_key,
                e.task_name = t.name, e.seq = st.result_event_seq
MERGE (s)-[:RESULT]->(e)
"""


NEO4J_CONNECT_TIMEOUT_S = 5.0
"""Seconds a new connection may take to connect and finish the Bolt handshake (the driver's
default is 30 s; a local or same-region Neo4j answers in milliseconds)."""
NEO4J_ACQUIRE_TIMEOUT_S = 10.0
"""Seconds to get a connection from the pool, a new one's connect or an idle one's liveness
check included (the driver's default is 60 s)."""
NEO4J_LIVENESS_CHECK_S = 10.0
"""A pooled connection idle for longer than this (seconds) is checked with a round trip before
it is used, within the acquisition timeout: one that died silently (a restarted server, a
dropped NAT entry, a proxy that stopped forwarding) is replaced instead of hanging a
transaction."""
NEO4J_TRANSACTION_TIMEOUT_S = 10.0
"""Seconds the server lets one transaction run (``unit_of_work(timeout=...)``) before it
aborts it; one mirror page (100 events, 1 MiB) takes about 0.1 s."""
NEO4J_RETRY_S = 10.0
"""Seconds the driver keeps retrying a transaction that failed with a transient error
(``max_transaction_retry_time``, default 30 s); the mirror activity's retry policy and the
workflow's pause retry after that."""
NEO4J_CALL_TIMEOUT_S = NEO4J_RETRY_S + NEO4J_ACQUIRE_TIMEOUT_S + NEO4J_TRANSACTION_TIMEOUT_S + 5.0
"""Client-side bound of one managed transaction with its retries (seconds): the last retry
may start just before ``NEO4J_RETRY_S`` and then take an acquisition and a transaction, plus
a margin. The server-side timeout cannot end a transaction whose peer went silent (a
half-open TCP connection, a partition): this bound does, by cancelling the call (the async
driver then drops that connection) and raising ``ServiceUnavailable``."""


def open_driver(uri: str, auth: tuple[str, str]) -> AsyncDriver:
    """The async driver every part of the project uses: ``auth`` is ``(user, password)``;
    connect, acquisition, liveness check and retry bounded (``NEO4J_*`` above); server
    notifications (warnings about unknown property keys on an empty graph) are off."""
    return AsyncGraphDatabase.driver(
        uri,
        auth=auth,
        notifications_min_severity="OFF",
        connection_timeout=NEO4J_CONNECT_TIMEOUT_S,
        connection_acquisition_timeout=NEO4J_ACQUIRE_TIMEOUT_S,
        liveness_check_timeout=NEO4J_LIVENESS_CHECK_S,
        max_transaction_retry_time=NEO4J_RETRY_S,
    )


class TaskIncarnationError(ValueError):
    """The mirror met a task node that is not its task's: one created by an earlier task of
    the same workflow id whose history Temporal deleted (retention), or the tombstone of a
    deleted task. A data error (the mirror does not retry it): the name is taken."""


_bounded = unit_of_work(timeout=NEO4J_TRANSACTION_TIMEOUT_S)
"""Marks a transaction function with the server-side ``NEO4J_TRANSACTION_TIMEOUT_S``."""


def task_properties(view: TaskView) -> dict[str, Any]:
    """Task node properties from a view (metadata, result and error as JSON text)."""
    return {
        "key": view.workflow_id,
        "project_id": view.project_id,
        "name": view.name,
        "goal": view.goal,
        "agent_id": view.agent_id,
        "session_id": view.session_id,
        "parent": view.parent,
        "metadata": json.dumps(view.metadata, ensure_ascii=False, sort_keys=True),
        "status": view.status.value,
        "result": None if view.result is None else view.result.text,
        "error": None if view.error is None else view.error.text,
        **_full("result", view.result),
        **_full("error", view.error),
        "last_seq": view.last_seq,
        "runs": view.runs,
        "created_at": utc(view.created_at),
        "updated_at": utc(view.updated_at),
    }


def _full(field: str, text: BoundedText | None) -> dict[str, Any]:
    """The full length and SHA-256 of a task's result or error text as properties, so that a
    view read back from Neo4j (``task_view``) has them."""
    return {
        f"{field}_full_length": None if text is None else text.full_length,
        f"{field}_full_sha256": None if text is None else text.full_sha256,
    }


def event_properties(event: Event) -> dict[str, Any]:
    """Event node properties of an opened event (``unseal``): ``time`` a Neo4j datetime in
    UTC, ``cites`` as JSON text; never the sealed text (the node holds the plain text)."""
    props = event.model_dump(mode="python", exclude={"sealed", "cites"})
    props["cites"] = None if event.cites is None else event.cites.model_dump_json()
    props["time"] = utc(event.time)
    props["kind"] = event.kind.value
    props["role"] = None if event.role is None else event.role.value
    props["truncated"] = event.truncated
    return props


def step_properties(step: StepView) -> dict[str, Any]:
    """Step node properties (``updated_at`` in UTC)."""
    props = step.model_dump(mode="python")
    props["updated_at"] = utc(step.updated_at)
    for field in ("state", "kind", "result_validity"):
        props[field] = props[field].value
    return props


class TaskGraph:
    """Reads and writes the task graph through one async driver.

    Each method opens its own session (one session per coroutine) and uses managed
    transactions (``execute_read`` / ``execute_write``), which retry transient errors
    (deadlocks, leader switches, unavailable servers) for up to ``NEO4J_RETRY_S``. Every
    transaction is bounded twice: by the server (``NEO4J_TRANSACTION_TIMEOUT_S``) and, with
    its retries, by the client (``NEO4J_CALL_TIMEOUT_S``), so a silent peer never holds a
    caller (an activity slot, a CLI command) for ever. Errors left are raised as the driver's
    ``neo4j.exceptions`` (``Neo4jError`` or ``DriverError``; ``is_retryable()`` says whether
    trying later can help; the client-side bound raises ``ServiceUnavailable``).

    Given an OpenTelemetry ``tracer`` (``telemetry.setup``), each ``write_task`` transaction
    runs in a client span ``neo4j write_task`` with the database semantic conventions
    (``db.system.name``, ``db.namespace``, ``db.operation.name``) and the task's workflow id,
    project id, counts and seq range (``agent_tasks.*``; the range only when events were
    written); without one, no OpenTelemetry code runs.
    """

    def __init__(
        self, driver: AsyncDriver, database: str = "neo4j", tracer: Tracer | None = None
    ) -> None:
        self.driver = driver
        self.database = database
        self.tracer = tracer
        self._schema_ready = False

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[AsyncSession]:
        """A session whose use is bounded by ``NEO4J_CALL_TIMEOUT_S``.

        Raises:
            neo4j.exceptions.ServiceUnavailable: the bound passed (the call was cancelled).
        """
        try:
            async with (
                asyncio.timeout(NEO4J_CALL_TIMEOUT_S),
                self.driver.session(database=self.database) as session,
            ):
                yield session
        except TimeoutError as err:
            raise ServiceUnavailable(
                f"Neo4j did not answer within {NEO4J_CALL_TIMEOUT_S:g} s"
            ) from err

    async def init_schema(self) -> None:
        """Create the constraints and indexes of ``SCHEMA`` (idempotent). ``write_task``
        runs it before its first write, so a worker can start while Neo4j is down."""
        async with self._session() as session:
            for statement in SCHEMA:
                await (await session.run(statement)).consume()
        self._schema_ready = True

    async def wipe_project(self, project_id: str) -> int:
        """Delete every node of one project and its relationships, but for what the Temporal
        histories cannot give back (``graph rebuild``): the data keys and the tombstones of
        deleted tasks. Returns nodes deleted."""

        async def work(tx: AsyncManagedTransaction) -> int:
            result = await tx.run(
                """
                MATCH (n {project_id: $p}) WHERE NOT n:DataKey AND NOT n:TaskTombstone
                DETACH DELETE n RETURN count(n) AS n
                """,
                p=project_id,
            )
            record = await result.single(strict=True)
            return int(record["n"])

        async with self._session() as session:
            return await session.execute_write(_bounded(work))

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

        async with self._session() as session:
            return await session.execute_write(_bounded(work))

    async def write_task(
        self,
        view: TaskView,
        events: Sequence[Event],
        steps: Sequence[StepView],
        *,
        mark: str | None = None,
    ) -> None:
        """Merge the task node, ``events`` (with their NEXT links, decisions with their
        citations) and ``steps`` in one transaction. Idempotent: repeating it changes nothing.
        ``mark`` (a rebuild's id) is stamped on the event and step nodes as property
        ``rebuild`` (``drop_unmarked``).

        Sealed events are opened with their keys inside the transaction, once the task node
        is locked (its MERGE and SET), so a redaction, which locks the task node first, is
        never undone: a destroyed key writes the event redacted.

        Raises:
            TaskIncarnationError: the task's node belongs to another task of the same
                workflow id, or the id was deleted (nothing is written).
            GraphIncomplete: a sealed event's key is not in the key store.
        """
        props = task_properties(view)
        parent_key = None
        if view.parent is not None:
            parent_key = task_workflow_id(view.project_id, view.parent)
        key = view.workflow_id
        stamp = {} if mark is None else {"rebuild": mark}
        seqs = [e.seq for e in events]
        step_rows = [step_properties(s) | stamp for s in steps]
        decisions = [
            {"seq": e.seq, **(e.cites or Citations()).model_dump(mode="json")}
            for e in events
            if e.kind is EventKind.DECISION
        ]
        watermark = max(seqs, default=0)
        sealed = [e.key_id for e in events if e.sealed is not None and e.key_id is not None]

        async def work(tx: AsyncManagedTransaction) -> None:
            result = await tx.run(_TASK, t=props, parent_key=parent_key)
            record = await result.single(strict=True)
            was = record["was"]
            if record["deleted"] or (was is not None and was.to_native() != props["created_at"]):
                raise TaskIncarnationError(
                    f"task {key}: "
                    + ("the task was deleted" if record["deleted"] else f"created at {was}")
                    + f"; this task was created at {view.created_at.isoformat()}. Neo4j keeps "
                    "the earlier one (its name stays taken) and takes nothing of this one"
                )
            if events:
                keys = await fetch_keys(tx, view.project_id, sealed) if sealed else {}
                rows = [event_properties(e) | stamp for e in unseal(events, keys)]
                await (await tx.run(_EVENTS, task_key=key, events=rows)).consume()
                await (await tx.run(_NEXT, task_key=key, seqs=seqs)).consume()
                await (await tx.run(_WATERMARK, task_key=key, seq=watermark)).consume()
            if step_rows:
                await (await tx.run(_STEPS, task_key=key, steps=step_rows)).consume()
            if decisions:
                await (await tx.run(_DECISIONS, task_key=key, decisions=decisions)).consume()

        if not self._schema_ready:
            await self.init_schema()
        with self._write_span(view, seqs, len(step_rows)):
            async with self._session() as session:
                await session.execute_write(_bounded(work))

    async def put_keys(self, project_id: str, workflow_id: str, keys: Mapping[str, bytes]) -> None:
        """Store data keys (key id -> key) of the task ``workflow_id`` in one transaction
        (``taskgraph.keys``); a client does this before it sends the events they seal."""

        async def work(tx: AsyncManagedTransaction) -> None:
            await store_keys(tx, project_id, workflow_id, keys)

        if not self._schema_ready:
            await self.init_schema()
        async with self._session() as session:
            await session.execute_write(_bounded(work))

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The data keys of ``key_ids`` (``taskgraph.keys.fetch_keys``)."""
        async with self._session() as session:
            return await session.execute_read(_bounded(fetch_keys), project_id, key_ids)

    async def drop_keys(self, project_id: str, key_ids: Sequence[str]) -> None:
        """Delete data keys that sealed nothing the workflow took (a refused write, a repeated
        request id): the client that made them knows they are unused."""
        await self._write(
            "MATCH (k:DataKey) WHERE k.key_id IN $ids AND k.project_id = $p DELETE k",
            ids=list(key_ids),
            p=project_id,
        )

    def _write_span(
        self, view: TaskView, seqs: Sequence[int], steps: int
    ) -> AbstractContextManager[object]:
        """The span around one ``write_task`` transaction (retries included)."""
        if self.tracer is None:
            return nullcontext()
        from opentelemetry.trace import SpanKind

        return self.tracer.start_as_current_span(
            "neo4j write_task",
            kind=SpanKind.CLIENT,
            attributes={
                "db.system.name": "neo4j",
                "db.namespace": self.database,
                "db.operation.name": "write_task",
                "agent_tasks.workflow_id": view.workflow_id,
                "agent_tasks.project_id": view.project_id,
                "agent_tasks.events": len(seqs),
                "agent_tasks.steps": steps,
                **(
                    {"agent_tasks.seq.first": seqs[0], "agent_tasks.seq.last": seqs[-1]}
                    if seqs
                    else {}
                ),
            },
        )

    async def _read(self, query: LiteralString, **params: Any) -> list[dict[str, Any]]:
        """The rows of one read statement, in a managed read transaction."""
        return await self._run(query, params, write=False)

    async def _write(self, query: LiteralString, **params: Any) -> list[dict[str, Any]]:
        """The rows of one write statement, in a managed write transaction."""
        return await self._run(query, params, write=True)

    async def _run(
        self, query: LiteralString, params: dict[str, Any], *, write: bool
    ) -> list[dict[str, Any]]:
        async def work(tx: AsyncManagedTransaction) -> list[dict[str, Any]]:
            result = await tx.run(query, **params)
            return [record.data() async for record in result]

        async with self._session() as session:
            execute = session.execute_write if write else session.execute_read
            return await execute(_bounded(work))

    async def task_view(self, project_id: str, workflow_id: str) -> TaskView | None:
        """The task view as Neo4j holds it (the task's mirrored state), for a task whose
        history Temporal no longer has (deleted after the namespace's retention); None when
        Neo4j has no such task. ``unmirrored_writes`` is 0 and ``run_first_seq`` follows
        ``last_seq``: Neo4j is all there is of it."""
        rows = await self._read(
            """
            MATCH (t:Task {key: $key, project_id: $p}) WHERE t.status IS NOT NULL
            OPTIONAL MATCH (t)-[:HAS_STEP]->(s:Step)
            RETURN t, collect(s.state) AS states
            """,
            key=workflow_id,
            p=project_id,
        )
        if not rows:
            return None
        props = plain(rows[0]["t"])
        counts = dict.fromkeys(StepState, 0)
        for state in rows[0]["states"]:
            counts[StepState(state)] += 1

        def text(field: str) -> BoundedText | None:
            value, length = props.get(field), props.get(f"{field}_full_length")
            if value is None:
                return None
            if length is None:  # mirrored before the full length and hash were kept
                return bound_text(value)
            sha = props[f"{field}_full_sha256"]
            return BoundedText(text=value, full_length=length, full_sha256=sha)

        return TaskView(
            project_id=project_id,
            name=props["name"],
            workflow_id=workflow_id,
            goal=props["goal"],
            agent_id=props["agent_id"],
            session_id=props.get("session_id"),
            parent=props.get("parent"),
            metadata=json.loads(props["metadata"]),
            status=props["status"],
            result=text("result"),
            error=text("error"),
            step_counts=counts,
            last_seq=props["last_seq"],
            mirrored_seq=props.get("mirrored_seq", 0),
            unmirrored_writes=0,
            mirror_error=None,
            run_first_seq=props["last_seq"] + 1,
            runs=props.get("runs", 1),
            created_at=props["created_at"],
            updated_at=props["updated_at"],
        )

    async def decisions(
        self,
        project_id: str,
        *,
        workflow_id: str | None = None,
        decision_id: str | None = None,
        after_seq: int = 0,
        limit: int = PAGE_LIMIT_MAX,
    ) -> list[DecisionRow]:
        """Decisions of a project (of one task, or the one with ``decision_id``) in seq order
        after ``after_seq``, at most ``limit``, each with the cited events redacted since and
        the cited steps changed since (``DecisionRow.needs_review``). A decision kept when its
        task was deleted is found by its task's workflow id and by its id."""
        rows = await self._read(
            """
            MATCH (d:Decision {project_id: $p})
            WHERE ($key IS NULL OR d.task_key = $key) AND ($id IS NULL OR d.id = $id)
              AND d.seq > $after
            WITH d ORDER BY d.seq LIMIT $limit
            OPTIONAL MATCH (d)-[:CITES]->(e:Event) WHERE e.redacted
            WITH d, collect(e.seq) AS redacted
            OPTIONAL MATCH (d)-[c:CITES]->(s:Step)
              WHERE s.state <> c.state OR s.attempt <> c.attempt
            RETURN d, redacted, collect(CASE WHEN s IS NULL THEN NULL ELSE
                     {name: s.step_name, state: s.state, attempt: s.attempt,
                      state_then: c.state, attempt_then: c.attempt} END) AS changed
            ORDER BY d.seq
            """,
            p=project_id,
            key=workflow_id,
            id=decision_id,
            after=after_seq,
            limit=limit,
        )
        out = []
        for row in rows:
            event = event_fields(row["d"])
            out.append(
                DecisionRow(
                    id=event["id"],
                    task_name=event["task_name"],
                    seq=event["seq"],
                    statement=event["payload"],
                    author=event["author"],
                    time=event["time"],
                    redacted=event.get("redacted", False),
                    cites=event.get("cites") or {},
                    redacted_events=sorted(row["redacted"]),
                    changed_steps=row["changed"],
                    detached=event.get("detached_at") is not None,
                )
            )
        return out

    async def events(
        self, project_id: str, workflow_id: str, after_seq: int, up_to_seq: int, limit: int
    ) -> list[Event]:
        """One task's mirrored events with ``after_seq < seq <= up_to_seq``, in seq order,
        at most ``limit``."""
        rows = await self._read(
            """
            MATCH (t:Task {key: $key, project_id: $p})-[:HAS_EVENT]->(e:Event)
            WHERE e.seq > $after AND e.seq <= $upto AND e.kind IS NOT NULL
            RETURN e ORDER BY e.seq LIMIT $limit
            """,
            key=workflow_id,
            p=project_id,
            after=after_seq,
            upto=up_to_seq,
            limit=limit,
        )
        return [_event(row["e"]) for row in rows]

    async def steps(
        self,
        project_id: str,
        workflow_id: str,
        *,
        state: StepState | None,
        after_name: str | None,
        limit: int,
        up_to_write: int,
    ) -> list[StepView]:
        """One task's mirrored steps last changed at or before write ``up_to_write`` (the
        earlier runs' steps: ``StepsPage.run_first_write``), in name order after ``after_name``,
        in ``state`` when not None, at most ``limit``."""
        rows = await self._read(
            """
            MATCH (t:Task {key: $key, project_id: $p})-[:HAS_STEP]->(s:Step)
            WHERE coalesce(s.changed_write, 0) <= $upto
              AND ($state IS NULL OR s.state = $state)
              AND ($after IS NULL OR s.step_name > $after)
            RETURN s ORDER BY s.step_name LIMIT $limit
            """,
            key=workflow_id,
            p=project_id,
            upto=up_to_write,
            state=None if state is None else state.value,
            after=after_name,
            limit=limit,
        )
        return [StepView.model_validate(plain(row["s"])) for row in rows]

    async def step(self, project_id: str, workflow_id: str, name: str) -> StepView | None:
        """One task's mirrored step ``name``, None when Neo4j has no such step."""
        rows = await self._read(
            "MATCH (s:Step {key: $key, project_id: $p}) RETURN s",
            key=f"{workflow_id}/{name}",
            p=project_id,
        )
        return StepView.model_validate(plain(rows[0]["s"])) if rows else None

    async def find_tasks(self, project_id: str, where: TaskFilter) -> list[TaskRow]:
        """Tasks of a project in name order, after ``where.after_name`` (the paging cursor),
        each filter applied when not None; placeholder nodes (no status) are left out."""
        rows = await self._read(
            """
            MATCH (t:Task {project_id: $p})
            WHERE t.status IS NOT NULL
              AND ($status IS NULL OR t.status = $status)
              AND ($agent IS NULL OR t.agent_id = $agent)
              AND ($session IS NULL OR t.session_id = $session)
              AND ($parent IS NULL OR t.parent = $parent)
              AND ($after IS NULL OR t.name > $after)
            RETURN t ORDER BY t.name LIMIT $limit
            """,
            p=project_id,
            status=None if where.status is None else where.status.value,
            agent=where.agent_id,
            session=where.session_id,
            parent=where.parent,
            after=where.after_name,
            limit=where.limit,
        )
        return [TaskRow.model_validate(plain(row["t"])) for row in rows]

    async def task_tree(self, project_id: str, where: TreeRead) -> list[TreeRow]:
        """The task ``where.task`` and its descendants up to ``where.depth`` levels (at most
        ``MAX_TREE_DEPTH``), each with its ``depth`` (0 for the task itself), ordered by
        depth then name."""
        rows = await self._read(
            """
            MATCH (root:Task {key: $key, project_id: $p})
            MATCH path = (root)<-[:CHILD_OF*0..20]-(t:Task)
            WHERE length(path) <= $depth AND all(n IN nodes(path) WHERE n.project_id = $p)
            RETURN t, length(path) AS depth
            ORDER BY depth, t.name
            """,
            key=task_workflow_id(project_id, where.task),
            p=project_id,
            depth=where.depth,
        )
        return [TreeRow.model_validate({**plain(row["t"]), "depth": row["depth"]}) for row in rows]

    async def find_events(self, project_id: str, where: EventFilter) -> list[EventRow]:
        """Events across the project's tasks, by kind, name and time range (``since`` <=
        time < ``until``), oldest first. ``failed_only`` keeps tool results of failed steps."""
        rows = await self._read(
            """
            MATCH (e:Event {project_id: $p})
            WHERE e.kind IS NOT NULL
              AND ($kind IS NULL OR e.kind = $kind)
              AND ($name IS NULL OR e.name = $name)
              AND ($since IS NULL OR e.time >= $since)
              AND ($until IS NULL OR e.time < $until)
              AND (NOT $failed OR EXISTS { (:Step {state: 'failed'})-[:RESULT]->(e) })
            RETURN e ORDER BY e.time, e.task_name, e.seq LIMIT $limit
            """,
            p=project_id,
            kind=None if where.kind is None else where.kind.value,
            name=where.name,
            since=where.since,
            until=where.until,
            failed=where.failed_only,
            limit=where.limit,
        )
        return [EventRow.model_validate(event_fields(row["e"]), strict=False) for row in rows]

    async def find_steps(self, project_id: str, where: StepFilter) -> list[StepRow]:
        """Steps across the project's tasks in a state, ordered by task then step name."""
        rows = await self._read(
            """
            MATCH (s:Step {project_id: $p})
            WHERE $state IS NULL OR s.state = $state
            RETURN s ORDER BY s.task_name, s.step_name LIMIT $limit
            """,
            p=project_id,
            state=None if where.state is None else where.state.value,
            limit=where.limit,
        )
        return [StepRow.model_validate(plain(row["s"])) for row in rows]

    async def failed_tool_calls(self, project_id: str) -> list[ToolFailures]:
        """Failed tool calls across the project's tasks, counted by tool name (steps of kind
        ``tool`` in state ``failed``, by the name of their result event), most failures
        first."""
        rows = await self._read(
            """
            MATCH (s:Step {project_id: $p, state: 'failed', kind: 'tool'})-[:RESULT]->(e:Event)
            RETURN coalesce(e.name, '?') AS tool, count(s) AS failed,
                   count(DISTINCT s.task_key) AS tasks
            ORDER BY failed DESC, tool
            """,
            p=project_id,
        )
        return [ToolFailures.model_validate(row) for row in rows]

    async def counts(self, project_id: str) -> dict[str, int]:
        """Nodes by (first) label and relationships of the project's task graph, the key
        store left out (a fingerprint for tests and rebuild checks)."""
        rows = await self._read(
            """
            MATCH (n {project_id: $p}) WHERE NOT n:DataKey
            WITH labels(n)[0] AS label, count(n) AS c
            RETURN label, c
            UNION ALL
            MATCH (n {project_id: $p})-[r]->()
            WITH type(r) AS label, count(r) AS c
            RETURN label, c
            """,
            p=project_id,
        )
        return {row["label"]: row["c"] for row in rows}


def event_fields(node: Any) -> dict[str, Any]:
    """An event node's properties as ``Event`` fields: ``cites`` parsed, and the ``id`` of a
    node mirrored before events had ids."""
    props = plain(node)
    if isinstance(props.get("cites"), str):
        props["cites"] = json.loads(props["cites"])
    props.setdefault("id", event_id(props["task_key"], props["seq"]))
    return props


def _event(node: Any) -> Event:
    return Event.model_validate(event_fields(node), strict=False)
