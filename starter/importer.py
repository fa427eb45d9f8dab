"""Import trajectory files as tasks, verify them, and export a task as ATIF.

One file becomes one task (``trajectories`` says how each record maps). The writes of a
file are a handful of updates: ``create_task``, ``record_events`` (split only past 200 events
or ~1 MiB per update), ``set_steps`` and ``finish_task``. Their request ids derive from the
file's SHA-256 and the write's position (``import-{sha[:24]}-{what}``), so importing the same
file again writes nothing: the task answers each write from its request-id window (or, once
finished, from its closed workflow's state).

Steps: each tool step is set ``completed`` or ``failed`` (kind ``tool``) with
``result_event_seq`` naming its ``tool_result`` event. Status: an imported task is finished
``done``, or ``failed`` when its ``exit_status`` metadata is present and is not ``submitted``
(case-insensitive). Child tasks: each child name a trajectory references is created (goal
``"subagent of {parent}"``, ``parent`` set) unless a task of that name exists.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from starter.client import ConversationHistory
from trajectories import ParsedTrajectory, export_atif, parse_file
from workflows.models import (
    PAGE_LIMIT_MAX,
    STEPS_PAGE_MAX,
    Event,
    StepState,
    StepView,
    StepWrite,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "trajectories"
"""The trajectories shipped with the project: the default input of ``agent-tasks import``."""

TRAJECTORY_SUFFIXES = (".json", ".traj")
"""Files taken from a folder: ``*.json`` (ATIF, mini-swe-agent ``.traj.json``) and ``*.traj``."""


class ImportReport(BaseModel):
    """One file's import."""

    file: str
    """The file's path as given."""
    task: str | None = None
    """The task name (None when the file could not be read)."""
    events: int = 0
    steps: int = 0
    failed_steps: int = 0
    cut_payloads: int = 0
    """Events whose payload was cut to 32,000 characters."""
    new_events: int = 0
    """Events this run recorded (0 on a re-import)."""
    ms: float = 0.0
    """Wall time of the file's writes, acknowledged by Temporal (ms)."""
    error: str | None = None
    """Why the file was not imported (a format error, or a refusal code and message)."""


def trajectory_files(paths: Iterable[Path]) -> Iterator[Path]:
    """The files to import: each path that is a file, and the trajectory files under each
    folder (``TRAJECTORY_SUFFIXES``), in sorted order."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in TRAJECTORY_SUFFIXES)
        else:
            yield path


def _request_id(parsed: ParsedTrajectory, what: str) -> str:
    return f"import-{parsed.source_sha256[:24]}-{what}"


def final_status(parsed: ParsedTrajectory) -> str:
    """``done``, or ``failed`` when the exit status is present and not ``submitted``."""
    exit_status = parsed.metadata.get("exit_status")
    return "failed" if exit_status and exit_status.lower() != "submitted" else "done"


async def import_file(history: ConversationHistory, path: Path, format: str | None) -> ImportReport:
    """Import one file as a task of ``history``'s project; never raises for a bad file.

    Returns:
        The report; ``error`` is set when the file is not a known trajectory (the message
        names the file) or a write was refused.
    """
    report = ImportReport(file=str(path))
    try:
        parsed = parse_file(path, format)
    except (ValueError, OSError) as err:
        return report.model_copy(update={"error": str(err)})
    report.task = parsed.name
    report.events = len(parsed.events)
    report.steps = len(parsed.steps)
    report.failed_steps = sum(s.failed for s in parsed.steps)
    report.cut_payloads = sum(e.full_length != len(e.payload) for e in parsed.events)
    started = time.perf_counter()
    results = [
        await history.create_task(
            parsed.name,
            parsed.goal,
            metadata=parsed.metadata,
            request_id=_request_id(parsed, "create"),
        )
    ]
    recorded = await history.record_events(
        parsed.name, parsed.events, request_id=_request_id(parsed, "events")
    )
    results.append(recorded)
    first = recorded.first_seq or 0
    if recorded.recorded and parsed.steps:
        writes = [
            StepWrite(
                step_name=step.step_name,
                state=StepState.FAILED if step.failed else StepState.COMPLETED,
                kind="tool",
                result_event_seq=None if step.result_index is None else first + step.result_index,
            )
            for step in parsed.steps
        ]
        results.append(
            await history.set_steps(parsed.name, writes, request_id=_request_id(parsed, "steps"))
        )
    for child in parsed.children:
        if not (await history.get_task(child)).found:
            results.append(
                await history.create_task(child, f"subagent of {parsed.name}", parent=parsed.name)
            )
    if all(r.recorded for r in results):
        results.append(
            await history.finish_task(
                parsed.name, final_status(parsed), request_id=_request_id(parsed, "finish")
            )
        )
    report.ms = (time.perf_counter() - started) * 1000
    refused = next((r for r in results if not r.recorded), None)
    if refused is not None:
        report.error = f"{refused.error.value if refused.error else 'refused'}: {refused.message}"
    elif not recorded.duplicate:
        report.new_events = len(parsed.events)
    return report


async def mirror_caught_up(
    history: ConversationHistory, tasks: list[str], within: float = 120.0
) -> float:
    """Wait until every task's mirror has caught up (``unmirrored_writes`` 0, polled every
    20 ms); returns the seconds waited.

    Raises:
        TimeoutError: not caught up within ``within`` seconds (Neo4j down, or a task whose
            ``mirror_error`` says why); the message names the first such task.
    """
    started = time.perf_counter()
    for task in tasks:
        while True:
            view = (await history.get_task(task)).view
            if view is None or view.unmirrored_writes == 0:
                break
            if time.perf_counter() - started > within:
                raise TimeoutError(
                    f"the mirror of task {task!r} has not caught up within {within:g} s "
                    f"(mirror_error: {view.mirror_error}); is Neo4j up?"
                )
            await asyncio.sleep(0.02)
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


async def verify_file(history: ConversationHistory, path: Path, format: str | None) -> list[str]:
    """Compare an imported file's events, read back from the workflow and from Neo4j, with
    the source: count, kind, payload, full length and SHA-256. Returns the mismatches (empty
    when all agree)."""
    parsed = parse_file(path, format)
    expected = [(e.kind.value, e.payload, e.full_length, e.full_sha256) for e in parsed.events]
    problems: list[str] = []
    graph = history.graph
    workflow_events = await all_events(history, parsed.name)
    sources: list[tuple[str, list[Event]]] = [("workflow", workflow_events)]
    if graph is not None:
        sources.append(
            (
                "neo4j",
                await graph.events(
                    history.project_id, history.workflow_id(parsed.name), 0, 10**12, 10**6
                ),
            )
        )
    for where, events in sources:
        got = [(e.kind.value, e.payload, e.full_length, e.full_sha256) for e in events]
        if len(got) != len(expected):
            problems.append(f"{path}: {where} has {len(got)} events, the source {len(expected)}")
        for index, (mine, theirs) in enumerate(zip(expected, got, strict=False)):
            if mine != theirs:
                problems.append(f"{path}: {where} event {index + 1} differs from the source")
    steps = await all_steps(history, parsed.name)
    if len(steps) != len(parsed.steps):
        problems.append(f"{path}: {len(steps)} steps, the source {len(parsed.steps)}")
    return problems


async def export_task(history: ConversationHistory, task: str) -> dict[str, Any]:
    """A task as an ATIF-v1.5 trajectory (``export_atif``). Importing the export gives the
    same events (kinds, roles, names, call ids, payloads, full lengths and hashes) and the same
    tool steps named ``NNNN:tool``; other steps, step states other than completed and failed,
    and the task's status and result text are kept in the export's ``extra`` but not restored
    by an import (an imported task is finished by its ``exit_status``).

    Raises:
        LookupError: no such task in this project.
    """
    found = await history.get_task(task)
    if found.view is None:
        raise LookupError(f"no task {task!r} in project {history.project_id!r}")
    view = found.view
    steps = await all_steps(history, task)
    return export_atif(
        name=view.name,
        goal=view.goal,
        agent_id=view.agent_id,
        metadata=view.metadata,
        events=await all_events(history, task),
        steps=steps,
    )
