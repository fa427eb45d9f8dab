"""``agent-tasks`` (also ``python -m agent_tasks.cli``): the command line for a person at a
terminal.

One module per command group: ``task`` (one task; its ``redact``, ``delete`` and
``decisions`` in ``retention``), ``graph`` (Neo4j), ``dev`` (the local
stack, the worker and ``setup``), ``transfer`` (import and export), ``replay`` (the pre-deploy
check), ``serve`` (the HTTP API and its API keys).
Output is readable by default; ``--json`` prints JSON for scripts. Exit codes: 0 on success,
1 when a write is refused or a read finds nothing (the error code is printed), 2 on bad
arguments, 3 when Temporal or Neo4j cannot be reached.
"""

from __future__ import annotations

import typer

from agent_tasks import telemetry
from agent_tasks.cli.agents import (
    approve_command,
    branch_command,
    cancel_command,
    continue_command,
    input_command,
    resume_command,
    run_command,
    step_app,
)
from agent_tasks.cli.common import main_of
from agent_tasks.cli.dev import dev_app, setup_command, worker_command
from agent_tasks.cli.graph import graph_app, tree_command
from agent_tasks.cli.replay import replay_command
from agent_tasks.cli.retention import decisions_command, delete_command, redact_command
from agent_tasks.cli.serve import keys_app, page_command, serve_command
from agent_tasks.cli.task import task_app
from agent_tasks.cli.transfer import export_command, import_command

app = typer.Typer(
    help="Durable tasks for AI agents, on Temporal with a Neo4j mirror.",
    rich_markup_mode="markdown",  # a docstring's lines are one paragraph, wrapped to the terminal
)
task_app.command("decisions")(decisions_command)
task_app.command("redact")(redact_command)
task_app.command("delete")(delete_command)
app.add_typer(task_app, name="task")
app.add_typer(dev_app, name="dev")
app.add_typer(graph_app, name="graph")
app.command("worker")(worker_command)
app.command("setup")(setup_command)
app.command("import")(import_command)
app.command("export")(export_command)
app.command("replay")(replay_command)
app.command("run")(run_command)
app.command("cancel")(cancel_command)
app.command("resume")(resume_command)
app.command("continue")(continue_command)
app.command("branch")(branch_command)
app.add_typer(step_app, name="step")
app.command("input")(input_command)
app.command("approve")(approve_command)
app.command("tree")(tree_command)
app.command("serve")(serve_command)
app.command("page")(page_command)
app.add_typer(keys_app, name="keys")


def main() -> None:
    """Entry point of ``agent-tasks`` and ``python -m agent_tasks.cli`` (``main_of``: flushed
    output, ``os._exit``). The Temporal SDK's core logs through Python's logging, to stderr
    (``telemetry.log_core_through_python``): standard output is the commands' output."""
    telemetry.log_core_through_python()
    main_of(app)
