"""A follower's page built from the run's new history events (``activities.history_page``)
against the page the workflow itself answers (the ``view`` and ``events`` queries), on the real
Temporal: the same view, the same events, sealed ones included; and None (the follower then
queries) where the history does not carry the page."""

from __future__ import annotations

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from agent_tasks.activities.history_page import history_page
from agent_tasks.contract import EventsQuery, TaskView
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.properties import task_properties
from agent_tasks.workflows.task import TaskWorkflow
from tests.conftest import mirrored


async def _state(client: Client, workflow_id: str) -> tuple[TaskView, list[HistoryEvent]]:
    handle = client.get_workflow_handle(workflow_id)
    view = await handle.query(TaskWorkflow.view)
    history = await handle.fetch_history()
    return view, list(history.events)


async def test_record_events_writes_give_the_page_the_workflow_gives(
    client: Client, history: ConversationHistory
) -> None:
    await history.create_task("t", "from history")
    assert (await history.record_event("t", "message", "m0")).recorded
    await mirrored(history, "t")  # the follower runs: no mirror activity event comes next
    wid = history.workflow_id("t")
    before, events_before = await _state(client, wid)
    assert (await history.record_event("t", "message", "m1")).recorded
    pair = [{"kind": "tool_call", "name": "f", "payload": "{}"}, {"kind": "message"}]
    assert (await history.record_events("t", pair)).recorded
    assert (await history.record_event("t", "message", "ünïcode " * 10)).recorded
    after, events_after = await _state(client, wid)
    new = events_after[len(events_before) :]

    built = await history_page(client.data_converter, before, new)

    assert built is not None
    view, events = built
    assert (after.last_seq, after.writes) == (5, before.writes + 3)
    assert task_properties(view) == task_properties(after)
    page = await client.get_workflow_handle(wid).query(
        TaskWorkflow.events, EventsQuery(after_seq=before.last_seq)
    )
    assert [e.model_dump() for e in events] == [e.model_dump() for e in page.events]
    assert all(e.sealed is not None for e in events)  # sealed as the client sent them
    # the view already holds them: nothing new, the view unchanged
    assert await history_page(client.data_converter, after, new) == (after, [])


async def test_a_write_the_history_does_not_carry_gives_none(
    client: Client, history: ConversationHistory
) -> None:
    await history.create_task("t", "steps")
    assert (await history.record_event("t", "message", "m0")).recorded
    await mirrored(history, "t")
    wid = history.workflow_id("t")
    before, events_before = await _state(client, wid)
    assert (await history.record_event("t", "message", "m1")).recorded
    _, events_mid = await _state(client, wid)
    assert (await history.set_step("t", "s", "in_progress")).recorded
    _, events_after = await _state(client, wid)
    record = events_mid[len(events_before) :]
    both = events_after[len(events_before) :]

    assert await history_page(client.data_converter, before, record) is not None
    assert await history_page(client.data_converter, before, both) is None  # set_steps
    assert await history_page(client.data_converter, before, None) is None  # unknown
    # a view that missed a write (its last_seq behind the first new event's) gives None
    behind = before.model_copy(update={"last_seq": before.last_seq - 1})
    assert await history_page(client.data_converter, behind, record) is None
