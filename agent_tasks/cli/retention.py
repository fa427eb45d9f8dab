"""``agent-tasks task redact | delete | decisions``: remove recorded history, read decisions
(``starter.retention.HistoryRetention``, ``ConversationHistory.list_decisions``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_tasks.cli.common import (
    AgentOpt,
    JsonOpt,
    LimitOpt,
    ProjectOpt,
    console,
    emit,
    found,
    open_history,
    run,
    table,
    with_history,
    within,
)

if TYPE_CHECKING:
    from agent_tasks.starter.results import DeleteResult, RedactResult
    from agent_tasks.starter.retention import HistoryRetention


@asynccontextmanager
async def open_retention(project: str, agent: str) -> AsyncIterator[HistoryRetention]:
    """A ``HistoryRetention`` from the environment's settings (Temporal and Neo4j)."""
    from agent_tasks.starter.retention import HistoryRetention

    async with open_history(project, agent) as history:
        yield HistoryRetention(
            history.client,
            project,
            agent,
            graph=history.graph,
            task_queue=history.task_queue,
        )


def _outcome(result: RedactResult | DeleteResult, as_json: bool, done: str) -> None:
    """Print a redaction's or deletion's result; exit 1 when it was refused."""
    if as_json:
        emit(result, True)
    elif result.recorded:
        again = " (done before)" if result.duplicate else ""
        affected = ", ".join(result.affected_decision_ids) or "none"
        console.print(f"[green]{done}{again}[/green]; decisions affected: {affected}")
    else:
        error = result.error.value if result.error else "refused"
        console.print(f"[red]{error}:[/red] {result.message}")
    if not result.recorded:
        raise typer.Exit(1)


def redact_command(
    event_id: str,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    as_json: JsonOpt = False,
) -> None:
    """Remove an event's text (by its id) from every read, from Neo4j and, by destroying its
    data key, from Temporal; the event keeps its seq, length and hash."""

    async def go() -> RedactResult:
        async with open_retention(project, agent) as retention:
            return await retention.redact_event(event_id)

    result = run(go())
    _outcome(result, as_json, f"redacted seq {result.seq} of task {result.task!r}")


def delete_command(
    name: str,
    keep_decisions: Annotated[
        bool, typer.Option(help="Keep the task's decisions in Neo4j, detached.")
    ] = False,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    as_json: JsonOpt = False,
) -> None:
    """Delete a task: every run from Temporal, its Neo4j nodes and data keys; its name stays
    taken."""

    async def go() -> DeleteResult:
        async with open_retention(project, agent) as retention:
            return await retention.delete_task(name, include_decisions=not keep_decisions)

    result = run(go())
    _outcome(
        result,
        as_json,
        f"deleted {len(result.runs_deleted)} runs, {result.events_deleted} events, "
        f"{result.steps_deleted} steps, {result.keys_destroyed} keys",
    )


def decisions_command(
    name: str,
    after: Annotated[int, typer.Option(callback=within(0), help="Decisions after this seq.")] = 0,
    limit: LimitOpt = 50,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List a task's decisions, with whether each needs review."""

    page = with_history(project, "cli", lambda history: history.list_decisions(name, after, limit))

    def render(p: Any) -> None:
        rows = [
            {
                **d.model_dump(mode="json"),
                "statement": d.statement[:80].replace("\n", " "),
                "cites": f"events {d.cites.events} steps {[s.name for s in d.cites.steps]}",
            }
            for d in p.decisions
        ]
        table(rows, ["seq", "id", "author", "needs_review", "cites", "statement"])

    emit(found(page, name, project, as_json), as_json, render)
