"""``python -m agent_tasks.devstack up|down|status``."""

import sys

from agent_tasks.devstack import main

sys.exit(main())
