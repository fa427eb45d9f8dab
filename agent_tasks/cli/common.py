"""What every CLI command shares: the console, options, output and exit codes, and the
``ConversationHistory`` a command works through.

Exit codes: 0 on success, 1 when a write is refused or a read finds nothing (the error code is
printed), 2 on bad arguments, 3 when Temporal or Neo4j cannot be reached.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

import typer

if TYPE_CHECKING:
    from types import ModuleType

    from pydantic import BaseModel, ValidationError
    from rich.console import Console

    from agent_tasks.config import Settings
    from agent_tasks.starter.client import ConversationHistory
    from agent_tasks.starter.results import WriteResult

_T = TypeVar("_T")


class _Page(Protocol):
    @property
    def found(self) -> bool: ...


_P = TypeVar("_P", bound=_Page)


class LazyConsole:
    """Where commands print: ``rich``'s console, made at its first use (160 columns when not
    a terminal, so piped output keeps its rows), so that a command's help and its argument
    errors print without loading ``rich``."""

    _made: Console | None = None

    @property
    def rich(self) -> Console:
        """The console itself (``rich.progress.Progress(console=...)`` takes it)."""
        if self._made is None:
            from rich.console import Console

            self._made = Console(width=None if sys.stdout.isatty() else 160)
        return self._made

    def print(self, *objects: Any, **options: Any) -> None:
        """``rich.console.Console.print``."""
        self.rich.print(*objects, **options)


console = LazyConsole()
"""Where commands print (``LazyConsole``)."""

COMMAND_VARIABLE = "AGENT_TASKS_COMMAND"
"""The variable that names the command a person types to run the CLI (the checkout's ``run``
sets it to itself, as it was typed: ``./run``)."""


def invoked_as() -> str:
    """The command a person typed to run the CLI, for the usage line and the hints to copy:
    ``AGENT_TASKS_COMMAND`` when set (``./run`` in a checkout), else the name this process was
    started by (``agent-tasks``; ``python -m agent_tasks.cli`` counts as ``agent-tasks``)."""
    named = os.environ.get(COMMAND_VARIABLE, "").strip()
    if named:
        return named
    started = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return started if started and not started.endswith(".py") else "agent-tasks"


PROJECT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
"""The public calls' project id rule (``contract.ProjectId``), checked here without loading
the contract's models (tests/cli/test_startup.py holds the two to one rule; the public calls
check it again)."""


def command_group(help: str) -> typer.Typer:
    """A group of commands (``agent-tasks task ...``) whose help is plain text, as click writes
    it: typer's rich help loads ``rich`` with its Markdown and traceback modules, which take
    longer than the rest of a command's help."""
    return typer.Typer(help=help, rich_markup_mode=None)


def project_id(value: str) -> str:
    """``--project``'s check, the public calls' rule (``PROJECT_ID``): a refusal names the
    option and the value, not a validation error of an internal argument."""
    if PROJECT_ID.fullmatch(value) is None:
        raise typer.BadParameter(
            f"{value!r} is not a project id: 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' "
            "and '-', beginning with a letter or digit",
            param_hint="--project",
        )
    return value


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
        from pydantic import AwareDatetime, TypeAdapter, ValidationError

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


# The choices of the options that take a value of the contract's enums (``contract.kinds``),
# spelled here so that a command's help and its argument errors load none of the contract's
# models; tests/cli/test_startup.py holds each to its enum, and the public calls check the value
# again.
EventKindName = Literal[
    "message", "tool_call", "tool_result", "reasoning", "input_request", "input_response",
    "child_task", "child_result", "error", "note", "decision",
]  # fmt: skip
"""``contract.EventKind``'s values."""
RoleName = Literal["system", "user", "assistant", "tool"]
"""``contract.Role``'s values."""
StepKindName = Literal["read", "write", "tool", "model", "human", "child"]
"""``contract.StepKind``'s values."""
StepStateName = Literal["not_started", "in_progress", "completed", "failed", "unknown"]
"""``contract.StepState``'s values."""
TaskStatusName = Literal[
    "open", "done", "failed", "cancelled", "queued", "in_progress", "awaiting_input",
    "awaiting_children",
]  # fmt: skip
"""``contract.TaskStatus``'s values."""


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


_core_logs = False
"""Whether this process's Temporal runtime logs through Python (``core_logs_through_python``)."""


def core_logs_through_python() -> None:
    """Make the Temporal SDK's core log through Python's logging, to stderr
    (``telemetry.log_core_through_python``; standard output is the commands' output), before
    a command makes its first client or worker; ``main_of`` then waits for the last records
    before the process leaves. Loads the SDK: called when a command runs, never for its help."""
    global _core_logs
    if not _core_logs:
        from agent_tasks import telemetry

        telemetry.log_core_through_python()
        _core_logs = True


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` (``core_logs_through_python`` first); turn unreachable services (Temporal,
    a worker, the graph store) into exit code 3 and bad arguments into 2, each with a one-line
    message."""
    import asyncio

    from pydantic import ValidationError

    from agent_tasks.config import Neo4jPasswordMissing, Settings
    from agent_tasks.contract.errors import (
        GraphAuthError,
        GraphUnavailable,
        TaskServiceUnavailable,
    )

    core_logs_through_python()
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
        import json

        from pydantic_core import to_jsonable_python

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
    from pydantic import BaseModel
    from rich.table import Table

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
    from agent_tasks.starter.client import ConversationHistory
    from agent_tasks.worker import open_services

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


def with_history(
    project: str,
    agent: str,
    call: Callable[[ConversationHistory], Awaitable[_T]],
    *,
    with_graph: bool = True,
) -> _T:
    """What ``call`` returns for a ``ConversationHistory`` of ``project`` writing as ``agent``
    (``open_history``), run by ``run`` (its exit codes)."""

    async def go() -> _T:
        async with open_history(project, agent, with_graph) as history:
            return await call(history)

    return run(go())


def found(page: _P, name: str, project: str, as_json: bool) -> _P:
    """``page`` of task ``name``; ``not_found`` (exit 1) when the task is not in ``project``."""
    if not page.found:
        not_found(name, project, as_json)
    return page


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
    a flag takes no value, so it has none to show), and off unless given: a flag whose default
    is None (``--help``, typer's ``--install-completion``) defaults to False, which typer takes
    as it is, where it would check None through pydantic on every run of every command.
    Returns ``command``."""
    shown = command.get_help_option(typer.Context(command))  # made once, then kept
    for param in [*command.params, *([shown] if shown is not None else [])]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
            if param.default is None:
                param.default = False
    subcommands = getattr(command, "commands", None)
    if isinstance(subcommands, dict):  # a lazy group's (``lazy``) are made so when built
        for sub in subcommands.values():
            plain_flags(sub)
    return command


def main_of(app: typer.Typer) -> None:
    """Run ``app`` as a process's command (``plain_flags``), named as it was invoked
    (``invoked_as``): flush the output, and leave with ``os._exit``, because the temporalio
    client's Rust runtime can crash the interpreter while it finalizes (exit 139 after a
    successful command)."""
    try:
        # the shell's completion script calls back with _AGENT_TASKS_COMPLETE whatever the name
        # the CLI was invoked by (typer derives the variable from it: ``./run`` would not do)
        command = plain_flags(typer.main.get_command(app))
        command(prog_name=invoked_as(), complete_var="_AGENT_TASKS_COMPLETE")
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    if _core_logs:
        from agent_tasks import telemetry

        telemetry.drain_core_logs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
