"""How fast the CLI answers: ``agent-tasks --help``, a group's help, an argument error and one
read (``task show`` of a closed task, from the local stack) against ``temporal workflow
describe`` of the same task's workflow on the same server, and, for scale, the floor of any
typer command (a one-command typer app's help and missing-argument error) and of Python itself.

Each command runs ``--runs`` times in a fresh process, the commands taking turns (one run of
each per round, so the machine's load falls on all of them alike); a row gives the median CPU
(user + system of the process) and the median wall time. ``--before PYTHON`` adds the same rows
run by another checkout's interpreter (its ``.venv/bin/python``, whose ``agent_tasks`` is that
checkout's): the code before a change.

    python -m bench.bench_cli [--runs 15] [--before ../main/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agent_tasks.devstack import find_temporal_binary
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.worker import build_worker, open_services

TYPER_FLOOR = '''
import typer
app = typer.Typer(rich_markup_mode=None, add_completion=False)
@app.command()
def show(name: str) -> None:
    """Show a task."""
app()
'''
"""The least a typer command does: one command of one argument, plain help."""


@dataclass
class Command:
    """One row: a command line and the environment it runs in."""

    row: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    codes: tuple[int, ...] = (0,)
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)

    def once(self, folder: Path) -> None:
        """Run it once in ``folder`` (not a checkout: ``python -m`` puts the current folder
        first on ``sys.path``, which would shadow another checkout's package); record its CPU
        and wall time."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            self.argv,
            cwd=folder,
            capture_output=True,
            env={**os.environ, "COLUMNS": "120", **self.env},
            timeout=120,
        )
        self.wall_s.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode not in self.codes:
            raise RuntimeError(f"{self.row}: exit {done.returncode}: {done.stderr.decode()}")


def cli_rows(label: str, python: str, task: str, project: str) -> list[Command]:
    """The CLI's rows, ``python -m agent_tasks.cli`` of ``python``."""
    cli = [python, "-m", "agent_tasks.cli"]
    return [
        Command(f"{label}: agent-tasks --help", [*cli, "--help"]),
        Command(f"{label}: agent-tasks task list --help", [*cli, "task", "list", "--help"]),
        Command(f"{label}: agent-tasks task show (no NAME)", [*cli, "task", "show"], codes=(2,)),
        Command(
            f"{label}: agent-tasks task show NAME (closed task)",
            [*cli, "task", "show", task, "--project", project, "--json"],
        ),
    ]


async def closed_task() -> tuple[ConversationHistory, str, str]:
    """A task of a project of its own, with a few events, finished (``done``)."""
    async with open_services(schema=True) as services:
        assert services.graph is not None
        queue = f"bench-cli-{uuid.uuid4().hex[:6]}"
        history = ConversationHistory(
            services.client, f"bench-cli-{uuid.uuid4().hex[:8]}", "bench", task_queue=queue,
            graph=services.graph,
        )  # fmt: skip
        async with build_worker(services.client, services.graph, queue):
            await history.create_task("closed", "read me")
            await history.record_event("closed", "message", "hello", role="user")
            await history.finish_task("closed", "done", result="read")
            await history.wait_task("closed")
        return history, "closed", history.workflow_id("closed")


async def forget(project: str, task_queue: str) -> None:
    """Delete the bench's task (Temporal and the graph store)."""
    async with open_services() as services:
        async with build_worker(services.client, services.graph, task_queue):  # type: ignore[arg-type]
            retention = HistoryRetention(
                services.client, project, "bench", graph=services.graph, task_queue=task_queue
            )
            await retention.delete_task("closed")


def main(runs: int, before: Path | None) -> None:
    history, task, workflow_id = asyncio.run(closed_task())
    python, temporal = sys.executable, str(find_temporal_binary())
    project = history.project_id
    with tempfile.TemporaryDirectory() as folder:
        floor = Path(folder) / "floor.py"
        floor.write_text(TYPER_FLOOR)
        rows = cli_rows("ours", python, task, project)
        if before is not None:
            rows += cli_rows("before", str(before), task, project)
        address = os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233")
        describe = ["workflow", "describe", "--workflow-id", workflow_id, "--address", address]
        rows += [
            Command("temporal workflow describe (same server)", [temporal, *describe]),
            Command("floor: a one-command typer app --help", [python, str(floor), "--help"]),
            Command(
                "floor: the same, missing argument (exit 2)",
                [sys.executable, str(floor)],
                codes=(2,),
            ),
            Command("floor: python -c pass", [sys.executable, "-c", "pass"]),
        ]
        for _ in range(runs):
            for row in rows:
                row.once(Path(folder))
    asyncio.run(forget(project, history.task_queue))
    load = os.getloadavg()
    print(f"{runs} runs each, taking turns; load average at the end {load[0]:.1f}, {load[1]:.1f}")
    print("| command | CPU p50 (s) | wall p50 (s) |")
    print("| --- | --- | --- |")
    for row in rows:
        cpu, wall = statistics.median(row.cpu_s), statistics.median(row.wall_s)
        print(f"| {row.row} | {cpu:.3f} | {wall:.3f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--before", type=Path, default=None)
    options = parser.parse_args()
    main(options.runs, options.before)
