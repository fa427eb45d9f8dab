"""``agent-tasks dev ...`` (the local stack), ``agent-tasks worker`` and ``agent-tasks setup``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_tasks.cli.agents import served_tools
from agent_tasks.cli.common import (
    ImportOpt,
    command_group,
    console,
    core_logs_through_python,
    run,
    within,
)

if TYPE_CHECKING:
    from agent_tasks.config import Settings
    from agent_tasks.devstack import ServiceStatus

dev_app = command_group(
    "The local stack: Temporal dev server, Neo4j and the broker. Where they listen and keep"
    " their data comes from the environment: TEMPORAL_ADDRESS, NEO4J_URI, AGENT_TASKS_BROKER_URL,"
    " AGENT_TASKS_DATA_DIR (a second stack beside a running one sets all four:"
    " docs/configuration-and-deploy.md)."
)


def _stack(
    command: Callable[[Settings], Coroutine[Any, Any, list[ServiceStatus]]],
) -> list[ServiceStatus]:
    """Run ``command`` with the environment's settings, print the data folder and the
    services it reports, and return them."""
    import asyncio

    from agent_tasks import devstack
    from agent_tasks.config import Settings

    core_logs_through_python()
    settings = Settings()
    try:
        services = asyncio.run(command(settings))
    except devstack.DevStackError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from err
    sys.stdout.write(f"data folder {settings.data_dir}\n{devstack.format_status(services)}\n")
    return services


RETENTION_DAYS = 30
"""The days ``dev up`` and ``setup`` keep a closed task's history unless told
(``worker.DEFAULT_RETENTION``, spelled here so that their help loads no worker; a test holds
the two equal)."""
RetentionDays = Annotated[
    int,
    typer.Option(
        envvar="AGENT_TASKS_RETENTION_DAYS",
        callback=within(1),
        help="Days Temporal keeps a closed task's history.",
    ),
]
"""The ``--retention-days`` option of ``dev up`` and ``setup``."""


RETENTION_MEANS = "how long Temporal keeps a closed task's history; --retention-days"
"""What the retention on ``dev up``'s Temporal line means (a newcomer reads it there)."""


async def up(settings: Settings, retention: timedelta) -> list[ServiceStatus]:
    """``devstack.up``, then, on a Temporal dev server of the local stack (not an external
    one), the namespace's retention (``prepare_namespace``: the dev server makes every
    namespace with one day, after which a closed task's history is gone)."""
    from dataclasses import replace

    from agent_tasks import devstack
    from agent_tasks.config import connect
    from agent_tasks.worker import prepare_namespace

    services = await devstack.up(settings)
    temporal = services[0]
    if not temporal.external:
        changed = await prepare_namespace(await connect(settings), retention)
        note = "; ".join(changed) or f"retention {retention.days} days"
        note += f" ({RETENTION_MEANS})"
        services[0] = replace(temporal, detail=f"{temporal.detail}; {note}".lstrip("; "))
    return services


@dev_app.command("up")
def dev_up(retention_days: RetentionDays = RETENTION_DAYS) -> None:
    """Start Temporal, Neo4j and the broker where nothing answers yet; wait until they answer.
    Sets the namespace's retention on the local Temporal (30 days unless told)."""
    _stack(lambda settings: up(settings, timedelta(days=retention_days)))


@dev_app.command("down")
def dev_down() -> None:
    """Stop what `dev up` started with this data folder (AGENT_TASKS_DATA_DIR, else the
    user's data folder), from any current folder; nothing else. Exit 1 when a server answers
    that it did not start (it is left running, and the line says why)."""
    from agent_tasks import devstack

    services = _stack(devstack.down)
    if any(service.answering for service in services):
        raise typer.Exit(1)


@dev_app.command("status")
def dev_status() -> None:
    """Show each service: address, answering, started by us (pid) or external."""
    from agent_tasks import devstack

    _stack(devstack.status)


def worker_command(modules: ImportOpt = None) -> None:
    """Run a worker until SIGINT or SIGTERM, polling TEMPORAL_TASK_QUEUE: the demo agent and
    its file tools (over AGENT_TASKS_FILES_ROOT), and the agents and tools of the --import
    modules."""
    from agent_tasks.worker import run_worker

    run(run_worker(tools=served_tools(modules)))


def setup_command(
    retention_days: RetentionDays = RETENTION_DAYS,
    wait: Annotated[
        float,
        typer.Option(
            callback=within(0), help="Seconds to keep trying while Temporal is still starting."
        ),
    ] = 0,
) -> None:
    """Ready Temporal and Neo4j (idempotent): the namespace with its retention and the task
    search attributes, then the Neo4j constraints and indexes. Exit 1 when Temporal refuses
    (for example Temporal Cloud, where namespaces are made with tcld or the console)."""
    import asyncio

    from temporalio.service import RPCError, RPCStatusCode

    from agent_tasks.config import Settings, connect
    from agent_tasks.contract.errors import TaskServiceUnavailable
    from agent_tasks.worker import open_graph, prepare_namespace

    async def go() -> list[str]:
        settings = Settings()
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            try:
                client = await connect(settings)
                done = await prepare_namespace(client, timedelta(days=retention_days))
                break
            except (TaskServiceUnavailable, RPCError) as err:
                starting = not isinstance(err, RPCError) or err.status == RPCStatusCode.UNAVAILABLE
                if not starting or asyncio.get_running_loop().time() >= deadline:
                    raise
                console.print(f"Temporal is not ready yet ({err}); trying again")
                await asyncio.sleep(2)
        async with open_graph(settings, schema=True):
            pass
        return done

    try:
        done = run(go())
    except RPCError as err:
        console.print(f"[red]refused:[/red] {err.status.name if err.status else ''} {err}")
        raise typer.Exit(1) from err
    for line in done or ["Temporal namespace ready, nothing to change"]:
        console.print(line)
    console.print("Neo4j schema ready")
