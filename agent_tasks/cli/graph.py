"""``agent-tasks graph ...``: the graph store's schema, rebuild and cross-task reads (Neo4j or
FalkorDB: ``AGENT_TASKS_GRAPH``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from agent_tasks.cli.common import (
    EventKindName,
    JsonOpt,
    LimitOpt,
    ProjectOpt,
    StepStateName,
    TaskStatusName,
    command_group,
    console,
    emit,
    iso_time,
    not_found,
    run,
    table,
    with_history,
)

if TYPE_CHECKING:
    from agent_tasks.activities.rebuild import RebuildReport
    from agent_tasks.taskgraph.models import EventRow
    from agent_tasks.taskgraph.refusals import GraphHealth

graph_app = command_group(
    "The graph store (Neo4j or FalkorDB): schema, rebuild and cross-task reads."
)


@graph_app.command("init")
def graph_init() -> None:
    """Create the graph store's constraints and indexes (idempotent)."""
    from agent_tasks.config import Settings
    from agent_tasks.worker import open_graph

    async def go() -> None:
        async with open_graph(Settings(), schema=True):
            pass

    run(go())
    console.print("schema ready")


@graph_app.command("rebuild")
def graph_rebuild(
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the project's graph (or one task's) from the Temporal histories."""
    from agent_tasks.activities.rebuild import rebuild
    from agent_tasks.worker import open_services

    async def go() -> RebuildReport:
        async with open_services(schema=True) as services:
            assert services.graph is not None
            return await rebuild(services.client, services.graph, project, task)

    report = run(go())
    emit(
        report,
        as_json,
        lambda r: table(
            [{**r.model_dump(), "failed": len(r.failed)}], ["tasks", "runs", "events", "failed"]
        ),
    )
    for failure in report.failed:
        console.print(f"[red]not rebuilt:[/red] {failure}")
    if report.failed:
        raise typer.Exit(1)


@graph_app.command("tasks")
def graph_tasks(
    status: Annotated[TaskStatusName | None, typer.Option(help="Only this status.")] = None,
    agent_id: Annotated[str | None, typer.Option("--agent-id", help="Only this agent.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    parent: Annotated[str | None, typer.Option(help="Only children of this task.")] = None,
    after: Annotated[str | None, typer.Option(help="Names after this one (paging).")] = None,
    limit: LimitOpt = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List tasks from the graph store."""

    from agent_tasks.contract import TaskStatus

    rows = with_history(
        project,
        "cli",
        lambda history: history.find_tasks(
            status=None if status is None else TaskStatus(status),
            agent_id=agent_id,
            session_id=session,
            parent=parent,
            after_name=after,
            limit=limit,
        ),
    )
    emit(
        rows,
        as_json,
        lambda rows: table(
            rows, ["name", "status", "agent_id", "session_id", "parent", "last_seq"]
        ),
    )


def tree_command(
    name: str,
    depth: Annotated[int, typer.Option(help="Levels of children.")] = 3,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Show a task and its child tasks (from the graph store)."""

    rows = with_history(project, "cli", lambda history: history.task_tree(name, depth))
    if not rows:
        not_found(name, project, as_json)
    emit(rows, as_json, lambda rows: table(rows, ["depth", "name", "status", "parent"]))


@graph_app.command("events")
def graph_events(
    kind: Annotated[EventKindName | None, typer.Option(help="Only this kind.")] = None,
    name: Annotated[str | None, typer.Option(help="Only this tool or label.")] = None,
    since: Annotated[
        str | None, typer.Option(help="ISO time, inclusive.", callback=iso_time)
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="ISO time, exclusive.", callback=iso_time)
    ] = None,
    failed: Annotated[bool, typer.Option(help="Only results of failed steps.")] = False,
    limit: LimitOpt = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Find events across tasks (for example every failed tool call)."""
    from pydantic import AwareDatetime, TypeAdapter

    times = TypeAdapter(AwareDatetime | None)

    from agent_tasks.contract import EventKind

    rows = with_history(
        project,
        "cli",
        lambda history: history.find_events(
            kind=None if kind is None else EventKind(kind),
            name=name,
            since=times.validate_python(since),
            until=times.validate_python(until),
            failed_only=failed,
            limit=limit,
        ),
    )

    def render(rows: list[EventRow]) -> None:
        table(
            [
                {**r.model_dump(mode="json"), "payload": r.payload[:80].replace("\n", " ")}
                for r in rows
            ],
            ["task_name", "seq", "kind", "name", "time", "payload"],
        )

    emit(rows, as_json, render)


@graph_app.command("steps")
def graph_steps(
    state: Annotated[StepStateName | None, typer.Option(help="Only this state.")] = None,
    limit: LimitOpt = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Find steps across tasks (for example every unknown step)."""

    from agent_tasks.contract import StepState

    state_of = None if state is None else StepState(state)
    rows = with_history(
        project, "cli", lambda history: history.find_steps(state=state_of, limit=limit)
    )
    emit(
        rows,
        as_json,
        lambda rows: table(rows, ["task_name", "step_name", "kind", "state", "result_validity"]),
    )


@graph_app.command("failed-tools")
def graph_failed_tools(project: ProjectOpt = "default", as_json: JsonOpt = False) -> None:
    """Failed tool calls across the project's tasks, by tool name case-folded (bash and
    Bash are one row; spellings shows the names as the model wrote them), most first."""

    emit(
        with_history(project, "cli", lambda history: history.failed_tool_calls()),
        as_json,
        lambda rows: table(
            [{**r.model_dump(), "spellings": ", ".join(r.spellings)} for r in rows],
            ["tool", "spellings", "failed", "tasks"],
        ),
    )


@graph_app.command("health")
def graph_health_command(project: ProjectOpt = "default", as_json: JsonOpt = False) -> None:
    """Whether the graph store answers, and the project's tasks whose mirror it refused for
    their data (each closed without those writes in the store, retried by the workers from
    its history until the store takes it), and how many of every project wait. Exit code 1
    when it does not answer or any wait."""
    from agent_tasks.config import Settings
    from agent_tasks.taskgraph.refusals import graph_health
    from agent_tasks.worker import open_graph

    async def go() -> GraphHealth:
        async with open_graph(Settings()) as graph:
            return await graph_health(graph, project, every_project=True)

    health = run(go())

    def render(h: GraphHealth) -> None:
        said = "answers" if h.reachable else f"does not answer: {h.error}"
        console.print(
            f"{h.store} {said}; tasks whose mirror it refused: {h.refused_tasks} in the "
            f"project, {h.refused_everywhere} in every project"
        )
        if h.refused:
            table(h.refused, ["workflow_id", "attempts", "first_at", "retry_at", "error"])

    emit(health, as_json, render)
    if not health.reachable or health.refused_everywhere:
        raise typer.Exit(1)


graph_app.command("tree")(tree_command)
