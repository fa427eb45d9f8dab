"""Import trajectory files as tasks, verify them, and export a task as ATIF.

Each run in the files becomes one task (``trajectories`` says how each record maps and how the
task is named: ``{format}/{source id}/{digest of the run}``). Importing is two phases:

1. **Plan** (``plan_import``): read every file (folders are walked recursively for
   ``TRAJECTORY_SUFFIXES``; a file may hold one trajectory, a JSON array or JSON Lines), then
   link the runs. Harbor writes a run's subagent and continuation files next to it and refers
   to them by relative path, so the planner also reads the trajectory files beside each input
   file (not importing them) to resolve links in both directions. A subagent reference
   resolves by ``trajectory_id`` (an embedded run of the same file, else a run in the same
   folder), else by ``trajectory_path`` (relative to the referencing file), else by
   ``session_id`` (the one run of the folder with that session id; an ambiguous one stays
   unresolved); an embedded run (``subagent_trajectories``) is a subagent of the run that
   embeds it. ``continued_trajectory_ref`` names the file that continues a run: the segments
   of a run form one task (the first segment names it) and are recorded in order, whichever of
   their files was given. Since task names come from content, a child task is created with
   its ``parent`` set to its parent's name whether or not the parent is imported yet (Neo4j's
   ``CHILD_OF`` then points at the parent's node, filled in when the parent is imported).
2. **Write** (``import_tasks``): the tasks are written concurrently (``CONCURRENCY`` at a
   time), each with the fewest updates the bounds allow: ``create_task``, ``record_events``
   per segment (split only past 200 events or ~1 MiB per update), ``set_steps`` per segment
   (past 200 steps) and ``finish_task``.

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from starter.client import ConversationHistory
from starter.results import WriteResult
from trajectories import (
    ParsedTrajectory,
    SubagentRef,
    TrajectoryFormatError,
    export_atif,
    read_file,
    short_text,
)
from workflows.errors import ErrorCode
from workflows.models import (
    MAX_STEPS_PER_TASK,
    PAGE_LIMIT_MAX,
    STEPS_PAGE_MAX,
    Event,
    StepState,
    StepView,
    StepWrite,
    TaskStatus,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "trajectories"
"""The trajectories shipped with the project: the default input of ``agent-tasks import``."""

TRAJECTORY_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj")
"""Files taken from a folder: ``*.json`` (ATIF, mini-swe-agent ``.traj.json``, JSON arrays),
``*.jsonl`` / ``*.ndjson`` (JSON Lines) and ``*.traj`` (SWE-agent)."""

CONCURRENCY = 16
"""Tasks written at once. Each task's writes are sequential (at most one update in flight per
workflow, far below the server's 10); 16 tasks keep a 2-core dev server busy without queueing
(``bench/bench_import.py``)."""

MAX_TREE_DEPTH = 20
"""Deepest level of child tasks ``export_task`` embeds (the task graph's tree depth)."""

Status = Literal["created", "already imported", "refused"]


class ImportReport(BaseModel):
    """One task's import (one run, or the segments of a continued run)."""

    file: str
    """The file as found (of the first segment)."""
    source: str | None = None
    """Where the run is in the file, when the file holds several (``[2]``, ``:4``,
    ``.subagent_trajectories[0]``); None for a file's only run."""
    task: str | None = None
    """The task name (None when the file could not be read)."""
    status: Status = "refused"
    """``created`` (this import wrote events), ``already imported`` (nothing new to write) or
    ``refused`` (nothing written: see ``error``)."""
    parent: str | None = None
    """The parent task's name, for a subagent run."""
    segments: int = 1
    """Files the run spans (a continued run has more than one)."""
    open: bool = False
    """True when the task was left open: its continuation file is missing."""
    events: int = 0
    steps: int = 0
    failed_steps: int = 0
    cut_payloads: int = 0
    """Events whose payload was cut to 32,000 characters."""
    new_events: int = 0
    """Events this run recorded (0 on a re-import)."""
    ms: float = 0.0
    """Wall time of the task's writes, acknowledged by Temporal (ms)."""
    error: str | None = None
    """Why the run was refused (a format error, or a refusal code and message)."""


@dataclass
class PlannedTask:
    """A task to write: the segments of one run (first segment first) and its parent."""

    file: Path
    """The first segment's file."""
    segments: list[ParsedTrajectory]
    """The run's segments in order (one unless continued)."""
    parent: str | None = None
    """The parent task's name, if the run is a subagent run."""
    complete: bool = True
    """False when the last segment names a continuation that was not found."""

    @property
    def head(self) -> ParsedTrajectory:
        """The first segment (it names and describes the task)."""
        return self.segments[0]

    def report(self) -> ImportReport:
        """A report with the task's counts, before anything is written."""
        runs = self.segments
        steps = [step for run in runs for step in run.steps]
        return ImportReport(
            file=str(self.file),
            source=self.head.source if self.head.source != self.file.name else None,
            task=self.head.name,
            parent=self.parent,
            segments=len(runs),
            open=not self.complete,
            events=sum(len(run.events) for run in runs),
            steps=len(steps),
            failed_steps=sum(step.failed for step in steps),
            cut_payloads=sum(e.full_length != len(e.payload) for r in runs for e in r.events),
        )


@dataclass
class _Read:
    """A file read by the planner: its runs, and whether it was asked for."""

    path: Path
    runs: list[ParsedTrajectory]
    asked: bool


def trajectory_files(paths: Iterable[Path]) -> Iterator[Path]:
    """The files to import: each path that is a file, and the trajectory files under each
    folder, recursively (``TRAJECTORY_SUFFIXES``), in sorted order."""
    for path in paths:
        if path.is_dir():
            yield from sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix in TRAJECTORY_SUFFIXES
            )
        else:
            yield path


class _Planner:
    """Reads files and links their runs (``plan_import``)."""

    def __init__(self, format: str | None) -> None:
        self.format = format
        self.files: dict[Path, _Read] = {}
        self.refused: list[ImportReport] = []

    def read(self, path: Path, asked: bool) -> None:
        key = path.resolve()
        if key in self.files:
            self.files[key].asked |= asked
            return
        try:
            runs = read_file(path, self.format)
        except (TrajectoryFormatError, OSError) as err:
            if asked:
                self.refused.append(ImportReport(file=str(path), error=str(err)))
            return
        self.files[key] = _Read(path, runs, asked)

    def read_siblings(self, folder: Path, everything: bool) -> None:
        """Read the trajectory files of ``folder`` not read yet: those that refer to other
        runs (cheap test: the bytes name a reference), or all of them."""
        for path in sorted(folder.iterdir()):
            if path.suffix not in TRAJECTORY_SUFFIXES or path.resolve() in self.files:
                continue
            if everything or b"_trajectory_ref" in path.read_bytes():
                self.read(path, asked=False)

    def read_named(self) -> None:
        """Read the files that runs name (continuations, subagent paths), until none is new."""
        while True:
            named = {
                (path.resolve().parent / target).resolve()
                for path, run in self.runs()
                for target in [run.continued_in, *(ref.trajectory_path for ref in run.subagents)]
                if target and "://" not in target
            }
            new = [p for p in named if p not in self.files and p.is_file()]
            if not new:
                return
            for path in sorted(new):
                self.read(path, asked=False)
                self.files.setdefault(path, _Read(path, [], asked=False))

    def runs(self) -> Iterator[tuple[Path, ParsedTrajectory]]:
        for read in self.files.values():
            for run in read.runs:
                yield read.path, run

    def resolve(
        self, path: Path, run: ParsedTrajectory, ref: SubagentRef
    ) -> ParsedTrajectory | None:
        """The run ``ref`` (in ``run`` of ``path``) names, or None (module docstring)."""
        folder = path.resolve().parent
        here = [(p, r) for p, r in self.runs() if p.resolve().parent == folder and r is not run]
        if ref.trajectory_id is not None:
            same_file = [r for p, r in here if p == path and r.trajectory_id == ref.trajectory_id]
            found = same_file or [r for _, r in here if r.trajectory_id == ref.trajectory_id]
            if len(found) == 1:
                return found[0]
        named = self.file_run(path, ref.trajectory_path)
        if named is not None:
            return named[1]
        if ref.session_id is not None:
            found = [r for _, r in here if r.session_id == ref.session_id]
            if len(found) == 1:
                return found[0]
        return None

    def file_run(self, path: Path, relative: str | None) -> tuple[Path, ParsedTrajectory] | None:
        """The file named ``relative`` to ``path``'s folder, and its one top-level run, if it
        was read (None for a URL, a file not read, or a file of several runs)."""
        if relative is None or "://" in relative:
            return None
        target = self.files.get((path.resolve().parent / relative).resolve())
        tops = [r for r in target.runs if r.embedded_in is None] if target else []
        return (target.path, tops[0]) if target and len(tops) == 1 else None


def plan_import(
    paths: Iterable[Path], format: str | None = None
) -> tuple[list[PlannedTask], list[ImportReport]]:
    """Read and link the runs of ``paths`` (module docstring, phase 1).

    Args:
        paths: files and folders.
        format: the format of every trajectory, or None to detect each one's.

    Returns:
        The tasks to write (each run of an asked-for file, with the segments of its run), and
        a refused report for each asked-for file that could not be read.
    """
    planner = _Planner(format)
    asked = list(trajectory_files(paths))
    for path in asked:
        planner.read(path, asked=True)
    folders = sorted({path.resolve().parent for path in asked if path.exists()})
    for folder in folders:
        planner.read_siblings(folder, everything=False)
    planner.read_named()
    runs = list(planner.runs())
    unresolved = {
        path.resolve().parent
        for path, run in runs
        for ref in run.subagents
        if planner.resolve(path, run, ref) is None
    }
    for folder in sorted(unresolved):
        planner.read_siblings(folder, everything=True)
    planner.read_named()
    runs = list(planner.runs())
    parent_of: dict[int, str] = {}
    next_of: dict[int, tuple[Path, ParsedTrajectory]] = {}
    for path, run in runs:
        if run.embedded_in is not None:
            parent_of.setdefault(id(run), run.embedded_in)
        elif run.parent is not None:
            parent_of.setdefault(id(run), run.parent)
        for ref in run.subagents:
            child = planner.resolve(path, run, ref)
            if child is not None:
                parent_of.setdefault(id(child), run.name)
        following = planner.file_run(path, run.continued_in)
        if following is not None:
            next_of[id(run)] = following
    continuations = {id(run) for _, run in next_of.values()}
    asked_files = {read.path.resolve() for read in planner.files.values() if read.asked}
    tasks: list[PlannedTask] = []
    for path, run in runs:
        if id(run) in continuations:
            continue
        chain, files, seen = [run], [path], {id(run)}
        while id(chain[-1]) in next_of and id(next_of[id(chain[-1])][1]) not in seen:
            next_path, next_run = next_of[id(chain[-1])]
            chain.append(next_run)
            files.append(next_path)
            seen.add(id(next_run))
        if not any(p.resolve() in asked_files for p in files):
            continue
        tasks.append(
            PlannedTask(
                file=path,
                segments=chain,
                parent=next((parent_of[id(r)] for r in chain if id(r) in parent_of), None),
                complete=chain[-1].continued_in is None,
            )
        )
    head_name = {id(r): t.head.name for t in tasks for r in t.segments}
    for task in tasks:  # a parent that is a continuation segment: its task is the first one's
        if task.parent is not None:
            segment = next((r for _, r in runs if r.name == task.parent), None)
            task.parent = head_name.get(id(segment), task.parent)
    return tasks, planner.refused


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
            report.status = "already imported"
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
        recorded = await history.record_events(
            head.name, segment.events, request_id=_request_id(segment, "events")
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
    if task.complete:
        finished = await history.finish_task(
            head.name, final_status(head.metadata), request_id=_request_id(head, "finish")
        )
        if not finished.recorded:
            return _refused(report, finished, "")
    report.new_events = new_events
    report.status = "created" if new_events or not created.duplicate else "already imported"
    return report


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
    """Wait until every task's mirror has caught up (``unmirrored_writes`` 0, each task polled
    every 20 ms, ``CONCURRENCY`` tasks at a time); returns the seconds waited.

    Raises:
        TimeoutError: not caught up within ``within`` seconds (Neo4j down, or a task whose
            ``mirror_error`` says why); the message names the first such task.
    """
    started = time.perf_counter()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(task: str) -> None:
        async with gate:
            while True:
                view = (await history.get_task(task)).view
                if view is None or view.unmirrored_writes == 0:
                    return
                if time.perf_counter() - started > within:
                    raise TimeoutError(
                        f"the mirror of task {task!r} has not caught up within {within:g} s "
                        f"(mirror_error: {view.mirror_error}); is Neo4j up?"
                    )
                await asyncio.sleep(0.02)

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
                await history.graph.events(
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
