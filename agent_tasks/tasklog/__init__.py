"""A task's log across its runs, read the one way the client and the activities both read it
(``tasklog.reader.TaskReader``). Below ``starter`` and ``activities``, above ``workflows`` and
``taskgraph``; no driver import (the graph store is passed in)."""
