"""``python -m agent_tasks.server``: serve the HTTP API with the settings of the environment."""

import os
import sys

from agent_tasks.server import main

main()
sys.stdout.flush()
os._exit(0)  # the Temporal SDK's runtime can crash the interpreter while it finalizes
