"""``python -m agent_tasks.cli``: the same as the ``agent-tasks`` command."""

from agent_tasks.cli import main

main()
