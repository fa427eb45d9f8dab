"""``python -m devstack up|down|status``."""

import sys

from agent_tasks.devstack import main

sys.exit(main())
