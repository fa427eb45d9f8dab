"""The ledger's published guide, as its users wrote it: create, record, step, read, resume,
decide, remove. Only the imports and the store's construction are ours; every call below is
the guide's name and shape, against the real Temporal and Neo4j."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from agent_tasks.starter import (
    ConversationHistory,
    ErrorCode,
    EventKind,
    HistoryRetention,
    ResultValidity,
    Role,
    StepKind,
    StepState,
    TaskStatus,
)
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from tests.conftest import mirrored


async def test_the_guide_path(
    client: Client, graph: TaskGraph, task_queue: str, project_id: str
) -> None:
    store = ConversationHistory(client, project_id, "planner-1", task_queue=task_queue, graph=graph)
    task = "fix-issue-42"

    # Create and record.
    created = await store.create_task(task, "Make the failing test pass", request_id="req-1")
    assert created.recorded and created.error is None
    assert created.task is not None and created.task.status == TaskStatus.OPEN
    call = await store.record_event(
        task,
        EventKind.TOOL_CALL,
        role=Role.ASSISTANT,
        name="bash",
        payload='{"cmd": "pytest"}',
        request_id="call-1",
    )
    assert call.recorded and call.event is not None and call.event.seq == 1
    again = await store.record_event(
        task,
        EventKind.TOOL_CALL,
        role=Role.ASSISTANT,
        name="bash",
        payload='{"cmd": "pytest"}',
        request_id="call-1",
    )
    assert again.duplicate and again.event == call.event  # the recorded event, once

    # Steps.
    assert (
        await store.set_step(task, "run-tests", StepState.IN_PROGRESS, kind=StepKind.TOOL)
    ).recorded
    out = await store.record_event(
        task, EventKind.TOOL_RESULT, "1 failed", role=Role.TOOL, name="bash"
    )
    assert out.event is not None and out.event.seq == 2
    failed = await store.set_step(
        task, "run-tests", StepState.FAILED, result_event_seq=out.event.seq
    )
    assert failed.recorded
    await store.set_step(task, "read-code", StepState.COMPLETED, kind=StepKind.READ)

    # Read.
    view = (await store.get_task(task)).view
    assert view is not None and view.last_event_seq == 2
    assert view.step_counts[StepState.FAILED] == 1 and view.step_counts[StepState.COMPLETED] == 1
    page = await store.list_events(task, after_seq=0, limit=50)
    assert [(e.seq, e.kind, e.payload) for e in page.events] == [
        (1, EventKind.TOOL_CALL, '{"cmd": "pytest"}'),
        (2, EventKind.TOOL_RESULT, "1 failed"),
    ]
    ids = [e.id for e in page.events]
    assert all(uuid.UUID(i).version == 5 for i in ids) and ids[0] == call.event.id
    steps = await store.list_steps(task, StepState.FAILED, limit=10)
    assert [(s.name, s.kind, s.result_validity) for s in steps.steps] == [
        ("run-tests", StepKind.TOOL, ResultValidity.FAILED)
    ]

    # Resume: another process (another client object) reads the same state and goes on.
    later = ConversationHistory(client, project_id, "planner-1", task_queue=task_queue, graph=graph)
    resumed = (await later.get_task(task)).view
    assert resumed is not None and resumed.last_event_seq == 2
    assert [e.id for e in (await later.list_events(task, after_seq=0)).events] == ids
    fix = await later.record_event(
        task, EventKind.MESSAGE, "patched the parser", role=Role.ASSISTANT
    )
    assert fix.event is not None and fix.event.seq == 3

    # Decide, citing an event by id and one by seq, and a step.
    decided = await later.record_decision(
        task, "retry after the patch", cites_events=[ids[1], 3], cites_steps=["run-tests"]
    )
    assert decided.recorded and decided.event is not None and decided.event.seq == 4
    await mirrored(later, task)
    (decision,) = (await later.list_decisions(task)).decisions
    assert (decision.id, decision.statement, decision.cites.events) == (
        decided.event.id,
        "retry after the patch",
        [2, 3],
    )
    assert not decision.needs_review

    # Refusals are results.
    missing = await store.record_event("no-such-task", EventKind.MESSAGE, payload="hi")
    assert (missing.recorded, missing.error) == (False, ErrorCode.TASK_NOT_FOUND)
    other_goal = await store.create_task(task, "another goal")
    assert (other_goal.recorded, other_goal.error) == (False, ErrorCode.TASK_EXISTS)

    # Remove.
    retention = HistoryRetention(
        client, project_id, "planner-1", graph=graph, task_queue=task_queue
    )
    redacted = await retention.redact_event(ids[1])
    assert redacted.recorded and redacted.affected_decision_ids == [decided.event.id]
    assert (await store.list_events(task)).events[1].payload == ""
    deleted = await retention.delete_task(task, include_decisions=True)
    assert deleted.recorded and deleted.affected_decision_ids == [decided.event.id]
    assert not (await store.get_task(task)).found
    reused = await store.create_task(task, "Make the failing test pass")
    assert (reused.recorded, reused.error) == (False, ErrorCode.TASK_EXISTS)
