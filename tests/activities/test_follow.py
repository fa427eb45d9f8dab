"""The mirror call that follows its run (``activities.follow``, the ``mirror-follows-run``
patch), against the real Temporal and Neo4j: single writes add no workflow task and no
activity of their own, Neo4j holds each one soon after it is acknowledged, the call ends when
the run is idle, when the run ends, and when its worker shuts down, and a worker past its
followers mirrors by one call per batch as before."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from agent_tasks.activities.follow import HistoryPoll
from agent_tasks.activities.mirror import MirrorActivities
from agent_tasks.contract import MirrorInput
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import AgentTasksWorkerPlugin, build_worker
from agent_tasks.workflows.mirroring import MIRROR_FOLLOW_IDLE
from tests.conftest import eventually, mirrored

SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED


COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
CLOSES = {
    COMPLETED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
}


async def mirror_closes(client: Client, workflow_id: str) -> list[EventType.ValueType]:
    """How each mirror call of the workflow closed so far, in order (an open one: none)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    mirrors = {
        e.event_id
        for e in history.events
        if e.event_type == SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mirror_task"
    }
    closes = []
    for e in history.events:
        if e.event_type in CLOSES:
            attributes = getattr(e, e.WhichOneof("attributes") or "")
            if attributes.scheduled_event_id in mirrors:
                closes.append(e.event_type)
    return closes


async def scheduled_mirrors(client: Client, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(
        e.event_type == SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mirror_task"
        for e in history.events
    )


async def test_single_writes_back_to_back_take_one_mirror_call(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    await history.create_task("t", "one call")
    seqs = [(await history.record_event("t", "message", f"m{i}")).seq for i in range(30)]
    assert seqs == list(range(1, 31))
    await mirrored(history, "t", within=10)  # Neo4j holds all 30 while the call still follows
    in_neo4j = await graph.reads.events(history.project_id, history.workflow_id("t"), 0, 99, 99)
    assert [e.payload for e in in_neo4j] == [f"m{i}" for i in range(30)]
    assert await scheduled_mirrors(client, history.workflow_id("t")) == 1
    view = (await history.get_task("t")).view
    assert view is not None and view.writes == 31 and view.unmirrored_writes == 31

    async def reported() -> bool:  # the call ends once the run is idle, and says how far
        found = (await history.get_task("t")).view
        return found is not None and found.unmirrored_writes == 0 and found.mirrored_seq == 30

    await eventually(reported, within=MIRROR_FOLLOW_IDLE.total_seconds() + 20)
    # the next write starts the next call; the finish ends it, and the workflow completes
    assert (await history.record_event("t", "message", "later")).seq == 31
    assert (await history.finish_task("t", "done")).recorded
    final = await asyncio.wait_for(history.wait_task("t"), 30)
    assert final is not None
    assert (final.mirrored_seq, final.unmirrored_writes) == (31, 0)
    assert await scheduled_mirrors(client, history.workflow_id("t")) == 2
    assert await graph.reads.mirrored_write(history.project_id, history.workflow_id("t")) == 33


async def test_a_worker_past_its_followers_mirrors_a_call_per_batch(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    queue = f"nofollow-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(client, project_id, "a", task_queue=queue, graph=graph)
    mirror = MirrorActivities(client, graph, followers=0)
    async with build_worker(client, graph, queue, workflows=True, activities=False):
        async with Worker(client, task_queue=queue, activities=[mirror.mirror_task]):
            await history.create_task("t", "no followers")
            for i in range(5):
                assert (await history.record_event("t", "message", f"m{i}")).recorded

            async def reported() -> bool:
                found = (await history.get_task("t")).view
                return found is not None and found.unmirrored_writes == 0

            await eventually(reported, within=20)  # each call ended at once: the view knows
    events = await graph.reads.events(project_id, history.workflow_id("t"), 0, 99, 99)
    assert [e.payload for e in events] == [f"m{i}" for i in range(5)]
    assert await scheduled_mirrors(client, history.workflow_id("t")) >= 2


async def test_a_follower_ends_when_its_worker_shuts_down(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """A follower ends as its worker shuts down: with a graceful shutdown shorter than the
    follower's idle time, the worker would cancel a follower that waited for more writes;
    this one completes (its activity's close event), and the next worker's follower copies
    the next write."""
    queue = f"shutdown-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(client, project_id, "a", task_queue=queue, graph=graph)
    grace = MIRROR_FOLLOW_IDLE * 3 / 5  # a follower that waited for writes would outlast it
    async with Worker(
        client,
        task_queue=queue,
        plugins=[AgentTasksWorkerPlugin(graph)],
        graceful_shutdown_timeout=grace,
    ):
        await history.create_task("t", "shut down")
        assert (await history.record_event("t", "message", "m0")).recorded
        await mirrored(history, "t")
    assert await mirror_closes(client, history.workflow_id("t")) == [COMPLETED]
    async with build_worker(client, graph, queue):
        assert (await history.record_event("t", "message", "m1")).recorded
        await mirrored(history, "t")
    events = await graph.reads.events(project_id, history.workflow_id("t"), 0, 99, 99)
    assert [e.payload for e in events] == ["m0", "m1"]


async def test_a_position_the_server_refuses_starts_from_the_first_event(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    await history.create_task("t", "bad token")
    assert (await history.record_event("t", "message", "m0")).recorded
    await mirrored(history, "t")
    handle = client.get_workflow_handle(history.workflow_id("t"))
    run_id = (await handle.describe()).run_id
    poll = HistoryPoll(client, handle.id, run_id, "bm90IGEgdG9rZW4=")  # "not a token"
    assert await poll.grew(timedelta(seconds=1)) == 1 and poll.token == b""
    assert await poll.grew(timedelta(seconds=1)) > 0  # the whole history from its first event
    assert poll.token
    outcome = await ActivityEnvironment().run(
        MirrorActivities(client, graph).mirror_task,
        MirrorInput(
            workflow_id=handle.id,
            run_id=run_id,
            after_seq=0,
            up_to_seq=1,
            after_write=0,
        ),
    )
    assert (outcome.events, outcome.up_to_seq, outcome.up_to_write) == (1, 1, 2)
