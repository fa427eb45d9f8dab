"""``agent-tasks replay``: the pre-deploy check of the workflow code against histories."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated

import typer

from config import Settings, connect
from starter.cli.common import JsonOpt, console, emit, run, table
from starter.replay import ReplayResult, all_ok, parse_since, replay_dir, replay_server
from workflows.models import TaskStatus


def replay_command(
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="Replay the saved *.json histories here, not the server's."),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Only this project (default: every one).")
    ] = None,
    status: Annotated[
        TaskStatus | None, typer.Option(help="Only tasks of this TaskStatus.")
    ] = None,
    since: Annotated[
        str,
        typer.Option(
            help="Closed runs that closed within this window (90m, 24h, 7d, or an ISO time); "
            "running ones always."
        ),
    ] = "7d",
    limit: Annotated[int, typer.Option(help="At most this many runs (newest first).")] = 200,
    modules: Annotated[
        list[str] | None,
        typer.Option(
            "--import",
            help="Import this module first (repeat): the modules of your agent code, which the "
            "histories of your agent tasks ran.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay task histories against the workflow code on disk: run this before deploying a
    new worker. Exit 1 on any nondeterminism or replay failure.

    Without --dir, fetches the histories of running tasks and of tasks closed within --since
    (every run, runs that continued-as-new included) from the Temporal server of
    TEMPORAL_ADDRESS. --project here is not read from AGENT_TASKS_PROJECT: a deploy check
    covers every project unless asked otherwise. A --dir without any *.json file exits 1 too
    (a wrong path must not pass the check). Agent code is workflow code: --import the modules
    that register yours (``workflows.agents.agent``), as the worker does.
    """
    for module in modules or []:
        importlib.import_module(module)

    async def go() -> list[ReplayResult]:
        if folder is not None:
            return await replay_dir(folder)
        client = await connect(Settings())
        return await replay_server(
            client, project=project, status=status, since=parse_since(since), limit=limit
        )

    try:
        results = run(go())
    except (NotADirectoryError, ValueError) as err:
        console.print(f"[red]invalid arguments:[/red] {err}")
        raise typer.Exit(2) from err
    counts = {name: sum(r.result == name for r in results) for name in ("ok", "nondeterministic")}
    counts["error"] = len(results) - counts["ok"] - counts["nondeterministic"]
    if as_json:
        emit({"results": [r.model_dump() for r in results], **counts}, True)
    else:
        rows = [
            {
                **r.model_dump(),
                "file": Path(r.source).name,
                "result": r.result if r.message is None else f"{r.result}: {r.message}",
            }
            for r in results
        ]
        columns = ["workflow_id", "run_id", "events", "result"]
        table(rows, (["file"] if folder is not None else []) + columns, title="replay")
        where = str(folder) if folder is not None else "the server"
        console.print(
            f"{len(results)} histories from {where}: {counts['ok']} ok, "
            f"{counts['nondeterministic']} nondeterministic, {counts['error']} error"
        )
        if not results:
            console.print(f"[yellow]nothing to replay in {where}[/yellow]")
    if not all_ok(results) or (folder is not None and not results):
        raise typer.Exit(1)
