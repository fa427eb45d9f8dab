"""A command loads what it runs, when it runs it: ``agent-tasks --help``, a group's and a
command's help, and an argument error load neither the services' drivers (Neo4j, FalkorDB,
Redis), the HTTP server (FastAPI, uvicorn, ``agent_tasks.server``), the Temporal SDK, the
settings (``agent_tasks.config``, pydantic-settings) nor the contract's models; the root's help
builds no command; and what the CLI spells out to stay light (the enums' values, the project
id rule, defaults of heavy modules) is held to the source it copies.

How fast they answer is measured in bench/ (``python -m bench cli``), never asserted here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from enum import StrEnum
from typing import Any, get_args

import pytest
import typer
from pydantic import TypeAdapter, ValidationError

from agent_tasks import contract
from agent_tasks.cli import COMMANDS, app
from agent_tasks.cli import common as cli_common
from agent_tasks.cli.lazy import LazyCommands, first_sentence, help_of
from tests.cli.test_cli_errors import ROOT

NEVER_FOR_HELP = (
    "neo4j",
    "falkordb",
    "redis",
    "fastapi",
    "starlette",
    "uvicorn",
    "temporalio",
    "pydantic_settings",
    "rich",
    "agent_tasks.server",
    "agent_tasks.config",
    "agent_tasks.contract",
    "agent_tasks.worker",
    "agent_tasks.workflows",
    "agent_tasks.activities",
    "agent_tasks.devstack",
    "agent_tasks.taskgraph",
    "agent_tasks.telemetry",
    "agent_tasks.starter",
)
"""What no help and no argument error loads (a package, or any module below it)."""
HELP_MODULES_AT_MOST = 220
"""The most modules a help may hold: the interpreter's own, typer's and ours are about 170
(before the commands were loaded lazily, ``--help`` held 1,361)."""


def loaded_by(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    """Run ``agent-tasks ARGS`` (the entry point, ``agent_tasks.cli.main``) in a fresh
    interpreter; its exit code, the modules it held when it left (``main`` leaves with
    ``os._exit``, which this records first) and its output."""
    code = (
        "import json, os, sys\n"
        "leave = os._exit\n"
        "def recorded(code):\n"
        "    sys.stderr.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\n"
        "    sys.stderr.flush()\n"
        "    leave(code)\n"
        "os._exit = recorded\n"
        f"sys.argv = ['agent-tasks', *{list(args)!r}]\n"
        "from agent_tasks.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=120,
    )
    listing = re.search(r"^MODULES (.*)$", done.stderr, re.MULTILINE)
    assert listing is not None, done.stderr
    return done.returncode, json.loads(listing.group(1)), done.stdout + done.stderr


def heavy(modules: list[str]) -> list[str]:
    """The modules of ``modules`` that are, or are below, one of ``NEVER_FOR_HELP``."""
    return [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in NEVER_FOR_HELP)]


def test_heavy_finds_a_module_below_a_refused_package() -> None:
    found = heavy(["neo4j.time", "neo4jx", "agent_tasks.server", "agent_tasks.cli", "rich"])
    assert found == ["neo4j.time", "agent_tasks.server", "rich"]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["task", "--help"],
        ["task", "list", "--help"],
        ["serve", "--help"],
        ["run", "--help"],
        ["worker", "--help"],
        ["graph", "events", "--help"],
    ],
)
def test_a_help_loads_no_service_server_sdk_or_settings(args: list[str]) -> None:
    code, modules, said = loaded_by(*args)
    assert code == 0, said
    assert "Usage: agent-tasks" in said
    assert heavy(modules) == []
    assert len(modules) <= HELP_MODULES_AT_MOST, len(modules)
    print(f"agent-tasks {' '.join(args)}: {len(modules)} modules")


def test_the_root_help_holds_no_pydantic_and_no_command_work() -> None:
    """The root's help lists every command without building one: no command's module is asked
    for more than its docstring, and typer's pydantic coercion never runs (nothing is parsed)."""
    code, modules, said = loaded_by("--help")
    assert code == 0
    assert "pydantic" not in modules
    for name in COMMANDS:
        assert re.search(rf"^  {re.escape(name)}\s", said, re.MULTILINE), name


def test_a_groups_help_takes_its_flags_as_given_without_pydantic() -> None:
    """typer checks each option's value through pydantic when it is not a bool, and the root's
    ``--help`` and completion flags are None unless given: ``plain_flags`` makes them False,
    so ``task list --help`` parses without loading pydantic."""
    code, modules, said = loaded_by("task", "list", "--help")
    assert code == 0, said
    assert "pydantic" not in modules and "in name order" in said


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["task", "show"], "Missing argument 'name'"),
        (["task", "list", "--limit", "0"], "0 is not from 1 to 200"),
        (["task", "list", "--status", "nope"], "'nope' is not one of"),
        (["task", "list", "--project", "bad id!"], "'bad id!' is not a project id"),
        (["task", "create", "t", "--project", "p"], "Missing option '--goal'"),
        (["graph", "events", "--since", "soon"], "'soon' is not an ISO time"),
        (["serve", "--import", "x"], "add --with-worker"),
        (["task", "show", "t", "--bogus"], "No such option: --bogus"),
        (["tsk"], "No such command 'tsk'. Did you mean 'task'?"),
    ],
)
def test_an_argument_error_loads_no_service_server_sdk_or_settings(
    args: list[str], said: str
) -> None:
    code, modules, output = loaded_by(*args)
    assert code == 2, output
    assert said in " ".join(output.split()), output
    assert heavy(modules) == [], args


def test_the_usage_line_and_hints_name_the_command_as_it_was_invoked() -> None:
    """A checkout's ``./run`` sets ``AGENT_TASKS_COMMAND`` to itself: the usage line and the
    page's hints name it, where a person typed it (``agent-tasks`` otherwise)."""
    _, _, said = loaded_by("task", "show", env={"AGENT_TASKS_COMMAND": "./run"})
    assert "Usage: ./run task show" in said and "Try './run task show --help'" in said
    _, _, plain = loaded_by("task", "show", env={"AGENT_TASKS_COMMAND": ""})
    assert "Usage: agent-tasks task show" in plain


@pytest.mark.parametrize("invoked", ["", "./run"])
def test_completing_a_command_loads_no_command_work(invoked: str) -> None:
    """Shell completion of a command's name ran every command module's imports (pallets/click#945:
    2.5 s a completion step; fastapi/typer#231): it loads no service, server or SDK, and names
    its variable ``_AGENT_TASKS_COMPLETE`` however the CLI was invoked (``./run``)."""
    asked = {
        "_AGENT_TASKS_COMPLETE": "complete_bash",
        "COMP_WORDS": "agent-tasks t",
        "COMP_CWORD": "1",
        "AGENT_TASKS_COMMAND": invoked,
    }
    code, modules, said = loaded_by(env=asked)
    assert code == 0, said
    assert said.split()[:2] == ["task", "tree"], said
    assert heavy(modules) == []
    deeper = {**asked, "COMP_WORDS": "agent-tasks task li", "COMP_CWORD": "2"}
    code, modules, said = loaded_by(env=deeper)
    assert (code, said.split()[0], heavy(modules)) == (0, "list", []), said


def test_the_root_lists_each_command_with_the_first_sentence_it_shows_when_built() -> None:
    """The root's listing (``LazyCommands.short_help``) reads each command's help without
    building it, and says what the built command says."""
    commands = LazyCommands(COMMANDS, {})
    listed = {name: commands.short_help(name) for name in COMMANDS}
    assert commands.built == {}
    for name in COMMANDS:
        built = commands[name]
        assert listed[name] == first_sentence(built.help or ""), name
        assert listed[name] and "\n" not in listed[name]
    assert first_sentence("Run it. Then more.") == "Run it"
    assert first_sentence("One line.\n  Wrapped") == "One line"
    assert help_of("agent_tasks.cli.task:task_app") == "Create, write and read tasks."


def test_every_command_builds_and_each_group_is_a_group() -> None:
    """Every name of ``COMMANDS`` builds a click command: a ``typer.Typer`` as a group (even one
    of a single command: ``step retry``), a function as a command."""
    root: Any = typer.main.get_command(app)
    for name, target in COMMANDS.items():
        built = root.get_command(typer.Context(root), name)
        assert built is not None, name
        module, _, attribute = target.partition(":")
        is_group = isinstance(getattr(sys.modules[module], attribute), typer.Typer)
        assert hasattr(built, "commands") == is_group, name
    assert "retry" in root.get_command(typer.Context(root), "step").commands


@pytest.mark.parametrize(
    ("choice", "enum"),
    [
        (cli_common.EventKindName, contract.EventKind),
        (cli_common.RoleName, contract.Role),
        (cli_common.StepKindName, contract.StepKind),
        (cli_common.StepStateName, contract.StepState),
        (cli_common.TaskStatusName, contract.TaskStatus),
    ],
)
def test_each_choice_is_its_enum(choice: Any, enum: type[StrEnum]) -> None:
    assert list(get_args(choice)) == [member.value for member in enum]


@pytest.mark.parametrize(
    "value",
    ["a", "A-1", "p.q_r-s", "9" * 64, "9" * 65, "", "-a", "_a", ".a", "a b", "a/b", "a\n", "é"],
)
def test_the_cli_project_rule_is_the_contracts(value: str) -> None:
    try:
        TypeAdapter(contract.ProjectId).validate_python(value)
        valid = True
    except ValidationError:
        valid = False
    assert (cli_common.PROJECT_ID.fullmatch(value) is not None) == valid


def test_the_defaults_spelled_in_the_cli_are_their_sources() -> None:
    from agent_tasks import server, worker
    from agent_tasks.cli import dev, importer, serve, transfer

    assert timedelta(days=dev.RETENTION_DAYS) == worker.DEFAULT_RETENTION
    assert serve.GRACEFUL_TIMEOUT_S == server.GRACEFUL_TIMEOUT_S
    assert importer.CONCURRENCY == transfer.CONCURRENCY
