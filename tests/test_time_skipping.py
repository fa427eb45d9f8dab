"""The ledger's timers in skipped time, on a private Temporal dev server with per-workflow time
skipping (``WorkflowEnvironment.start_time_skipping_v2``, fixture ``time_skipping_env``), with
the real mirror activity writing the real Neo4j.

V2 time skipping has no global clock: ``env.sleep`` raises, and a workflow's clock is moved
with ``env.fast_forward(handle, duration)``; a workflow that waits on a timer has its clock
moved to the timer's fire time (a ``WORKFLOW_EXECUTION_TIME_SKIPPING_TRANSITIONED`` event).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.testing import WorkflowEnvironment

from activities.graph import TaskGraph
from starter.client import ConversationHistory
from tests.conftest import mirrored
from workflows.models import TaskStatus

DEBOUNCE = timedelta(milliseconds=200)
"""The mirror's debounce as README.md states it (200 ms after the first waiting write)."""
WEEK = timedelta(days=7)


def name(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


def first(events: list[HistoryEvent], type_name: str) -> HistoryEvent:
    return next(e for e in events if name(e) == type_name)


async def test_mirror_runs_after_the_debounce_in_skipped_time(
    time_skipping_env: WorkflowEnvironment,
    time_skipping_history: ConversationHistory,
    graph: TaskGraph,
) -> None:
    history = time_skipping_history
    await history.create_task("t", "debounce")
    await mirrored(history, "t")
    handle = time_skipping_env.client.get_workflow_handle(history.workflow_id("t"))
    before = len((await handle.fetch_history()).events)

    written = await history.record_event("t", "message", "one write")
    assert written.seq == 1
    await mirrored(history, "t")

    view = (await history.get_task("t")).view
    assert view is not None
    assert (view.last_seq, view.mirrored_seq, view.unmirrored_writes) == (1, 1, 0)
    events = list((await handle.fetch_history()).events)[before:]
    types = [name(e) for e in events]
    # The write, then the debounce timer, the skip to its fire time, the timer, the mirror.
    order = [
        "WORKFLOW_EXECUTION_UPDATE_COMPLETED",
        "TIMER_STARTED",
        "WORKFLOW_EXECUTION_TIME_SKIPPING_TRANSITIONED",
        "TIMER_FIRED",
        "ACTIVITY_TASK_SCHEDULED",
        "ACTIVITY_TASK_COMPLETED",
    ]
    positions = [types.index(t) for t in order]
    assert positions == sorted(positions), types
    timer = first(events, "TIMER_STARTED")
    assert timer.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() == DEBOUNCE
    skip = first(events, "WORKFLOW_EXECUTION_TIME_SKIPPING_TRANSITIONED")
    target = skip.workflow_execution_time_skipping_transitioned_event_attributes.target_time
    fire_time = timer.event_time.ToDatetime() + DEBOUNCE
    assert abs(target.ToDatetime() - fire_time) < timedelta(milliseconds=1)
    scheduled = first(events, "ACTIVITY_TASK_SCHEDULED").activity_task_scheduled_event_attributes
    assert scheduled.activity_type.name == "mirror_task"
    assert types.count("ACTIVITY_TASK_SCHEDULED") == 1  # one mirror call for the one write
    in_neo4j = await graph.events(history.project_id, history.workflow_id("t"), 0, 100, 100)
    assert [(e.seq, e.payload) for e in in_neo4j] == [(1, "one write")]


async def test_a_task_idle_for_a_week(
    time_skipping_env: WorkflowEnvironment, time_skipping_history: ConversationHistory
) -> None:
    history = time_skipping_history
    await history.create_task("t", "idle")
    assert (await history.record_event("t", "message", "before")).seq == 1
    await mirrored(history, "t")
    handle = time_skipping_env.client.get_workflow_handle(history.workflow_id("t"))
    before = len((await handle.fetch_history()).events)
    clock = await time_skipping_env.get_current_time(handle)

    assert await time_skipping_env.fast_forward(handle, WEEK)

    assert await time_skipping_env.get_current_time(handle) - clock >= WEEK
    week = [name(e) for e in list((await handle.fetch_history()).events)[before:]]
    # Only the server's own records of the fast-forward: no timer, no workflow task, no
    # activity ran while the task was idle (no busy loop, nothing polled).
    assert set(week) <= {
        "WORKFLOW_EXECUTION_OPTIONS_UPDATED",
        "WORKFLOW_EXECUTION_TIME_SKIPPING_TRANSITIONED",
    }, week

    after = await history.record_event("t", "message", "after a week")
    assert after.seq == 2
    await mirrored(history, "t")
    view = (await history.get_task("t")).view
    assert view is not None
    assert (view.status, view.last_seq, view.mirrored_seq) == (TaskStatus.open, 2, 2)
    assert view.updated_at - view.created_at >= WEEK
    events = (await history.list_events("t")).events
    assert [e.payload for e in events] == ["before", "after a week"]
    assert events[1].time - events[0].time >= WEEK
