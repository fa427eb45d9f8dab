"""The mirror's writes to Neo4j: one page of a task (node, events, steps, decisions) in one
transaction of two statements, idempotent (MERGE on stable keys); and the rebuild's and benchmarks'
clean-ups. Times are sent as ``epoch`` pairs, set as UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, LiteralString

from neo4j import AsyncManagedTransaction, AsyncTransaction

from agent_tasks.contract import (
    Citations,
    EventKind,
    task_workflow_id,
)
from agent_tasks.contract.errors import TaskIncarnationError
from agent_tasks.sealing.keys import KeyLookup
from agent_tasks.sealing.seal import unseal
from agent_tasks.taskgraph.dialect import SHARED_NODES
from agent_tasks.taskgraph.neo4j.keys import KEY_READS
from agent_tasks.taskgraph.page_batches import PageWrite
from agent_tasks.taskgraph.properties import (
    epoch,
    event_properties,
    step_properties,
    task_properties,
)

WIPE_BATCH = 10_000
"""Event nodes ``wipe_project`` deletes per transaction."""

_TASK: LiteralString = (
    """
UNWIND $tasks AS tk
MERGE (t:Task {key: tk.key})
WITH tk, t, t.created_at AS was, coalesce(t.writes, -1) <= tk.writes AS newer,
     datetime({epochSeconds: tk.created_at[0], nanosecond: tk.created_at[1]}) AS created
SET t.writes = CASE WHEN newer THEN tk.writes ELSE t.writes END
FOREACH (_ IN CASE WHEN newer THEN [1] ELSE [] END |
  SET t += tk, t.created_at = created,
      t.updated_at = datetime({epochSeconds: tk.updated_at[0], nanosecond: tk.updated_at[1]}))
WITH tk, was, created
OPTIONAL MATCH (gone:TaskTombstone {key: tk.key})
WITH collect({
  key: tk.key,
  other: CASE WHEN was IS NULL OR was = created THEN null ELSE toString(was) END,
  deleted: gone IS NOT NULL
}) AS placed
"""
    + KEY_READS
    + "RETURN placed, trees, singles"
)
"""A batch's first statement (one project, a page per task, in key order so batches lock in one
order): each task node locked by its first SET, its properties set only when the view's ``writes``
is not older (a late attempt never undoes a newer one); returns per task the node's other
``created_at`` and whether its id is tombstoned, so the write refuses another incarnation first; and
the pages' sealed keys (``KEY_READS``)."""

_PAGE: LiteralString = (
    """
UNWIND $pages AS pg
MATCH (t:Task {key: pg.key})
CALL (t, pg) {
  UNWIND pg.events AS ev
  MERGE (e:Event {key: t.key + '#' + toString(ev.seq)})
  WITH t, e, ev, e.kind IS NULL AS fresh
  SET e += ev, e.time = datetime({epochSeconds: ev.time[0], nanosecond: ev.time[1]}),
      e.task_key = t.key, e.project_id = t.project_id, e.task_name = t.name
  MERGE (t)-[:HAS_EVENT]->(e)
  RETURN collect(CASE WHEN fresh THEN ev.seq END) AS fresh
}
CALL (t, pg) {
  UNWIND pg.events AS ev
  MATCH (a:Event {key: t.key + '#' + toString(ev.seq - 1)})
  MATCH (b:Event {key: t.key + '#' + toString(ev.seq)})
  MERGE (a)-[:NEXT]->(b)
}
SET t.mirrored_seq = CASE WHEN coalesce(t.mirrored_seq, 0) < pg.watermark THEN pg.watermark
                          ELSE t.mirrored_seq END,
    t.mirrored_write = CASE WHEN coalesce(t.mirrored_write, 0) < coalesce(pg.mirrored_write, 0)
                            THEN pg.mirrored_write ELSE t.mirrored_write END
WITH t, pg, fresh
CALL (t, pg) {
  UNWIND pg.steps AS st
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
CALL (t, pg) {
  UNWIND pg.decisions AS d
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
CALL (t, pg) {"""
    + SHARED_NODES
    + """}
CALL (t, pg, fresh) {
  UNWIND pg.events AS ev
  WITH t, ev WHERE ev.seq IN fresh
  MATCH (e:Event {key: t.key + '#' + toString(ev.seq)})
  MERGE (a:Agent {key: t.project_id + '/' + ev.author})
    ON CREATE SET a.project_id = t.project_id, a.agent_id = ev.author
  CREATE (e)-[:AUTHORED_BY]->(a)
}
"""
)
"""The rest of a batch in one statement, per page (a row of ``$pages``), in order: events and NEXT
links; the watermarks (never lowered); steps and RESULT links, each only when not older
(``changed_write``); decisions' labels and CITES; then the shared nodes (``SHARED_NODES``). The
shared nodes come last since a new relationship locks both nodes until commit (taken first, many
tasks' mirrors queued on the project's lock); an event's ``AUTHORED_BY`` is created (``CREATE``)
with a new node only, so concurrent pages do not queue on their agent."""


Transaction = AsyncManagedTransaction | AsyncTransaction


def _page_row(page: PageWrite) -> dict[str, Any]:
    """A page's row of ``_PAGE`` but its events (opened with their keys in the transaction)."""
    view = page.view
    parent_key = None
    if view.parent is not None:
        parent_key = task_workflow_id(view.project_id, view.parent)
    branch_key = None
    if view.branched_from is not None:
        branch_key = task_workflow_id(view.project_id, view.branched_from.task)
    stamp = {} if page.mark is None else {"rebuild": page.mark}
    return {
        "key": view.workflow_id,
        "parent_key": parent_key,
        "branch_key": branch_key,
        "watermark": max((e.seq for e in page.events), default=0),
        "mirrored_write": page.mirrored_write,
        "steps": [step_properties(s) | stamp for s in page.steps],
        "decisions": [
            {"seq": e.seq, **(e.cites or Citations()).model_dump(mode="json")}
            for e in page.events
            if e.kind is EventKind.DECISION
        ],
    }


def batch_writer(batch: Sequence[PageWrite]) -> Callable[[Transaction], Awaitable[None]]:
    """The transaction function of a batch of mirror pages (one project, a page per task)."""
    pages = sorted(batch, key=lambda page: page.view.workflow_id)
    project = pages[0].view.project_id
    tasks = [
        task_properties(page.view)
        | {"created_at": epoch(page.view.created_at), "updated_at": epoch(page.view.updated_at)}
        for page in pages
    ]
    rows = [_page_row(page) for page in pages]
    lookup = KeyLookup(
        e.key_id
        for page in pages
        for e in page.events
        if e.sealed is not None and e.key_id is not None
    )

    async def work(tx: Transaction) -> None:
        result = await tx.run(_TASK, lookup.parameters(), tasks=tasks, p=project)
        record = await result.single(strict=True)
        for page, placed in zip(pages, record["placed"], strict=True):
            other = placed["other"]
            if placed["deleted"] or other is not None:
                raise TaskIncarnationError(
                    f"task {page.view.workflow_id}: "
                    + ("the task was deleted" if placed["deleted"] else f"created at {other}")
                    + f"; this task was created at {page.view.created_at.isoformat()}. Neo4j "
                    "keeps the earlier one (its name stays taken) and takes nothing of this one"
                )
        keys = lookup.keys(record["trees"], record["singles"])
        for page, row in zip(pages, rows, strict=True):
            stamp = {} if page.mark is None else {"rebuild": page.mark}
            row["events"] = [event_properties(e) | stamp for e in unseal(page.events, keys)]
        await (await tx.run(_PAGE, pages=rows)).consume()

    return work
