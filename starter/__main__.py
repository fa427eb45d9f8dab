"""``python -m starter``: the same as the ``agent-tasks`` command."""

from starter.cli import main

main()
