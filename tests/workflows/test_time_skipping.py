"""The ledger's timers in skipped time, on a private Temporal dev server with per-workflow time
skipping (``WorkflowEnvironment.start_time_skipping_v2``, fixture ``time_skipping_env``), with
the real mirror activity writing the real Neo4j.

V2 time skipping has no global clock: ``env.sleep`` raises, and a workflow's clock is moved
with ``env.fast_forward(handle, duration)``; a workflow that waits on a timer has its clock
moved to the timer's fire time (a ``WORKFLOW_EXECUTION_TIME_SKIPPING_TRANSITIONED`` event).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.testing import WorkflowEnvironment

from agent_tasks.contract import TaskStatus
from agent_tasks.contract.errors import TaskServiceUnavailable
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.conftest import eventually, mirrored

PAUSES = [timedelta(seconds=n) for n in (2, 4, 8, 16, 30, 30)]
"""The pauses after failed mirror calls as README.md states them: 2 s doubling to 30 s."""
WEEK = timedelta(days=7)


def name(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


def first(events: list[HistoryEvent], type_name: str) -> HistoryEvent:
    return next(e for e in events if name(e) == type_name)


async def test_mirror_failures_pause_with_backoff_and_writes_go_on(
    time_skipping_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """A worker whose Neo4j database does not exist: every mirror call fails (a data error,
    not retried), the task pauses 2, 4, 8, 16, 30, 30 s in skipped time and keeps accepting
    writes; a worker with the right database then catches the mirror up."""
    client = time_skipping_env.client
    queue = f"skip-fail-{uuid.uuid4().hex[:6]}"
    history = ConversationHistory(client, project_id=project_id, agent_id="a", task_queue=queue)
    handle = client.get_workflow_handle(history.workflow_id("t"))

    async def timers() -> list[timedelta]:
        events = (await handle.fetch_history()).events
        return [
            e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
            for e in events
            if name(e) == "TIMER_STARTED"
        ]

    async with build_worker(client, TaskGraph(graph.driver, "no-such-database"), queue):
        await history.create_task("t", "mirror fails")
        await eventually(lambda: _at_least(timers, len(PAUSES)))
        assert (await history.record_event("t", "message", "still writable")).seq == 1
        view = (await history.get_task("t")).view
        assert view is not None and view.mirror_error is not None
        assert history.workflow_id("t") in view.mirror_error
    assert (await timers())[: len(PAUSES)] == PAUSES
    async with build_worker(client, graph, queue):

        async def caught_up() -> bool:
            try:
                view = (await history.get_task("t")).view
            except TaskServiceUnavailable:  # the new worker has not polled yet
                return False
            return view is not None and view.unmirrored_writes == 0

        await eventually(caught_up)
        view = (await history.get_task("t")).view
        assert view is not None and view.mirror_error is None and view.mirrored_seq == 1
    in_neo4j = await graph.reads.events(project_id, history.workflow_id("t"), 0, 9, 9)
    assert [e.payload for e in in_neo4j] == ["still writable"]


async def _at_least(values: Callable[[], Awaitable[list[timedelta]]], count: int) -> bool:
    return len(await values()) >= count


async def test_a_task_idle_for_a_week(
    time_skipping_env: WorkflowEnvironment, time_skipping_history: ConversationHistory
) -> None:
    history = time_skipping_history
    await history.create_task("t", "idle")
    assert (await history.record_event("t", "message", "before")).seq == 1
    await mirrored(history, "t")
    handle = time_skipping_env.client.get_workflow_handle(history.workflow_id("t"))

    async def quiet() -> bool:  # the mirror call that follows the run ends once it is idle
        described = (await handle.describe()).raw_description
        return not described.pending_activities and not described.HasField("pending_workflow_task")

    await eventually(quiet)
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
    await eventually(quiet)  # the follower told the workflow how far Neo4j holds it
    view = (await history.get_task("t")).view
    assert view is not None
    assert (view.status, view.last_seq, view.mirrored_seq) == (TaskStatus.OPEN, 2, 2)
    assert view.updated_at - view.created_at >= WEEK
    events = (await history.list_events("t")).events
    assert [e.payload for e in events] == ["before", "after a week"]
    assert events[1].time - events[0].time >= WEEK
