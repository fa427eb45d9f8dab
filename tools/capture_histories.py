"""Capture TaskWorkflow histories from real runs into ``tests/histories/`` for the replay tests.

    python -m tools.capture_histories [SCENARIO...] [--out DIR] [--force]
    python -m tools.capture_histories --list      # JSON: each scenario -> the files it writes

Old histories are never regenerated to make a test pass; they are the compatibility contract
with tasks already running. A history in ``tests/histories/`` records what a deployed worker
once did; a new worker must replay it without a ``NondeterminismError``, or tasks that are
running (and finished tasks that are queried, since a query replays the history) break when
the new worker takes them over. So this script refuses to overwrite an existing file unless
``--force`` is given, and ``--force`` is for a capture that went wrong before it was ever
committed, never for a history a test now fails on: when workflow code changes, guard the
change with ``workflow.patched(...)`` so the old histories still replay, and capture the new
behaviour under a new scenario name (a new file) next to the old ones.

Each scenario runs real tasks against the local stack (``TEMPORAL_ADDRESS``, ``NEO4J_URI``,
``NEO4J_PASSWORD``... from the environment, as ``config.Settings`` reads them) with
an in-process worker (``worker.build_worker``) on a private task queue, checks that the run
did what the scenario is about (refusal codes, duplicates, a continue-as-new...), waits until
the workflow is quiet (no workflow task or activity pending), and writes each captured run as
``<name>.json`` in Temporal's history JSON format (``WorkflowHistory.to_json()``, the format
``temporal workflow show --output json`` and the web UI download). The ``continue_as_new``
scenario starts a private dev server (the ``temporal`` CLI next to the Python executable, or
on ``PATH``) with ``limit.historyCount.suggestContinueAsNew`` lowered to
``CONTINUE_AS_NEW_SUGGESTED_AT`` events, so that Temporal suggests continue-as-new after a few
writes instead of 4,096 events.

Exit codes: 0 when every asked scenario was captured, 1 when a scenario's file exists (without
``--force``) or a scenario did not behave as expected, 2 on an unknown scenario name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import temporalio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import import_paths
from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.config import Settings, connect
from agent_tasks.contract import (
    EventInput,
    StepState,
    StepWrite,
    TaskStatus,
    TaskView,
    event_id,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS
from agent_tasks.devstack import find_temporal_binary
from agent_tasks.devstack.process import parse_host_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import WriteResult
from agent_tasks.taskgraph.neo4j.driver import open_driver
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.conftest import eventually, payload_texts

ROOT = Path(__file__).resolve().parents[1]
HISTORIES = ROOT / "tests" / "histories"
"""Where the replay tests read the histories from (the default ``--out``)."""
IMPORT_FILE = (
    ROOT / "examples" / "trajectories" / "swe-agent" / "sweagent__demo__humanevalfix-python-0.traj"
)
"""The small trajectory the ``import`` scenario imports."""
CONTINUE_AS_NEW_SUGGESTED_AT = 60
"""History length (events) at which the private server of ``continue_as_new`` suggests
continue-as-new (the production default is 4,096)."""
CONTINUE_AS_NEW_WRITERS = 4
CONTINUE_AS_NEW_WRITES = 20
"""Concurrent writers in ``continue_as_new`` and the events each records, one per update: far
past ``CONTINUE_AS_NEW_SUGGESTED_AT`` events, so that writes are in flight at the switch."""


class CaptureError(RuntimeError):
    """A scenario did not behave as it is meant to; nothing of it is written."""


@dataclass
class Stack:
    """What a scenario runs against: a client with the pydantic converter, the task graph,
    a worker already polling ``task_queue``, and the settings they came from."""

    client: Client
    graph: TaskGraph
    task_queue: str
    settings: Settings

    def history(self, scenario: str, session_id: str | None = None) -> ConversationHistory:
        """A ``ConversationHistory`` in a fresh project ``cap-{scenario}-{random}``."""
        project = f"cap-{scenario.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
        return ConversationHistory(
            self.client,
            project_id=project,
            agent_id="capture-agent",
            task_queue=self.task_queue,
            graph=self.graph,
            session_id=session_id,
        )


Captured = dict[str, WorkflowHistory]
"""File name (without ``.json``) -> the captured history of one run."""


@dataclass(frozen=True)
class Scenario:
    """A way of driving tasks, and the files (without ``.json``) it writes."""

    run: Callable[[Stack], Awaitable[Captured]]
    files: tuple[str, ...]
    about: str


# ------------------------------------------------------------------------------------ helpers


def expect(result: WriteResult, *, error: ErrorCode | None = None, **fields: object) -> None:
    """Raise ``CaptureError`` unless ``result`` has the ``error`` code (None: recorded) and
    the given field values."""
    if error is None and not result.recorded:
        raise CaptureError(f"write refused: {result.error} {result.message}")
    if error is not None and result.error is not error:
        raise CaptureError(f"expected {error.value}, got {result!r}")
    for name, value in fields.items():
        got = getattr(result, name)
        if got != value:
            raise CaptureError(f"expected {name}={value!r}, got {got!r} in {result!r}")


async def quiet(
    handle: WorkflowHandle[object, object],
    ready: Callable[[], Awaitable[bool]] | None = None,
    within: float = 60.0,
) -> None:
    """Wait until the workflow has no workflow task and no activity pending (or is closed)
    and ``ready()`` is true; polled every 100 ms.

    Raises:
        CaptureError: not within ``within`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        description = await handle.describe()
        raw = description.raw_description
        closed = description.close_time is not None
        idle = not raw.HasField("pending_workflow_task") and not raw.pending_activities
        if (closed or idle) and (ready is None or await ready()):
            return
        await asyncio.sleep(0.1)
    raise CaptureError(f"{handle.id} did not settle within {within} s")


def mirrored(history: ConversationHistory, task: str) -> Callable[[], Awaitable[bool]]:
    """A ``ready`` check for ``quiet``: the mirror has caught up with every write."""

    async def check() -> bool:
        view = (await history.get_task(task)).view
        return view is not None and view.unmirrored_writes == 0

    return check


async def fetch(
    history: ConversationHistory, task: str, run_id: str | None = None
) -> WorkflowHistory:
    """The history of ``task`` (its latest run, or ``run_id``), once the workflow is quiet."""
    handle = history.client.get_workflow_handle(history.workflow_id(task), run_id=run_id)
    return await handle.fetch_history()


async def first_two_runs(
    history: ConversationHistory, task: str
) -> tuple[WorkflowHistory, WorkflowHistory]:
    """The histories of the task's first run and of the run it continued as.

    Raises:
        CaptureError: the first run did not end in continue-as-new.
    """
    handle = history.client.get_workflow_handle(history.workflow_id(task))
    description = await handle.describe()
    first_run = description.raw_description.workflow_execution_info.first_run_id
    run1 = await fetch(history, task, first_run)
    last = run1.events[-1]
    if not last.HasField("workflow_execution_continued_as_new_event_attributes"):
        raise CaptureError("the first run did not end in continue-as-new")
    attributes = last.workflow_execution_continued_as_new_event_attributes
    return run1, await fetch(history, task, attributes.new_execution_run_id)


def event_types(history: WorkflowHistory) -> list[str]:
    """The history's event type names without the ``EVENT_TYPE_`` prefix."""
    return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]


async def history_length(history: ConversationHistory, task: str) -> int:
    """Events in the task's current run."""
    return len((await fetch(history, task)).events)


@asynccontextmanager
async def low_limit_stack(stack: Stack, queue_prefix: str) -> AsyncIterator[Stack]:
    """A private dev server that suggests continue-as-new at ``CONTINUE_AS_NEW_SUGGESTED_AT``
    events, as a ``Stack``: a client on it, the same task graph, a fresh task queue (no worker
    polls it yet)."""
    dynamic = f"limit.historyCount.suggestContinueAsNew={CONTINUE_AS_NEW_SUGGESTED_AT}"
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(find_temporal_binary()),
        search_attributes=SEARCH_ATTRIBUTE_KEYS,
        dev_server_extra_args=["--dynamic-config-value", dynamic],
        data_converter=DATA_CONVERTER,
    ) as env:
        target = env.client.service_client.config.target_host
        client = await connect(stack.settings, address=target)
        queue = f"{queue_prefix}-{uuid.uuid4().hex[:8]}"
        yield Stack(client, stack.graph, queue, stack.settings)


@contextmanager
def expected_activity_failures() -> Iterator[None]:
    """Silence the worker's warning for each failed activity (the failures a scenario causes)."""
    activity_log = logging.getLogger("temporalio.activity")
    level = activity_log.level
    activity_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        activity_log.setLevel(level)


# ---------------------------------------------------------------------------------- scenarios


async def create_scenario(stack: Stack) -> Captured:
    """A task created with every start field set (session, parent, metadata), mirrored."""
    history = stack.history("create", session_id="session-1")
    created = await history.create_task(
        "fix-issue-42",
        "Make the failing test pass",
        request_id="create-1",
        metadata={"model": "model-x", "source": "capture"},
        parent="planning",
    )
    expect(created, created=True)
    handle = stack.client.get_workflow_handle(history.workflow_id("fix-issue-42"))
    await quiet(handle, mirrored(history, "fix-issue-42"))
    return {"create": await fetch(history, "fix-issue-42")}


async def writes_scenario(stack: Stack) -> Captured:
    """Single and batched event writes and step writes through every step state."""
    history = stack.history("writes")
    task = "writes"
    expect(await history.create_task(task, "record events and steps"))
    expect(await history.record_event(task, "message", "run the tests", role="user"), first_seq=1)
    batch = await history.record_events(
        task,
        [
            EventInput(kind="reasoning", payload="the tests live in tests/"),
            EventInput(kind="tool_call", name="bash", call_id="c1", payload='{"cmd": "pytest"}'),
            EventInput(kind="tool_result", name="bash", call_id="c1", payload="1 failed"),
        ],
    )
    expect(batch, first_seq=2, last_seq=4)
    expect(await history.set_step(task, "run-tests", "in_progress", kind="tool"))
    expect(await history.set_step(task, "run-tests", "failed", result_event_seq=4))
    expect(await history.set_step(task, "run-tests", "in_progress"))
    expect(await history.set_step(task, "run-tests", "unknown"))
    expect(await history.set_step(task, "run-tests", "completed", result_event_seq=4))
    expect(
        await history.set_steps(
            task,
            [
                StepWrite(step_name="read-file", state=StepState.COMPLETED, kind="read"),
                StepWrite(step_name="ask-user", state=StepState.NOT_STARTED, kind="human"),
                StepWrite(step_name="ask-user", state=StepState.IN_PROGRESS),
            ],
        )
    )
    expect(await history.record_event(task, "message", "fixed", role="assistant"), first_seq=5)
    long_payload = "x" * 40_000  # cut to 32,000 characters on the client
    expect(await history.record_event(task, "tool_result", long_payload), first_seq=6)
    handle = stack.client.get_workflow_handle(history.workflow_id(task))
    await quiet(handle, mirrored(history, task))
    return {"writes": await fetch(history, task)}


async def refusals_scenario(stack: Stack) -> Captured:
    """Refused writes (which leave nothing in the history) between accepted writes."""
    history = stack.history("refusals")
    task = "refusals"
    expect(await history.create_task(task, "the goal", request_id="c1"))
    expect(await history.record_event(task, "message", "m", request_id="e1"), first_seq=1)
    expect(await history.set_step(task, "s", "in_progress", kind="write", request_id="s1"))
    before = await history_length(history, task)
    refusals = [
        (history.record_event(task, "message", "other", request_id="e1"), "request_id_reused"),
        (history.set_step(task, "s", "completed", result_event_seq=9), "event_not_found"),
        (history.set_step(task, "s", "in_progress"), "invalid_transition"),
        (history.set_step(task, "s", "failed", kind="read"), "step_kind_changed"),
        (history.create_task(task, "another goal", request_id="c2"), "task_exists"),
    ]
    for call, code in refusals:
        expect(await call, error=ErrorCode(code))
    if await history_length(history, task) != before:
        raise CaptureError("a refused write changed the history")
    expect(await history.record_event(task, "message", "accepted", request_id="e2"), first_seq=2)
    expect(await history.set_step(task, "s", "completed", result_event_seq=2))
    before = await history_length(history, task)
    expect(await history.set_step(task, "s", "in_progress"), error=ErrorCode.INVALID_TRANSITION)
    expect(
        await history.record_event(task, "message", "again", request_id="e2"),
        error=ErrorCode.REQUEST_ID_REUSED,
    )
    if await history_length(history, task) != before:
        raise CaptureError("a refused write changed the history")
    expect(await history.record_event(task, "message", "last", request_id="e3"), first_seq=3)
    handle = stack.client.get_workflow_handle(history.workflow_id(task))
    await quiet(handle, mirrored(history, task))
    return {"refusals": await fetch(history, task)}


async def duplicates_scenario(stack: Stack) -> Captured:
    """Request-id retries: create, event and step writes repeated, some concurrently; each
    is answered with the stored result and writes nothing."""
    history = stack.history("duplicates")
    task = "duplicates"
    expect(await history.create_task(task, "g", request_id="c1"), created=True)
    expect(await history.create_task(task, "g", request_id="c1"), created=True, duplicate=True)
    expect(await history.create_task(task, "g", request_id="c2"), created=False, duplicate=True)
    expect(await history.record_event(task, "message", "once", request_id="r1"), first_seq=1)
    expect(
        await history.record_event(task, "message", "once", request_id="r1"),
        first_seq=1,
        duplicate=True,
    )
    results = await asyncio.gather(
        *(history.record_event(task, "message", "many", request_id="conc") for _ in range(10))
    )
    if {r.seq for r in results} != {2} or sum(not r.duplicate for r in results) != 1:
        raise CaptureError(f"concurrent retries were not written once: {results}")
    expect(await history.set_step(task, "s", "completed", request_id="st1"))
    expect(await history.set_step(task, "s", "completed", request_id="st1"), duplicate=True)
    view = (await history.get_task(task)).view
    if view is None or view.last_seq != 2:
        raise CaptureError(f"duplicates wrote events: {view}")
    handle = stack.client.get_workflow_handle(history.workflow_id(task))
    await quiet(handle, mirrored(history, task))
    return {"duplicates": await fetch(history, task)}


async def finish_scenario(stack: Stack) -> Captured:
    """A task finished: the workflow completes once the mirror has caught up; a retried
    finish and a late write come after."""
    history = stack.history("finish")
    task = "finish"
    expect(await history.create_task(task, "g"))
    expect(await history.record_event(task, "tool_result", "all green"), first_seq=1)
    expect(await history.set_step(task, "check", "completed", result_event_seq=1))
    expect(await history.finish_task(task, "done", result="fixed in abc123", request_id="f1"))
    expect(await history.finish_task(task, "done", result="fixed in abc123", request_id="f1"))
    expect(await history.record_event(task, "message", "late"), error=ErrorCode.TASK_CLOSED)
    handle = stack.client.get_workflow_handle(history.workflow_id(task), result_type=TaskView)
    view = await handle.result()
    if view.status is not TaskStatus.DONE or view.unmirrored_writes != 0:
        raise CaptureError(f"the task did not complete as done and mirrored: {view}")
    captured = await fetch(history, task)
    if event_types(captured)[-1] != "WORKFLOW_EXECUTION_COMPLETED":
        raise CaptureError("the finished workflow did not complete")
    return {"finish": captured}


async def mirror_scenario(stack: Stack) -> Captured:
    """The mirror's scheduling since the ``mirror-without-debounce-timer`` patch: the patch
    marker, then a mirror call as soon as a write waits (no timer); batches written while a
    call is in flight are mirrored by the next call right after it. (``mirror.json`` holds
    the same scenario captured before the patch, with the 200 ms debounce timer.)"""
    history = stack.history("mirror")
    task = "mirror"
    handle = stack.client.get_workflow_handle(history.workflow_id(task))
    expect(await history.create_task(task, "g"))
    await quiet(handle, mirrored(history, task))
    expect(await history.record_event(task, "message", "one write"), first_seq=1)
    await quiet(handle, mirrored(history, task))
    batch = [EventInput(kind="note", payload=f"note {i}") for i in range(120)]
    expect(await history.record_events(task, batch), first_seq=2, last_seq=121)
    await quiet(handle, mirrored(history, task))
    results = [await history.record_events(task, batch) for _ in range(3)]
    expect(results[-1], last_seq=481)
    await quiet(handle, mirrored(history, task))
    captured = await fetch(history, task)
    types = event_types(captured)
    if (
        "TIMER_STARTED" in types
        or "MARKER_RECORDED" not in types
        or types.count("ACTIVITY_TASK_COMPLETED") < 4
    ):
        raise CaptureError(f"unexpected mirror scheduling: {types}")
    return {"mirror_at_once": captured}


async def mirror_follows_scenario(stack: Stack) -> Captured:
    """The mirror that follows its run (the ``mirror-follows-run`` patch): create, three
    single writes back to back and a batch of 120, all copied by one call; once the run was
    idle for ``MIRROR_FOLLOW_IDLE`` that call ends with its history position, a write starts
    the next call from there, and the finish ends it (the run ending) and the workflow."""
    history = stack.history("mirror_follows")
    task = "follows"
    handle = stack.client.get_workflow_handle(history.workflow_id(task))
    expect(await history.create_task(task, "g"))
    for i in range(3):
        expect(await history.record_event(task, "message", f"write {i}"), first_seq=i + 1)
    batch = [EventInput(kind="note", payload=f"note {i}") for i in range(120)]
    expect(await history.record_events(task, batch), first_seq=4, last_seq=123)
    await quiet(handle, mirrored(history, task))
    expect(await history.record_event(task, "message", "after the pause"), first_seq=124)
    expect(await history.finish_task(task, "done"))
    await handle.result()
    captured = await fetch(history, task)
    types = event_types(captured)
    inputs = [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for e in captured.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    if (
        "MARKER_RECORDED" not in types
        or [(i["follow"], bool(i["history_token"])) for i in inputs]
        != [(True, False), (True, True)]
        or types[-1] != "WORKFLOW_EXECUTION_COMPLETED"
    ):
        raise CaptureError(f"unexpected mirror calls: {types} {inputs}")
    return {"mirror_follows": captured}


async def mirror_failure_scenario(stack: Stack) -> Captured:
    """The mirror fails without retry (a worker configured with a Neo4j database that does
    not exist: ``DatabaseNotFound`` is a ``MirrorDataError``, not retried): the task shows
    ``mirror_error``, keeps accepting writes, and pauses (a timer) before the next call. The
    workflow is terminated after the capture (the captured history ends before that)."""
    broken = TaskGraph(stack.graph.driver, "no-such-database")
    queue = f"capture-broken-{uuid.uuid4().hex[:8]}"
    history = stack.history("mirror_failure")
    history.task_queue = queue
    task = "mirror-failure"
    handle = stack.client.get_workflow_handle(history.workflow_id(task))
    with expected_activity_failures():
        captured = await _fail_the_mirror(stack, broken, history, task, handle)
    await handle.terminate("history captured")
    types = event_types(captured)
    if "ACTIVITY_TASK_FAILED" not in types or types.count("TIMER_STARTED") < 2:
        raise CaptureError(f"the mirror did not fail and pause: {types}")
    return {"mirror_failure": captured}


async def _fail_the_mirror(
    stack: Stack,
    broken: TaskGraph,
    history: ConversationHistory,
    task: str,
    handle: WorkflowHandle[object, object],
) -> WorkflowHistory:
    async with build_worker(stack.client, broken, history.task_queue):
        expect(await history.create_task(task, "g"))

        async def failed() -> bool:
            view = (await history.get_task(task)).view
            return view is not None and view.mirror_error is not None

        await quiet(handle, failed)
        expect(await history.record_event(task, "message", "accepted while paused"), first_seq=1)

        async def written() -> bool:
            view = (await history.get_task(task)).view
            return view is not None and view.last_seq == 1

        await quiet(handle, written)
        return await fetch(history, task)


async def mirror_refused_scenario(stack: Stack) -> Captured:
    """A page the graph store refuses for its data (the ``mirror-refusal-closes`` patch): a
    node of another key holds the id of the task's first event, so the unique constraint on
    ``Event.id`` refuses its page; the mirror keeps the refusal in the store
    (``MirrorRefused``), and the finished task completes with it in its view. The blocking
    node and the refusal are removed after the capture."""
    history = stack.history("mirror_refused")
    task = "mirror-refused"
    workflow_id = history.workflow_id(task)
    expect(await history.create_task(task, "g"))
    block = {"key": workflow_id, "id": event_id(workflow_id, 1), "p": history.project_id}
    await stack.graph.records(_BLOCK_EVENT_ID, write=True, **block)
    try:
        with expected_activity_failures():
            expect(await history.record_event(task, "message", "refused"), first_seq=1)
            expect(await history.finish_task(task, "done", result="closed anyway"))
            handle = stack.client.get_workflow_handle(workflow_id, result_type=TaskView)
            view = await asyncio.wait_for(handle.result(), 90)
    finally:
        await stack.graph.records(_UNBLOCK_EVENT_ID, write=True, key=workflow_id)
        await stack.graph.records(_DROP_REFUSAL, write=True, key=workflow_id)
    if view.status is not TaskStatus.DONE or not view.unmirrored_writes:
        raise CaptureError(f"the task did not complete with its refusal: {view}")
    captured = await fetch(history, task)
    types = event_types(captured)
    if "ACTIVITY_TASK_FAILED" not in types or types[-1] != "WORKFLOW_EXECUTION_COMPLETED":
        raise CaptureError(f"the refused mirror did not let the task complete: {types}")
    return {"mirror_refused": captured}


_BLOCK_EVENT_ID: LiteralString = """
CREATE (:Event {key: $key + '#blocker', id: $id, project_id: $p, seq: -1, kind: 'note'})
"""
_UNBLOCK_EVENT_ID: LiteralString = "MATCH (e:Event {key: $key + '#blocker'}) DELETE e"
_DROP_REFUSAL: LiteralString = "MATCH (r:MirrorRefusal {key: $key}) DELETE r"


async def import_scenario(stack: Stack) -> Captured:
    """``cli.importer.import_paths`` of a small SWE-agent trajectory (create, one batch of
    events, one batch of steps, finish)."""
    history = stack.history("import")
    (report,) = await import_paths(history, [IMPORT_FILE])
    if report.error or report.task is None:
        raise CaptureError(f"import failed: {report}")
    handle = stack.client.get_workflow_handle(history.workflow_id(report.task))
    await handle.result()
    return {"import": await fetch(history, report.task)}


async def continue_as_new_scenario(stack: Stack) -> Captured:
    """Continue-as-new with writes in flight, on a private dev server that suggests it at
    ``CONTINUE_AS_NEW_SUGGESTED_AT`` events: four writers record 20 events each at once. The
    first run keeps accepting writes (and mirroring them) past the suggestion, continues-as-new
    once its handlers have finished and the mirror has caught up, and a write that arrives
    during the switch runs in the next run's first workflow task (state restored in
    ``@workflow.init``). A request id of the first run is then retried: deduplicated across
    runs, it writes nothing. Captures the first run and the run it continued as."""
    async with low_limit_stack(stack, "capture-can") as private:
        client, queue = private.client, private.task_queue
        async with build_worker(client, stack.graph, queue):
            history = private.history("continue_as_new")
            task = "long-task"
            expect(await history.create_task(task, "write past the suggested history length"))

            async def writer(name: str) -> list[WriteResult]:
                return [
                    await history.record_event(
                        task, "message", f"{name} {i}", request_id=f"{name}-{i}"
                    )
                    for i in range(CONTINUE_AS_NEW_WRITES)
                ]

            names = [f"w{k}" for k in range(CONTINUE_AS_NEW_WRITERS)]
            results = [r for rs in await asyncio.gather(*map(writer, names)) for r in rs]
            total = CONTINUE_AS_NEW_WRITERS * CONTINUE_AS_NEW_WRITES
            if sorted(r.seq or 0 for r in results) != list(range(1, total + 1)):
                raise CaptureError(f"seqs are not 1..{total}: {[r.seq for r in results]}")
            handle = client.get_workflow_handle(history.workflow_id(task))
            await quiet(handle, mirrored(history, task))
            again = await history.record_event(task, "message", "w0 0", request_id="w0-0")
            expect(again, duplicate=True, first_seq=results[0].seq)
            run1, run2 = await first_two_runs(history, task)
            if event_types(run2)[4:6] != [
                "WORKFLOW_EXECUTION_UPDATE_ACCEPTED",
                "WORKFLOW_EXECUTION_UPDATE_COMPLETED",
            ]:
                raise CaptureError(
                    "no write arrived during the switch (the second run's first workflow task "
                    "ran no update); this is timing: run the scenario again"
                )
            return {"continue_as_new_run1": run1, "continue_as_new_run2": run2}


async def backlog_scenario(stack: Stack) -> Captured:
    """Continue-as-new without waiting for the mirror (the ``continue-as-new-without-mirror``
    patch), on a private dev server that suggests it at ``CONTINUE_AS_NEW_SUGGESTED_AT``
    events: a worker whose Neo4j database does not exist fails every mirror call while events
    are written one by one until the first run continues-as-new with its writes unmirrored
    (``mirror_backlog``); one more event goes to the second run; a worker with the right
    database then lets the second run copy the first run's writes (querying the closed run)
    and its own. Captures both runs."""
    async with low_limit_stack(stack, "capture-backlog") as private:
        client, queue = private.client, private.task_queue
        history = private.history("backlog")
        task = "backlog-task"
        handle = client.get_workflow_handle(history.workflow_id(task))
        broken = TaskGraph(stack.graph.driver, "no-such-database")
        with expected_activity_failures():
            async with build_worker(client, broken, queue):
                expect(await history.create_task(task, "continue while Neo4j refuses"))
                seq = 0
                while (view := (await history.get_task(task)).view) is None or view.runs < 2:
                    seq += 1
                    expect(await history.record_event(task, "message", f"m{seq}"), first_seq=seq)
                    if seq > 100:
                        raise CaptureError("no continue-as-new after 100 writes")
                if not view.mirror_backlog:
                    raise CaptureError("the first run continued-as-new without a backlog")
                expect(await history.record_event(task, "message", "next run"), first_seq=seq + 1)
        async with build_worker(client, stack.graph, queue):
            await quiet(handle, mirrored(history, task))
        run1, run2 = await first_two_runs(history, task)
        if "ACTIVITY_TASK_COMPLETED" not in event_types(run2):
            raise CaptureError("the second run did not mirror the backlog")
        return {"backlog_run1": run1, "backlog_run2": run2}


async def agent_scenarios(stack: Stack) -> Captured:
    """Agent tasks on a worker with the agent tests' tools (``tests.agent_tools``):

    - ``agent_loop``: the tool-calling loop with a scripted model: two tool calls in one round
      (one succeeds, one names no tool and fails), a second round, the final answer;
    - ``agent_cancel``: a cancel request while a heartbeating tool runs: the tool sees the
      cancellation, the step ends ``unknown``, the task ``cancelled`` and the workflow closes
      as cancelled;
    - ``agent_failed`` and ``agent_resumed``: agent code whose third step fails (the task ends
      ``failed``), then the run ``resume`` starts, where the completed steps return their
      recorded results (read by an activity) and the failed one runs again."""
    import tempfile

    from agent_tasks.contract import AgentSpec, ModelSpec
    from tests.agent_tools import SCRIPTS, TOOL_NAMES, TOOLS, answer, calls

    queue = f"capture-agents-{uuid.uuid4().hex[:8]}"
    history = stack.history("agents")
    history.task_queue = queue
    model = ModelSpec(provider="scripted", model="from-goal")
    captured: Captured = {}
    with tempfile.TemporaryDirectory() as folder, expected_activity_failures():
        log = str(Path(folder) / "effects.log")
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
            turns = [
                calls(("echo", {"text": "hello"}), ("no_such_tool", {})),
                calls(("echo", {"text": "again"})),
                answer("two echoes"),
            ]
            goal = json.dumps([t.model_dump(mode="json") for t in turns])
            loop = AgentSpec(tools=TOOL_NAMES, model=model)
            expect(await history.create_task("loop", goal, agent=loop))
            await history.wait_task("loop")
            captured["agent_loop"] = await fetch(history, "loop")

            turns = [calls(("charge_card", {"log": log, "seconds": 300})), answer("never")]
            goal = json.dumps([t.model_dump(mode="json") for t in turns])
            expect(await history.create_task("cancel", goal, agent=loop))
            await quiet_until(lambda: Path(log).exists())
            expect(await history.cancel_task("cancel"))
            await history.wait_task("cancel")
            captured["agent_cancel"] = await fetch(history, "cancel")

            code = AgentSpec(name="three_steps", tools=TOOL_NAMES, input={"log": log + ".r"})
            expect(await history.create_task("resume", "three steps", agent=code))
            await history.wait_task("resume")
            handle = stack.client.get_workflow_handle(history.workflow_id("resume"))
            first_run = (await handle.describe()).run_id
            expect(await history.resume_task("resume"))
            await history.wait_task("resume")
            captured["agent_failed"] = await fetch(history, "resume", first_run)
            captured["agent_resumed"] = await fetch(history, "resume")
    return captured


async def steps_at_once_scenario(stack: Stack) -> Captured:
    """Agent code ``fan_out`` running six steps of the CPU-heavy ``burn`` at once, on a
    worker with the agent tests' tools: the calls and ``in_progress`` of all six in one
    workflow task, each tool activity carrying its arguments (no query), the results as they
    come, the mirror following the run throughout (one call), the task ``done``."""
    import tempfile

    from agent_tasks.contract import AgentSpec
    from tests.agent_tools import SCRIPTS, TOOLS

    queue = f"capture-fanout-{uuid.uuid4().hex[:8]}"
    history = stack.history("steps_at_once")
    history.task_queue = queue
    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "burn.log")
        spec = AgentSpec(name="fan_out", tools=["burn"], input={"steps": 6, "log": log})
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
            expect(await history.create_task("fan", "six at once", agent=spec))
            view = await history.wait_task("fan")
            if view is None or view.result is None or view.result.text != "6":
                raise CaptureError(f"the six steps did not complete: {view}")
            captured = await fetch(history, "fan")
    inputs = [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for e in captured.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "tool.burn"
    ]
    mirrors = [
        e
        for e in captured.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "mirror_task"
    ]
    if len(inputs) != 6 or not all(i["arguments"] for i in inputs) or len(mirrors) != 1:
        raise CaptureError(f"unexpected activities: {inputs} {len(mirrors)} mirror calls")
    return {"steps_at_once": captured}


async def human_scenarios(stack: Stack) -> Captured:
    """Input requests and child tasks, on a worker with the agent tests' tools:

    - ``input_early``: an answer sent by signal (twice, one request id) while the agent's first
      step runs, before it asks: kept, then taken when the question is asked;
    - ``input_answered``: a question answered by an invalid signal (recorded as rejected), an
      update refused (``input_invalid``, nothing recorded) and a valid update;
    - ``children_parent`` and ``children_child``: a parent spawning three recorded children,
      ended from outside (the last two together), and one child's own run, whose end it
      signals to the parent;
    - ``children_cancel``: a cancel of a parent waiting for two children: the cancel cascades
      and each child reports ``cancelled`` before the parent ends."""
    import tempfile

    from pydantic import JsonValue

    from agent_tasks.contract import AgentSpec
    from tests.agent_tools import SCRIPTS, TOOLS

    queue = f"capture-human-{uuid.uuid4().hex[:8]}"
    history = stack.history("human")
    history.task_queue = queue
    captured: Captured = {}

    async def view(task: str) -> TaskView:
        found = (await history.get_task(task)).view
        if found is None:
            raise CaptureError(f"no task {task!r}")
        return found

    async def until(task: str, check: Callable[[TaskView], bool]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not check(await view(task)):
            if loop.time() > deadline:
                raise CaptureError(f"task {task!r} not ready within 60 s")
            await asyncio.sleep(0.05)

    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "effects.log")
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
            early = AgentSpec(name="ask_later", tools=["sync_data"], input={"log": log})
            expect(await history.create_task("early", "deploy?", agent=early))
            approval: JsonValue = {"approved": True, "reviewer": "ann"}
            for _ in range(2):
                expect(await history.submit_input("early", approval, request_id="ann-1"))
            await history.wait_task("early")
            captured["input_early"] = await fetch(history, "early")

            positive = AgentSpec(
                name="ask_positive", tools=["sync_data", "echo"], input={"log": log + ".p"}
            )
            expect(await history.create_task("answered", "how many?", agent=positive))
            await until("answered", lambda v: bool(v.pending_inputs))
            asked = (await view("answered")).last_seq
            expect(await history.submit_input("answered", "abc"))
            await until("answered", lambda v: v.last_seq > asked)  # recorded as rejected
            expect(await history.respond("answered", 0), error=ErrorCode.INPUT_INVALID)
            expect(await history.respond("answered", 5))
            await history.wait_task("answered")
            captured["input_answered"] = await fetch(history, "answered")

            fanout = AgentSpec(name="fanout", input={"children": 3})
            expect(await history.create_task("parent", "three children", agent=fanout))
            await until("parent", lambda v: v.status is TaskStatus.AWAITING_CHILDREN)
            expect(await history.finish_task("parent/c0", "done", result="zero"))
            ends = await asyncio.gather(
                history.finish_task("parent/c1", "done"),
                history.finish_task("parent/c2", "failed", error="broke"),
            )
            for end in ends:
                expect(end)
            await history.wait_task("parent")
            captured["children_parent"] = await fetch(history, "parent")
            captured["children_child"] = await fetch(history, "parent/c0")

            fanout = AgentSpec(name="fanout", input={"children": 2})
            expect(await history.create_task("cancel", "two children", agent=fanout))
            await until("cancel", lambda v: v.status is TaskStatus.AWAITING_CHILDREN)
            expect(await history.cancel_task("cancel"))
            final = await history.wait_task("cancel")
            if final is None or final.status is not TaskStatus.CANCELLED:
                raise CaptureError("the parent did not end cancelled")
            captured["children_cancel"] = await fetch(history, "cancel")
    return captured


async def lifecycle_scenarios(stack: Stack) -> Captured:
    """The one cancellation rule, answers bound to requests and child tasks in every order
    (the ``one-cancellation-rule``, ``answers-bound-to-requests`` and ``tool-specs-by-activity``
    patches, workflow tasks applied as one batch), on a worker with the agent tests' tools:

    - ``cancel_rule_tool``: a cancel while a tool without heartbeats (``plain_wait``) runs: the
      tool runs to its end, its step is recorded ``completed``, no model call follows, the task
      ends ``cancelled``;
    - ``cancel_rule_input``: a cancel while the agent waits for an answer: the request is closed
      (an ``input_closed`` note), the task ends ``cancelled``;
    - ``answers_bound``: ``two_questions``: an answer without an id while nothing is open (a
      2 s step runs)
      (rejected), ``q1`` timing out to its default, a late answer to it (recorded ``late``),
      ``q2`` answered by update;
    - ``spawn_taken``: a spawn whose workflow id a task created from outside holds (the child
      recorded ``failed``, ``SpawnRefused`` in the agent), the other child, then a cancel whose
      cascade reaches only that one;
    - ``children_reconciled``: the run ``resume`` starts for a parent cancelled without the
      cascade while a child ended: the ``child_ends`` activity finds that child's end first."""
    import tempfile

    from agent_tasks.contract import AgentSpec, ModelSpec
    from tests.agent_tools import SCRIPTS, TOOL_NAMES, TOOLS, answer, calls

    queue = f"capture-lifecycle-{uuid.uuid4().hex[:8]}"
    history = stack.history("lifecycle")
    history.task_queue = queue
    loop = AgentSpec(tools=TOOL_NAMES, model=ModelSpec(provider="scripted", model="from-goal"))
    captured: Captured = {}

    async def until(task: str, check: Callable[[TaskView], bool]) -> None:
        async def ready() -> bool:
            found = (await history.get_task(task)).view
            return found is not None and check(found)

        loop_ = asyncio.get_running_loop()
        deadline = loop_.time() + 60
        while not await ready():
            if loop_.time() > deadline:
                raise CaptureError(f"task {task!r} not ready within 60 s")
            await asyncio.sleep(0.05)

    async def ended(task: str, status: TaskStatus) -> None:
        final = await history.wait_task(task)
        if final is None or final.status is not status:
            raise CaptureError(f"task {task!r} did not end {status.value}: {final!r}")

    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "effects.log")
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
            turns = [calls(("plain_wait", {"log": log, "seconds": 3})), answer("never")]
            goal = json.dumps([t.model_dump(mode="json") for t in turns])
            expect(await history.create_task("tool", goal, agent=loop))
            await quiet_until(lambda: Path(log).exists())
            expect(await history.cancel_task("tool"))
            await ended("tool", TaskStatus.CANCELLED)
            captured["cancel_rule_tool"] = await fetch(history, "tool")

            positive = AgentSpec(name="ask_positive", tools=TOOL_NAMES, input={"log": log + ".p"})
            expect(await history.create_task("input", "how many?", agent=positive))
            await until("input", lambda v: bool(v.pending_inputs))
            expect(await history.cancel_task("input"))
            await ended("input", TaskStatus.CANCELLED)
            captured["cancel_rule_input"] = await fetch(history, "input")

            two = AgentSpec(
                name="two_questions", tools=TOOL_NAMES, input={"before_s": 2, "timeout_s": 2}
            )
            expect(await history.create_task("bound", "two questions", agent=two))
            expect(await history.submit_input("bound", "nothing is open"))
            await until("bound", lambda v: "q1" in v.closed_inputs)
            expect(await history.submit_input("bound", "late", input_id="q1"))
            expect(
                await history.respond("bound", "late", input_id="q1"), error=ErrorCode.INPUT_CLOSED
            )
            await until("bound", lambda v: [r.input_id for r in v.pending_inputs] == ["q2"])
            expect(await history.respond("bound", "second", input_id="q2"))
            await ended("bound", TaskStatus.DONE)
            captured["answers_bound"] = await fetch(history, "bound")

            expect(await history.create_task("taken/c0", "a task created from outside"))
            expect(await history.create_task("taken", "spawn", agent=AgentSpec(name="spawn_taken")))
            await until("taken", lambda v: v.status is TaskStatus.AWAITING_CHILDREN)
            expect(await history.cancel_task("taken"))
            await ended("taken", TaskStatus.CANCELLED)
            captured["spawn_taken"] = await fetch(history, "taken")
            expect(await history.finish_task("taken/c0", "done"))

            fanout = AgentSpec(name="fanout", input={"children": 2})
            expect(await history.create_task("parent", "two children", agent=fanout))
            await until("parent", lambda v: v.status is TaskStatus.AWAITING_CHILDREN)
            expect(await history.cancel_task("parent", cascade=False))
            await ended("parent", TaskStatus.CANCELLED)
            expect(await history.finish_task("parent/c0", "done", result="zero"))
            await ended("parent/c0", TaskStatus.DONE)
            expect(await history.resume_task("parent"))
            await until("parent", lambda v: v.children["c0"].status is TaskStatus.DONE)
            expect(await history.finish_task("parent/c1", "done", result="one"))
            await ended("parent", TaskStatus.DONE)
            captured["children_reconciled"] = await fetch(history, "parent")
    return captured


async def turn_scenarios(stack: Stack) -> Captured:
    """The turn rules (the ``turn-rules``, ``unknown-stays-unknown``, ``tool-call-bounds`` and
    ``progress-before-parking`` patches), on a worker with the agent tests' tools:

    - ``turn_failed`` and ``turn_resumed``: the tool loop over its round budget (the run fails,
      a ``run_failed`` and a ``rolled_back`` note), then the run ``resume_task`` starts, whose
      model is shown the turn without the rolled-back events;
    - ``turn_continued``: the run ``continue_task`` starts after a cancel during a heartbeating
      tool (its step ``unknown``): the model asked again, the tool not run again;
    - ``step_retried``: agent code whose step times out (``unknown``) and which retries it
      explicitly (``AgentContext.retry``: a decision, the same idempotency key);
    - ``tool_call_bounds``: a model turn calling a tool with no name and one with arguments
      past the bound: both steps fail without running;
    - ``branch_continued``: a branch of a finished tool-loop task at its first tool result:
      the copy in pages, then the agent's continuation."""
    import tempfile

    from agent_tasks.contract import AgentSpec, Budgets, ModelSpec, ModelTurn
    from tests.agent_tools import SCRIPTS, TOOL_NAMES, TOOLS, answer, calls

    queue = f"capture-turns-{uuid.uuid4().hex[:8]}"
    history = stack.history("turns")
    history.task_queue = queue
    model = ModelSpec(provider="scripted", model="from-goal")
    captured: Captured = {}

    def goal(*turns: ModelTurn) -> str:
        return json.dumps([t.model_dump(mode="json") for t in turns])

    async def ended(task: str, status: TaskStatus) -> None:
        final = await history.wait_task(task)
        if final is None or final.status is not status:
            raise CaptureError(f"task {task!r} did not end {status.value}: {final!r}")

    with tempfile.TemporaryDirectory() as folder, expected_activity_failures():
        log = str(Path(folder) / "effects.log")
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
            echoes = [calls(("echo", {"text": str(i)})) for i in range(3)]
            loop = AgentSpec(tools=TOOL_NAMES, model=model, budgets=Budgets(max_rounds=2))
            expect(await history.create_task("failed", goal(*echoes, answer("x")), agent=loop))
            await ended("failed", TaskStatus.FAILED)
            handle = stack.client.get_workflow_handle(history.workflow_id("failed"))
            first_run = (await handle.describe()).run_id
            expect(await history.resume_task("failed"))
            await ended("failed", TaskStatus.FAILED)
            captured["turn_failed"] = await fetch(history, "failed", first_run)
            captured["turn_resumed"] = await fetch(history, "failed")

            loop = AgentSpec(tools=TOOL_NAMES, model=model)
            turns = [calls(("charge_card", {"log": log, "seconds": 300})), answer("left as is")]
            expect(await history.create_task("continued", goal(*turns), agent=loop))
            await quiet_until(lambda: Path(log).exists())
            expect(await history.cancel_task("continued"))
            await ended("continued", TaskStatus.CANCELLED)
            expect(await history.continue_task("continued"))
            await ended("continued", TaskStatus.DONE)
            captured["turn_continued"] = await fetch(history, "continued")

            retry = AgentSpec(name="retry_unknown", tools=TOOL_NAMES, input={"log": log + ".r"})
            expect(await history.create_task("retried", "retry", agent=retry))
            await ended("retried", TaskStatus.DONE)
            captured["step_retried"] = await fetch(history, "retried")

            bounds = AgentSpec(
                tools=TOOL_NAMES, model=ModelSpec(provider="scripted", model="call-bounds")
            )
            expect(await history.create_task("bounds", "call badly", agent=bounds))
            await ended("bounds", TaskStatus.DONE)
            captured["tool_call_bounds"] = await fetch(history, "bounds")

            three = [calls(("echo", {"text": "a"})), calls(("echo", {"text": "b"})), answer("end")]
            expect(await history.create_task("source", goal(*three), agent=loop))
            await ended("source", TaskStatus.DONE)
            page = await history.list_events("source")
            point = next(e.seq for e in page.events if e.kind.value == "tool_result")
            expect(await history.branch_from("source", point, "branch"))
            await ended("branch", TaskStatus.DONE)
            captured["branch_continued"] = await fetch(history, "branch")
    return captured


async def branch_reuse_scenario(stack: Stack) -> Captured:
    """The ``branch-reuses-before-point`` patch: agent code ``ask_positive`` (a step, a question
    answered 5, a step) run to its end, then branched right after its answer
    (``branch_reused``): the copy, the ``branch_reuse`` activity (the source's settled step and
    its answer), the ``set_steps`` write and the ``branch_reused`` note, then the agent run
    from the top: the first step and the question memoized (no tool activity, no request), the
    last step run."""
    import tempfile

    from agent_tasks.contract import AgentSpec
    from tests.agent_tools import SCRIPTS, TOOLS

    queue = f"capture-branch-{uuid.uuid4().hex[:8]}"
    history = stack.history("branch")
    history.task_queue = queue
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "prepare.log"
        agent = AgentSpec(name="ask_positive", tools=["sync_data", "echo"], input={"log": str(log)})
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
            expect(await history.create_task("source", "ask", agent=agent))
            await history.wait_task("source", until=TaskStatus.AWAITING_INPUT)
            expect(await history.respond("source", 5, input_id="n"))
            await history.wait_task("source")
            page = await history.list_events("source")
            point = next(e.seq for e in page.events if e.kind.value == "input_response")
            expect(await history.branch_from("source", point, "branch"))
            final = await history.wait_task("branch")
            if final is None or final.result is None or final.result.text != "using 5":
                raise CaptureError(f"the branch did not end with the source's answer: {final!r}")
            if len(log.read_text(encoding="utf-8").splitlines()) != 1:
                raise CaptureError("the branch ran the step its source had completed")
            return {"branch_reused": await fetch(history, "branch")}


async def branch_child_scenario(stack: Stack) -> Captured:
    """The ``branch-reuses-before-point`` patch with a child: agent code ``fanout`` with one
    recorded child finished from outside, then branched after the child's ``child_result``
    (``branch_reused_child``): the ``branch_reuse`` activity's result carries the child, the
    agent's ``spawn`` starts no child workflow and its wait reads the recorded end."""
    from agent_tasks.contract import AgentSpec
    from tests.agent_tools import SCRIPTS, TOOLS

    queue = f"capture-branch-child-{uuid.uuid4().hex[:8]}"
    history = stack.history("branch_child")
    history.task_queue = queue
    async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
        agent = AgentSpec(name="fanout", input={"children": 1})
        expect(await history.create_task("source", "one child", agent=agent))

        async def spawned() -> bool:
            return (await history.get_task("source/c0")).view is not None

        await eventually(spawned, within=60)
        expect(await history.finish_task("source/c0", "done", result="built"))
        await history.wait_task("source")
        page = await history.list_events("source")
        point = next(e.seq for e in page.events if e.kind.value == "child_result")
        expect(await history.branch_from("source", point, "branch"))
        final = await history.wait_task("branch")
        if final is None or final.result is None or final.result.text != "c0=done":
            raise CaptureError(f"the branch did not reuse the child's end: {final!r}")
        if (await history.get_task("branch/c0")).view is not None:
            raise CaptureError("the branch started a second child")
        return {"branch_reused_child": await fetch(history, "branch")}


async def long_ids_scenario(stack: Stack) -> Captured:
    """The ``bounded-workflow-ids`` patch: in a project whose id has 64 characters, agent code
    ``fanout`` of a task named with 180 characters spawns one recorded child (its name has
    183), whose plain workflow id passes 255 characters; the child is finished from outside.
    ``long_ids_parent``: the marker and ``StartChildWorkflowExecution`` with the bounded id;
    ``long_ids_child``: its run, the marker and ``SignalExternalWorkflowExecution`` to the
    parent's bounded id."""
    from agent_tasks.contract import MAX_WORKFLOW_ID, AgentSpec
    from tests.agent_tools import SCRIPTS, TOOLS

    queue = f"capture-long-ids-{uuid.uuid4().hex[:8]}"
    project = "cap-long-ids-" + "p" * 43 + uuid.uuid4().hex[:8]
    history = ConversationHistory(
        stack.client, project, "capture-agent", task_queue=queue, graph=stack.graph
    )
    parent, child = "p" * 180, "p" * 180 + "/c0"
    async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
        agent = AgentSpec(name="fanout", input={"children": 1})
        expect(await history.create_task(parent, "one child", agent=agent))

        async def spawned() -> bool:
            return (await history.get_task(child)).view is not None

        await eventually(spawned, within=60)
        expect(await history.finish_task(child, "done", result="built"))
        final = await history.wait_task(parent)
        if final is None or final.result is None or final.result.text != "c0=done":
            raise CaptureError(f"the parent did not take its child's end: {final!r}")
        child_id = history.workflow_id(child)
        if len(child_id) != MAX_WORKFLOW_ID or child_id.startswith(history.workflow_id(parent)):
            raise CaptureError(f"the child's id is not the bounded one: {child_id!r}")
        return {
            "long_ids_parent": await fetch(history, parent),
            "long_ids_child": await fetch(history, child),
        }


async def cancel_after_end_scenario(stack: Stack) -> Captured:
    """The ``cancel-after-end`` patch: the agent ``leave`` ends ``done`` while its two recorded
    children run, then a cancel request (``cancel_after_end``): the patch's marker, the
    ``cancel_after_end`` note, ``RequestCancelExternalWorkflowExecution`` per child, their
    ``cancelled`` ends by signal, the last mirror and the workflow completing (not cancelled)
    with the task ``done``."""
    from agent_tasks.contract import AgentSpec
    from tests.agent_tools import SCRIPTS, TOOLS

    queue = f"capture-after-end-{uuid.uuid4().hex[:8]}"
    history = stack.history("after_end")
    history.task_queue = queue
    async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
        expect(await history.create_task("t", "leave two", agent=AgentSpec(name="leave")))

        async def done() -> bool:
            view = (await history.get_task("t")).view
            return view is not None and view.status is TaskStatus.DONE

        await eventually(done, within=60)
        await quiet(history.client.get_workflow_handle(history.workflow_id("t")))
        expect(await history.cancel_task("t"))
        final = await history.wait_task("t")
        if final is None or final.status is not TaskStatus.DONE:
            raise CaptureError(f"the task did not stay done: {final!r}")
        handle = stack.client.get_workflow_handle(history.workflow_id("t"))
        status = (await handle.describe()).status
        if status is None or status.name != "COMPLETED":
            raise CaptureError(f"its workflow closed {status}")
        return {"cancel_after_end": await fetch(history, "t")}


async def cancel_after_end_kept_scenario(stack: Stack) -> Captured:
    """The ``cancel-after-end`` patch without cascade: the agent ``leave`` ends ``done`` while
    its two recorded children run, then a cancel with ``cascade=False``
    (``cancel_after_end_kept``): the ``keep_children`` signal, the cancel request, the
    patch's marker and the ``cancel_after_end`` note, then the task waiting for its children
    as before: both finished from outside, their ends by signal, the workflow completing."""
    from agent_tasks.contract import AgentSpec
    from tests.agent_tools import SCRIPTS, TOOLS

    queue = f"capture-kept-{uuid.uuid4().hex[:8]}"
    history = stack.history("kept")
    history.task_queue = queue
    async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
        expect(await history.create_task("t", "leave two", agent=AgentSpec(name="leave")))

        async def done() -> bool:
            view = (await history.get_task("t")).view
            return view is not None and view.status is TaskStatus.DONE

        await eventually(done, within=60)
        handle = stack.client.get_workflow_handle(history.workflow_id("t"))
        await quiet(handle)
        expect(await history.cancel_task("t", cascade=False))
        await quiet(handle)
        for key in ("a", "b"):
            expect(await history.finish_task(f"t/{key}", "done"))
        final = await history.wait_task("t")
        if final is None or final.status is not TaskStatus.DONE:
            raise CaptureError(f"the task did not stay done: {final!r}")
        status = (await handle.describe()).status
        if status is None or status.name != "COMPLETED":
            raise CaptureError(f"its workflow closed {status}")
        return {"cancel_after_end_kept": await fetch(history, "t")}


async def app_lifecycle_scenario(stack: Stack) -> Captured:
    """A recorded task whose app runs it (``workflows.lifecycle``, the Tasks API): status
    ``in_progress``, an input request asked from outside, a refused and an accepted answer
    (back to ``queued``), a child spawned from outside and its own run, ``awaiting_children``
    until the child ends (back to ``queued``), then ``done``."""
    history = stack.history("app_lifecycle", session_id="session-1")
    expect(await history.create_task("parent", "release"))
    expect(await history.set_status("parent", TaskStatus.IN_PROGRESS))
    expect(await history.request_input("parent", "replicas", "How many?", {"type": "integer"}))
    expect(await history.respond("parent", "three"), error=ErrorCode.INPUT_INVALID)
    expect(await history.respond("parent", 3))
    expect(await history.spawn_child("parent", "eu", "parent-eu", "deploy eu"))
    expect(await history.set_status("parent", TaskStatus.AWAITING_CHILDREN))
    expect(await history.finish_task("parent-eu", "done", result="eu deployed"))
    handle = history.client.get_workflow_handle(history.workflow_id("parent"))

    async def queued() -> bool:
        view = (await history.get_task("parent")).view
        return view is not None and view.status is TaskStatus.QUEUED

    await quiet(handle, queued)
    expect(await history.finish_task("parent", "done", result="released"))
    await history.wait_task("parent")
    await history.wait_task("parent-eu")
    return {
        "app_lifecycle": await fetch(history, "parent"),
        "app_lifecycle_child": await fetch(history, "parent-eu"),
    }


async def approvals_scenario(stack: Stack) -> Captured:
    """Approval before a tool runs (the ``tool-approval`` patch), on a worker with the tools
    of ``tests.approval_tools``: one model turn of five calls, run one after the other: a mail
    accepted, a mail edited, a payment its predicate lets run unasked, a mail answered
    instead, a mail ignored; then the model's answer."""
    import tempfile

    from pydantic import JsonValue

    from tests.approval_tools import (
        APPROVAL_SCRIPTS,
        APPROVAL_TOOLS,
        approval_spec,
        effects,
        goal,
    )

    queue = f"capture-approvals-{uuid.uuid4().hex[:8]}"
    history = stack.history("approvals")
    history.task_queue = queue
    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "effects.log")
        mail: dict[str, JsonValue] = {"log": log, "to": "ops@example.com", "subject": "s"}
        calls = [("send_mail", mail)] * 2 + [("pay", {"log": log, "amount": 5})]
        calls += [("send_mail", mail)] * 2
        choices: list[dict[str, JsonValue]] = [
            {"choice": "accept"},
            {"choice": "edit", "arguments": {**mail, "to": "team@example.com"}},
            {"choice": "answer", "text": "done by hand"},
            {"choice": "ignore"},
        ]
        async with build_worker(
            stack.client, stack.graph, queue, tools=APPROVAL_TOOLS, scripts=APPROVAL_SCRIPTS
        ):
            expect(await history.create_task("approvals", goal(*calls), agent=approval_spec()))
            for choice in choices:
                await quiet_until_asked(history, "approvals")
                view = (await history.get_task("approvals")).view
                assert view is not None
                (request,) = view.pending_inputs
                arguments = choice.get("arguments")
                text = choice.get("text")
                expect(
                    await history.approve(
                        "approvals",
                        request.input_id,
                        choice["choice"],  # type: ignore[arg-type]
                        arguments=arguments if isinstance(arguments, dict) else None,
                        text=text if isinstance(text, str) else None,
                    )
                )
            final = await history.wait_task("approvals")
            if final is None or final.status is not TaskStatus.DONE:
                raise CaptureError("the approvals task did not end done")
            if sum(" mail " in line for line in effects(Path(log))) != 2:
                raise CaptureError("two mails should have run (accepted and edited)")
    return {"approval_choices": await fetch(history, "approvals")}


async def ignore_reason_scenario(stack: Stack) -> Captured:
    """The ``ignore-with-reason`` patch: a mail ignored with a reason; the patch's marker, the
    step ``failed`` with ``IGNORED`` and the reason as its result, no tool activity, then the
    model's answer."""
    import tempfile

    from tests.approval_tools import APPROVAL_SCRIPTS, APPROVAL_TOOLS, approval_spec, goal

    queue = f"capture-ignore-{uuid.uuid4().hex[:8]}"
    history = stack.history("ignore")
    history.task_queue = queue
    with tempfile.TemporaryDirectory() as folder:
        mail = {"log": str(Path(folder) / "effects.log"), "to": "ops@example.com", "subject": "s"}
        async with build_worker(
            stack.client, stack.graph, queue, tools=APPROVAL_TOOLS, scripts=APPROVAL_SCRIPTS
        ):
            created = await history.create_task(
                "ignored", goal(("send_mail", mail)), agent=approval_spec()
            )
            expect(created)
            await quiet_until_asked(history, "ignored")
            view = (await history.get_task("ignored")).view
            assert view is not None
            (request,) = view.pending_inputs
            reason = "wrong list: ask me for the right one"
            expect(await history.approve("ignored", request.input_id, "ignore", text=reason))
            final = await history.wait_task("ignored")
            if final is None or final.result is None or reason not in final.result.text:
                raise CaptureError(f"the model was not told the reason: {final!r}")
    return {"approval_ignore_reason": await fetch(history, "ignored")}


async def approval_bound_scenario(stack: Stack) -> Captured:
    """The ``approval-bound-to-call`` patch: one model turn of two calls, run one after the
    other: a ``wire`` (two approvers, an hour's expiry) accepted by ann, a stale accept by bob
    refused (nothing in the history), then bob's accept with the digest; then a
    ``page_oncall`` whose request expires after 2 s unanswered; then the model's answer."""
    import tempfile

    from tests.approval_tools import (
        APPROVAL_SCRIPTS,
        APPROVAL_TOOLS,
        approval_spec,
        effects,
        goal,
    )

    queue = f"capture-bound-{uuid.uuid4().hex[:8]}"
    history = stack.history("bound")
    history.task_queue = queue

    def person(name: str) -> ConversationHistory:
        return as_person(stack, history, name)

    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "effects.log")
        page = {"log": log, "to": "oncall@example.com", "subject": "disk full"}
        calls: list[tuple[str, dict[str, Any]]] = [
            ("wire", {"log": log, "amount": 500}),
            ("page_oncall", page),
        ]
        async with build_worker(
            stack.client, stack.graph, queue, tools=APPROVAL_TOOLS, scripts=APPROVAL_SCRIPTS
        ):
            expect(await history.create_task("bound", goal(*calls), agent=approval_spec()))
            await quiet_until_asked(history, "bound")
            view = (await history.get_task("bound")).view
            assert view is not None
            (first,) = view.pending_inputs
            expect(await person("ann").approve("bound", first.input_id, "accept"))
            second = f"{first.input_id}-2"

            async def asked_again() -> bool:
                found = (await history.get_task("bound")).view
                return found is not None and any(r.input_id == second for r in found.pending_inputs)

            await quiet(
                history.client.get_workflow_handle(history.workflow_id("bound")), asked_again
            )
            stale = await person("bob").approve("bound", second, "accept", digest="0" * 64)
            expect(stale, error=ErrorCode.APPROVAL_STALE)
            expect(await person("bob").approve("bound", second, "accept"))
            final = await history.wait_task("bound")
            if final is None or final.result is None or "expired" not in final.result.text:
                raise CaptureError(f"the page call should have expired: {final!r}")
            if sum(" wire 500" in line for line in effects(Path(log))) != 1:
                raise CaptureError("the wire should have run once")
    return {"approval_bound": await fetch(history, "bound")}


async def one_person_scenario(stack: Stack) -> Captured:
    """The ``one-person-one-approver`` patch: a ``wire`` (two approvers) accepted by ann; the
    same person's accept as ``"ANN "`` by signal is recorded rejected (the marker), by update
    as ``"Ann"`` refused (nothing in the history); bob's accept runs it once."""
    import tempfile

    from tests.approval_tools import (
        APPROVAL_SCRIPTS,
        APPROVAL_TOOLS,
        approval_spec,
        effects,
        goal,
    )

    queue = f"capture-one-person-{uuid.uuid4().hex[:8]}"
    history = stack.history("one_person")
    history.task_queue = queue

    def person(name: str) -> ConversationHistory:
        return as_person(stack, history, name)

    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "effects.log")
        async with build_worker(
            stack.client, stack.graph, queue, tools=APPROVAL_TOOLS, scripts=APPROVAL_SCRIPTS
        ):
            wire = goal(("wire", {"log": log, "amount": 500}))
            expect(await history.create_task("one", wire, agent=approval_spec()))
            await quiet_until_asked(history, "one")
            view = (await history.get_task("one")).view
            assert view is not None
            (first,) = view.pending_inputs
            assert first.approval is not None and first.approval.digest is not None
            expect(await person("ann").approve("one", first.input_id, "accept"))
            second = f"{first.input_id}-2"
            handle = history.client.get_workflow_handle(history.workflow_id("one"))

            async def asked_again() -> bool:
                found = (await history.get_task("one")).view
                return found is not None and any(r.input_id == second for r in found.pending_inputs)

            await quiet(handle, asked_again)
            accept: dict[str, Any] = {"type": "accept", "digest": first.approval.digest}
            expect(await person("ANN ").submit_input("one", accept, input_id=second))

            async def rejected() -> bool:
                events = (await history.list_events("one", limit=200)).events
                return any(e.name == "rejected" for e in events)

            await quiet(handle, rejected)
            again = await person("Ann").approve("one", second, "accept")
            expect(again, error=ErrorCode.APPROVER_REPEATED)
            expect(await person("bob").approve("one", second, "accept"))
            final = await history.wait_task("one")
            if final is None or final.status is not TaskStatus.DONE:
                raise CaptureError(f"the task should have ended done: {final!r}")
            if sum(" wire 500" in line for line in effects(Path(log))) != 1:
                raise CaptureError("the wire should have run once")
    return {"one_person": await fetch(history, "one")}


async def answers_by_deadline_scenario(stack: Stack) -> Captured:
    """The ``answers-by-deadline`` patch: a ``reboot`` whose request expires after 10 s; the
    worker stops before the deadline, an accept comes by signal 4 s after it, then a worker
    starts: the workflow sees the answer before the timer in one workflow task, records it
    late (the marker) and closes the request at the timer; the call never runs."""
    import tempfile
    from datetime import UTC, datetime

    from tests.approval_tools import (
        APPROVAL_SCRIPTS,
        APPROVAL_TOOLS,
        approval_spec,
        effects,
        goal,
    )

    queue = f"capture-deadline-{uuid.uuid4().hex[:8]}"
    history = stack.history("deadline")
    history.task_queue = queue

    def worker() -> Any:
        return build_worker(
            stack.client, stack.graph, queue, tools=APPROVAL_TOOLS, scripts=APPROVAL_SCRIPTS
        )

    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "effects.log")
        async with worker():
            call = goal(("reboot", {"log": log, "host": "db-1"}))
            expect(await history.create_task("late", call, agent=approval_spec()))
            await quiet_until_asked(history, "late")
            view = (await history.get_task("late")).view
            assert view is not None
            (request,) = view.pending_inputs
        ask = request.approval
        assert request.deadline is not None and ask is not None and ask.digest is not None
        if datetime.now(UTC) >= request.deadline:
            raise CaptureError("the worker stopped after the deadline")
        await asyncio.sleep((request.deadline - datetime.now(UTC)).total_seconds() + 4)
        accept: dict[str, Any] = {"type": "accept", "digest": ask.digest}
        expect(await history.submit_input("late", accept, input_id=request.input_id))
        async with worker():
            final = await history.wait_task("late")
            if final is None or final.result is None or "expired" not in final.result.text:
                raise CaptureError(f"the request should have expired: {final!r}")
            events = (await history.list_events("late", limit=200)).events
            if [e.name for e in events if e.kind.value == "input_response"] != ["late"]:
                raise CaptureError("the accept should have been recorded late")
            if effects(Path(log)):
                raise CaptureError("the call should never have run")
    return {"answers_by_deadline": await fetch(history, "late")}


async def same_call_scenario(stack: Stack) -> Captured:
    """``same_call_continued`` (the ``same-call-same-key`` patch): the tool loop's
    ``charge_card`` (not idempotent, holding its first run of a key) cancelled while it runs
    (its step ``unknown``), then the run ``continue_task`` starts, whose model calls
    ``charge_card`` again with the same arguments: the call runs as a retry of the unknown step,
    under its key (the tool's log holds that key twice, no other), then the answer."""
    import tempfile

    from agent_tasks.contract import AgentSpec, ModelSpec
    from tests.agent_tools import SCRIPTS, TOOL_NAMES, TOOLS, answer, calls

    queue = f"capture-same-{uuid.uuid4().hex[:8]}"
    history = stack.history("same_call")
    history.task_queue = queue
    with tempfile.TemporaryDirectory() as folder, expected_activity_failures():
        log = Path(folder) / "effects.log"
        charge = ("charge_card", {"log": str(log), "seconds": 300})
        turns = [calls(charge), calls(charge), answer("charged once")]
        goal = json.dumps([t.model_dump(mode="json") for t in turns])
        loop = AgentSpec(tools=TOOL_NAMES, model=ModelSpec(provider="scripted", model="from-goal"))
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS, scripts=SCRIPTS):
            expect(await history.create_task("same", goal, agent=loop))
            await quiet_until(log.exists)
            expect(await history.cancel_task("same"))
            final = await history.wait_task("same")
            if final is None or final.status is not TaskStatus.CANCELLED:
                raise CaptureError(f"the task did not end cancelled: {final!r}")
            expect(await history.continue_task("same"))
            final = await history.wait_task("same")
            if final is None or final.status is not TaskStatus.DONE:
                raise CaptureError(f"the continued task did not end done: {final!r}")
            keys = log.read_text(encoding="utf-8").splitlines()
            if len(keys) != 2 or len(set(keys)) != 1:
                raise CaptureError(f"the call did not run again under its key: {keys}")
            return {"same_call_continued": await fetch(history, "same")}


async def open_calls_scenario(stack: Stack) -> Captured:
    """The ``resume-open-calls`` patch, on a private dev server that suggests continue-as-new
    at ``CONTINUE_AS_NEW_SUGGESTED_AT`` events: the tool loop's one call of ``wire`` (two
    approvers) accepted by ann; stale answers by signal (each recorded rejected) grow the run
    until it continues as new while the second request waits; then bob's accept. Captures the
    first run (the marker, the turn's calls carried) and the run it continued as (the call
    resumed on the same request before the model is called again)."""
    import tempfile

    from tests.approval_tools import (
        APPROVAL_SCRIPTS,
        APPROVAL_TOOLS,
        approval_spec,
        effects,
        goal,
    )

    async with low_limit_stack(stack, "capture-open-calls") as private:
        history = private.history("open_calls")

        def person(name: str) -> ConversationHistory:
            return ConversationHistory(
                private.client,
                project_id=history.project_id,
                agent_id=name,
                task_queue=private.task_queue,
                graph=stack.graph,
            )

        with tempfile.TemporaryDirectory() as folder:
            log = str(Path(folder) / "effects.log")
            async with build_worker(
                private.client,
                stack.graph,
                private.task_queue,
                tools=APPROVAL_TOOLS,
                scripts=APPROVAL_SCRIPTS,
            ):
                text = goal(("wire", {"log": log, "amount": 500}))
                expect(await history.create_task("wire", text, agent=approval_spec()))
                await quiet_until_asked(history, "wire")
                view = (await history.get_task("wire")).view
                assert view is not None
                (first,) = view.pending_inputs
                expect(await person("ann").approve("wire", first.input_id, "accept"))
                second = f"{first.input_id}-2"
                stale: dict[str, Any] = {"type": "accept", "digest": "0" * 64}

                async def continued() -> bool:
                    found = (await history.get_task("wire")).view
                    return found is not None and found.runs >= 2

                await quiet(history.client.get_workflow_handle(history.workflow_id("wire")))
                for _ in range(30):  # about 4 history events each: past the suggestion
                    if await continued():
                        break
                    expect(await person("bob").submit_input("wire", stale, input_id=second))
                await eventually(continued, within=60)
                expect(await person("bob").approve("wire", second, "accept"))
                final = await history.wait_task("wire")
                if final is None or final.status is not TaskStatus.DONE:
                    raise CaptureError(f"the task should have ended done: {final!r}")
                if sum(" wire 500" in line for line in effects(Path(log))) != 1:
                    raise CaptureError("the wire should have run once")
        run1, run2 = await first_two_runs(history, "wire")
    return {"open_calls_run1": run1, "open_calls_run2": run2}


def as_person(stack: Stack, history: ConversationHistory, name: str) -> ConversationHistory:
    """``history``'s project and task queue, writing as the person ``name`` (an approver)."""
    return ConversationHistory(
        stack.client,
        project_id=history.project_id,
        agent_id=name,
        task_queue=history.task_queue,
        graph=stack.graph,
    )


async def quiet_until_asked(history: ConversationHistory, task: str) -> None:
    """Wait until ``task`` has an open approval request and its workflow is quiet."""
    handle = history.client.get_workflow_handle(history.workflow_id(task))

    async def asked() -> bool:
        view = (await history.get_task(task)).view
        return view is not None and any(r.approval for r in view.pending_inputs)

    await quiet(handle, asked)


async def parked_scenario(stack: Stack) -> Captured:
    """The ``park-on-suggestion`` patch, on a private dev server that suggests continue-as-new
    at ``CONTINUE_AS_NEW_SUGGESTED_AT`` events: the ``counter`` agent (40 rounds of one echo
    step, a checkpoint before each) starts while Neo4j is held (a proxy that lets no new
    connection through), so the run loop sits in its first mirror call; the agent parks at its
    first checkpoint past the suggestion all the same; once Neo4j answers, the next run goes on
    from its state. Captures the first run and the run it continued as."""
    from agent_tasks.contract import AgentSpec
    from agent_tasks.worker import open_graph
    from tests.agent_tools import SCRIPTS, TOOLS
    from tests.tcp_proxy import TcpProxy

    host, port = parse_host_port(stack.settings.neo4j_uri, 7687)
    async with (
        low_limit_stack(stack, "capture-parked") as private,
        TcpProxy(host, port).running() as proxy,
    ):
        through = stack.settings.model_copy(update={"neo4j_uri": f"bolt://127.0.0.1:{proxy.port}"})
        async with open_graph(through, schema=True) as graph:
            assert isinstance(graph, TaskGraph)
            held = Stack(private.client, graph, private.task_queue, stack.settings)
            history = held.history("parked")
            plain = ConversationHistory(  # a sealed task would store its key in Neo4j first
                private.client,
                project_id=history.project_id,
                agent_id=history.agent_id,
                task_queue=private.task_queue,
            )
            async with build_worker(
                private.client, graph, private.task_queue, tools=TOOLS, scripts=SCRIPTS
            ):
                proxy.hold(new=True)
                counter = AgentSpec(name="counter", tools=["echo"], input={"rounds": 40})
                expect(await plain.create_task("counter", "count", agent=counter))

                async def continued() -> bool:
                    view = (await plain.get_task("counter")).view
                    return view is not None and view.runs >= 2

                await eventually(continued, within=60)
                proxy.release()
                await history.wait_task("counter")
        run1, run2 = await first_two_runs(plain, "counter")
        if len(run1.events) > CONTINUE_AS_NEW_SUGGESTED_AT + 30:
            raise CaptureError(f"the first run ran {len(run1.events)} events past the suggestion")
        return {"parked_run1": run1, "parked_run2": run2}


async def quiet_until(check: Callable[[], bool], within: float = 60.0) -> None:
    """Wait (polling every 50 ms) until ``check()`` is true.

    Raises:
        CaptureError: not within ``within`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise CaptureError(f"not ready within {within} s")
        await asyncio.sleep(0.05)


async def sealed_decisions_scenario(stack: Stack) -> Captured:
    """Sealed event text and decisions: events written by a client with a key store (each
    text sealed under its own data key: ``sealed``, ``key_id``), a step, a decision citing
    two events (one by id) and the step, a decision refused for a step the task lacks (it
    leaves nothing), then the task finished."""
    history = stack.history("sealed_decisions")
    task = "sealed"
    expect(await history.create_task(task, "decide from sealed events"))
    first = await history.record_event(task, "tool_call", '{"cmd": "env"}', name="bash")
    expect(first, first_seq=1)
    leak = await history.record_event(task, "tool_result", "TOKEN=secret", name="bash")
    expect(leak, first_seq=2)
    if leak.event is None or leak.event.key_id is None:
        raise CaptureError(f"the event was not sealed: {leak!r}")
    expect(await history.set_step(task, "read-env", "completed", kind="read", result_event_seq=2))
    decided = await history.record_decision(
        task, "use the token", cites_events=[1, leak.event.id], cites_steps=["read-env"]
    )
    expect(decided, first_seq=3)
    handle = stack.client.get_workflow_handle(history.workflow_id(task))
    await quiet(handle, mirrored(history, task))
    before = await history_length(history, task)
    refused = await history.record_decision(task, "x", cites_steps=["no-such-step"])
    expect(refused, error=ErrorCode.STEP_NOT_FOUND)
    if await history_length(history, task) != before:
        raise CaptureError("a refused decision changed the history")
    expect(await history.finish_task(task, "done", result="decided"))
    await handle.result()
    captured = await fetch(history, task)
    if "TOKEN=secret" in payload_texts(captured.to_json()):
        raise CaptureError("plain text in the history")
    return {"sealed_decisions": captured}


@contextmanager
def openai_at(url: str) -> Iterator[None]:
    """The ``openai`` provider's environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``) pointed
    at the tests' model server at ``url`` while the block runs, then as it was."""
    before = {name: os.environ.get(name) for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    os.environ.update(OPENAI_BASE_URL=url, OPENAI_API_KEY="capture-key")
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def echo_loop_done(
    stack: Stack, name: str, goal: str, replies: Sequence[Any]
) -> tuple[ConversationHistory, list[dict[str, Any]]]:
    """Run task ``t`` of the tool loop (tool ``echo``) whose ``openai`` model answers
    ``replies`` from the tests' model server, until it ends ``done``; its history and the
    requests the model got.

    Raises:
        CaptureError: the task did not end ``done``.
    """
    from agent_tasks.contract import AgentSpec, ModelSpec
    from tests.agent_tools import TOOLS
    from tests.model_server import ModelServer

    queue = f"capture-{name.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    history = stack.history(name)
    history.task_queue = queue
    server = ModelServer(list(replies))
    with openai_at(server.url), server.running():
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS):
            model = ModelSpec(provider="openai", model="m", stream=False)
            spec = AgentSpec(tools=["echo"], model=model)
            expect(await history.create_task("t", goal, agent=spec))
            final = await history.wait_task("t")
    if final is None or final.status is not TaskStatus.DONE:
        raise CaptureError(f"the task did not end done: {final!r}")
    return history, server.requests


async def model_mistake_scenario(stack: Stack) -> Captured:
    """An answer the model call cannot take (``ModelTurn.mistake``): the tool loop with an
    ``openai`` model answering from the tests' scripted server (``tests.model_server``) with
    four calls of 40,000 control characters each (over the payload budget with each cut), then
    a final answer (``model_mistake``): the model activity's turn without calls, its message,
    the user message telling the model why, the second model call, the answer, ``done``."""
    from tests.model_server import Reply, completion

    calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "echo", "arguments": "\x01" * 40_000},
        }
        for i in range(4)
    ]
    replies = [Reply(body=completion(tool_calls=calls)), Reply(body=completion("smaller now"))]
    history, requests = await echo_loop_done(stack, "model_mistake", "answer too large", replies)
    if len(requests) != 2:
        raise CaptureError(f"the model was called {len(requests)} times")
    return {"model_mistake": await fetch(history, "t")}


async def cut_arguments_scenario(stack: Stack) -> Captured:
    """Arguments over the event bound, cut by the model call with their full length and
    SHA-256 (``ToolCall.arguments_full_length``): the tool loop with an ``openai`` model
    answering from the tests' scripted server (``tests.model_server``) with one call of
    100,000 characters of arguments, then a final answer (``cut_arguments``): the call's event
    records the full length and digest, its step fails naming the real length (no tool
    activity), the second model call, the answer, ``done``."""
    from tests.model_server import Reply, completion

    arguments = json.dumps({"text": "x" * 100_000})
    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": arguments}}
    replies = [Reply(body=completion(tool_calls=[call])), Reply(body=completion("shorter now"))]
    history, requests = await echo_loop_done(stack, "cut_arguments", "arguments too long", replies)
    told = [m["content"] for m in requests[1]["messages"] if m["role"] == "tool"]
    if told != [
        f"the call's arguments are {len(arguments):,} characters; a tool call's "
        "arguments are at most 32,000: the tool was not run"
    ]:
        raise CaptureError(f"the model was told {told!r}")
    return {"cut_arguments": await fetch(history, "t")}


async def model_cancel_scenario(stack: Stack) -> Captured:
    """The ``model-call-cancel`` patch: the tool loop with an ``openai`` model streaming from
    the tests' scripted server (``tests.model_server``, a chunk every 0.1 s for a minute), a
    cancel while it streams (``model_cancel``): the patch's marker, the model activity scheduled
    with its heartbeat timeout, the cancel request, the workflow waiting for the activity's
    ``ActivityTaskCanceled`` (it closed its HTTP request) before the task's ``cancelled`` and
    the workflow's end."""
    from agent_tasks.contract import AgentSpec, ModelSpec
    from tests.agent_tools import TOOLS
    from tests.model_server import ModelServer, Reply, chunk

    queue = f"capture-model-cancel-{uuid.uuid4().hex[:8]}"
    history = stack.history("model_cancel")
    history.task_queue = queue
    chunks = [chunk(content=f"w{i} ") for i in range(600)] + [chunk(finish="stop")]
    server = ModelServer([Reply(chunks=chunks, chunk_delay_s=0.1)])
    with openai_at(server.url), server.running(), expected_activity_failures():
        async with build_worker(stack.client, stack.graph, queue, tools=TOOLS):
            model = ModelSpec(provider="openai", model="m", stream=True)
            spec = AgentSpec(tools=["echo"], model=model)
            expect(await history.create_task("t", "count to 600", agent=spec))
            await quiet_until(lambda: bool(server.exchanges) and server.exchanges[0].sent >= 5)
            expect(await history.cancel_task("t"))
            final = await history.wait_task("t")
            if final is None or final.status is not TaskStatus.CANCELLED:
                raise CaptureError(f"the task was not cancelled: {final!r}")
            await quiet_until(lambda: server.exchanges[0].closed_early)
            if server.exchanges[0].sent >= len(chunks):
                raise CaptureError("the model's stream was read to its end")
            return {"model_cancel": await fetch(history, "t")}


async def mcp_scenario(stack: Stack) -> Captured:
    """MCP servers as tool sources (``activities.mcp``): the tool loop with a scripted model
    over the tests' MCP server (``tests.mcp_server``, over stdio): the server's listing by an
    activity, a call of ``bill_charge`` run by ``mcp_call_tool`` (completed), a call of
    ``bill_refuse`` (the server's error: the step failed), the answer."""
    from agent_tasks.contract import AgentSpec, McpServer, ModelSpec
    from tests.agent_tools import SCRIPTS, answer, calls

    queue = f"capture-mcp-{uuid.uuid4().hex[:8]}"
    history = stack.history("mcp")
    history.task_queue = queue
    server = McpServer(
        name="bill", command=sys.executable, args=["-m", "tests.mcp_server", "/dev/null", "stdio"]
    )
    spec = AgentSpec(mcp_servers=[server], model=ModelSpec(provider="scripted", model="from-goal"))
    turns = [
        calls(("bill_charge", {"account": "acme", "cents": 5})),
        calls(("bill_refuse", {"reason": "declined"})),
        answer("charged once"),
    ]
    goal = json.dumps([t.model_dump(mode="json") for t in turns])
    with expected_activity_failures():
        async with build_worker(stack.client, stack.graph, queue, scripts=SCRIPTS):
            expect(await history.create_task("mcp", goal, agent=spec))
            await history.wait_task("mcp")
            return {"mcp_call": await fetch(history, "mcp")}


async def mcp_list_cancel_scenario(stack: Stack) -> Captured:
    """``mcp_list_cancelled`` (the ``mcp-list-cancel`` patch): an agent over the tests' MCP
    server (over stdio) started with ``MCP_TEST_START_DELAY_S`` of 600, so its listing waits;
    the task is cancelled meanwhile: the listing (scheduled with a heartbeat timeout) is asked
    to cancel and ends cancelled, the task ``cancelled``."""
    return {"mcp_list_cancelled": await _slow_mcp_server_cancelled(stack, stateful=False)}


async def mcp_open_cancel_scenario(stack: Stack) -> Captured:
    """``mcp_open_cancelled`` (the ``mcp-open-cancel`` patch): as ``mcp_list_cancelled`` with
    the server ``stateful``: its session's open (``mcp_open_session``, scheduled with a
    heartbeat timeout) waits, is asked to cancel and ends cancelled, the task ``cancelled``."""
    return {"mcp_open_cancelled": await _slow_mcp_server_cancelled(stack, stateful=True)}


async def _slow_mcp_server_cancelled(stack: Stack, *, stateful: bool) -> WorkflowHistory:
    """The history of a task whose agent's MCP server (the tests' own, over stdio, waiting 600 s
    before it serves) was cancelled while the run waited for it."""
    import tempfile

    from agent_tasks.contract import AgentSpec, McpServer, ModelSpec
    from tests.agent_tools import SCRIPTS, answer

    queue = f"capture-mcp-slow-{uuid.uuid4().hex[:8]}"
    history = stack.history("mcp")
    history.task_queue = queue
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "ledger.jsonl"
        args = ["-m", "tests.mcp_server", str(log), "stdio"]
        env = {"MCP_TEST_START_DELAY_S": "600"}
        server = McpServer(
            name="bill", command=sys.executable, args=args, env=env, stateful=stateful
        )
        model = ModelSpec(provider="scripted", model="from-goal")
        spec = AgentSpec(mcp_servers=[server], model=model)
        goal = json.dumps([answer("never").model_dump(mode="json")])
        async with build_worker(stack.client, stack.graph, queue, scripts=SCRIPTS):
            expect(await history.create_task("mcp-slow", goal, agent=spec))
            await quiet_until(log.exists)
            expect(await history.cancel_task("mcp-slow"))
            final = await history.wait_task("mcp-slow")
            if final is None or final.status is not TaskStatus.CANCELLED:
                raise CaptureError(f"the task did not end cancelled: {final!r}")
            return await fetch(history, "mcp-slow")


async def mcp_stateful_scenario(stack: Stack) -> Captured:
    """A stateful MCP server (``McpServer.stateful``, over stdio): the tool loop with a scripted
    model calling ``bill_tally`` twice: ``mcp_open_session`` on the task's queue, the listing,
    both calls and ``mcp_close_session`` on the session's worker's queue, the counter 1 then 2
    (one session for the run)."""
    from agent_tasks.contract import AgentSpec, McpServer, ModelSpec
    from tests.agent_tools import SCRIPTS, answer, calls

    queue = f"capture-mcp-stateful-{uuid.uuid4().hex[:8]}"
    history = stack.history("mcp")
    history.task_queue = queue
    args = ["-m", "tests.mcp_server", "/dev/null", "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, stateful=True)
    spec = AgentSpec(mcp_servers=[server], model=ModelSpec(provider="scripted", model="from-goal"))
    turns = [calls(("bill_tally", {})), calls(("bill_tally", {})), answer("tallied twice")]
    goal = json.dumps([t.model_dump(mode="json") for t in turns])
    async with build_worker(stack.client, stack.graph, queue, scripts=SCRIPTS):
        expect(await history.create_task("mcp-stateful", goal, agent=spec))
        await history.wait_task("mcp-stateful")
        page = await history.list_events("mcp-stateful")
        texts = [e.payload for e in page.events if e.kind.value == "tool_result"]
        if texts != ["1", "2"]:
            raise RuntimeError(f"the stateful session's tallies are {texts}, not 1 then 2")
        return {"mcp_stateful": await fetch(history, "mcp-stateful")}


SCENARIOS: dict[str, Scenario] = {
    "create": Scenario(create_scenario, ("create",), "create a task (update-with-start)"),
    "writes": Scenario(writes_scenario, ("writes",), "event and step writes"),
    "refusals": Scenario(refusals_scenario, ("refusals",), "refusals between accepted writes"),
    "duplicates": Scenario(duplicates_scenario, ("duplicates",), "request-id retries"),
    "finish": Scenario(finish_scenario, ("finish",), "finish: the workflow completes"),
    "mirror": Scenario(
        mirror_scenario, ("mirror_at_once",), "mirror calls without a debounce timer (patched)"
    ),
    "mirror_failure": Scenario(
        mirror_failure_scenario, ("mirror_failure",), "non-retryable mirror failure and pause"
    ),
    "mirror_refused": Scenario(
        mirror_refused_scenario, ("mirror_refused",), "a refused page: the finished task closes"
    ),
    "mirror_follows": Scenario(
        mirror_follows_scenario, ("mirror_follows",), "one mirror call follows the run (patched)"
    ),
    "import": Scenario(import_scenario, ("import",), "an imported trajectory"),
    "continue_as_new": Scenario(
        continue_as_new_scenario,
        ("continue_as_new_run1", "continue_as_new_run2"),
        "continue-as-new with writes in flight (private dev server)",
    ),
    "backlog": Scenario(
        backlog_scenario,
        ("backlog_run1", "backlog_run2"),
        "continue-as-new while the mirror fails; the next run copies the backlog (patched)",
    ),
    "agents": Scenario(
        agent_scenarios,
        ("agent_loop", "agent_cancel", "agent_failed", "agent_resumed"),
        "agent tasks: the tool loop, a cancel, a failure and its resume",
    ),
    "steps_at_once": Scenario(
        steps_at_once_scenario,
        ("steps_at_once",),
        "six steps at once, their arguments in their activities' input, one mirror call",
    ),
    "human": Scenario(
        human_scenarios,
        (
            "input_early",
            "input_answered",
            "children_parent",
            "children_child",
            "children_cancel",
        ),
        "input requests (early, rejected, refused, answered) and child tasks (ends, cancel)",
    ),
    "sealed_decisions": Scenario(
        sealed_decisions_scenario,
        ("sealed_decisions",),
        "sealed event text and decisions citing events and steps",
    ),
    "lifecycle": Scenario(
        lifecycle_scenarios,
        (
            "cancel_rule_tool",
            "cancel_rule_input",
            "answers_bound",
            "spawn_taken",
            "children_reconciled",
        ),
        "the cancellation rule, answers bound to requests, a taken child id, a reconciled resume",
    ),
    "mcp_list_cancel": Scenario(
        mcp_list_cancel_scenario,
        ("mcp_list_cancelled",),
        "a cancel during an MCP server's slow listing cancels the listing (patched)",
    ),
    "mcp_open_cancel": Scenario(
        mcp_open_cancel_scenario,
        ("mcp_open_cancelled",),
        "a cancel while a stateful MCP server's session opens cancels the open (patched)",
    ),
    "same_call": Scenario(
        same_call_scenario,
        ("same_call_continued",),
        "a continued turn's call identical to an unknown one runs under its key (patched)",
    ),
    "turns": Scenario(
        turn_scenarios,
        (
            "turn_failed",
            "turn_resumed",
            "turn_continued",
            "step_retried",
            "tool_call_bounds",
            "branch_continued",
        ),
        "the turn rules: rollback and resume, continuation, explicit retry, call bounds, branch",
    ),
    "branch_reuse": Scenario(
        branch_reuse_scenario,
        ("branch_reused",),
        "an agent branch reuses its source's steps and answers before the point (patched)",
    ),
    "branch_child": Scenario(
        branch_child_scenario,
        ("branch_reused_child",),
        "an agent branch reuses its source's child ended before the point (patched)",
    ),
    "long_ids": Scenario(
        long_ids_scenario,
        ("long_ids_parent", "long_ids_child"),
        "a child and its parent named by workflow ids cut to 255 characters (patched)",
    ),
    "cancel_after_end": Scenario(
        cancel_after_end_scenario,
        ("cancel_after_end",),
        "a cancel of a task that ended done while its children run keeps it done (patched)",
    ),
    "cancel_after_end_kept": Scenario(
        cancel_after_end_kept_scenario,
        ("cancel_after_end_kept",),
        "a cancel without cascade of a task that ended while its children run (patched)",
    ),
    "app_lifecycle": Scenario(
        app_lifecycle_scenario,
        ("app_lifecycle", "app_lifecycle_child"),
        "a recorded task run by its app: status, input from outside, a child (patched)",
    ),
    "approvals": Scenario(
        approvals_scenario,
        ("approval_choices",),
        "approval before a tool runs: accept, edit, unasked by predicate, answer, ignore",
    ),
    "approval_bound": Scenario(
        approval_bound_scenario,
        ("approval_bound",),
        "an approval bound to its call: two approvers, a stale accept, an expiry",
    ),
    "one_person": Scenario(
        one_person_scenario,
        ("one_person",),
        "one person under two spellings is one approver (patched)",
    ),
    "answers_by_deadline": Scenario(
        answers_by_deadline_scenario,
        ("answers_by_deadline",),
        "an accept by signal past the expiry, no worker at the deadline, is late (patched)",
    ),
    "ignore_reason": Scenario(
        ignore_reason_scenario,
        ("approval_ignore_reason",),
        "an approval ignored with a reason the model reads (patched)",
    ),
    "open_calls": Scenario(
        open_calls_scenario,
        ("open_calls_run1", "open_calls_run2"),
        "the tool loop resumes a call waiting for approval across continue-as-new (patched)",
    ),
    "parked": Scenario(
        parked_scenario,
        ("parked_run1", "parked_run2"),
        "an agent parks at the suggestion while a mirror call is held (patched)",
    ),
    "model_cancel": Scenario(
        model_cancel_scenario,
        ("model_cancel",),
        "a cancel while the model streams: the call cancelled and waited for (patched)",
    ),
    "model_mistake": Scenario(
        model_mistake_scenario,
        ("model_mistake",),
        "an answer over the payload budget: its calls dropped, the model told and asked again",
    ),
    "cut_arguments": Scenario(
        cut_arguments_scenario,
        ("cut_arguments",),
        "arguments over the event bound: cut with their full length, refused naming it",
    ),
    "mcp": Scenario(
        mcp_scenario, ("mcp_call",), "an MCP server's tools listed and called as steps"
    ),
    "mcp_stateful": Scenario(
        mcp_stateful_scenario,
        ("mcp_stateful",),
        "a stateful MCP server: one session for the run, on its worker's queue",
    ),
}
"""Every scenario by name, in capture order."""


def check_targets(names: Sequence[str], out: Path, force: bool) -> None:
    """Create ``out`` if missing; refuse when a file of the named scenarios exists.

    Raises:
        FileExistsError: a scenario's file exists and ``force`` is False.
    """
    targets = [out / f"{file}.json" for name in names for file in SCENARIOS[name].files]
    existing = [str(path) for path in targets if path.exists()]
    if existing and not force:
        raise FileExistsError(
            "refusing to overwrite " + ", ".join(existing) + ": old histories are never "
            "regenerated (they are the compatibility contract with running tasks); capture "
            "new behaviour under a new scenario name, or pass --force for a file never committed"
        )
    out.mkdir(parents=True, exist_ok=True)


def local_paths(text: str) -> str:
    """``text`` without this machine's folders (failure stack traces name source files): the
    project folder and the installed packages' folder become relative paths."""
    for folder in (str(Path(temporalio.__file__).parents[1]), str(ROOT)):
        text = text.replace(json.dumps(folder + "/")[1:-1], "")
    return text


def write_history(path: Path, history: WorkflowHistory) -> Path:
    """Write ``history`` to ``path`` in Temporal's history JSON format, without this machine's
    folders (``local_paths``); returns ``path``."""
    path.write_text(local_paths(history.to_json()) + "\n", encoding="utf-8")
    return path


async def capture(names: Sequence[str], out: Path, force: bool) -> list[Path]:
    """Run the named scenarios and write their histories to ``out``.

    Args:
        names: scenario names (keys of ``SCENARIOS``).
        out: the folder to write ``<file>.json`` into (created if missing).
        force: overwrite existing files (only for a capture never committed).

    Returns:
        The files written.

    Raises:
        FileExistsError: a scenario's file exists and ``force`` is False (checked for every
            scenario before anything runs).
        CaptureError: a scenario did not behave as expected.
    """
    check_targets(names, out, force)
    settings = Settings()
    client = await connect(settings)
    driver = open_driver(settings.neo4j_uri, settings.neo4j_auth())
    written: list[Path] = []
    try:
        await driver.verify_connectivity()
        graph = TaskGraph(driver, settings.neo4j_database)
        await graph.init_schema()
        queue = f"capture-{uuid.uuid4().hex[:8]}"
        async with build_worker(client, graph, queue):
            stack = Stack(client, graph, queue, settings)
            for name in names:
                captured = await SCENARIOS[name].run(stack)
                for file, history in captured.items():
                    path = write_history(out / f"{file}.json", history)
                    written.append(path)
                    print(f"{name}: {path} ({len(history.events)} events)", flush=True)
    finally:
        await driver.close()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit code (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.capture_histories",
        description="Capture TaskWorkflow histories from real runs (see the module docstring).",
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    parser.add_argument("--out", type=Path, default=HISTORIES, help="output folder")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    parser.add_argument(
        "--list", action="store_true", help="print each scenario's files as JSON, capture nothing"
    )
    args = parser.parse_args(argv)
    if args.list:
        print(json.dumps({name: list(s.files) for name, s in SCENARIOS.items()}))
        return 0
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    try:
        asyncio.run(capture(names, args.out, args.force))
    except (FileExistsError, CaptureError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
