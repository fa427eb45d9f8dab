"""The plan of an import: trajectory files read and their runs linked into the tasks to write.

Each run in the files becomes one task (``trajectories`` says how each record maps and how the
task is named: ``{format}/{source id}/{digest of the run}``); ``cli.importer`` writes them.

``plan_import`` reads every file (folders are walked recursively for
``TRAJECTORY_SUFFIXES``; a file may hold one trajectory, a JSON array or JSON Lines), then links
the runs. Harbor writes a run's subagent and continuation files next to it and refers
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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from agent_tasks.contract import TaskStatus
from agent_tasks.trajectories import (
    ParsedTrajectory,
    SubagentRef,
    TrajectoryFormatError,
    read_file,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "trajectories"
"""The trajectories shipped with the project: the default input of ``agent-tasks import``."""

TRAJECTORY_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj")
"""Files taken from a folder: ``*.json`` (ATIF, mini-swe-agent ``.traj.json``, JSON arrays),
``*.jsonl`` / ``*.ndjson`` (JSON Lines) and ``*.traj`` (SWE-agent)."""


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
    """What this import did: ``created`` (it wrote events), ``already imported`` (nothing new
    to write) or ``refused`` (nothing written: see ``error``)."""
    task_status: TaskStatus | None = None
    """The task's status after the import, as ``task list`` shows it (``done``, ``failed``, or
    ``open`` when its continuation file is missing); None when refused."""
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
    """Events whose payload was cut to ``MAX_PAYLOAD_CHARS`` characters."""
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


# Long: three passes (read files, link parents and continuations, chain into tasks); to split when
# linking grows
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
