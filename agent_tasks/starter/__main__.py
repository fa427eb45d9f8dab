"""``python -m starter``: the same as the ``agent-tasks`` command."""

from agent_tasks.starter.cli import main

main()
