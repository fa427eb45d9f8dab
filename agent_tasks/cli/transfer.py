"""``agent-tasks import`` and ``agent-tasks export``: trajectory files in and out."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_tasks.cli.common import (
    AgentOpt,
    JsonOpt,
    ProjectOpt,
    console,
    emit,
    open_history,
    run,
    table,
    within,
)

if TYPE_CHECKING:
    from agent_tasks.cli.planning import ImportReport

CONCURRENCY = 16
"""``import``'s ``--concurrency`` unless told (``importer.CONCURRENCY``, spelled here so that its
help loads no importer; a test holds the two equal)."""


# Long: one CLI command's flow: options, the import, the verification table, the exit code
def import_command(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Files or folders (walked recursively).")
    ] = None,
    format: Annotated[
        str | None, typer.Option(help="atif, mini-swe-agent or swe-agent (default: detect).")
    ] = None,
    verify: Annotated[bool, typer.Option(help="Read every event back and compare.")] = False,
    with_worker: Annotated[
        bool, typer.Option("--with-worker", help="Run a worker in this process meanwhile.")
    ] = False,
    concurrency: Annotated[
        int, typer.Option(callback=within(1), help="Tasks written at once.")
    ] = CONCURRENCY,
    project: ProjectOpt = "default",
    agent: AgentOpt = "importer",
    as_json: JsonOpt = False,
) -> None:
    """Import trajectory files as tasks (default: the shipped examples), one task per run.
    Reports each run as created, already imported or refused. Exit 1 when a run is refused
    or, with --verify, any event differs from its source."""
    import contextlib
    import time

    from rich.progress import Progress

    from agent_tasks.cli.importer import import_tasks, mirror_caught_up, verify_task
    from agent_tasks.cli.planning import EXAMPLES, TRAJECTORY_SUFFIXES, plan_import
    from agent_tasks.contract import MAX_PAYLOAD_CHARS
    from agent_tasks.worker import build_worker

    tasks, unreadable = plan_import(paths or [EXAMPLES], format)
    if not tasks and not unreadable:
        where = ", ".join(str(p) for p in paths or [EXAMPLES])
        message = (
            f"no trajectory file in {where} (atif, mini-swe-agent or swe-agent files: "
            f"{', '.join('*' + s for s in TRAJECTORY_SUFFIXES)}); nothing imported"
        )
        if as_json:
            emit({"error": "no_trajectory", "message": message}, True)
        else:
            console.print(f"[red]no_trajectory:[/red] {message}")
        raise typer.Exit(1)

    async def go() -> tuple[list[ImportReport], list[str], dict[str, float]]:
        async with open_history(project, agent) as history:
            assert history.graph is not None
            async with contextlib.AsyncExitStack() as stack:
                if with_worker:
                    await history.graph.ensure_ready()
                    await stack.enter_async_context(
                        build_worker(history.client, history.graph, history.task_queue)
                    )
                started = time.perf_counter()
                with Progress(console=console.rich, transient=True, disable=as_json) as progress:
                    bar = progress.add_task("importing", total=len(tasks))
                    reports = await import_tasks(
                        history,
                        tasks,
                        concurrency=concurrency,
                        done=lambda _: progress.advance(bar),
                    )
                write_s = time.perf_counter() - started
                written = [r.task for r in reports if r.task and r.status != "refused"]
                try:
                    catch_up_s = await mirror_caught_up(history, written)
                except TimeoutError as err:
                    console.print(f"[red]mirror lagging:[/red] {err}")
                    raise typer.Exit(1) from err
                problems: list[str] = []
                if verify:
                    for task, report in zip(tasks, reports, strict=True):
                        if report.status != "refused":
                            problems += await verify_task(history, task)
                new = sum(r.new_events for r in reports)
                numbers = {
                    "runs": len(reports),
                    "events": sum(r.events for r in reports),
                    "new_events": new,
                    "write_s": round(write_s, 3),
                    "events_per_s": round(new / write_s, 1) if new else 0.0,
                    "mirror_catch_up_s": round(catch_up_s, 3),
                }
                return unreadable + reports, problems, numbers

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
            [
                {
                    **r.model_dump(mode="json"),
                    "ms": f"{r.ms:.0f}",
                    "file": Path(r.file).name + (r.source or "").removeprefix(Path(r.file).name),
                    "import": r.status,
                    "status": r.task_status or "",
                }
                for r in reports
            ],
            # status: the task's, as `task list` shows it; import: what this import did
            ["file", "task", "status", "import", "events", "steps", "failed_steps", "ms", "error"],
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
        cut = [r for r in reports if r.cut_payloads]
        if cut:
            console.print(
                f"[yellow]payloads cut:[/yellow] {sum(r.cut_payloads for r in cut):,} events "
                f"of {len(cut)} runs kept the first {MAX_PAYLOAD_CHARS:,} characters "
                "(MAX_PAYLOAD_CHARS) of a longer text, with its full length and SHA-256: "
                + ", ".join(f"{r.task} ({r.cut_payloads})" for r in cut[:5])
                + (", ..." if len(cut) > 5 else "")
            )
        console.print(f"the tasks are in project {project!r} (--project {project})")

        if verify:
            for problem in problems:
                console.print(f"[red]mismatch:[/red] {problem}")
            if not problems and not cut:
                console.print(
                    "[green]verified:[/green] every event matches its source, in the "
                    "workflow and in the graph store"
                )
            elif not problems:
                console.print(
                    "[green]verified:[/green] every event matches its source, in the workflow "
                    f"and in the graph store; the {sum(r.cut_payloads for r in cut):,} cut "
                    f"payloads above keep only their first {MAX_PAYLOAD_CHARS:,} characters, "
                    "so they are checked by those, their full length and SHA-256 (the rest "
                    "of those texts is not stored anywhere)"
                )
    if problems or any(r.status == "refused" for r in reports):
        raise typer.Exit(1)


def export_command(
    name: str,
    format: Annotated[str, typer.Option(help="Only atif.")] = "atif",
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="File (default: stdout).")
    ] = None,
    project: ProjectOpt = "default",
) -> None:
    """Write a task as an ATIF v1.7 trajectory, its child tasks embedded; the export is
    checked against the published ATIF v1.7 schema first (exit 1 if it fails)."""
    from agent_tasks.cli.importer import export_task
    from agent_tasks.trajectories import check_atif

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
    problems = check_atif(data)
    if problems:
        console.print(f"[red]not valid ATIF v1.7:[/red] {'; '.join(problems[:5])}")
        raise typer.Exit(1)
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
