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
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, LiteralString

from neo4j import (
    AsyncDriver,
    AsyncGraphDatabase,
    AsyncManagedTransaction,
    AsyncSession,
    unit_of_work,
)
from neo4j.exceptions import ClientError, ServiceUnavailable

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
    "CREATE INDEX task_project_status_name IF NOT EXISTS FOR (n:Task) "
    "ON (n.project_id, n.status, n.name)",
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
constraints and range indexes, which Neo4j Community has). ``task_project_status_name``
replaced ``task_project_status`` (its prefix, which a graph made before still has: it is not
dropped here, since workers of both versions run side by side during a deploy; an operator may
drop it once every worker is new)."""

WIPE_BATCH = 10_000
"""Event nodes ``wipe_project`` deletes per transaction."""

SCHEMA_RULE_EXISTS = "Neo.ClientError.Schema.EquivalentSchemaRuleAlreadyExists"
"""The error of a schema rule created by another session meanwhile (``init_schema``)."""

_TASK: LiteralString = """
MERGE (t:Task {key: $t.key})
WITH t, t.created_at AS was, coalesce(t.writes, -1) <= $t.writes AS newer
SET t.writes = CASE WHEN newer THEN $t.writes ELSE t.writes END
FOREACH (_ IN CASE WHEN newer THEN [1] ELSE [] END | SET t += $t)
WITH was
OPTIONAL MATCH (gone:TaskTombstone {key: $t.key})
RETURN was, gone IS NOT NULL AS deleted
"""
"""The first statement of a mirror write: the task node, locked by its first SET (and
nothing shared: see ``_PAGE``), its properties set only when the view is not older than the
node (``writes``, the view's write counter, is its version: a late, retried or cancelled
mirror attempt never undoes a newer one); returns the ``created_at`` the node had before
(``was``, null for a new node) and whether the task's id has a tombstone (``deleted``), so
the write can refuse a node that is not its task's before anything else is written."""

_PAGE: LiteralString = """
MATCH (t:Task {key: $key})
CALL (t) {
  UNWIND $events AS ev
  MERGE (e:Event {key: t.key + '#' + toString(ev.seq)})
  SET e += ev, e.time = datetime({epochSeconds: ev.time[0], nanosecond: ev.time[1]}),
      e.task_key = t.key, e.project_id = t.project_id, e.task_name = t.name
  MERGE (t)-[:HAS_EVENT]->(e)
}
CALL (t) {
  UNWIND $events AS ev
  MATCH (a:Event {key: t.key + '#' + toString(ev.seq - 1)})
  MATCH (b:Event {key: t.key + '#' + toString(ev.seq)})
  MERGE (a)-[:NEXT]->(b)
}
SET t.mirrored_seq = CASE WHEN coalesce(t.mirrored_seq, 0) < $watermark THEN $watermark
                          ELSE t.mirrored_seq END
WITH t
CALL (t) {
  UNWIND $steps AS st
  MERGE (s:Step {key: t.key + '/' + st.step_name})
  WITH t, s, st WHERE coalesce(s.changed_write, -1) <= st.changed_write
  SET s += st,
      s.updated_at = datetime({epochSeconds: st.updated_at[0], nanosecond: st.updated_at[1]}),
      s.task_key = t.key, s.project_id = t.project_id, s.task_name = t.name
  MERGE (t)-[:HAS_STEP]->(s)
  WITH t, s, st
  OPTIONAL MATCH (s)-[old:RESULT]->(previous:Event)
    WHERE previous.seq <> st.result_event_seq OR st.result_event_seq IS NULL
  DELETE old
  WITH t, s, st WHERE st.result_event_seq IS NOT NULL
  MERGE (e:Event {key: t.key + '#' + toString(st.result_event_seq)})
    ON CREATE SET e.project_id = t.project_id, e.task_key = t.key,
                  e.task_name = t.name, e.seq = st.result_event_seq
  MERGE (s)-[:RESULT]->(e)
}
CALL (t) {
  UNWIND $decisions AS d
  MATCH (e:Event {key: t.key + '#' + toString(d.seq)})
  SET e:Decision
  WITH t, e, d
  CALL (t, e, d) {
    UNWIND d.events AS s
    MATCH (c:Event {key: t.key + '#' + toString(s)})
    MERGE (e)-[:CITES]->(c)
  }
  CALL (t, e, d) {
    UNWIND d.steps AS st
    MATCH (x:Step {key: t.key + '/' + st.name})
    MERGE (e)-[r:CITES]->(x)
    SET r.state = st.state, r.attempt = st.attempt
  }
}
CALL (t) {
  MERGE (p:Project {project_id: t.project_id})
  MERGE (p)-[:HAS_TASK]->(t)
  MERGE (a:Agent {key: t.project_id + '/' + t.agent_id})
    ON CREATE SET a.project_id = t.project_id, a.agent_id = t.agent_id
  MERGE (t)-[:CREATED_BY]->(a)
  FOREACH (s IN CASE WHEN t.session_id IS NULL THEN [] ELSE [t.session_id] END |
    MERGE (se:Session {key: t.project_id + '/' + s})
      ON CREATE SET se.project_id = t.project_id, se.session_id = s
    MERGE (t)-[:IN_SESSION]->(se))
  FOREACH (pk IN CASE WHEN $parent_key IS NULL THEN [] ELSE [$parent_key] END |
    MERGE (pt:Task {key: pk}) ON CREATE SET pt.project_id = t.project_id, pt.name = t.parent
    MERGE (t)-[:CHILD_OF]->(pt))
  FOREACH (bk IN CASE WHEN $branch_key IS NULL THEN [] ELSE [$branch_key] END |
    MERGE (src:Task {key: bk}) ON CREATE SET src.project_id = t.project_id
    MERGE (t)-[b:BRANCHED_FROM]->(src) SET b.seq = t.branched_at_seq)
}
CALL (t) {
  UNWIND $events AS ev
  MATCH (e:Event {key: t.key + '#' + toString(ev.seq)})
  MERGE (a:Agent {key: t.project_id + '/' + ev.author})
    ON CREATE SET a.project_id = t.project_id, a.agent_id = ev.author
  MERGE (e)-[:AUTHORED_BY]->(a)
}
"""
"""The rest of a mirror page in one statement (one round trip): the events with their NEXT
links; the task's mirror watermark (``mirrored_seq``, never lowered); the steps with their
RESULT links, each only when not older than its node (``changed_write``, the write that last
changed the step, is its version); the decisions' labels and CITES links; then the nodes every
task of a project shares (its project, its agents, a session, a parent) with the task's and
the events' relationships to them. Each part is a unit subquery over the one task row, run in
this order, so the NEXT links see the events merged before them, a step's result event is
merged (as a placeholder) when not written yet, and a decision cites the steps as merged. The
shared nodes come last because a new relationship locks both its nodes until the transaction
commits: taken first, the project's and agent's locks were held through the whole page, and
the mirrors of 16 tasks importing at once on a loaded machine queued on them past the
transaction timeout (6 of 16 first pages at load 7). Event and step times arrive as
``epoch`` pairs and are set as datetimes in the same SET."""


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
    """Task node properties from a view (metadata, result and error as JSON text; the open
    input requests as the list ``pending_inputs`` of their ids, each one's prompt and schema
    being its ``input_request`` event)."""
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
        "writes": view.writes,
        "branched_at_seq": None if view.branched_from is None else view.branched_from.seq,
        "runs": view.runs,
        "pending_inputs": [request.input_id for request in view.pending_inputs],
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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch(moment: datetime) -> list[int]:
    """``[seconds, nanoseconds]`` of an aware ``moment`` since the Unix epoch, exactly (no
    float); the mirror's statement makes it a datetime in UTC with ``datetime({epochSeconds,
    nanosecond})``, equal to the driver's own encoding of that instant (same value, same
    ``Z`` zone). The driver converts a Python datetime in pure Python even with its Rust
    extension: 96% of the packing of a page of 100 events (cProfile).

    Raises:
        ValueError: ``moment`` is naive (``taskgraph.models.utc``).
    """
    since = utc(moment) - _EPOCH
    return [since.days * 86_400 + since.seconds, since.microseconds * 1_000]


def event_properties(event: Event) -> dict[str, Any]:
    """Event node properties of an opened event (``unseal``): ``time`` as ``epoch`` (the
    statement makes it a datetime), ``cites`` as JSON text, a model message's token ``usage``
    as the properties ``input_tokens`` and ``output_tokens`` (a property cannot hold a map);
    never the sealed text (the node holds the plain text). ``event_fields`` reverses it."""
    props = event.model_dump(mode="python", exclude={"sealed", "cites", "usage"})
    props["cites"] = None if event.cites is None else event.cites.model_dump_json()
    if event.usage is not None:
        props |= event.usage.model_dump()
    props["time"] = epoch(event.time)
    props["kind"] = event.kind.value
    props["role"] = None if event.role is None else event.role.value
    props["truncated"] = event.truncated
    return props


def step_properties(step: StepView) -> dict[str, Any]:
    """Step node properties (``updated_at`` as ``epoch``: the statement makes it a
    datetime)."""
    props = step.model_dump(mode="python")
    props["updated_at"] = epoch(step.updated_at)
    for field in ("state", "kind", "result_validity"):
        props[field] = props[field].value
    return props


def tasks_statement(where: TaskFilter) -> LiteralString:
    """The Cypher of ``TaskGraph.find_tasks`` for the filters ``where`` gives, and only those,
    so that the planner seeks the index on ``(project_id, status, name)`` (a status given) or
    on ``(project_id, name)`` and reads the page in the index's order, stopping after one page
    (a ``$x IS NULL OR ...`` clause per filter made it read and sort every task of the
    project). The ORDER BY names the index's properties from the first: with the leading ones
    fixed by equality it is the name order, and only so does Neo4j 5 use the index's order
    instead of sorting (a plan test keeps it so). Parameters: ``p``, ``after`` (``""`` for the
    first page), ``status``, ``agent``, ``session``, ``parent``, ``limit``."""
    clauses: list[LiteralString] = ["t.project_id = $p", "t.name > $after"]
    if where.status is None:
        clauses.append("t.status IS NOT NULL")
        order: LiteralString = "t.project_id, t.name"
    else:
        clauses.append("t.status = $status")
        order = "t.project_id, t.status, t.name"
    for value, clause in (
        (where.agent_id, "t.agent_id = $agent"),
        (where.session_id, "t.session_id = $session"),
        (where.parent, "t.parent = $parent"),
    ):
        if value is not None:
            clauses.append(clause)
    where_clause = " AND ".join(clauses)
    return f"MATCH (t:Task) WHERE {where_clause} RETURN t ORDER BY {order} LIMIT $limit"


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
        runs it before its first write, so a worker can start while Neo4j is down.

        ``IF NOT EXISTS`` does not cover two sessions creating the same rule at once (workers
        starting together): the one that loses gets ``EquivalentSchemaRuleAlreadyExists``,
        which means the rule exists, so it is taken as done (seen when a benchmark's worker
        processes started beside the test suite's)."""
        async with self._session() as session:
            for statement in SCHEMA:
                try:
                    await (await session.run(statement)).consume()
                except ClientError as err:
                    if err.code != SCHEMA_RULE_EXISTS:
                        raise
        self._schema_ready = True

    async def wipe_project(self, project_id: str) -> int:
        """Delete every node of one project and its relationships, but for what the Temporal
        histories cannot give back (``graph rebuild``): the data keys and the tombstones of
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
                MATCH (n {project_id: $p}) WHERE NOT n:DataKey AND NOT n:TaskTombstone
                DETACH DELETE n RETURN count(n) AS n
                """,
                p=project_id,
            )
            return int((await result.single(strict=True))["n"])

        deleted, batch = 0, WIPE_BATCH
        while batch:
            async with self._session() as session:  # each batch bounded on its own
                batch = await session.execute_write(_bounded(events))
            deleted += batch
        async with self._session() as session:
            return deleted + await session.execute_write(_bounded(rest))

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
        citations) and ``steps`` in one transaction of two statements (``_TASK``, then
        ``_PAGE``; a third between them reads the keys of sealed events). Idempotent:
        repeating it changes nothing.
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
        branch_key = None
        if view.branched_from is not None:
            branch_key = task_workflow_id(view.project_id, view.branched_from.task)
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
            result = await tx.run(_TASK, t=props)
            record = await result.single(strict=True)
            was = record["was"]
            if record["deleted"] or (was is not None and was.to_native() != props["created_at"]):
                raise TaskIncarnationError(
                    f"task {view.workflow_id}: "
                    + ("the task was deleted" if record["deleted"] else f"created at {was}")
                    + f"; this task was created at {view.created_at.isoformat()}. Neo4j keeps "
                    "the earlier one (its name stays taken) and takes nothing of this one"
                )
            keys = await fetch_keys(tx, view.project_id, sealed) if sealed else {}
            await (
                await tx.run(
                    _PAGE,
                    key=view.workflow_id,
                    parent_key=parent_key,
                    branch_key=branch_key,
                    events=[event_properties(e) | stamp for e in unseal(events, keys)],
                    watermark=watermark,
                    steps=step_rows,
                    decisions=decisions,
                )
            ).consume()

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
            writes=props.get("writes", 0),
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
        each filter applied when not None; placeholder nodes (no status) are left out. Reads
        one page from an index (``tasks_statement``)."""
        rows = await self._read(
            tasks_statement(where),
            p=project_id,
            status=None if where.status is None else where.status.value,
            agent=where.agent_id,
            session=where.session_id,
            parent=where.parent,
            after=where.after_name or "",
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
    """An event node's properties as ``Event`` fields (``event_properties`` reversed):
    ``cites`` parsed, the token counts back into ``usage``, and the ``id`` of a node mirrored
    before events had ids."""
    props = plain(node)
    if isinstance(props.get("cites"), str):
        props["cites"] = json.loads(props["cites"])
    if "input_tokens" in props:
        props["usage"] = {k: props.pop(k) for k in ("input_tokens", "output_tokens")}
    props.setdefault("id", event_id(props["task_key"], props["seq"]))
    return props


def _event(node: Any) -> Event:
    return Event.model_validate(event_fields(node), strict=False)
