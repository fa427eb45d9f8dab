"""What every CLI command shares: the console, options, output and exit codes, and the
``ConversationHistory`` a command works through.

Exit codes: 0 on success, 1 when a write is refused or a read finds nothing (the error code is
printed), 2 on bad arguments, 3 when Temporal or Neo4j cannot be reached.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

import typer
from pydantic import AwareDatetime, BaseModel, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.table import Table

from agent_tasks import telemetry
from agent_tasks.config import Neo4jPasswordMissing, Settings
from agent_tasks.contract import ProjectId
from agent_tasks.contract.errors import GraphAuthError, GraphUnavailable, TaskServiceUnavailable
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import WriteResult
from agent_tasks.worker import open_services

console = Console(width=None if sys.stdout.isatty() else 160)
"""Where commands print (160 columns when not a terminal, so piped output keeps its rows)."""
_T = TypeVar("_T")


def project_id(value: str) -> str:
    """``--project``'s check, the public calls' rule (``ProjectId``): a refusal names the
    option and the value, not a validation error of an internal argument."""
    try:
        return str(TypeAdapter(ProjectId).validate_python(value))
    except ValidationError as err:
        raise typer.BadParameter(
            f"{value!r} is not a project id: 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' "
            "and '-', beginning with a letter or digit",
            param_hint="--project",
        ) from err


ProjectOpt = Annotated[
    str,
    typer.Option(
        "--project", envvar="AGENT_TASKS_PROJECT", help="Project id.", callback=project_id
    ),
]
AgentOpt = Annotated[str, typer.Option("--agent", envvar="AGENT_TASKS_AGENT", help="Agent id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
RequestOpt = Annotated[
    str | None, typer.Option("--request-id", help="1 to 64 characters; a new UUID if unset.")
]


def within(low: float, high: float | None = None) -> Callable[[Any], Any]:
    """The check of a number option (``typer.Option(callback=within(1, 200))``): a value out
    of range is refused naming the option and the value (typer's own ``min=`` names only
    the option)."""

    def check(value: Any) -> Any:
        if value is not None and (value < low or (high is not None and value > high)):
            span = f"at least {low:g}" if high is None else f"from {low:g} to {high:g}"
            raise typer.BadParameter(f"{value!r} is not {span}")
        return value

    return check


def iso_time(value: str | None) -> str | None:
    """The check of an ISO time option (``2026-12-01T09:00:00+00:00``; a time without an
    offset is refused: which zone it meant is unknown)."""
    if value is not None:
        try:
            TypeAdapter(AwareDatetime).validate_python(value)
        except ValidationError as err:
            raise typer.BadParameter(
                f"{value!r} is not an ISO time with an offset (2026-12-01T09:00:00+00:00): "
                f"{err.errors()[0]['msg']}"
            ) from err
    return value


OPTIONS = {"project_id": "--project", "agent_id": "--agent", "task": "task NAME"}
"""The CLI's name of an argument of the public calls, where it is not ``--`` + its name."""


SHOWN_CHARS = 80
"""Characters of a refused value that a refusal shows (a long one is cut, with ...)."""


def refusal_of(err: ValidationError) -> str:
    """A ``ValidationError`` of the public calls in the CLI's words: each error as the option,
    the value given, and why (``--agent '': String should have at least 1 character``)."""
    parts = []
    for error in err.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        option = OPTIONS.get(field, f"--{field.replace('_', '-')}") if field else "a value"
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= SHOWN_CHARS else f"{shown[: SHOWN_CHARS - 3]}..."
        parts.append(f"{option} {shown}: {error['msg']}")
    return "; ".join(parts)


LimitOpt = Annotated[int, typer.Option(callback=within(1, 200), help="At most this many.")]


ImportOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--import",
        help="Import this module first (repeat), found from the current folder like "
        "`python -m` finds it: the modules that register your agents and tools.",
    ),
]
"""The ``--import MODULE`` option of ``run``, ``worker`` and ``replay`` (``import_modules``)."""


def import_modules(modules: Sequence[str] | None) -> list[ModuleType]:
    """Import ``modules`` (``--import``) as ``python -m`` would find them: the current folder
    first, then the installed packages (an installed console script, unlike ``python -m``,
    does not put the current folder on ``sys.path``; this does, once).

    Returns:
        The modules, in order.

    Raises:
        typer.BadParameter: a module is not found (``--import`` and the name; a module it
            imports that is missing is named too). Other errors of the module's own code
            propagate with their traceback.
    """
    here = str(Path.cwd())
    if modules and here not in sys.path:
        sys.path.insert(0, here)
    imported = []
    for name in modules or []:
        try:
            imported.append(importlib.import_module(name))
        except ModuleNotFoundError as err:
            missing = err.name or name
            where = f"in {here} or the installed packages"
            reason = f"no module {name!r} {where}"
            if missing != name and not name.startswith(f"{missing}."):
                reason = f"{name!r} imports {missing!r}, which is not {where}"
            raise typer.BadParameter(reason, param_hint="--import") from err
    return imported


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro``; turn unreachable services (Temporal, a worker, the graph store) into exit
    code 3 and bad arguments into 2, each with a one-line message."""
    try:
        return asyncio.run(coro)
    except (TaskServiceUnavailable, GraphUnavailable, GraphAuthError, Neo4jPasswordMissing) as err:
        message = str(err)
        reached = not message.startswith("cannot reach Temporal")
        if isinstance(err, TaskServiceUnavailable) and reached and "task queue" not in message:
            queue = Settings().temporal_task_queue
            message += f" (the tasks' task queue: {queue!r}, TEMPORAL_TASK_QUEUE)"
        if isinstance(err, GraphUnavailable):
            message += f" ({graph_address(Settings())})"
        console.print(f"[red]unavailable:[/red] {message}")
        raise typer.Exit(3) from err
    except ValidationError as err:
        console.print(f"[red]invalid arguments:[/red] {refusal_of(err)}")
        raise typer.Exit(2) from err
    except ValueError as err:
        console.print(f"[red]invalid arguments:[/red] {err}")
        raise typer.Exit(2) from err


def graph_address(settings: Settings) -> str:
    """Which graph store the settings name, where, and the setting that says so:
    ``the graph store: Neo4j at bolt://127.0.0.1:7687, NEO4J_URI`` (FalkorDB's URL may carry
    a password: only its host and port are named)."""
    if settings.graph == "falkordb":
        parts = urlsplit(settings.falkordb_url.get_secret_value())
        where = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
        return f"the graph store: FalkorDB at {where}, AGENT_TASKS_FALKORDB_URL"
    return f"the graph store: Neo4j at {settings.neo4j_uri}, NEO4J_URI"


def emit(value: Any, as_json: bool, render: Callable[[Any], None] | None = None) -> None:
    """Print ``value``: JSON with ``--json`` (models, datetimes and all), else
    ``render(value)`` or a plain JSON dump."""
    if as_json or render is None:
        data = to_jsonable_python(value)
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=None if as_json else 2))
        sys.stdout.write("\n")
    else:
        render(value)


WHOLE_COLUMNS = ("name", "task")
"""The columns a person copies from (``agent-tasks show NAME``): ``table`` never cuts them."""


def table(
    rows: Sequence[BaseModel | dict[str, Any]], columns: list[str], title: str | None = None
) -> None:
    """Print ``rows`` (models or dicts) as a rich table of ``columns``. No cell is cut with
    an ellipsis: a long one wraps, and a column of ``WHOLE_COLUMNS`` is not narrowed (the
    others wrap first), so a name is shown whole on one line where it fits."""
    dumped = [row.model_dump(mode="json") if isinstance(row, BaseModel) else row for row in rows]
    cells = [["" if d.get(c) is None else str(d.get(c)) for c in columns] for d in dumped]
    out = Table(title=title)
    for column in columns:
        out.add_column(column, overflow="fold", no_wrap=column in WHOLE_COLUMNS)
    for cell in cells:
        out.add_row(*cell)
    console.print(out)


@asynccontextmanager
async def open_history(
    project: str, agent: str, with_graph: bool = True, task_queue: str | None = None
) -> AsyncIterator[ConversationHistory]:
    """An async context giving a ``ConversationHistory`` from the environment's settings,
    with the Neo4j task graph attached when ``with_graph``, on ``task_queue`` (default
    TEMPORAL_TASK_QUEUE). The graph store is pinged first: an unreachable one fails at once
    (``GraphUnavailable``), not after the driver's retries."""
    async with open_services(with_graph=with_graph) as services:
        if services.graph is not None:
            await services.graph.ping()  # fails at once, not after the driver's retries
        history = ConversationHistory(
            services.client,
            project_id=project,
            agent_id=agent,
            task_queue=task_queue or services.settings.temporal_task_queue,
            graph=services.graph,
            broker=services.broker,
        )
        try:
            yield history
        finally:
            if history.transport.pages is not None:  # before the broker closes
                await history.transport.pages.published()


def write_outcome(result: WriteResult, as_json: bool) -> None:
    """Print a write's result; exit 1 when it was refused."""
    if as_json:
        emit(result, True)
    elif result.recorded:
        detail = "duplicate of an earlier request" if result.duplicate else "recorded"
        seqs = f" seqs {result.first_seq}..{result.last_seq}" if result.first_seq else ""
        console.print(f"[green]{detail}[/green]{seqs}")
        event = result.event
        if event is not None and event.full_length > len(event.payload):
            console.print(
                f"[yellow]payload cut:[/yellow] {len(event.payload):,} of "
                f"{event.full_length:,} characters kept (MAX_PAYLOAD_CHARS); the full text's "
                f"length and SHA-256 ({event.full_sha256[:12]}...) are recorded"
            )
    else:
        console.print(
            f"[red]{result.error.value if result.error else 'refused'}:[/red] {result.message}"
        )
    if not result.recorded:
        raise typer.Exit(1)


def not_found(name: str, project: str, as_json: bool) -> None:
    """Report a task missing from ``project`` (JSON with ``--json``) and exit 1; the message
    names the project and the option that picks another."""
    message = f"no task {name!r} in project {project!r} (--project or AGENT_TASKS_PROJECT)"
    if as_json:
        emit({"error": "task_not_found", "message": message}, True)
    else:
        console.print(f"[red]task_not_found:[/red] {message}")
    raise typer.Exit(1)


def plain_flags(command: Any) -> Any:
    """``command`` (a click command of typer's, and its subcommands) with its flags shown in
    ``--help`` as flags: ``--json``, not ``--json <bool>`` (typer shows every option's type;
    a flag takes no value, so it has none to show). Returns ``command``."""
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    shown = command.get_help_option(typer.Context(command))
    if shown is not None:
        shown.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        plain_flags(sub)
    return command


def main_of(app: typer.Typer) -> None:
    """Run ``app`` as a process's command (``plain_flags``): flush the output, and leave with
    ``os._exit``, because the temporalio client's Rust runtime can crash the interpreter while
    it finalizes (exit 139 after a successful command)."""
    try:
        plain_flags(typer.main.get_command(app))()
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    telemetry.drain_core_logs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
