"""``agent-tasks task ...``: create, write and read one task."""

from __future__ import annotations

import shlex
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_tasks.cli.common import (
    AgentOpt,
    EventKindName,
    JsonOpt,
    LimitOpt,
    ProjectOpt,
    RequestOpt,
    RoleName,
    StepKindName,
    StepStateName,
    TaskStatusName,
    command_group,
    console,
    emit,
    found,
    table,
    with_history,
    within,
    write_outcome,
)
from agent_tasks.cli.retention import decisions_command, delete_command, redact_command

if TYPE_CHECKING:
    from agent_tasks.taskgraph.models import TaskRow

task_app = command_group("Create, write and read tasks.")


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

    result = with_history(
        project,
        agent,
        lambda history: history.create_task(
            name,
            goal,
            request_id=request_id,
            metadata=metadata,
            parent=parent,
            session_id=session,
        ),
    )
    write_outcome(result, as_json)


@task_app.command("event")
def task_event(
    name: str,
    kind: Annotated[EventKindName, typer.Option(help="Event kind.")],
    payload: Annotated[str | None, typer.Option(help="Payload text.")] = None,
    payload_file: Annotated[Path | None, typer.Option(help="Read the payload from a file.")] = None,
    role: Annotated[RoleName | None, typer.Option(help="Message role.")] = None,
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

    from agent_tasks.contract import EventKind, Role

    result = with_history(
        project,
        agent,
        lambda history: history.record_event(
            name,
            EventKind(kind),
            text,
            role=None if role is None else Role(role),
            name=tool,
            call_id=call_id,
            request_id=request_id,
        ),
    )
    write_outcome(result, as_json)


@task_app.command("step")
def task_step(
    name: str,
    step: str,
    state: Annotated[StepStateName, typer.Option(help="New state.")],
    kind: Annotated[StepKindName | None, typer.Option(help="Step kind (new steps).")] = None,
    result_seq: Annotated[int | None, typer.Option(help="Seq of the result event.")] = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a step's state."""

    from agent_tasks.contract import StepKind, StepState

    result = with_history(
        project,
        agent,
        lambda history: history.set_step(
            name,
            step,
            StepState(state),
            kind=None if kind is None else StepKind(kind),
            result_event_seq=result_seq,
            request_id=request_id,
        ),
        with_graph=False,
    )
    write_outcome(result, as_json)


@task_app.command("finish")
def task_finish(
    name: str,
    status: Annotated[TaskStatusName, typer.Option(help="done, failed or cancelled.")],
    result: Annotated[str | None, typer.Option(help="Result text.")] = None,
    error: Annotated[str | None, typer.Option(help="Error text.")] = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Finish a task."""

    from agent_tasks.contract import TaskStatus

    finished = with_history(
        project,
        agent,
        lambda history: history.finish_task(
            name, TaskStatus(status), result=result, error=error, request_id=request_id
        ),
        with_graph=False,
    )
    write_outcome(finished, as_json)


@task_app.command("show")
def task_show(name: str, project: ProjectOpt = "default", as_json: JsonOpt = False) -> None:
    """Show a task's view."""

    view = found(
        with_history(project, "cli", lambda history: history.get_task(name)), name, project, as_json
    ).view
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
    after: Annotated[int, typer.Option(callback=within(0), help="Events after this seq.")] = 0,
    limit: LimitOpt = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List a task's events (all runs)."""

    page = with_history(project, "cli", lambda history: history.list_events(name, after, limit))

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

    emit(found(page, name, project, as_json), as_json, render)


@task_app.command("steps")
def task_steps(
    name: str,
    state: Annotated[StepStateName | None, typer.Option(help="Only steps in this state.")] = None,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List a task's steps."""

    from agent_tasks.contract import StepState

    state_of = None if state is None else StepState(state)
    page = with_history(project, "cli", lambda history: history.list_steps(name, state_of))
    emit(
        found(page, name, project, as_json),
        as_json,
        lambda r: table(
            [s.model_dump(mode="json") for s in r.steps],
            ["step_name", "kind", "state", "attempt", "result_event_seq", "result_validity"],
        ),
    )


@task_app.command("list")
def task_list(
    status: Annotated[
        TaskStatusName | None, typer.Option(help="Only tasks in this status.")
    ] = None,
    after: Annotated[
        str | None, typer.Option(help="Names after this one: the next page (printed under it).")
    ] = None,
    limit: LimitOpt = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List the project's tasks in name order (A before B before a; --after NAME for the next
    page): a table of status, agent, created (UTC) and the full name, read from the graph
    store. --json prints each task's row (goal, session, parent, counts and times too)."""

    from agent_tasks.contract import TaskStatus

    status_of = None if status is None else TaskStatus(status)
    rows = with_history(
        project,
        "cli",
        lambda history: history.find_tasks(status=status_of, after_name=after, limit=limit),
    )

    def render(rows: list[TaskRow]) -> None:
        shown = [
            {
                "status": "" if r.status is None else r.status.value,
                "agent": r.agent_id,
                "created": r.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
                if r.created_at
                else "",
                "name": r.name,
            }
            for r in rows
        ]
        table(shown, ["status", "agent", "created", "name"])
        if len(rows) == limit:
            console.print(f"more: --after {shlex.quote(rows[-1].name)}", markup=False)

    emit(rows, as_json, render)


task_app.command("decisions")(decisions_command)
task_app.command("redact")(redact_command)
task_app.command("delete")(delete_command)
