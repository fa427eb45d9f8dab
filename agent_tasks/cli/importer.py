"""Import trajectory files as tasks, verify them, and export a task as ATIF.

Each run in the files becomes one task (``trajectories`` says how each record maps and how the
task is named: ``{format}/{source id}/{digest of the run}``). Importing is two phases:

1. **Plan** (``cli.planning.plan_import``): read every file and link the runs (that
   module's docstring says how).
2. **Write** (``import_tasks``): the tasks are written concurrently (``CONCURRENCY`` at a
   time), each with the fewest updates the bounds allow: ``create_task``, ``record_events``
   per segment (split only past one update's bounds: ``starter.writes.split_events``),
   ``set_steps`` per segment (past ``MAX_STEPS_PER_UPDATE`` steps) and ``finish_task``.

Atomic refusal: nothing is written unless ``create_task`` reports that this import's own
request id created the task (now, or in an earlier run of the same import). When the name
belongs to a task created otherwise, nothing is written: the task is "already imported" when it
is finished with the same goal (the name holds the run's digest, so a finished task of that
name holds this run), else the run is refused (``task_exists``). Request ids derive from the
run's digest (``import-{digest[:24]}-{what}``), so a re-import writes nothing: a finished task
is left alone, an unfinished one (an interrupted import) is completed, each write answered from
the task's request-id window when it was made before.

Steps: each tool step is set ``completed`` or ``failed`` (kind ``tool``) with
``result_event_seq`` naming its ``tool_result`` event. Status: an imported task is finished
``done``, or ``failed`` when its ``exit_status`` metadata is present and is not ``submitted``
(case-insensitive); a task whose continuation file is missing is left open, and importing that
file later appends it and finishes the task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agent_tasks.cli.planning import ImportReport, PlannedTask, plan_import
from agent_tasks.contract import (
    MAX_STEPS_PER_TASK,
    PAGE_LIMIT_MAX,
    STEPS_PAGE_MAX,
    Event,
    EventInput,
    StepState,
    StepView,
    StepWrite,
    TaskStatus,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import WriteResult
from agent_tasks.taskgraph.models import MAX_TREE_DEPTH
from agent_tasks.trajectories import (
    ParsedTrajectory,
    export_atif,
    short_text,
)

CONCURRENCY = 16
"""Tasks written at once. Each task's writes are sequential (at most one update in flight per
workflow, far below the server's 10); 16 tasks keep a small dev server busy without
queueing."""
KEY_STORE_RETRY_S = 60.0
"""How long an import sends a segment again (with its request id, once a second) while it is
refused ``key_store_unavailable``: an app's write is refused after ``KEY_STORE_WAIT_S`` so that
it never waits on Neo4j, while an import, a batch job, waits for the key store to store the
task's key tree (a cold or loaded store takes longer than that on a first run)."""


def _request_id(run: ParsedTrajectory, what: str) -> str:
    return f"import-{run.digest[:24]}-{what}"


def final_status(metadata: dict[str, str]) -> TaskStatus:
    """``done``, or ``failed`` when the exit status is present and not ``submitted``."""
    exit_status = metadata.get("exit_status")
    return (
        TaskStatus.FAILED if exit_status and exit_status.lower() != "submitted" else TaskStatus.DONE
    )


def _refused(report: ImportReport, result: WriteResult, what: str) -> ImportReport:
    code = result.error.value if result.error else "refused"
    report.error = f"{code}: {result.message}{what}"
    return report


async def import_task(history: ConversationHistory, task: PlannedTask) -> ImportReport:
    """Write one planned task (module docstring, phase 2); never raises for a refusal.

    Returns:
        The report: ``status`` created, already imported or refused (with ``error``).
    """
    report = task.report()
    started = time.perf_counter()
    try:
        return await _write(history, task, report)
    finally:
        report.ms = (time.perf_counter() - started) * 1000


# Long: one planned task's writes in order: create, each segment's events and steps, the finish
async def _write(
    history: ConversationHistory, task: PlannedTask, report: ImportReport
) -> ImportReport:
    head = task.head
    if report.steps > MAX_STEPS_PER_TASK:
        report.error = (
            f"{ErrorCode.STEP_LIMIT_REACHED.value}: {report.steps} tool steps; a task holds at "
            f"most {MAX_STEPS_PER_TASK}; nothing written"
        )
        return report
    created = await history.create_task(
        head.name,
        head.goal,
        metadata=head.metadata,
        parent=task.parent,
        parent_may_follow=True,
        session_id=short_text(head.source_id),
        request_id=_request_id(head, "create"),
    )
    if not created.recorded:
        return _refused(report, created, "; nothing written")
    if created.duplicate:
        view = (await history.get_task(head.name)).view
        if view is not None and view.status is not TaskStatus.OPEN and view.goal == head.goal:
            report.status, report.task_status = "already imported", view.status
            return report
        if not created.created:
            report.error = (
                f"task_exists: task {head.name!r} was created by another writer, not by this "
                "import; nothing written"
            )
            return report
    new_events = 0
    for segment in task.segments:
        if not segment.events:
            continue
        recorded = await _record_segment(
            history, head.name, segment.events, _request_id(segment, "events")
        )
        if not recorded.recorded:
            return _refused(report, recorded, "")
        if not recorded.duplicate:
            new_events += len(segment.events)
        writes = [
            StepWrite(
                step_name=name,
                state=StepState.FAILED if step.failed else StepState.COMPLETED,
                kind="tool",
                result_event_seq=result_seq,
            )
            for step, name, result_seq in segment.numbered_steps(recorded.first_seq or 1)
        ]
        if writes:
            steps = await history.set_steps(
                head.name, writes, request_id=_request_id(segment, "steps")
            )
            if not steps.recorded:
                return _refused(report, steps, "")
    status = final_status(head.metadata) if task.complete else TaskStatus.OPEN
    if task.complete:
        finished = await history.finish_task(
            head.name, status, request_id=_request_id(head, "finish")
        )
        if not finished.recorded:
            return _refused(report, finished, "")
    report.task_status = status
    report.new_events = new_events
    report.status = "created" if new_events or not created.duplicate else "already imported"
    return report


async def _record_segment(
    history: ConversationHistory, name: str, events: list[EventInput], request_id: str
) -> WriteResult:
    """``record_events`` of one segment, sent again while it is refused
    ``key_store_unavailable``, for at most ``KEY_STORE_RETRY_S``; any other answer at once."""
    deadline = time.monotonic() + KEY_STORE_RETRY_S
    while True:
        recorded = await history.record_events(name, events, request_id=request_id)
        if recorded.error is not ErrorCode.KEY_STORE_UNAVAILABLE or time.monotonic() > deadline:
            return recorded
        await asyncio.sleep(1.0)


async def import_tasks(
    history: ConversationHistory,
    tasks: list[PlannedTask],
    *,
    concurrency: int = CONCURRENCY,
    done: Callable[[ImportReport], None] | None = None,
) -> list[ImportReport]:
    """Write planned tasks, ``concurrency`` at a time; returns their reports in plan order.

    Args:
        history: the project and agent to write as.
        tasks: from ``plan_import``.
        concurrency: tasks written at once (at least 1).
        done: called with each report as its task is written (a progress bar).
    """
    gate = asyncio.Semaphore(max(concurrency, 1))

    async def one(task: PlannedTask) -> ImportReport:
        async with gate:
            report = await import_task(history, task)
        if done is not None:
            done(report)
        return report

    return list(await asyncio.gather(*(one(task) for task in tasks)))


async def import_paths(
    history: ConversationHistory, paths: Iterable[Path], format: str | None = None
) -> list[ImportReport]:
    """Plan and write the runs of ``paths`` (``plan_import`` then ``import_tasks``); returns the
    refused reports of unreadable files, then one report per task in plan order."""
    tasks, unreadable = plan_import(paths, format)
    return unreadable + await import_tasks(history, tasks)


async def mirror_caught_up(
    history: ConversationHistory, tasks: list[str], within: float = 120.0
) -> float:
    """Wait until Neo4j holds every write of every task (``wait_mirrored``, ``CONCURRENCY``
    tasks at a time); returns the seconds waited.

    Raises:
        TimeoutError: not caught up within ``within`` seconds (Neo4j down, or a task whose
            ``mirror_error`` says why); the message names the first such task.
    """
    started = time.perf_counter()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(task: str) -> None:
        async with gate:
            left = within - (time.perf_counter() - started)
            if await history.wait_mirrored(task, timeout_s=max(left, 0.0)):
                return
            view = (await history.get_task(task)).view
            if view is None:
                return
            raise TimeoutError(
                f"the mirror of task {task!r} has not caught up within {within:g} s "
                f"(mirror_error: {view.mirror_error}); is Neo4j up?"
            )

    await asyncio.gather(*(one(task) for task in dict.fromkeys(tasks)))
    return time.perf_counter() - started


async def all_events(history: ConversationHistory, task: str) -> list[Event]:
    """Every event of ``task`` in seq order, through ``list_events`` (all runs)."""
    events: list[Event] = []
    after: int | None = 0
    while after is not None:
        page = await history.list_events(task, after_seq=after, limit=PAGE_LIMIT_MAX)
        events += page.events
        after = page.next_after_seq
    return events


async def all_steps(history: ConversationHistory, task: str) -> list[StepView]:
    """Every step of ``task`` in name order, through ``list_steps`` (all runs)."""
    steps: list[StepView] = []
    after: str | None = None
    while True:
        page = await history.list_steps(task, limit=STEPS_PAGE_MAX, after_name=after)
        steps += page.steps
        if page.next_after_name is None:
            return steps
        after = page.next_after_name


async def verify_task(history: ConversationHistory, task: PlannedTask) -> list[str]:
    """Compare an imported task's events, read back from the workflow and from Neo4j, with its
    source runs: count, kind, payload, full length and SHA-256; and its step count. Returns the
    mismatches (empty when all agree)."""
    name = task.head.name
    where_from = f"{task.file} ({name})"
    expected = [
        (e.kind.value, e.payload, e.full_length, e.full_sha256)
        for run in task.segments
        for e in run.events
    ]
    sources: list[tuple[str, list[Event]]] = [("workflow", await all_events(history, name))]
    if history.graph is not None:
        sources.append(
            (
                "neo4j",
                await history.graph.reads.events(
                    history.project_id, history.workflow_id(name), 0, 10**12, 10**6
                ),
            )
        )
    problems: list[str] = []
    for where, events in sources:
        got = [(e.kind.value, e.payload, e.full_length, e.full_sha256) for e in events]
        if len(got) != len(expected):
            problems.append(
                f"{where_from}: {where} has {len(got)} events, the source {len(expected)}"
            )
        for index, (mine, theirs) in enumerate(zip(expected, got, strict=False)):
            if mine != theirs:
                problems.append(f"{where_from}: {where} event {index + 1} differs from the source")
    steps = await all_steps(history, name)
    if len(steps) != sum(len(run.steps) for run in task.segments):
        problems.append(f"{where_from}: {len(steps)} steps, the source {task.report().steps}")
    return problems


async def export_task(
    history: ConversationHistory, task: str, depth: int = MAX_TREE_DEPTH
) -> dict[str, Any]:
    """A task as an ATIF v1.7 trajectory (``trajectories.export_atif``), its child tasks
    (found in Neo4j, down to ``depth`` levels) embedded as ``subagent_trajectories``.
    Importing the export gives the same events (kinds, roles, names, call ids, payloads, full
    lengths and hashes), the same tool steps named ``NNNN:tool`` and the same child tasks;
    other steps, step states other than completed and failed, and the task's status and result
    text are kept in the export's ``extra`` but not restored by an import (an imported task is
    finished by its ``exit_status``).

    Raises:
        LookupError: no such task in this project.
        GraphNotConfigured: ``history`` has no Neo4j graph (children are found there).
    """
    found = await history.get_task(task)
    if found.view is None:
        raise LookupError(f"no task {task!r} in project {history.project_id!r}")
    view = found.view
    children = []
    if depth > 0:
        rows = await history.find_tasks(parent=task, limit=PAGE_LIMIT_MAX)
        children = [await export_task(history, row.name, depth - 1) for row in rows]
    return export_atif(
        name=view.name,
        goal=view.goal,
        agent_id=view.agent_id,
        session_id=view.session_id,
        parent=view.parent,
        metadata=view.metadata,
        events=await all_events(history, task),
        steps=await all_steps(history, task),
        children=children,
    )
