"""The mirror's pages of many tasks written together (``taskgraph.page_batches``), against each
adapter (``store``: Neo4j and FalkorDB, real servers): a batch writes every page of it; a
batch with a page the store refuses fails that page's caller only, the others' pages written;
pages of one task sent at once keep the write counter rule (a page applies only if newer);
pages that come while the last batch is younger than its gather window go together in the next;
a batch of two pages of one task or of two projects is refused with nothing written. Expected
values come from the pages the test built, not from the store under test.

The kinds of peers' bugs these hold off: one bad item rolling back or failing every item of
its batch (google/capsem#125: a batch transaction dropped with its good events;
spec-kitty/spec-kitty#2736: the batch's error fanned out to innocent events; with the batch's
error fanned out, the second test fails), and two writes of one key in one batch applied out
of order (hpgrahsl/kafka-connect-mongodb#98, datamill-co/target-postgres#232)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from agent_tasks.contract import TaskView, task_workflow_id
from agent_tasks.contract.errors import TaskIncarnationError
from agent_tasks.taskgraph.falkordb.graph import FalkorGraph
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.taskgraph.page_batches import PageBatches, PageWrite
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.seeds import seed_event, seed_view


def _page(project_id: str, name: str, events: int, writes: int, now: datetime) -> PageWrite:
    """A page of task ``name``: its events 1..``events`` (payload ``name/seq``) and a view of
    write counter ``writes``, created ``now``; the copy's last page (``mirrored_write``)."""
    view = seed_view(project_id, name, last_seq=events, now=now)
    view = view.model_copy(update={"writes": writes})
    wid = task_workflow_id(project_id, name)
    return PageWrite(
        view,
        [seed_event(wid, seq, f"{name}/{seq}", now) for seq in range(1, events + 1)],
        [],
        mirrored_write=writes,
    )


def _batching(store: GraphStore) -> TaskGraph | FalkorGraph:
    assert isinstance(store, TaskGraph | FalkorGraph)
    return store


async def _payloads(store: GraphStore, view: TaskView) -> list[str]:
    return [
        e.payload for e in await store.reads.events(view.project_id, view.workflow_id, 0, 99, 99)
    ]


async def test_a_batch_writes_every_page_of_it(store: GraphStore, project_id: str) -> None:
    now = datetime.now(UTC)
    pages = [_page(project_id, f"t{i}", i + 1, i + 2, now) for i in range(5)]

    await _batching(store).write_pages(pages)

    for i, page in enumerate(pages):
        assert await _payloads(store, page.view) == [f"t{i}/{s}" for s in range(1, i + 2)]
        assert await store.reads.mirrored_write(project_id, page.view.workflow_id) == i + 2
    counts = await store.reads.counts(project_id)
    assert (counts["Task"], counts["Event"], counts["NEXT"]) == (5, 15, 10)
    assert (counts["Project"], counts["Agent"], counts["HAS_TASK"]) == (1, 1, 5)


async def test_a_page_the_store_refuses_fails_its_own_caller_only(
    store: GraphStore, project_id: str
) -> None:
    now = datetime.now(UTC)
    first = _page(project_id, "taken", 1, 1, now)
    await store.write_task(first.view, first.events, [])
    # another incarnation of "taken": created a second later, with an event of its own
    other = _page(project_id, "taken", 2, 2, now + timedelta(seconds=1))
    other = PageWrite(
        other.view.model_copy(update={"created_at": now + timedelta(seconds=1)}),
        other.events,
        [],
    )
    good = [_page(project_id, f"g{i}", 2, 2, now) for i in range(6)]
    pages = [*good[:3], other, *good[3:]]

    with pytest.raises(TaskIncarnationError, match="created at"):
        await _batching(store).write_pages(pages)
    if store.kind == "neo4j":  # one transaction: nothing of the batch is written
        assert (await store.reads.counts(project_id))["Task"] == 1

    outcomes = await asyncio.gather(
        *(store.write_task(p.view, p.events, [], mirrored_write=2) for p in pages),
        return_exceptions=True,
    )

    assert [type(o) for o in outcomes] == [
        *[type(None)] * 3, TaskIncarnationError, *[type(None)] * 3
    ]  # fmt: skip
    for page in good:
        name = page.view.name
        assert await _payloads(store, page.view) == [f"{name}/1", f"{name}/2"]
        assert await store.reads.mirrored_write(project_id, page.view.workflow_id) == 2
    assert await _payloads(store, first.view) == ["taken/1"]  # the first incarnation's only


async def test_pages_of_one_task_at_once_apply_only_if_newer(
    store: GraphStore, project_id: str
) -> None:
    now = datetime.now(UTC)
    newer = _page(project_id, "t", 3, 5, now)
    older = _page(project_id, "t", 1, 3, now)
    newest_other = _page(project_id, "u", 2, 9, now)
    stale_other = _page(project_id, "u", 1, 4, now)

    await asyncio.gather(
        *(
            store.write_task(p.view, p.events, [], mirrored_write=p.mirrored_write)
            for p in (newer, older, stale_other, newest_other)
        )
    )

    for page in (newer, newest_other):
        held = await store.reads.task_view(project_id, page.view.workflow_id)
        assert held is not None
        assert (held.last_seq, held.writes) == (page.view.last_seq, page.view.writes)
        assert (
            await store.reads.mirrored_write(project_id, page.view.workflow_id) == page.view.writes
        )
    assert await _payloads(store, newer.view) == ["t/1", "t/2", "t/3"]


async def test_a_batch_of_two_pages_of_one_task_or_two_projects_is_refused(
    store: GraphStore, project_id: str
) -> None:
    now = datetime.now(UTC)
    twice = [_page(project_id, "t", 1, 1, now), _page(project_id, "t", 2, 2, now)]
    apart = [_page(project_id, "t", 1, 1, now), _page(f"{project_id}-b", "t", 1, 1, now)]
    for pages in (twice, apart):
        with pytest.raises(ValueError, match="one project, with one page per task"):
            await _batching(store).write_pages(pages)
    assert (await store.reads.counts(project_id)).get("Task", 0) == 0
    assert (await store.reads.counts(f"{project_id}-b")).get("Task", 0) == 0


async def test_pages_that_come_right_after_a_batch_gather_into_the_next(
    store: GraphStore, project_id: str
) -> None:
    now = datetime.now(UTC)
    first, *rest = [_page(project_id, f"t{i}", 1, 2, now) for i in range(4)]
    graph = _batching(store)
    sent: list[list[str]] = []

    async def write(pages: Sequence[PageWrite]) -> None:
        sent.append([p.view.name for p in pages])
        await graph.write_pages(pages)

    batches = PageBatches(write, gather=0.5)
    await batches.write(first)  # the line was quiet: sent at once, alone
    await asyncio.gather(*(batches.write(p) for p in rest))  # within 0.5 s of it: gathered

    assert sent == [["t0"], ["t1", "t2", "t3"]]
    for page in (first, *rest):
        assert await store.reads.mirrored_write(project_id, page.view.workflow_id) == 2
