"""Mirror pages a graph store refused for their data, kept in that store until it takes them: one
``MirrorRefusal`` node per task, in either store (``taskgraph.port.RecordStore``).

    (:MirrorRefusal {key: workflow id, project_id, error, after_seq, up_to_seq,
                     after_write, first_at, refused_at, attempts, retry_at})

A refusal lets a finished task close without its last writes in the store: the mirror records it,
the workflow completes with it in its view, and a worker retries the task from its history at
``retry_at`` (``activities.refusals``), later each time, until the store takes it or the history is
gone (``docs/graph-stores.md``). A node holds ids, seqs and the error, never the refused data; times
come from the client (``$now``), so one statement serves both stores.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

from pydantic import BaseModel

from agent_tasks.contract.errors import GraphError
from agent_tasks.taskgraph.dialect import GraphKind
from agent_tasks.taskgraph.models import as_datetime
from agent_tasks.taskgraph.port import GraphStore

REFUSAL_ERROR_CHARS = 2_000
"""Characters of the store's error kept in a refusal (as ``MIRROR_ERROR_CHARS``)."""
RETRY_FIRST = timedelta(minutes=1)
"""The wait before a refusal's first retry; each later one waits twice the one before."""
RETRY_MOST = timedelta(hours=6)
"""The longest wait between two retries of a refusal: a fixed store takes the task within this."""

_RECORD: LiteralString = """
MERGE (r:MirrorRefusal {key: $key})
  ON CREATE SET r.project_id = $p, r.first_at = $now, r.attempts = 0
SET r.error = $error, r.after_seq = $after_seq,
    r.up_to_seq = $up_to_seq, r.after_write = $after_write, r.refused_at = $now,
    r.attempts = r.attempts + 1, r.retry_at = $retry_at
RETURN r
"""
_DEFER: LiteralString = """
MATCH (r:MirrorRefusal {key: $key}) WHERE r.attempts = $attempts
SET r.error = $error, r.refused_at = $now, r.attempts = r.attempts + 1, r.retry_at = $retry_at
RETURN count(r) AS n
"""
_RETRY_AT: LiteralString = """
MATCH (r:MirrorRefusal {key: $key}) WHERE r.attempts = $attempts
SET r.retry_at = $retry_at
RETURN count(r) AS n
"""
_CLAIM: LiteralString = """
MATCH (r:MirrorRefusal {key: $key}) WHERE r.attempts = $attempts AND r.retry_at <= $now
SET r.retry_at = $until
RETURN count(r) AS n
"""
_CLEAR: LiteralString = """
MATCH (r:MirrorRefusal {key: $key}) WHERE r.attempts = $attempts
DELETE r
RETURN count(*) AS n
"""
_DUE: LiteralString = """
MATCH (r:MirrorRefusal) WHERE r.retry_at <= $now
RETURN r ORDER BY r.retry_at LIMIT $limit
"""
_LIST: LiteralString = """
MATCH (r:MirrorRefusal) WHERE r.project_id = $p
RETURN r ORDER BY r.first_at, r.key LIMIT $limit
"""
_HELD: LiteralString = "MATCH (r:MirrorRefusal {key: $key}) RETURN count(r) AS n"
_COUNT: LiteralString = """
MATCH (r:MirrorRefusal) WHERE $p IS NULL OR r.project_id = $p RETURN count(r) AS n
"""


class MirrorRefusal(BaseModel):
    """A task whose mirror the graph store refused for its data, as the store keeps it."""

    workflow_id: str
    """The task's workflow id (the node's key)."""
    project_id: str
    """Its project."""
    error: str
    """The store's error, cut to ``REFUSAL_ERROR_CHARS``."""
    after_seq: int
    """The refused call copied events after this seq ..."""
    up_to_seq: int
    """... up to this one (0 for a call that followed its run)."""
    after_write: int
    """The write counter the store held when the call started; once its ``mirrored_write`` passes
    it, the store has caught up."""
    first_at: datetime
    """When the store first refused the task's page."""
    refused_at: datetime
    """When it last refused (the mirror's call, or a retry)."""
    attempts: int
    """Refusals so far (the mirror's and the retries')."""
    retry_at: datetime
    """When a worker retries the task next."""


def retry_delay(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th refusal (1 or more): ``RETRY_FIRST`` doubling, at most
    ``RETRY_MOST``."""
    wait: timedelta = RETRY_FIRST * 2 ** min(max(attempts - 1, 0), 20)
    return min(wait, RETRY_MOST)


def _refusal(node: dict[str, Any]) -> MirrorRefusal:
    times = {f: as_datetime(node[f]) for f in ("first_at", "refused_at", "retry_at")}
    fields = {k: node[k] for k in ("project_id", "error", "after_seq", "up_to_seq", "attempts")}
    return MirrorRefusal(
        workflow_id=node["key"],
        after_write=node["after_write"],
        **fields,
        **times,
    )


class Refusals:
    """The refusals kept in ``graph`` (either store).

    Args:
        graph: the graph store the mirror writes to.
    """

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def record(
        self,
        project_id: str,
        workflow_id: str,
        error: str,
        *,
        after_seq: int,
        up_to_seq: int,
        after_write: int,
    ) -> MirrorRefusal:
        """Keep (or renew) the task's refusal: one more attempt, the next retry ``retry_delay`` from
        now.

        Raises:
            GraphError: the store did not keep it.
        """
        await self.graph.ensure_schema()
        now = datetime.now(UTC)
        rows = await self.graph.records(
            _RECORD,
            write=True,
            key=workflow_id,
            p=project_id,
            error=error[:REFUSAL_ERROR_CHARS],
            after_seq=after_seq,
            up_to_seq=up_to_seq,
            after_write=after_write,
            now=now,
            retry_at=now + RETRY_FIRST,
        )
        held = _refusal(rows[0]["r"])
        if held.attempts > 1:  # recorded again: its retry waits as its count says
            held.retry_at = now + retry_delay(held.attempts)
            await self._unchanged(_RETRY_AT, held, retry_at=held.retry_at)
        return held

    async def _unchanged(
        self, statement: LiteralString, refusal: MirrorRefusal, **params: Any
    ) -> bool:
        """Run ``statement`` (matching the node of ``$key`` whose count is still ``$attempts``,
        returning ``n``) on ``refusal``'s node; False when the node changed since it was read."""
        rows = await self.graph.records(
            statement, write=True, key=refusal.workflow_id, attempts=refusal.attempts, **params
        )
        return bool(rows[0]["n"])

    async def defer(self, refusal: MirrorRefusal, error: str) -> bool:
        """After a failed retry of ``refusal``: count it and set the next retry
        (``retry_delay``); False when the node changed meanwhile."""
        now = datetime.now(UTC)
        later = now + retry_delay(refusal.attempts + 1)
        error = error[:REFUSAL_ERROR_CHARS]
        return await self._unchanged(_DEFER, refusal, error=error, now=now, retry_at=later)

    async def claim(self, refusal: MirrorRefusal, lease: timedelta) -> bool:
        """Take ``refusal`` for a retry, moving its retry time ``lease`` ahead; False when it is not
        due any more or changed."""
        now = datetime.now(UTC)
        return await self._unchanged(_CLAIM, refusal, now=now, until=now + lease)

    async def clear(self, refusal: MirrorRefusal) -> bool:
        """Delete ``refusal`` once the store holds the task; False when recorded again meanwhile."""
        return await self._unchanged(_CLEAR, refusal)

    async def due(self, limit: int) -> list[MirrorRefusal]:
        """The refusals due now, oldest first, of every project (the workers' retries serve them
        all)."""
        now = datetime.now(UTC)
        rows = await self.graph.records(_DUE, write=False, now=now, limit=limit)
        return [_refusal(row["r"]) for row in rows]

    async def of_project(self, project_id: str, limit: int) -> list[MirrorRefusal]:
        """The project's refusals, the oldest first."""
        rows = await self.graph.records(_LIST, write=False, p=project_id, limit=limit)
        return [_refusal(row["r"]) for row in rows]

    async def held(self, workflow_id: str) -> bool:
        """True while the store holds a refusal of the task, so lacks some of its writes (closed
        reads then ask Temporal)."""
        rows = await self.graph.records(_HELD, write=False, key=workflow_id)
        return bool(rows[0]["n"])

    async def count(self, project_id: str | None) -> int:
        """Refusals the store holds, of ``project_id`` (None: of every project)."""
        rows = await self.graph.records(_COUNT, write=False, p=project_id)
        return int(rows[0]["n"])


HEALTH_REFUSALS = 50
"""Refusals of the asking project a health read lists at most (``graph_health``)."""


class GraphHealth(BaseModel):
    """The graph store's health as ``agent-tasks graph health`` and ``GET /graph/health`` show it:
    whether it answers, and which tasks' mirror it refused."""

    store: GraphKind
    """Which store (``AGENT_TASKS_GRAPH``)."""
    reachable: bool
    """True when it answered."""
    error: str | None = None
    """Why it did not answer."""
    refused_tasks: int = 0
    """Tasks of the asking project whose mirror the store refused and that wait for a retry."""
    refused_everywhere: int | None = None
    """The same of every project, when asked (the CLI; never over HTTP, where a key reads its own
    project only)."""
    refused: list[MirrorRefusal] = []
    """The asking project's, the oldest first (at most ``HEALTH_REFUSALS``)."""


async def graph_health(
    graph: GraphStore, project_id: str, *, every_project: bool = False
) -> GraphHealth:
    """The health of ``graph`` for ``project_id``: a ping, then the refusals (of every project too
    with ``every_project``); an unreachable or refusing store is reported, not raised."""
    try:
        await graph.ping()
        refusals = Refusals(graph)
        return GraphHealth(
            store=graph.kind,
            reachable=True,
            refused_tasks=await refusals.count(project_id),
            refused_everywhere=await refusals.count(None) if every_project else None,
            refused=await refusals.of_project(project_id, HEALTH_REFUSALS),
        )
    except GraphError as err:
        return GraphHealth(store=graph.kind, reachable=False, error=str(err))
