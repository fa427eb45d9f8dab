"""``agent-tasks import`` and ``agent-tasks export``: trajectory files in and out."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from starter.cli.common import (
    AgentOpt,
    JsonOpt,
    ProjectOpt,
    console,
    emit,
    open_history,
    run,
    table,
)
from starter.importer import (
    EXAMPLES,
    ImportReport,
    export_task,
    import_file,
    mirror_caught_up,
    trajectory_files,
    verify_file,
)
from worker import build_worker


def import_command(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders.")] = None,
    format: Annotated[
        str | None, typer.Option(help="atif, mini-swe-agent or swe-agent (default: detect).")
    ] = None,
    verify: Annotated[bool, typer.Option(help="Read every event back and compare.")] = False,
    with_worker: Annotated[
        bool, typer.Option("--with-worker", help="Run a worker in this process meanwhile.")
    ] = False,
    project: ProjectOpt = "default",
    agent: AgentOpt = "importer",
    as_json: JsonOpt = False,
) -> None:
    """Import trajectory files as tasks (default: the shipped examples). Exit 1 when a file
    fails to import or, with --verify, any event differs from its source."""
    files = list(trajectory_files(paths or [EXAMPLES]))

    async def go() -> tuple[list[ImportReport], list[str], dict[str, float]]:
        async with open_history(project, agent) as history:
            assert history.graph is not None
            async with contextlib.AsyncExitStack() as stack:
                if with_worker:
                    await history.graph.init_schema()
                    await stack.enter_async_context(
                        build_worker(history.client, history.graph, history.task_queue)
                    )
                reports: list[ImportReport] = []
                started = time.perf_counter()
                with Progress(console=console, transient=True, disable=as_json) as progress:
                    bar = progress.add_task("importing", total=len(files))
                    for path in files:
                        reports.append(await import_file(history, path, format))
                        progress.advance(bar)
                write_s = time.perf_counter() - started
                imported = [r.task for r in reports if r.task and not r.error]
                try:
                    catch_up_s = await mirror_caught_up(history, imported)
                except TimeoutError as err:
                    console.print(f"[red]mirror lagging:[/red] {err}")
                    raise typer.Exit(1) from err
                problems: list[str] = []
                if verify:
                    for report in reports:
                        if not report.error:
                            problems += await verify_file(history, Path(report.file), format)
                new = sum(r.new_events for r in reports)
                numbers = {
                    "files": len(files),
                    "events": sum(r.events for r in reports),
                    "new_events": new,
                    "write_s": round(write_s, 3),
                    "events_per_s": round(new / write_s, 1) if new else 0.0,
                    "mirror_catch_up_s": round(catch_up_s, 3),
                }
                return reports, problems, numbers

    reports, problems, numbers = run(go())
    if as_json:
        emit(
            {
                "files": [r.model_dump() for r in reports],
                "totals": numbers,
                "verify_problems": problems,
            },
            True,
        )
    else:
        table(
            [{**r.model_dump(), "ms": f"{r.ms:.0f}", "file": Path(r.file).name} for r in reports],
            ["file", "task", "events", "steps", "failed_steps", "cut_payloads", "ms", "error"],
            title="import",
        )
        if numbers["new_events"]:
            console.print(
                f"{numbers['new_events']} new events of {numbers['events']} in "
                f"{numbers['write_s']} s ({numbers['events_per_s']} events/s durable and "
                f"acknowledged); mirror caught up {numbers['mirror_catch_up_s']} s after the "
                "last write"
            )
        else:
            console.print(
                f"all {numbers['events']} events were already recorded: nothing new written"
            )
        console.print(f"the tasks are in project {project!r} (--project {project})")

        if verify:
            for problem in problems:
                console.print(f"[red]mismatch:[/red] {problem}")
            if not problems:
                console.print(
                    "[green]verified:[/green] every event matches its source, in the "
                    "workflow and in Neo4j"
                )
    if problems or any(r.error for r in reports):
        raise typer.Exit(1)


def export_command(
    name: str,
    format: Annotated[str, typer.Option(help="Only atif.")] = "atif",
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="File (default: stdout).")
    ] = None,
    project: ProjectOpt = "default",
) -> None:
    """Write a task as an ATIF trajectory."""
    if format != "atif":
        console.print(f"[red]unknown format {format!r}:[/red] only atif")
        raise typer.Exit(2)

    async def go() -> dict[str, Any]:
        async with open_history(project, "cli") as history:
            return await export_task(history, name)

    try:
        data = run(go())
    except LookupError as err:
        console.print(f"[red]task_not_found:[/red] {err}")
        raise typer.Exit(1) from err
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
