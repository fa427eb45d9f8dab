"""The broker of the local stack: a ``redis-server`` (Debian's package ``redis-server``; CI's
``.ci/run`` installs it when missing) on 127.0.0.1 at the port of ``AGENT_TASKS_BROKER_URL``,
used for pub/sub only (``broker``): it keeps nothing, so it saves nothing (``--save ''``,
``--appendonly no``) and its folder holds only its working files."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from devstack.process import (
    BIND_HOST,
    DevStackError,
    ManagedProcess,
    Probe,
    short_error,
)

REDIS_SERVER = "redis-server"
"""The server's executable, looked up on ``PATH``."""


def find_redis_server() -> Path:
    """The ``redis-server`` executable on ``PATH``.

    Raises:
        DevStackError: not installed (``apt-get install redis-server``).
    """
    found = shutil.which(REDIS_SERVER)
    if found is None:
        raise DevStackError(
            "redis-server was not found on PATH: install it (Debian: apt-get install "
            "redis-server), or set AGENT_TASKS_BROKER_URL to a running one"
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
        # redis-server sets its process title to "redis-server host:port"
        return bool(cmdline) and REDIS_SERVER in cmdline[0] and f":{self.port}" in cmdline[0]

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
