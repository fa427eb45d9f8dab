"""The mirror's writes to the task graph: one page of a task (its node, events, steps and
decisions) in one transaction of two statements, idempotent (MERGE on stable keys); and the
rebuild's and the benchmarks' clean-ups.

A task node belongs to one task: the mirror refuses to write a task into a node created by
another task of the same workflow id (one whose history was deleted: ``TaskIncarnationError``)
or into a deleted task's id (a ``TaskTombstone``). Times are sent as ``epoch`` pairs and set as
Neo4j datetimes in UTC; payloads and tool arguments are strings, so integers of any size,
arbitrary JSON and any Unicode are stored exactly as recorded.
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
"""The first statement of a batch of mirror pages (``taskgraph.page_batches``: one project,
a page per task, in key order so that two batches lock their tasks in one order): each task
node, locked by its first SET (and nothing shared: see ``_PAGE``), its properties set only
when the view is not older than the node (``writes``, the view's write counter, is its
version: a late, retried or cancelled mirror attempt never undoes a newer one); returns for
each task (``placed``) the ``created_at`` its node had before when it is not the view's
(``other``, as text; null for a new node or the same task) and whether the task's id has a
tombstone (``deleted``), so the write can refuse a node that is not its task's before anything
else is written (times travel as ``epoch`` pairs and come back as text: the driver converts
datetimes in pure Python); and, the nodes locked, the keys of the pages' sealed events
(``KEY_READS``, in the same round trip)."""

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
"""The rest of a batch of mirror pages in one statement (one round trip), for each page (a row
of ``$pages``, its task's node matched): the events with their NEXT links; the task's mirror
watermarks (``mirrored_seq``, and on a copy's last page ``mirrored_write``, the write counter
up to which Neo4j holds every write; never lowered); the steps with their RESULT links, each
only when not older than its node (``changed_write``, the write that last changed the step,
is its version); the decisions' labels and CITES links; then the nodes every task of a
project shares (``SHARED_NODES``: its project, its agents, a session, a parent) with the
task's and the events' relationships to them. Each part is a unit subquery over the page's
row, run in this order, so the NEXT links see the events merged before them, a step's result
event is merged (as a placeholder) when not written yet, and a decision cites the steps as
merged. The shared nodes come last because a new relationship locks both its nodes until the
transaction commits: taken first, the project's and agent's locks were held through the
whole page, and the mirrors of many tasks importing at once queued on them past the
transaction timeout. An event's ``AUTHORED_BY`` link
to its agent, the node every event of an agent shares, is created (``CREATE``) only with the
event's node (one that had no ``kind``: new, or a step result's placeholder), where a
``MERGE`` that finds no link locks both nodes to make one: creating a relationship does not
lock a dense node exclusively (Neo4j's locks for dense nodes), so the pages of concurrent
tasks do not queue on their agent. Event and step times arrive as ``epoch`` pairs and are set
as datetimes in the same SET."""


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
    """The transaction function of a batch of mirror pages (``TaskGraph.write_task``; one
    project, a page per task: ``taskgraph.page_batches``)."""
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
