"""``python -m devstack up|down|status``."""

import sys

from devstack import main

sys.exit(main())
