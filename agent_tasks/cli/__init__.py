"""``agent-tasks`` (also ``python -m agent_tasks.cli``): the command line for a person at a
terminal.

One module per command group: ``task`` (one task; its ``redact``, ``delete`` and
``decisions`` in ``retention``), ``graph`` (the graph store), ``dev`` (the local stack, the
worker and ``setup``), ``transfer`` (import and export), ``replay`` (the pre-deploy check),
``agents`` (agent tasks: ``run``, ``cancel``, ``input``, ``approve`` ...), ``serve`` (the HTTP
API and its API keys). A command loads what it runs when it runs it: the root group builds a
command only when it is used (``lazy``), and each command module imports its work inside the
command, so ``--help`` and an argument error load none of it.
Output is readable by default; ``--json`` prints JSON for scripts. Exit codes: 0 on success,
1 when a write is refused or a read finds nothing (the error code is printed), 2 on bad
arguments, 3 when Temporal or Neo4j cannot be reached.
"""

from __future__ import annotations

import typer

from agent_tasks.cli.common import main_of
from agent_tasks.cli.lazy import LazyGroup

COMMANDS = {
    "task": "agent_tasks.cli.task:task_app",
    "dev": "agent_tasks.cli.dev:dev_app",
    "graph": "agent_tasks.cli.graph:graph_app",
    "worker": "agent_tasks.cli.dev:worker_command",
    "setup": "agent_tasks.cli.dev:setup_command",
    "import": "agent_tasks.cli.transfer:import_command",
    "export": "agent_tasks.cli.transfer:export_command",
    "replay": "agent_tasks.cli.replay:replay_command",
    "run": "agent_tasks.cli.agents:run_command",
    "cancel": "agent_tasks.cli.agents:cancel_command",
    "resume": "agent_tasks.cli.agents:resume_command",
    "continue": "agent_tasks.cli.agents:continue_command",
    "branch": "agent_tasks.cli.agents:branch_command",
    "step": "agent_tasks.cli.agents:step_app",
    "input": "agent_tasks.cli.agents:input_command",
    "approve": "agent_tasks.cli.agents:approve_command",
    "tree": "agent_tasks.cli.graph:tree_command",
    "serve": "agent_tasks.cli.serve:serve_command",
    "page": "agent_tasks.cli.serve:page_command",
    "keys": "agent_tasks.cli.serve:keys_app",
}
"""Each command of ``agent-tasks`` -> the ``typer.Typer`` group or the function that is it, in
the order ``--help`` lists them."""


class Commands(LazyGroup):
    """The root group: ``COMMANDS``, each built when it is first used."""

    lazy = COMMANDS


app = typer.Typer(
    help="Durable tasks for AI agents, on Temporal with a graph store (Neo4j or FalkorDB).",
    cls=Commands,
    rich_markup_mode=None,  # plain help, as click writes it (``common.command_group``)
)


@app.callback()
def root() -> None:
    """The root group's own step before any command: none (typer makes an app with a callback a
    group, and a group holds the lazily built commands)."""


def main() -> None:
    """Entry point of ``agent-tasks`` and ``python -m agent_tasks.cli`` (``main_of``: flushed
    output, ``os._exit``). The Temporal SDK's core logs through Python's logging, to stderr,
    from the first command that runs it (``common.core_logs_through_python``): standard output
    is the commands' output."""
    main_of(app)
