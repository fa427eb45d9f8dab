"""The Neo4j mirror and the cross-task reads, against the real Neo4j and Temporal."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from neo4j import AsyncManagedTransaction, unit_of_work
from neo4j.exceptions import Neo4jError
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.exceptions import ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from agent_tasks.activities.mirror import MirrorActivities, mirror_failure
from agent_tasks.activities.rebuild import RebuildReport, rebuild
from agent_tasks.contract import (
    Event,
    EventInput,
    MirrorInput,
    StepState,
    StepView,
    StepWrite,
)
from agent_tasks.contract.errors import (
    MIRROR_DATA_ERROR,
    MIRROR_UNAVAILABLE,
    GraphDataError,
    GraphUnavailable,
)
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.models import StepFilter, TaskFilter, ToolFailures
from agent_tasks.taskgraph.neo4j.driver import NEO4J_TRANSACTION_TIMEOUT_S, OUT_OF_TIME_CODES
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from tests.conftest import eventually, mirrored


async def mixed_writes(history: ConversationHistory, task: str) -> None:
    await history.create_task(task, "mixed", metadata={"model": "m-1"})
    await history.record_events(
        task,
        [
            EventInput(kind="message", role="user", payload="do it"),
            EventInput(kind="tool_call", name="bash", call_id="c1", payload='{"cmd":"ls"}'),
            EventInput(kind="tool_result", name="bash", call_id="c1", payload="x" * 40_000),
            EventInput(kind="message", role="assistant", payload="\u6f22\u5b57 \U0001f680 done"),
        ],
    )
    await history.set_steps(
        task,
        [
            StepWrite(step_name="call-1", state=StepState.COMPLETED, result_event_seq=3),
            StepWrite(step_name="call-2", state=StepState.UNKNOWN, kind="write"),
        ],
    )


async def graph_state(graph: TaskGraph, history: ConversationHistory, task: str):
    events = await graph.reads.events(history.project_id, history.workflow_id(task), 0, 10**9, 200)
    steps = [
        StepView.model_validate(row.model_dump())
        for row in await graph.reads.find_steps(history.project_id, StepFilter(limit=200))
        if row.task_name == task
    ]
    tasks = await graph.reads.find_tasks(history.project_id, TaskFilter(limit=200))
    return events, steps, {t.name: t for t in tasks}


async def test_neo4j_holds_exactly_what_the_workflow_holds(
    graph: TaskGraph, history: ConversationHistory
) -> None:
    await mixed_writes(history, "t")
    await history.finish_task("t", "done", result="fine")
    await mirrored(history, "t")
    events, steps, tasks = await graph_state(graph, history, "t")
    assert events == (await history.list_events("t")).events
    assert steps == (await history.list_steps("t")).steps
    view = (await history.get_task("t")).view
    assert view is not None
    node = tasks["t"]
    assert (node.status, node.goal, node.last_seq, node.agent_id) == (
        "done",
        "mixed",
        4,
        "agent-1",
    )
    assert node.metadata == {"model": "m-1"}
    assert node.created_at == view.created_at and node.updated_at == view.updated_at
    assert events[2].truncated and events[2].full_length == 40_000


async def test_graph_shape(graph: TaskGraph, history: ConversationHistory) -> None:
    await mixed_writes(history, "t")
    await mirrored(history, "t")
    counts = await graph.reads.counts(history.project_id)
    # 1 project, 1 task, 1 agent, 4 events, 2 steps; HAS_TASK 1, CREATED_BY 1, HAS_EVENT 4,
    # NEXT 3, AUTHORED_BY 4, HAS_STEP 2, RESULT 1 (only call-1 names a result event).
    assert counts == {
        "Project": 1,
        "Task": 1,
        "Agent": 1,
        "Event": 4,
        "Step": 2,
        "HAS_TASK": 1,
        "CREATED_BY": 1,
        "HAS_EVENT": 4,
        "NEXT": 3,
        "AUTHORED_BY": 4,
        "HAS_STEP": 2,
        "RESULT": 1,
    }


async def test_rerunning_a_mirror_batch_changes_nothing(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    await mixed_writes(history, "t")
    await mirrored(history, "t")
    before = await graph.reads.counts(history.project_id)
    events_before = await graph.reads.events(
        history.project_id, history.workflow_id("t"), 0, 99, 99
    )
    handle = client.get_workflow_handle(history.workflow_id("t"))
    run_id = (await handle.describe()).run_id
    outcome = await ActivityEnvironment().run(
        MirrorActivities(client, graph).mirror_task,
        MirrorInput(
            workflow_id=history.workflow_id("t"),
            run_id=run_id,
            after_seq=0,
            up_to_seq=4,
            after_write=0,
        ),
    )
    assert (outcome.events, outcome.steps) == (4, 2)
    assert await graph.reads.counts(history.project_id) == before
    assert (
        await graph.reads.events(history.project_id, history.workflow_id("t"), 0, 99, 99)
        == events_before
    )


async def test_twenty_tasks_share_one_agent_node(
    graph: TaskGraph, history: ConversationHistory
) -> None:
    names = [f"task-{i:02d}" for i in range(20)]
    await asyncio.gather(*(history.create_task(n, "g") for n in names))
    await asyncio.gather(*(history.record_event(n, "message", n) for n in names))
    for name in names:
        await mirrored(history, name)
    counts = await graph.reads.counts(history.project_id)
    assert counts["Agent"] == 1 and counts["Task"] == 20 and counts["Event"] == 20
    assert counts["AUTHORED_BY"] == 20 and counts["CREATED_BY"] == 20


async def test_large_integers_and_unicode_round_trip(
    graph: TaskGraph, history: ConversationHistory
) -> None:
    args = {"max": 2**63 - 1, "min": -(2**63) - 1, "big": 2**64, "s": "\u6f22\U0001f600"}
    text = json.dumps(args, ensure_ascii=False)
    await history.create_task("t", "g")
    await history.record_event("t", "tool_call", text, name="calc")
    await history.record_event("t", "message", "\u4e2d\u6587 \U0001f9e9 \u00e9\u0301")
    await mirrored(history, "t")
    stored = await graph.reads.events(history.project_id, history.workflow_id("t"), 0, 9, 9)
    assert stored[0].payload == text
    assert json.loads(stored[0].payload) == args
    assert stored[1].payload == "\u4e2d\u6587 \U0001f9e9 \u00e9\u0301"


async def test_wipe_and_rebuild_gives_the_same_graph(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    await mixed_writes(history, "a")
    await history.create_task("b", "child", parent="a")
    await history.record_event("b", "message", "hi")
    await history.finish_task("b", "failed", error="no")
    for name in ("a", "b"):
        await mirrored(history, name)
    before = await graph.reads.counts(history.project_id)
    snapshot = await graph_state(graph, history, "a")
    await graph.wipe_project(history.project_id)
    assert await graph.reads.counts(history.project_id) == {}
    report = await rebuild(client, graph, history.project_id)
    assert report == RebuildReport(tasks=2, runs=2, events=5, failed=[])
    assert await graph.reads.counts(history.project_id) == before
    assert await graph_state(graph, history, "a") == snapshot
    one = await rebuild(client, graph, history.project_id, "b")
    assert one == RebuildReport(tasks=1, runs=1, events=1, failed=[])
    assert await graph.reads.counts(history.project_id) == before


async def test_cross_task_reads(graph: TaskGraph, history: ConversationHistory) -> None:
    await history.create_task("root", "r")
    await history.create_task("kid-1", "k", parent="root")
    await history.create_task("kid-2", "k", parent="root")
    await history.create_task("grandkid", "k", parent="kid-1")
    for name in ("root", "kid-1", "kid-2"):
        seq = (await history.record_event(name, "tool_result", f"{name} out", name="bash")).seq
        state = "failed" if name != "kid-2" else "completed"
        await history.set_step(name, "s", state, result_event_seq=seq)
    await history.set_step("kid-2", "w", "unknown", kind="write")
    await history.finish_task("kid-2", "done")
    for name in ("root", "kid-1", "kid-2", "grandkid"):
        await mirrored(history, name)

    tree = await history.task_tree("root", depth=1)
    assert [(t.depth, t.name) for t in tree] == [(0, "root"), (1, "kid-1"), (1, "kid-2")]
    deep = await history.task_tree("root", depth=5)
    assert [t.name for t in deep] == ["root", "kid-1", "kid-2", "grandkid"]

    assert [t.name for t in await history.find_tasks(status="open")] == [
        "grandkid",
        "kid-1",
        "root",
    ]
    assert [t.name for t in await history.find_tasks(parent="root")] == ["kid-1", "kid-2"]
    page1 = await history.find_tasks(limit=2)
    page2 = await history.find_tasks(limit=2, after_name=page1[-1].name)
    assert [t.name for t in page1 + page2] == ["grandkid", "kid-1", "kid-2", "root"]

    failed = await history.find_events(kind="tool_result", failed_only=True)
    assert sorted(e.task_name for e in failed) == ["kid-1", "root"]
    assert await history.failed_tool_calls() == [
        ToolFailures(tool="bash", spellings=["bash"], failed=2, tasks=2)
    ]
    now = datetime.now(UTC)
    assert await history.find_events(since=now + timedelta(hours=1)) == []
    assert len(await history.find_events(until=now + timedelta(hours=1))) == 3
    unknown = await history.find_steps(state="unknown")
    assert [(s.task_name, s.step_name) for s in unknown] == [("kid-2", "w")]


async def test_events_are_equal_models(graph: TaskGraph, history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    await history.record_event("t", "message", "one", role="user")
    await mirrored(history, "t")
    (stored,) = await graph.reads.events(history.project_id, history.workflow_id("t"), 0, 1, 1)
    assert isinstance(stored, Event)
    assert stored.time.utcoffset() == timedelta(0)


async def test_rebuild_of_odd_names_and_bad_project_ids(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    odd = "quote\" back\\slash ' and #hash"
    await history.create_task(odd, "g")
    await history.record_event(odd, "message", "kept")
    await mirrored(history, odd)
    before = await graph.reads.counts(history.project_id)
    report = await rebuild(client, graph, history.project_id, odd)
    assert report == RebuildReport(tasks=1, runs=1, events=1, failed=[])
    assert await graph.reads.counts(history.project_id) == before
    assert await rebuild(client, graph, history.project_id, "no such task") == RebuildReport(
        tasks=0, runs=0, events=0, failed=[]
    )
    assert await graph.reads.counts(history.project_id) == before
    with pytest.raises(ValidationError):
        await rebuild(client, graph, "x' OR ProjectId != 'zz")


async def test_a_transaction_that_ran_out_of_time_is_retried_not_refused(
    graph: TaskGraph,
) -> None:
    """A real Neo4j transaction ended by its timeout is a client error to the driver
    (``is_retryable()`` False) but says the server was slow, not that the data is wrong: the
    adapter maps it to ``GraphUnavailable`` and the mirror retries it (``MirrorUnavailable``);
    a real syntax error is ``GraphDataError`` and stays ``MirrorDataError``."""

    async def slow(tx: AsyncManagedTransaction) -> None:
        await (await tx.run("UNWIND range(1, 100000000) AS x RETURN count(x)")).consume()

    async def wrong(tx: AsyncManagedTransaction) -> None:
        await (await tx.run("MERGE (n:Task {key: }) RETURN n")).consume()

    with pytest.raises(GraphUnavailable) as timed_out:  # raised as the session closes
        async with graph.runner.session() as session:
            await session.execute_write(unit_of_work(timeout=0.05)(slow))
    with pytest.raises(GraphDataError) as refused:
        async with graph.runner.session() as session:
            await session.execute_write(wrong)
    cause = timed_out.value.__cause__
    assert isinstance(cause, Neo4jError) and cause.code in OUT_OF_TIME_CODES
    assert not cause.is_retryable()
    passes = mirror_failure(timed_out.value, "task t seqs 1..2")
    assert (passes.type, passes.non_retryable) == (MIRROR_UNAVAILABLE, False)
    assert passes.category is ApplicationErrorCategory.BENIGN  # logged at DEBUG by the SDK
    assert passes.message.startswith(
        "graph store unavailable while mirroring task t seqs 1..2: Neo4j unavailable: "
    )
    data = mirror_failure(refused.value, "task t seqs 1..2")
    assert (data.type, data.non_retryable) == (MIRROR_DATA_ERROR, True)
    assert data.category is ApplicationErrorCategory.UNSPECIFIED  # a WARNING with its traceback


async def test_an_event_first_merged_as_a_step_results_placeholder_gets_its_author(
    graph: TaskGraph, history: ConversationHistory
) -> None:
    """A page whose step names a result event that a later page brings merges that event's
    node as a placeholder; the later page still links the event to its agent, once
    (``AUTHORED_BY`` is created with the event's content), and a page sent again adds none."""
    await history.create_task("t", "g")
    await history.record_events(
        "t", [EventInput(kind="message", payload=f"m{n}") for n in range(3)]
    )
    await history.set_step("t", "s", StepState.COMPLETED, result_event_seq=3)
    await mirrored(history, "t")
    view = (await history.get_task("t")).view
    events = (await history.list_events("t")).events
    steps = (await history.list_steps("t")).steps
    assert view is not None and [e.seq for e in events] == [1, 2, 3]
    key = history.workflow_id("t")
    await graph.driver.execute_query(  # as if event 3 had not been copied yet
        "MATCH (e:Event {key: $k}) DETACH DELETE e", k=f"{key}#3", database_=graph.database
    )
    await graph.write_task(view, events[:2], steps)  # the step's page: 3 is a placeholder
    placeholder = await graph.reads.counts(history.project_id)
    assert (placeholder["Event"], placeholder["AUTHORED_BY"]) == (3, 2)
    for _ in range(2):  # event 3's page, and the same page again
        await graph.write_task(view, events[2:], [])
    counts = await graph.reads.counts(history.project_id)
    assert (counts["Event"], counts["AUTHORED_BY"], counts["RESULT"]) == (3, 3, 1)
    linked = await graph.driver.execute_query(
        "MATCH (e:Event {key: $k})-[r:AUTHORED_BY]->(:Agent) RETURN count(r) AS n",
        k=f"{key}#3",
        database_=graph.database,
    )
    assert linked.records[0]["n"] == 1


async def test_a_mirror_attempt_that_waits_out_a_lock_is_retried_without_a_traceback(
    graph: TaskGraph, history: ConversationHistory, caplog: pytest.LogCaptureFixture
) -> None:
    """The cold start's fault: a mirror transaction that waits on a lock past Neo4j's
    transaction timeout (``NEO4J_TRANSACTION_TIMEOUT_S``) is ended by the server. Another
    transaction holds the task node's lock for longer than that: the attempt fails
    ``MirrorUnavailable`` of category ``BENIGN``, which the SDK logs at DEBUG with no WARNING
    and no traceback, and the next attempt copies the write once the lock is gone."""
    caplog.set_level(logging.DEBUG, logger="temporalio.activity")
    await history.create_task("t", "g")
    await mirrored(history, "t")
    key = history.workflow_id("t")
    async with graph.driver.session(database=graph.database) as session:
        lock = await session.begin_transaction()
        await lock.run("MATCH (t:Task {key: $k}) SET t.held = true", k=key)
        assert (await history.record_event("t", "message", "while held")).recorded

        def failed_attempts() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.getMessage().startswith("Completing activity")]

        async def attempt_failed() -> bool:
            return bool(failed_attempts())

        await eventually(attempt_failed, within=NEO4J_TRANSACTION_TIMEOUT_S + 20)
        await lock.rollback()
    await mirrored(history, "t", within=60)
    (failed, *_) = failed_attempts()
    assert failed.levelno == logging.DEBUG and MIRROR_UNAVAILABLE in str(failed.exc_info)
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in warned if r.name.startswith("temporalio")], warned
    events = await graph.reads.events(history.project_id, key, 0, 10, 10)
    assert [e.payload for e in events] == ["while held"]
