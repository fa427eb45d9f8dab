"""``agent-tasks`` (also ``python -m starter``): the command line for a person at a terminal.

Output is readable by default; ``--json`` prints JSON for scripts. Exit codes: 0 on success,
1 when a write is refused or a read finds nothing (the error code is printed), 2 on bad
arguments, 3 when Temporal or Neo4j cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from neo4j.exceptions import AuthError, ServiceUnavailable
from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.table import Table

from activities.graph import TaskGraph, open_driver
from starter.client import ConversationHistory, TaskServiceUnavailable, WriteResult, connect
from starter.settings import Settings
from workflows.models import EventKind, Role, StepKind, StepState, TaskStatus

app = typer.Typer(help="Durable tasks for AI agents, on Temporal with a Neo4j mirror.")
task_app = typer.Typer(help="Create, write and read tasks.")
dev_app = typer.Typer(help="The local stack: Temporal dev server and Neo4j.")
graph_app = typer.Typer(help="The Neo4j mirror: schema, rebuild and cross-task reads.")
app.add_typer(task_app, name="task")
app.add_typer(dev_app, name="dev")
app.add_typer(graph_app, name="graph")

console = Console(width=None if sys.stdout.isatty() else 160)
_T = TypeVar("_T")

ProjectOpt = Annotated[
    str, typer.Option("--project", envvar="AGENT_TASKS_PROJECT", help="Project id.")
]
AgentOpt = Annotated[str, typer.Option("--agent", envvar="AGENT_TASKS_AGENT", help="Agent id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
RequestOpt = Annotated[
    str | None, typer.Option("--request-id", help="1 to 64 characters; a new UUID if unset.")
]


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro``; turn unreachable services (Temporal, a worker, Neo4j) into exit code 3
    and bad arguments into 2, each with a one-line message."""
    try:
        return asyncio.run(coro)
    except (TaskServiceUnavailable, ServiceUnavailable, AuthError) as err:
        console.print(f"[red]unavailable:[/red] {err}")
        raise typer.Exit(3) from err
    except (ValidationError, ValueError) as err:
        console.print(f"[red]invalid arguments:[/red] {err}")
        raise typer.Exit(2) from err


def emit(value: Any, as_json: bool, render: Callable[[Any], None] | None = None) -> None:
    """Print ``value``: JSON with ``--json`` (models, datetimes and all), else
    ``render(value)`` or a plain JSON dump."""
    if as_json or render is None:
        data = to_jsonable_python(value)
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=None if as_json else 2))
        sys.stdout.write("\n")
    else:
        render(value)


def table(rows: list[dict[str, Any]], columns: list[str], title: str | None = None) -> None:
    """Print ``rows`` as a rich table of ``columns``."""
    out = Table(title=title)
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    console.print(out)


@asynccontextmanager
async def open_graph(settings: Settings) -> AsyncIterator[TaskGraph]:
    """An async context giving a ``TaskGraph`` on the configured Neo4j (driver closed after)."""
    driver = open_driver(settings.neo4j_uri, settings.neo4j_auth())
    try:
        yield TaskGraph(driver, settings.neo4j_database)
    finally:
        await driver.close()


@asynccontextmanager
async def open_history(
    project: str, agent: str, with_graph: bool = True
) -> AsyncIterator[ConversationHistory]:
    """An async context giving a ``ConversationHistory`` from the environment's settings;
    with Neo4j attached when ``with_graph`` and credentials are available."""
    settings = Settings()
    client = await connect(settings)
    if not with_graph:
        yield ConversationHistory(
            client, project_id=project, agent_id=agent, task_queue=settings.temporal_task_queue
        )
        return
    async with open_graph(settings) as graph:
        yield ConversationHistory(
            client,
            project_id=project,
            agent_id=agent,
            task_queue=settings.temporal_task_queue,
            graph=graph,
        )


def write_outcome(result: WriteResult, as_json: bool) -> None:
    """Print a write's result; exit 1 when it was refused."""
    if as_json:
        emit(result, True)
    elif result.recorded:
        detail = "duplicate of an earlier request" if result.duplicate else "recorded"
        seqs = f" seqs {result.first_seq}..{result.last_seq}" if result.first_seq else ""
        console.print(f"[green]{detail}[/green]{seqs}")
    else:
        console.print(
            f"[red]{result.error.value if result.error else 'refused'}:[/red] {result.message}"
        )
    if not result.recorded:
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------- task


@task_app.command("create")
def task_create(
    name: str,
    goal: Annotated[str, typer.Option(help="What the task is for.")],
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    session: Annotated[str | None, typer.Option(help="Session id.")] = None,
    parent: Annotated[str | None, typer.Option(help="Parent task name.")] = None,
    meta: Annotated[list[str] | None, typer.Option(help="Metadata KEY=VALUE (repeat).")] = None,
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a task (or find it, same name and goal)."""
    if any("=" not in item for item in meta or []):
        raise typer.BadParameter("each --meta is KEY=VALUE", param_hint="--meta")
    metadata = dict(item.split("=", 1) for item in meta or [])

    async def go() -> WriteResult:
        async with open_history(project, agent, with_graph=False) as history:
            history.session_id = session
            return await history.create_task(
                name, goal, request_id=request_id, metadata=metadata, parent=parent
            )

    write_outcome(run(go()), as_json)


@task_app.command("event")
def task_event(
    name: str,
    kind: Annotated[EventKind, typer.Option(help="Event kind.")],
    payload: Annotated[str | None, typer.Option(help="Payload text.")] = None,
    payload_file: Annotated[Path | None, typer.Option(help="Read the payload from a file.")] = None,
    role: Annotated[Role | None, typer.Option(help="Message role.")] = None,
    tool: Annotated[str | None, typer.Option("--name", help="Tool or label.")] = None,
    call_id: Annotated[str | None, typer.Option(help="Tool call id.")] = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record one event."""
    try:
        text = payload_file.read_text(encoding="utf-8") if payload_file else (payload or "")
    except (OSError, UnicodeDecodeError) as err:
        raise typer.BadParameter(str(err), param_hint="--payload-file") from err

    async def go() -> WriteResult:
        async with open_history(project, agent, with_graph=False) as history:
            return await history.record_event(
                name, kind, text, role=role, name=tool, call_id=call_id, request_id=request_id
            )

    write_outcome(run(go()), as_json)


@task_app.command("step")
def task_step(
    name: str,
    step: str,
    state: Annotated[StepState, typer.Option(help="New state.")],
    kind: Annotated[StepKind | None, typer.Option(help="Step kind (new steps).")] = None,
    result_seq: Annotated[int | None, typer.Option(help="Seq of the result event.")] = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a step's state."""

    async def go() -> WriteResult:
        async with open_history(project, agent, with_graph=False) as history:
            return await history.set_step(
                name, step, state, kind=kind, result_event_seq=result_seq, request_id=request_id
            )

    write_outcome(run(go()), as_json)


@task_app.command("finish")
def task_finish(
    name: str,
    status: Annotated[TaskStatus, typer.Option(help="done, failed or cancelled.")],
    result: Annotated[str | None, typer.Option(help="Result text.")] = None,
    error: Annotated[str | None, typer.Option(help="Error text.")] = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Finish a task."""

    async def go() -> WriteResult:
        async with open_history(project, agent, with_graph=False) as history:
            return await history.finish_task(
                name, status, result=result, error=error, request_id=request_id
            )

    write_outcome(run(go()), as_json)


def _not_found(name: str, as_json: bool) -> None:
    """Report a task missing from the project (JSON with ``--json``) and exit 1."""
    message = f"no task {name!r} in this project"
    if as_json:
        emit({"error": "task_not_found", "message": message}, True)
    else:
        console.print(f"[red]task_not_found:[/red] {message}")
    raise typer.Exit(1)


@task_app.command("show")
def task_show(name: str, project: ProjectOpt = "default", as_json: JsonOpt = False) -> None:
    """Show a task's view."""

    async def go() -> Any:
        async with open_history(project, "cli", with_graph=False) as history:
            return await history.get_task(name)

    found = run(go())
    if found.view is None:
        _not_found(name, as_json)
    view = found.view
    emit(
        view,
        as_json,
        lambda v: table(
            [{"field": k, "value": val} for k, val in v.model_dump(mode="json").items()],
            ["field", "value"],
            title=f"task {name}",
        ),
    )


@task_app.command("events")
def task_events(
    name: str,
    after: Annotated[int, typer.Option(min=0, help="Events after this seq.")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List a task's events (all runs)."""

    async def go() -> Any:
        async with open_history(project, "cli") as history:
            return await history.list_events(name, after_seq=after, limit=limit)

    page = run(go())
    if not page.found:
        _not_found(name, as_json)

    def render(p: Any) -> None:
        rows = [
            {
                **e.model_dump(mode="json"),
                "payload": e.payload[:80].replace("\n", " "),
                "cut": "yes" if e.truncated else "",
            }
            for e in p.events
        ]
        table(rows, ["seq", "kind", "role", "name", "author", "time", "cut", "payload"])
        if p.next_after_seq is not None:
            console.print(f"more: --after {p.next_after_seq}")

    emit(page, as_json, render)


@task_app.command("steps")
def task_steps(
    name: str,
    state: Annotated[StepState | None, typer.Option(help="Only steps in this state.")] = None,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List a task's steps."""

    async def go() -> Any:
        async with open_history(project, "cli", with_graph=False) as history:
            return await history.list_steps(name, state=state)

    result = run(go())
    if not result.found:
        _not_found(name, as_json)
    emit(
        result,
        as_json,
        lambda r: table(
            [s.model_dump(mode="json") for s in r.steps],
            ["step_name", "kind", "state", "attempt", "result_event_seq", "result_validity"],
        ),
    )


@task_app.command("list")
def task_list(
    status: Annotated[TaskStatus | None, typer.Option(help="Only tasks in this status.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List the project's tasks from Temporal visibility (no Neo4j needed)."""

    async def go() -> list[str]:
        async with open_history(project, "cli", with_graph=False) as history:
            return await history.list_tasks(status=status, limit=limit)

    names = run(go())
    emit(names, as_json, lambda n: table([{"task": x} for x in n], ["task"]))


# ---------------------------------------------------------------------------------- dev


def _stack(command: Callable[[Settings], Coroutine[Any, Any, list[Any]]]) -> None:
    from starter import devstack

    try:
        services = asyncio.run(command(Settings()))
    except devstack.DevStackError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from err
    sys.stdout.write(devstack.format_status(services) + "\n")


@dev_app.command("up")
def dev_up() -> None:
    """Start Temporal and Neo4j where nothing answers yet; wait until both answer."""
    from starter import devstack

    _stack(devstack.up)


@dev_app.command("down")
def dev_down() -> None:
    """Stop what `dev up` started (nothing else)."""
    from starter import devstack

    _stack(devstack.down)


@dev_app.command("status")
def dev_status() -> None:
    """Show each service: address, answering, started by us (pid) or external."""
    from starter import devstack

    _stack(devstack.status)


# ---------------------------------------------------------------------------------- worker


@app.command("worker")
def worker_command() -> None:
    """Run a worker until SIGINT or SIGTERM."""
    from worker import run_worker

    run(run_worker())


# ---------------------------------------------------------------------------------- graph


@graph_app.command("init")
def graph_init() -> None:
    """Create the Neo4j constraints and indexes (idempotent)."""

    async def go() -> None:
        async with open_graph(Settings()) as graph:
            await graph.init_schema()

    run(go())
    console.print("schema ready")


@graph_app.command("rebuild")
def graph_rebuild(
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the project's graph (or one task's) from the Temporal histories."""
    from activities.mirror import rebuild

    async def go() -> dict[str, Any]:
        settings = Settings()
        client = await connect(settings)
        async with open_graph(settings) as graph:
            await graph.init_schema()
            return await rebuild(client, graph, project, task)

    report = run(go())
    emit(report, as_json, lambda r: table([{**r, "failed": len(r["failed"])}], list(r)))
    for failure in report["failed"]:
        console.print(f"[red]not rebuilt:[/red] {failure}")
    if report["failed"]:
        raise typer.Exit(1)


@graph_app.command("tasks")
def graph_tasks(
    status: Annotated[TaskStatus | None, typer.Option(help="Only this status.")] = None,
    agent_id: Annotated[str | None, typer.Option("--agent-id", help="Only this agent.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    parent: Annotated[str | None, typer.Option(help="Only children of this task.")] = None,
    after: Annotated[str | None, typer.Option(help="Names after this one (paging).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List tasks from Neo4j."""

    async def go() -> list[dict[str, Any]]:
        async with open_history(project, "cli") as history:
            return await history.find_tasks(
                status=status,
                agent_id=agent_id,
                session_id=session,
                parent=parent,
                after_name=after,
                limit=limit,
            )

    emit(
        run(go()),
        as_json,
        lambda rows: table(
            rows, ["name", "status", "agent_id", "session_id", "parent", "last_seq"]
        ),
    )


@graph_app.command("tree")
def graph_tree(
    name: str,
    depth: Annotated[int, typer.Option(help="Levels of children.")] = 3,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Show a task and its child tasks."""

    async def go() -> list[dict[str, Any]]:
        async with open_history(project, "cli") as history:
            return await history.task_tree(name, depth)

    emit(run(go()), as_json, lambda rows: table(rows, ["depth", "name", "status", "parent"]))


@graph_app.command("events")
def graph_events(
    kind: Annotated[EventKind | None, typer.Option(help="Only this kind.")] = None,
    name: Annotated[str | None, typer.Option(help="Only this tool or label.")] = None,
    since: Annotated[str | None, typer.Option(help="ISO time, inclusive.")] = None,
    until: Annotated[str | None, typer.Option(help="ISO time, exclusive.")] = None,
    failed: Annotated[bool, typer.Option(help="Only results of failed steps.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Find events across tasks (for example every failed tool call)."""
    from pydantic import AwareDatetime, TypeAdapter

    times = TypeAdapter(AwareDatetime | None)

    async def go() -> list[dict[str, Any]]:
        async with open_history(project, "cli") as history:
            return await history.find_events(
                kind=kind,
                name=name,
                since=times.validate_python(since),
                until=times.validate_python(until),
                failed_only=failed,
                limit=limit,
            )

    def render(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            row["payload"] = str(row.get("payload", ""))[:80].replace("\n", " ")
        table(rows, ["task_name", "seq", "kind", "name", "time", "payload"])

    emit(run(go()), as_json, render)


@graph_app.command("steps")
def graph_steps(
    state: Annotated[StepState | None, typer.Option(help="Only this state.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Find steps across tasks (for example every unknown step)."""

    async def go() -> list[dict[str, Any]]:
        async with open_history(project, "cli") as history:
            return await history.find_steps(state=state, limit=limit)

    emit(
        run(go()),
        as_json,
        lambda rows: table(rows, ["task_name", "step_name", "kind", "state", "result_validity"]),
    )


@graph_app.command("failed-tools")
def graph_failed_tools(project: ProjectOpt = "default", as_json: JsonOpt = False) -> None:
    """Failed tool calls across the project's tasks, by tool name."""

    async def go() -> list[dict[str, Any]]:
        async with open_history(project, "cli") as history:
            return await history.failed_tool_calls()

    emit(run(go()), as_json, lambda rows: table(rows, ["tool", "failed", "tasks"]))


# ---------------------------------------------------------------------------------- import


EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "trajectories"
"""The trajectories shipped with the project: the default input of ``agent-tasks import``."""


@app.command("import")
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
    from rich.progress import Progress

    from starter.importer import (
        ImportReport,
        import_file,
        mirror_caught_up,
        trajectory_files,
        verify_file,
    )
    from worker import build_worker

    files = list(trajectory_files(paths or [EXAMPLES]))

    async def go() -> tuple[list[ImportReport], list[str], dict[str, float]]:
        settings = Settings()
        async with open_history(project, agent) as history:
            assert history.graph is not None
            async with contextlib.AsyncExitStack() as stack:
                if with_worker:
                    await history.graph.init_schema()
                    await stack.enter_async_context(
                        build_worker(history.client, history.graph, settings.temporal_task_queue)
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


@app.command("export")
def export_command(
    name: str,
    format: Annotated[str, typer.Option(help="Only atif.")] = "atif",
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="File (default: stdout).")
    ] = None,
    project: ProjectOpt = "default",
) -> None:
    """Write a task as an ATIF trajectory."""
    from starter.importer import export_task

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


# ---------------------------------------------------------------------------------- replay


@app.command("replay")
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
    as_json: JsonOpt = False,
) -> None:
    """Replay task histories against the workflow code on disk: run this before deploying a
    new worker. Exit 1 on any nondeterminism or replay failure.

    Without --dir, fetches the histories of running tasks and of tasks closed within --since
    (every run, runs that continued-as-new included) from the Temporal server of
    TEMPORAL_ADDRESS. --project here is not read from AGENT_TASKS_PROJECT: a deploy check
    covers every project unless asked otherwise. A --dir without any *.json file exits 1 too
    (a wrong path must not pass the check).
    """
    from starter.replay import ReplayResult, all_ok, parse_since, replay_dir, replay_server

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


def main() -> None:
    """Entry point of ``agent-tasks`` and ``python -m starter``: run the command, flush the
    output, and leave with ``os._exit``, because the temporalio client's Rust runtime can crash
    the interpreter while it finalizes (exit 139 after a successful command)."""
    try:
        app()
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
