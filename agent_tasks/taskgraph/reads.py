"""The graph store's reads: one task's mirrored view, events, steps and decisions, and the
cross-task reads. Every statement is parameterized and filtered by project id."""

from __future__ import annotations

import json
from typing import Any, LiteralString

from agent_tasks.contract import (
    PAGE_LIMIT_MAX,
    BoundedText,
    Event,
    StepState,
    StepView,
    TaskView,
    bound_text,
    event_id,
    task_workflow_id,
)
from agent_tasks.taskgraph.dialect import Statement
from agent_tasks.taskgraph.models import (
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
)
from agent_tasks.taskgraph.runner import StatementRunner


def tasks_statement(where: TaskFilter) -> LiteralString:
    """The Cypher of ``find_tasks`` for the filters ``where`` gives, and only those, so the planner
    seeks the ``(project_id, status, name)`` or ``(project_id, name)`` index and stops after one
    page (a ``$x IS NULL OR ...`` per filter sorted every task). The ORDER BY names the index's
    properties from the first, the only way Neo4j 5 keeps the index order (a plan test holds it).
    Parameters: ``p``, ``after`` (``""`` first), ``status``, ``agent``, ``session``, ``parent``,
    ``contains``, ``since``, ``until``, ``limit``."""
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
        (where.name_contains, "toLower(t.name) CONTAINS toLower($contains)"),
        (where.since, "t.created_at >= $since"),
        (where.until, "t.created_at < $until"),
        (where.open_inputs or None, "size(coalesce(t.pending_inputs, [])) > 0"),
    ):
        if value is not None:
            clauses.append(clause)
    where_clause = " AND ".join(clauses)
    return f"MATCH (t:Task) WHERE {where_clause} RETURN t ORDER BY {order} LIMIT $limit"


_FIND_EVENTS: Statement = {
    # "a failed step's result": Neo4j's existential subquery EXISTS { pattern }; FalkorDB has
    # none (nor a pattern predicate on a bound node): OPTIONAL MATCH and a count instead
    "neo4j": """
MATCH (e:Event {project_id: $p})
WHERE e.kind IS NOT NULL
  AND ($kind IS NULL OR e.kind = $kind)
  AND ($name IS NULL OR e.name = $name)
  AND ($since IS NULL OR e.time >= $since)
  AND ($until IS NULL OR e.time < $until)
  AND (NOT $failed OR EXISTS { (:Step {state: 'failed'})-[:RESULT]->(e) })
RETURN e ORDER BY e.time, e.task_name, e.seq LIMIT $limit
""",
    "falkordb": """
MATCH (e:Event {project_id: $p})
WHERE e.kind IS NOT NULL
  AND ($kind IS NULL OR e.kind = $kind)
  AND ($name IS NULL OR e.name = $name)
  AND ($since IS NULL OR e.time >= $since)
  AND ($until IS NULL OR e.time < $until)
OPTIONAL MATCH (f:Step {state: 'failed'})-[:RESULT]->(e)
WITH e, count(f) AS failed
WHERE NOT $failed OR failed > 0
RETURN e ORDER BY e.time, e.task_name, e.seq LIMIT $limit
""",
}
"""The events across tasks (``GraphReads.find_events``)."""


def _closed_view(text: str) -> TaskView:
    """A closed task's whole view from its node's ``closed_view``, caught up with the store."""
    # json.loads, not pydantic's parser: it refuses a lone surrogate's escape
    closed = TaskView.model_validate(json.loads(text))
    return closed.model_copy(
        update={
            "mirrored_seq": closed.last_seq,
            "unmirrored_writes": 0,
            "mirror_error": None,
            "mirror_failures": 0,
            "mirror_backlog": [],
        }
    )


class GraphReads:
    """The reads of the task graph, in either store, run on the adapter's statement runner.

    Args:
        runner: the adapter's one-statement reads and writes (``StatementRunner``).
    """

    def __init__(self, runner: StatementRunner) -> None:
        self.runner = runner

    async def task_view(self, project_id: str, workflow_id: str) -> TaskView | None:
        """The task view as the store holds it (a closed run, or a task past retention); None when
        it has none. A closed task's is its whole view (``closed_view``); another's is built from
        the node (no agent, run, children or closed requests). Either has ``unmirrored_writes``
        0."""
        rows = await self.runner.read(
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
        if props.get("closed_view"):
            return _closed_view(props["closed_view"])
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

    async def mirrored_write(self, project_id: str, workflow_id: str) -> int:
        """The write counter up to which the store holds every write of the task (the node's
        ``mirrored_write``); 0 before the first."""
        rows = await self.runner.read(
            "MATCH (t:Task {key: $key, project_id: $p}) RETURN t.mirrored_write AS w",
            key=workflow_id,
            p=project_id,
        )
        return int(rows[0]["w"] or 0) if rows else 0

    async def decisions(
        self,
        project_id: str,
        *,
        workflow_id: str | None = None,
        decision_id: str | None = None,
        after_seq: int = 0,
        limit: int = PAGE_LIMIT_MAX,
    ) -> list[DecisionRow]:
        """Decisions of a project (of one task, or the one ``decision_id``) in seq order after
        ``after_seq``, at most ``limit``, each with cited events redacted and cited steps changed
        since. A decision kept after its task's deletion is found by the task's workflow id and by
        its id."""
        rows = await self.runner.read(
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
        rows = await self.runner.read(
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
        """One task's mirrored steps last changed at or before write ``up_to_write``, in name order
        after ``after_name``, in ``state`` when not None, at most ``limit``."""
        rows = await self.runner.read(
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
        """One task's mirrored step ``name``, None when the store has no such step."""
        rows = await self.runner.read(
            "MATCH (s:Step {key: $key + '/' + $name, project_id: $p}) RETURN s",
            key=workflow_id,
            name=name,
            p=project_id,
        )
        return StepView.model_validate(plain(rows[0]["s"])) if rows else None

    async def find_tasks(self, project_id: str, where: TaskFilter) -> list[TaskRow]:
        """Tasks of a project in name order after ``where.after_name``, filtered by ``where``;
        placeholder nodes (no status) left out; one page read from an index
        (``tasks_statement``)."""
        rows = await self.runner.read(
            tasks_statement(where),
            p=project_id,
            status=None if where.status is None else where.status.value,
            agent=where.agent_id,
            session=where.session_id,
            parent=where.parent,
            contains=where.name_contains,
            since=where.since,
            until=where.until,
            after=where.after_name or "",
            limit=where.limit,
        )
        return [TaskRow.model_validate(plain(row["t"])) for row in rows]

    async def task_tree(self, project_id: str, where: TreeRead) -> list[TreeRow]:
        """The task ``where.task`` and its descendants up to ``where.depth`` levels, each with its
        ``depth`` (0: the task), by depth then name."""
        rows = await self.runner.read(
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
        """Events across the project's tasks by kind, name and time (``since`` <= time < ``until``),
        oldest first; ``failed_only`` keeps tool results of failed steps."""
        rows = await self.runner.read(
            _FIND_EVENTS,
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
        rows = await self.runner.read(
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
        """Failed tool steps across the project's tasks, by their result's tool name case-folded
        (``spellings`` keeps each spelling), most failures first."""
        rows = await self.runner.read(
            """
            MATCH (s:Step {project_id: $p, state: 'failed', kind: 'tool'})-[:RESULT]->(e:Event)
            WITH s, coalesce(e.name, '?') AS spelled
            RETURN toLower(spelled) AS tool, collect(DISTINCT spelled) AS spellings,
                   count(s) AS failed, count(DISTINCT s.task_key) AS tasks
            ORDER BY failed DESC, tool
            """,
            p=project_id,
        )
        return [ToolFailures.model_validate(row) for row in rows]

    async def counts(self, project_id: str) -> dict[str, int]:
        """Nodes by first label and relationships of the project (the key store left out): a
        fingerprint for tests and rebuild checks."""
        rows = await self.runner.read(
            """
            MATCH (n {project_id: $p}) WHERE NOT n:DataKey AND NOT n:KeyTree
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
    """An event node's properties as ``Event`` fields (``event_properties`` reversed), with the
    ``id`` of a node mirrored before events had ids."""
    props = plain(node)
    if isinstance(props.get("cites"), str):
        props["cites"] = json.loads(props["cites"])
    if "input_tokens" in props:
        props["usage"] = {k: props.pop(k) for k in ("input_tokens", "output_tokens")}
    props.setdefault("id", event_id(props["task_key"], props["seq"]))
    return props


def _event(node: Any) -> Event:
    return Event.model_validate(event_fields(node), strict=False)
