"""``agent-tasks replay``: the pre-deploy check of the workflow code against histories."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent_tasks.cli.common import (
    ImportOpt,
    JsonOpt,
    TaskStatusName,
    console,
    emit,
    import_modules,
    run,
    table,
    within,
)

if TYPE_CHECKING:
    from agent_tasks.cli.replay_check import ReplayResult


# Long: one CLI command's flow: options, the replay, the table and its notes, the exit code
def replay_command(
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="Replay the saved *.json histories here, not the server's."),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Only this project (default: every one).")
    ] = None,
    status: Annotated[
        TaskStatusName | None, typer.Option(help="Only tasks of this TaskStatus.")
    ] = None,
    since: Annotated[
        str,
        typer.Option(
            help="Closed runs that closed within this window (90m, 24h, 7d, or an ISO time); "
            "running ones always."
        ),
    ] = "7d",
    limit: Annotated[
        int, typer.Option(callback=within(1), help="At most this many runs (newest first).")
    ] = 200,
    modules: ImportOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay task histories against the workflow code on disk: run this before deploying a
    new worker. Exit 1 on any nondeterminism or replay failure.

    Without --dir, fetches the histories of running tasks and of tasks closed within --since
    (every run, runs that continued-as-new included) from the Temporal server of
    TEMPORAL_ADDRESS. --project here is not read from AGENT_TASKS_PROJECT: a deploy check
    covers every project unless asked otherwise. A --dir without any *.json file exits 1 too
    (a wrong path must not pass the check). Agent code is workflow code: --import the modules
    that register yours (``workflows.agents.agent``), as the worker does; a history of an
    agent that is not registered is an error saying so, without a replay. When more runs
    match than --limit, the output says how many were left out (``truncated``, ``selected``
    in the JSON). --json prints the JSON only; the SDK's logs go to stderr.
    """
    from agent_tasks.cli.replay_check import (
        all_ok,
        count_runs,
        parse_since,
        replay_dir,
        replay_server,
    )
    from agent_tasks.config import Settings, connect

    import_modules(modules)

    async def go() -> tuple[list[ReplayResult], int]:
        if folder is not None:
            results = await replay_dir(folder)
            return results, len(results)
        client = await connect(Settings())
        window = parse_since(since)
        selected = await count_runs(client, project=project, status=status, since=window)
        results = await replay_server(
            client, project=project, status=status, since=window, limit=limit
        )
        return results, max(selected, len(results))

    try:
        results, selected = run(go())
    except (NotADirectoryError, ValueError) as err:
        console.print(f"[red]invalid arguments:[/red] {err}")
        raise typer.Exit(2) from err
    counts = {name: sum(r.result == name for r in results) for name in ("ok", "nondeterministic")}
    counts["error"] = len(results) - counts["ok"] - counts["nondeterministic"]
    truncated = selected > len(results)
    if as_json:
        emit(
            {
                "results": [r.model_dump() for r in results],
                **counts,
                "selected": selected,
                "truncated": truncated,
            },
            True,
        )
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
        missing = sorted({r.unregistered_agent for r in results if r.unregistered_agent})
        if missing:
            console.print(
                f"[red]not registered here:[/red] agent {', '.join(map(repr, missing))}: pass "
                "--import MODULE (the modules that register them, as your worker imports them)"
            )
        if truncated:
            console.print(
                f"[yellow]truncated:[/yellow] {selected:,} runs match, the newest {len(results):,} "
                f"were replayed (--limit {limit}); narrow with --project, --status, --since or "
                "raise --limit"
            )
        if not results:
            console.print(f"[yellow]nothing to replay in {where}[/yellow]")
    if not all_ok(results) or (folder is not None and not results):
        raise typer.Exit(1)
