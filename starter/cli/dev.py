"""``agent-tasks dev ...`` (the local stack), ``agent-tasks worker`` and ``agent-tasks setup``."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Annotated, Any

import typer

import devstack
from config import Settings, connect
from starter.cli.common import console, run
from worker import DEFAULT_RETENTION, open_graph, prepare_namespace, run_worker

dev_app = typer.Typer(help="The local stack: Temporal dev server and Neo4j.")


def _stack(command: Callable[[Settings], Coroutine[Any, Any, list[Any]]]) -> None:
    try:
        services = asyncio.run(command(Settings()))
    except devstack.DevStackError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from err
    sys.stdout.write(devstack.format_status(services) + "\n")


@dev_app.command("up")
def dev_up() -> None:
    """Start Temporal and Neo4j where nothing answers yet; wait until both answer."""
    _stack(devstack.up)


@dev_app.command("down")
def dev_down() -> None:
    """Stop what `dev up` started (nothing else)."""
    _stack(devstack.down)


@dev_app.command("status")
def dev_status() -> None:
    """Show each service: address, answering, started by us (pid) or external."""
    _stack(devstack.status)


def worker_command() -> None:
    """Run a worker until SIGINT or SIGTERM."""
    run(run_worker())


def setup_command(
    retention_days: Annotated[
        int,
        typer.Option(
            envvar="AGENT_TASKS_RETENTION_DAYS",
            min=1,
            help="Days Temporal keeps a closed task's history.",
        ),
    ] = DEFAULT_RETENTION.days,
) -> None:
    """Ready Temporal and Neo4j (idempotent): the namespace with its retention and the task
    search attributes, then the Neo4j constraints and indexes."""

    async def go() -> list[str]:
        settings = Settings()
        done = await prepare_namespace(await connect(settings), timedelta(days=retention_days))
        async with open_graph(settings, schema=True):
            pass
        return done

    for line in run(go()) or ["Temporal namespace ready, nothing to change"]:
        console.print(line)
    console.print("Neo4j schema ready")
