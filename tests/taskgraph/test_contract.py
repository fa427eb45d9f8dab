"""The graph store's contract, run against each adapter (``store``: Neo4j and FalkorDB, real
servers): the mirror's writes and reads, the ordering rule (a write applies only if newer),
idempotent pages, a refused incarnation, retention (redaction destroys the key, deletion keeps
the name taken), sealing's key store, rebuild, the cross-task reads, API keys and page
sessions. Expected values come from the writes the test made (Temporal's side), not from the
store under test."""

from __future__ import annotations

import asyncio
from datetime import timedelta, timezone

import httpx
import pytest
from temporalio.client import Client

from agent_tasks.activities.rebuild import rebuild
from agent_tasks.contract import (
    ChildRecord,
    EventInput,
    EventKind,
    StepState,
    TaskStatus,
    TaskView,
)
from agent_tasks.contract.errors import TaskIncarnationError
from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.server.pagesessions import PageSessionStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.taskgraph.models import EventFilter, StepFilter, TaskFilter
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import Services
from tests.conftest import mirrored
from tests.servers import served


async def _task_with_a_tool_step(history: ConversationHistory, name: str) -> TaskView:
    """A task of three events (a question, a tool call, its result) and a completed step
    whose result is the third; returns its view as Temporal has it, once mirrored."""
    assert (await history.create_task(name, f"goal of {name}")).recorded
    events = [
        EventInput(kind="message", role="user", payload=f"question of {name}"),
        EventInput(kind="tool_call", name="search", payload='{"q": "x"}'),
        EventInput(kind="tool_result", name="search", payload=f"answer of {name} é ✓"),
    ]
    assert (await history.record_events(name, events)).recorded
    assert (await history.set_step(name, "look", StepState.COMPLETED, result_event_seq=3)).recorded
    await mirrored(history, name)
    view = (await history.get_task(name)).view
    assert view is not None
    return view


async def test_a_mirrored_task_reads_back_as_written(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    view = await _task_with_a_tool_step(store_history, "t")
    p, key = store_history.project_id, view.workflow_id
    held = await store.reads.task_view(p, key)
    assert held is not None
    assert (held.name, held.goal, held.status, held.last_seq) == ("t", "goal of t", view.status, 3)
    assert held.created_at == view.created_at and held.updated_at == view.updated_at
    assert held.step_counts[StepState.COMPLETED] == 1
    events = await store.reads.events(p, key, 0, 3, 10)
    assert [e.payload for e in events] == ["question of t", '{"q": "x"}', "answer of t é ✓"]
    assert [e.seq for e in events] == [1, 2, 3]
    steps = await store.reads.steps(
        p, key, state=None, after_name=None, limit=10, up_to_write=10**6
    )
    assert [(s.step_name, s.state, s.result_event_seq) for s in steps] == [
        ("look", StepState.COMPLETED, 3)
    ]
    assert await store.reads.counts(p) == {
        "Task": 1, "Event": 3, "Step": 1, "Project": 1, "Agent": 1,
        "HAS_TASK": 1, "CREATED_BY": 1, "HAS_EVENT": 3, "NEXT": 2, "AUTHORED_BY": 3,
        "HAS_STEP": 1, "RESULT": 1,
    }  # fmt: skip
    assert await store.reads.mirrored_write(p, key) == view.writes


async def test_a_page_written_again_changes_nothing(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    view = await _task_with_a_tool_step(store_history, "again")
    p = store_history.project_id
    before = await store.reads.counts(p)
    events = await store.reads.events(p, view.workflow_id, 0, 3, 10)
    steps = await store.reads.steps(
        p, view.workflow_id, state=None, after_name=None, limit=10, up_to_write=10**6
    )
    await store.write_task(view, events, steps)
    assert await store.reads.counts(p) == before


async def test_a_write_applies_only_if_newer(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """An older view (a lower write counter) changes nothing, a step older than its node
    changes nothing; a newer view applies."""
    view = await _task_with_a_tool_step(store_history, "order")
    p, key = store_history.project_id, view.workflow_id
    (step,) = await store.reads.steps(
        p, key, state=None, after_name=None, limit=10, up_to_write=10**6
    )
    older = view.model_copy(update={"writes": view.writes - 1, "goal": "older goal"})
    old_step = step.model_copy(
        update={"changed_write": step.changed_write - 1, "state": StepState.FAILED}
    )
    await store.write_task(older, [], [old_step])
    held = await store.reads.task_view(p, key)
    assert held is not None and held.goal == "goal of order"
    assert (await store.reads.step(p, key, "look")) == step
    newer = view.model_copy(update={"writes": view.writes + 1, "goal": "newer goal"})
    await store.write_task(newer, [], [])
    held = await store.reads.task_view(p, key)
    assert held is not None and held.goal == "newer goal"


async def test_a_closed_task_keeps_its_whole_view_and_a_reopened_one_drops_it(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """A closed view (``cancelled``, with what the node's properties do not hold: closed
    requests, a child, text of other scripts and a control character) reads back whole, as
    caught up with the store (``closed_view``); written open again (a resume) the node's
    properties are the view again."""
    view = await _task_with_a_tool_step(store_history, "closed")
    p, key = store_history.project_id, view.workflow_id
    text = "é ✓ \x00 \U0001f600 \ud800"
    child = ChildRecord(name="closed/k", status=TaskStatus.DONE, result=text)
    closed = view.model_copy(
        update={
            "writes": view.writes + 1,
            "status": TaskStatus.CANCELLED,
            "closed_inputs": {"n": "task cancelled", "q\u2028": "timed out"},
            "children": {"k": child},
            "unmirrored_writes": 1,
        }
    )
    await store.write_task(closed, [], [])
    held = await store.reads.task_view(p, key)
    expected = closed.model_copy(
        update={"unmirrored_writes": 0, "mirrored_seq": closed.last_seq, "mirror_backlog": []}
    )
    assert held == expected
    reopened = closed.model_copy(
        update={"writes": closed.writes + 1, "status": TaskStatus.IN_PROGRESS}
    )
    await store.write_task(reopened, [], [])
    held = await store.reads.task_view(p, key)
    assert held is not None and held.status is TaskStatus.IN_PROGRESS
    assert held.closed_inputs == {} and held.children == {}
    listed = await store.reads.find_tasks(p, TaskFilter(limit=10))
    assert [row.name for row in listed] == ["closed"]


async def test_another_incarnation_of_the_task_is_refused_and_nothing_written(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    view = await _task_with_a_tool_step(store_history, "twice")
    p = store_history.project_id
    before = await store.reads.counts(p)
    other = view.model_copy(
        update={"created_at": view.created_at + timedelta(seconds=1), "goal": "another"}
    )
    with pytest.raises(TaskIncarnationError, match="created at"):
        await store.write_task(other, [], [])
    assert await store.reads.counts(p) == before
    held = await store.reads.task_view(p, view.workflow_id)
    assert held is not None and held.goal == "goal of twice"


async def test_redaction_empties_the_text_and_destroys_its_key_only(
    client: Client, store: GraphStore, store_history: ConversationHistory, store_queue: str
) -> None:
    """Events are sealed (a client with a graph seals): redacting one destroys its leaf of the
    key tree; the other events still open, in the store and through the client."""
    view = await _task_with_a_tool_step(store_history, "secret")
    p = store_history.project_id
    events = await store.reads.events(p, view.workflow_id, 0, 3, 10)
    retention = HistoryRetention(client, p, "agent-1", graph=store, task_queue=store_queue)
    redacted = await retention.redact_event(events[2].id)
    assert redacted.recorded
    after = await store.reads.events(p, view.workflow_id, 0, 3, 10)
    assert [e.payload for e in after] == ["question of secret", '{"q": "x"}', ""]
    assert after[2].redacted and after[2].seq == 3
    listed = (await store_history.list_events("secret")).events
    assert [e.payload for e in listed] == ["question of secret", '{"q": "x"}', ""]


async def test_two_redactions_of_one_key_tree_at_once_both_hold(
    client: Client, store: GraphStore, store_history: ConversationHistory, store_queue: str
) -> None:
    view = await _task_with_a_tool_step(store_history, "two")
    p = store_history.project_id
    events = await store.reads.events(p, view.workflow_id, 0, 3, 10)
    retention = HistoryRetention(client, p, "agent-1", graph=store, task_queue=store_queue)
    done = await asyncio.gather(*(retention.redact_event(e.id) for e in events[:2]))
    assert all(r.recorded for r in done)
    keys = await store.get_keys(p, [e.key_id for e in events if e.key_id is not None])
    assert [keys[e.key_id] is None for e in events if e.key_id is not None] == [True, True, False]


async def test_deleting_a_task_removes_its_nodes_and_keeps_its_name_taken(
    client: Client, store: GraphStore, store_history: ConversationHistory, store_queue: str
) -> None:
    view = await _task_with_a_tool_step(store_history, "gone")
    p = store_history.project_id
    retention = HistoryRetention(client, p, "agent-1", graph=store, task_queue=store_queue)
    assert (await retention.delete_task("gone")).recorded
    assert await store.reads.task_view(p, view.workflow_id) is None
    counts = await store.reads.counts(p)
    assert not {"Task", "Event", "Step"} & set(counts)
    assert (await store.retention.name_state(p, view.workflow_id)).deleted
    again = await store_history.create_task("gone", "goal of gone")
    assert not again.recorded
    with pytest.raises(TaskIncarnationError, match="deleted"):
        await store.write_task(view, [], [])


async def test_a_rebuild_gives_back_what_a_wipe_took(
    client: Client, store: GraphStore, store_history: ConversationHistory
) -> None:
    await _task_with_a_tool_step(store_history, "a")
    await _task_with_a_tool_step(store_history, "b")
    p = store_history.project_id
    before = await store.reads.counts(p)
    assert await store.wipe_project(p) > 0
    assert await store.reads.counts(p) == {}
    report = await rebuild(client, store, p)
    assert (report.tasks, report.failed) == (2, [])
    assert await store.reads.counts(p) == before
    assert [e.payload for e in (await store_history.list_events("b")).events][2] == (
        "answer of b é ✓"
    )


async def test_cross_task_reads(store: GraphStore, store_history: ConversationHistory) -> None:
    for name in ("alpha", "beta", "gamma"):
        await _task_with_a_tool_step(store_history, name)
    assert (await store_history.create_task("child", "c", parent="alpha")).recorded
    assert await store_history.set_step("beta", "break", StepState.FAILED, result_event_seq=2)
    assert (await store_history.finish_task("gamma", TaskStatus.DONE, result="fine")).recorded
    for name in ("child", "beta", "gamma"):
        await mirrored(store_history, name)
    p = store_history.project_id
    rows = await store.reads.find_tasks(p, TaskFilter())
    assert [r.name for r in rows] == ["alpha", "beta", "child", "gamma"]
    page = await store.reads.find_tasks(p, TaskFilter(after_name="beta", limit=1))
    assert [r.name for r in page] == ["child"]
    done = await store.reads.find_tasks(p, TaskFilter(status=TaskStatus.DONE))
    assert [(r.name, r.result) for r in done] == [("gamma", "fine")]
    assert [r.name for r in await store.reads.find_tasks(p, TaskFilter(name_contains="AMM"))] == [
        "gamma"
    ]
    tree = await store_history.task_tree("alpha")
    assert [(r.name, r.depth) for r in tree] == [("alpha", 0), ("child", 1)]
    calls = await store.reads.find_events(p, EventFilter(kind=EventKind.TOOL_CALL))
    assert sorted(r.task_name for r in calls) == ["alpha", "beta", "gamma"]
    failed = await store.reads.find_events(p, EventFilter(failed_only=True))
    assert [(r.task_name, r.seq) for r in failed] == [("beta", 2)]
    steps = await store.reads.find_steps(p, StepFilter(state=StepState.FAILED))
    assert [(s.task_name, s.step_name) for s in steps] == [("beta", "break")]
    (tools,) = await store.reads.failed_tool_calls(p)
    assert (tools.tool, tools.failed, tools.tasks) == ("search", 1, 1)


async def test_api_keys_and_page_sessions(store: GraphStore, project_id: str) -> None:
    keys, sessions = ApiKeyStore(store), PageSessionStore(store)
    record, key = await keys.create(project_id, "contract")
    assert await keys.check(key) == record
    assert await keys.check(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    token = await sessions.create(record, timedelta(hours=1))
    assert await sessions.check(token) == record
    expired = await sessions.create(record, timedelta(seconds=0))
    assert await sessions.check(expired) is None
    await sessions.delete(token)
    assert await sessions.check(token) is None
    live = await sessions.create(record, timedelta(hours=1))
    revoked = await keys.revoke(record.key_id)
    assert revoked is not None and revoked.revoked_at is not None
    assert revoked.revoked_at >= record.created_at
    assert await keys.check(key) is None and await sessions.check(live) is None
    assert [k.key_id for k in await keys.list(project_id)] == [record.key_id]
    assert await keys.revoke("0" * 16) is None


async def test_a_decision_cites_events_and_steps_and_says_what_changed_since(
    client: Client, store: GraphStore, store_history: ConversationHistory, store_queue: str
) -> None:
    view = await _task_with_a_tool_step(store_history, "choose")
    p = store_history.project_id
    assert (await store_history.set_step("choose", "check", StepState.IN_PROGRESS)).recorded
    made = await store_history.record_decision(
        "choose", "use the search answer", cites_events=[1, 3], cites_steps=["look", "check"]
    )
    assert made.recorded and made.event is not None
    await mirrored(store_history, "choose")
    (row,) = await store.reads.decisions(p, workflow_id=view.workflow_id)
    assert (row.seq, row.statement, row.redacted_events, row.changed_steps) == (
        4,
        "use the search answer",
        [],
        [],
    )
    counts = await store.reads.counts(p)
    assert counts["CITES"] == 4 and counts["Event"] == 4
    events = await store.reads.events(p, view.workflow_id, 0, 3, 10)
    retention = HistoryRetention(client, p, "agent-1", graph=store, task_queue=store_queue)
    assert (await retention.redact_event(events[0].id)).affected_decision_ids == [row.id]
    assert (await store_history.set_step("choose", "check", StepState.COMPLETED)).recorded
    await mirrored(store_history, "choose")
    (row,) = await store.reads.decisions(p, decision_id=row.id)
    assert row.redacted_events == [1]
    assert [(c.name, c.state, c.state_then) for c in row.changed_steps] == [
        ("check", "completed", "in_progress")
    ]


async def test_the_same_page_written_ten_times_at_once_adds_nothing_twice(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """Concurrent MERGEs of one page (a retried mirror call beside the first, a rebuild
    beside the live mirror) create no second node or relationship (memgraph/memgraph#4352's
    kind: duplicate relationships from concurrent MERGE)."""
    view = await _task_with_a_tool_step(store_history, "crowd")
    p = store_history.project_id
    before = await store.reads.counts(p)
    await store.wipe_project(p)
    events = [
        e.model_copy(update={"payload": f"text {e.seq}", "sealed": None, "key_id": None})
        for e in (await store_history.list_events("crowd")).events
    ]
    await asyncio.gather(*(store.write_task(view, events, []) for _ in range(10)))
    after = await store.reads.counts(p)
    assert after == {k: v for k, v in before.items() if k not in ("Step", "HAS_STEP", "RESULT")}


async def test_deleting_a_task_can_keep_its_decisions_detached(
    client: Client, store: GraphStore, store_history: ConversationHistory, store_queue: str
) -> None:
    view = await _task_with_a_tool_step(store_history, "kept")
    p = store_history.project_id
    made = await store_history.record_decision("kept", "keep this", cites_events=[3])
    assert made.recorded and made.event is not None
    await mirrored(store_history, "kept")
    retention = HistoryRetention(client, p, "agent-1", graph=store, task_queue=store_queue)
    deleted = await retention.delete_task("kept", include_decisions=False)
    assert deleted.recorded
    (row,) = await store.reads.decisions(p, decision_id=made.event.id)
    assert (row.statement, row.detached, row.task_name) == ("keep this", True, "kept")
    counts = await store.reads.counts(p)
    assert counts["Decision"] == 1 and "Event" not in counts and "CITES" not in counts
    assert await store.reads.task_view(p, view.workflow_id) is None


async def test_the_http_api_serves_the_store_with_its_keys(
    client: Client,
    store: GraphStore,
    store_history: ConversationHistory,
    store_queue: str,
    services: Services,
) -> None:
    """The HTTP API on either store: its keys are checked against the store and its task
    list is read from it; a key of another project sees none of it, a made-up key nothing."""
    await _task_with_a_tool_step(store_history, "served")
    p = store_history.project_id
    settings = services.settings.model_copy(update={"temporal_task_queue": store_queue})
    app = create_app(Services(settings, client, store, None))
    _, key = await ApiKeyStore(store).create(p, "contract")
    _, other = await ApiKeyStore(store).create(f"{p}-other", "contract")
    async with served(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        mine = await http.get("/tasks", headers={"Authorization": f"Bearer {key}"})
        theirs = await http.get("/tasks", headers={"Authorization": f"Bearer {other}"})
        nobody = await http.get("/tasks", headers={"Authorization": "Bearer atk_made_up"})
    assert mine.status_code == 200
    assert [t["name"] for t in mine.json()["tasks"]] == ["served"]
    assert theirs.status_code == 200 and theirs.json()["tasks"] == []
    assert nobody.status_code == 401


async def test_time_bounds_in_any_offset_find_what_was_written_at_that_instant(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """``since`` is inclusive and ``until`` exclusive, to the microsecond, whatever the offset
    a bound is given in (Neo4j compares datetimes, FalkorDB microseconds)."""
    view = await _task_with_a_tool_step(store_history, "when")
    p = store_history.project_id
    written = (await store_history.list_events("when")).events
    first = written[0]
    at_first = [("when", e.seq) for e in written if e.time == first.time]  # one batch, one time
    india = timezone(timedelta(hours=5, minutes=30))
    at = first.time.astimezone(india)
    tick = timedelta(microseconds=1)
    found = await store.reads.find_events(p, EventFilter(since=at, until=at + tick))
    assert [(r.task_name, r.seq) for r in found] == at_first
    assert await store.reads.find_events(p, EventFilter(since=at + tick, until=at + 2 * tick)) == []
    created = view.created_at.astimezone(india)
    tasks = await store.reads.find_tasks(p, TaskFilter(since=created, until=created + tick))
    assert [r.name for r in tasks] == ["when"]
    assert await store.reads.find_tasks(p, TaskFilter(until=created)) == []
