"""Faults that once lost a task for good, each as the whole kind (issue: no input, outage or
load wedges a task), against real servers: a long Neo4j outage in skipped time, content that
grows when encoded, many writers on one task, one writer's order across continue-as-new."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.config import connect
from agent_tasks.contract import StepState, StepWrite, TaskStatus, TaskView, sha256_hex
from agent_tasks.contract.errors import ErrorCode, TaskServiceUnavailable
from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS
from agent_tasks.devstack import find_temporal_binary
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.conftest import DEV_SERVER_ARGS, eventually, mirrored, private_dev_server
from tests.workflows.conftest import CONTINUE_AS_NEW_AT


@pytest.fixture
async def skipping_low_limit_env() -> AsyncIterator[WorkflowEnvironment]:
    """A private dev server with time skipping that suggests continue-as-new at 60 events."""
    env = await private_dev_server(
        lambda: WorkflowEnvironment.start_time_skipping_v2(
            dev_server_existing_path=str(find_temporal_binary()),
            data_converter=DATA_CONVERTER,
            search_attributes=SEARCH_ATTRIBUTE_KEYS,
            dev_server_extra_args=[*DEV_SERVER_ARGS, "--dynamic-config-value", CONTINUE_AS_NEW_AT],
        )
    )
    yield env
    await env.shutdown()


async def fast_forward(
    env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], by: timedelta
) -> None:
    """``env.fast_forward`` of the workflow clock ``by``, sent again while the task's new run
    has no workflow task yet (the server answers "Workflow task is not scheduled yet" right
    after continue-as-new)."""
    for _ in range(100):
        try:
            assert await env.fast_forward(handle, by)
            return
        except RPCError as err:
            if "not scheduled yet" not in err.message:
                raise
        await asyncio.sleep(0.1)
    raise AssertionError("the task's run never became ready to fast-forward")


async def test_a_12_hour_neo4j_outage_in_skipped_time(
    skipping_low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """Neo4j refusing every mirror write for more than 12 hours of workflow time while writes
    arrive (once, 47 failed calls in a row overflowed the pause and failed the task for good):
    every write is taken, the pause grows to 5 minutes and stays there, the task
    continues-as-new during the outage (it does not wait for the mirror), reads of earlier runs
    come from those runs, and once Neo4j takes writes again the mirror catches up with every
    event once.

    The outage is a database that does not exist, so each mirror call fails at once; a refused
    connection behaves the same for the workflow, but its three activity attempts wait 1 s and
    2 s of real time (``test_durability.py`` stops a real Neo4j for that path). The server
    skips each pause as it comes, so the test waits for 50 failed calls by count (about a
    second of real time each), then moves the clock past 12 hours in one step.
    """
    env = skipping_low_limit_env
    queue = f"outage-{uuid.uuid4().hex[:6]}"
    history = ConversationHistory(
        env.client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    handle = env.client.get_workflow_handle(history.workflow_id("t"))
    written: list[str] = []

    async def view() -> TaskView:
        found = (await history.get_task("t")).view
        assert found is not None
        return found

    async def failures_at_least(count: int) -> bool:
        return (await view()).mirror_failures >= count

    async with build_worker(env.client, TaskGraph(graph.driver, "no-such-database"), queue):
        await history.create_task("t", "outage")
        start = (await view()).created_at
        for round_ in range(10):
            batch = [f"r{round_}-{i}" for i in range(5)]
            for text in batch:
                assert (await history.record_event("t", "message", text)).recorded
            written += batch
            await eventually(partial(failures_at_least, 5 * (round_ + 1)), within=120)
        await fast_forward(env, handle, timedelta(hours=12))
        assert (await history.record_event("t", "message", "after 12 hours")).recorded
        written.append("after 12 hours")
        during = await view()
        assert during.mirror_failures >= 50 and during.mirror_error is not None
        assert during.updated_at - start >= timedelta(hours=12)
        assert during.runs > 1 and during.mirrored_seq == 0 and during.mirror_backlog
        # Reads of earlier runs do not wait for Neo4j: they come from those runs.
        assert [e.payload for e in await all_events(history, "t")] == written
    pauses = [
        event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        async for event in handle.fetch_history_events()
        if event.HasField("timer_started_event_attributes")
    ]
    assert pauses and set(pauses) == {timedelta(minutes=5)}  # a long outage's pause
    async with build_worker(env.client, graph, queue):

        async def caught_up() -> bool:
            try:
                return (await view()).unmirrored_writes == 0
            except TaskServiceUnavailable:  # the new worker has not polled yet
                return False

        await fast_forward(env, handle, timedelta(minutes=5))  # the pause in progress
        await eventually(caught_up, within=120)
        after = await view()
    assert (after.last_seq, after.mirrored_seq, after.mirror_error, after.mirror_backlog) == (
        51,
        51,
        None,
        [],
    )
    in_neo4j = await graph.reads.events(project_id, history.workflow_id("t"), 0, 10**6, 1000)
    assert [(e.seq, e.payload) for e in in_neo4j] == list(enumerate(written, start=1))
    counts = await graph.reads.counts(project_id)
    assert (counts["Event"], counts["NEXT"], counts["HAS_EVENT"]) == (51, 50, 51)


def utf16_read_as_latin1() -> str:
    """UTF-16 text decoded as Latin-1: every other character is NUL (6 bytes in JSON)."""
    return ("plain text " * 3_000).encode("utf-16-le").decode("latin-1")[:32_000]


def ansi_escapes() -> str:
    """Terminal output dense with ANSI colour escapes (ESC is a control character)."""
    return ("\x1b[31mE\x1b[0m\x1b[1m!\x1b[0m" * 3_000)[:32_000]


@pytest.mark.parametrize(
    "payload",
    ["\x01" * 32_000, utf16_read_as_latin1(), ansi_escapes()],
    ids=["control-characters", "utf16-as-latin1", "ansi-escapes"],
)
async def test_content_that_grows_when_encoded_stops_no_read_and_no_mirror(
    history: ConversationHistory, graph: TaskGraph, payload: str
) -> None:
    """25 events whose JSON is about six times their UTF-8 size (once 22 stopped the mirror
    for good and 11 broke list_events): one call writes them (split by encoded bytes), every
    read pages them under the payload budget, the mirror copies them all and the task
    finishes."""
    await history.create_task("t", "encoded size")
    written = await history.record_events("t", [{"kind": "tool_result", "payload": payload}] * 25)
    assert written.seqs == list(range(1, 26))
    page = await history.list_events("t", limit=200)
    assert page.events and [e.seq for e in page.events] == list(range(1, len(page.events) + 1))
    events = await all_events(history, "t")
    assert [e.seq for e in events] == list(range(1, 26))
    assert all(e.payload == payload and e.full_sha256 == sha256_hex(payload) for e in events)
    assert (await history.finish_task("t", "done")).recorded
    await mirrored(history, "t")
    done = await history.client.get_workflow_handle(
        history.workflow_id("t"), result_type=TaskView
    ).result()
    assert done.status is TaskStatus.DONE and done.mirrored_seq == 25
    in_neo4j = await graph.reads.events(history.project_id, history.workflow_id("t"), 0, 99, 99)
    assert [e.payload for e in in_neo4j] == [payload] * 25


@pytest.mark.load
async def test_200_concurrent_writers_on_one_task(
    history: ConversationHistory, task_queue: str
) -> None:
    """200 concurrent writes with distinct request ids, from one client and then spread over
    12 clients (so more than the server's 10 updates in flight per workflow, which it turns
    away): every one is recorded once."""
    await history.create_task("t", "crowd")
    texts = [f"one-client-{i}" for i in range(200)]
    results = await asyncio.gather(
        *(history.record_event("t", "message", text, request_id=text) for text in texts)
    )
    assert all(r.recorded and not r.duplicate for r in results), [
        r for r in results if not r.recorded or r.duplicate
    ][:3]
    assert sorted(r.seq or 0 for r in results) == list(range(1, 201))
    clients: list[Client] = [await connect() for _ in range(20)]
    crowd = [
        ConversationHistory(c, project_id=history.project_id, agent_id="a", task_queue=task_queue)
        for c in clients
    ]
    more = [f"many-clients-{i}" for i in range(200)]
    results = await asyncio.gather(
        *(crowd[i % 12].record_event("t", "message", t, request_id=t) for i, t in enumerate(more))
    )
    assert all(r.recorded and not r.duplicate for r in results), [
        r for r in results if not r.recorded or r.duplicate
    ][:3]
    assert sorted(r.seq or 0 for r in results) == list(range(201, 401))
    events = await all_events(history, "t")
    assert sorted(e.payload for e in events) == sorted(texts + more)


async def test_one_writers_order_holds_across_continue_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """50 writes sent 50 ms apart without waiting for each (the order promised: writes through
    one client to one task are applied in call order), while the task continues-as-new several
    times: each lands once, in the order sent."""
    client, queue = low_limit_env.client, "order"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue):
        await history.create_task("t", "order")
        sent: list[asyncio.Task[object]] = []
        started = time.perf_counter()
        for i in range(50):
            sent.append(asyncio.create_task(history.record_event("t", "message", f"m{i}")))
            await asyncio.sleep(max(0.0, started + (i + 1) * 0.05 - time.perf_counter()))
        await asyncio.gather(*sent)
        view = (await history.get_task("t")).view
        assert view is not None and view.runs > 1
        events = await all_events(history, "t")
        assert [e.payload for e in events] == [f"m{i}" for i in range(50)]
        await mirrored(history, "t")


@pytest.mark.load
async def test_ten_thousand_steps_across_continue_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """A long agent run: 10,000 steps in one task, which continues-as-new many times meanwhile
    (closed steps are carried as 10 bytes each, their records stay in the history and Neo4j).
    Every step reads back, in pages, with its state and result; the 10,001st is refused; a step
    failed in an earlier run is retried under a new idempotency key, and one completed in an
    earlier run stays final."""
    client, queue = low_limit_env.client, "steps"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    names = [f"step-{i:05d}" for i in range(10_000)]
    async with build_worker(client, graph, queue):
        await history.create_task("t", "long agent run")
        result = (await history.record_event("t", "tool_result", "out")).seq
        writes = [
            StepWrite(
                step_name=name,
                state=StepState.FAILED if i % 1000 == 0 else StepState.COMPLETED,
                result_event_seq=result,
            )
            for i, name in enumerate(names)
        ]
        assert (await history.set_steps("t", writes)).recorded

        async def continued() -> bool:
            view = (await history.get_task("t")).view
            return view is not None and view.runs > 1

        await eventually(continued)  # the steps are closed in an earlier run from here on
        over = await history.set_step("t", "step-10000", "completed")
        assert over.error is ErrorCode.STEP_LIMIT_REACHED
        retried = await history.set_step("t", "step-00000", "in_progress")
        assert retried.recorded
        final = await history.set_step("t", "step-00001", "in_progress")
        assert final.error is ErrorCode.INVALID_TRANSITION
        view = (await history.get_task("t")).view
        assert view is not None
        assert view.step_counts[StepState.COMPLETED] == 9_990
        assert view.step_counts[StepState.FAILED] == 9
        assert view.step_counts[StepState.IN_PROGRESS] == 1
        await mirrored(history, "t")
        steps = await all_steps(history, "t")
        assert [s.step_name for s in steps] == names
        expected = {
            name: (
                StepState.IN_PROGRESS
                if i == 0
                else StepState.FAILED
                if i % 1000 == 0
                else StepState.COMPLETED
            )
            for i, name in enumerate(names)
        }
        assert {s.step_name: s.state for s in steps} == expected
        first = steps[0]
        assert (first.attempt, first.result_event_seq) == (1, None)
        assert first.idempotency_key == f"{history.workflow_id('t')}/step-00000/1"
        assert all(s.result_event_seq == result for s in steps[1:])
        failed = await history.list_steps("t", state="failed", limit=500)
        assert [s.step_name for s in failed.steps] == [
            f"step-{i:05d}" for i in range(1000, 10_000, 1000)
        ]
