"""Shared pieces of the local stack: errors, status records, addresses, probes' error text,
and the managed server process (pid file, log file, start, wait, stop)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar, NamedTuple, Self
from urllib.parse import urlsplit

from agent_tasks.contract.errors import ConfigurationError

BIND_HOST = "127.0.0.1"
"""The address every server started here listens on (also when the settings say ``localhost``)."""

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
"""Host names that mean "this machine": a server is started there when nothing answers."""

_POLL_S = 0.1

_Popen = subprocess.Popen[bytes]


class DevStackError(ConfigurationError):
    """A service of the local stack cannot be started, reached or stopped; the message says why."""


class Probe(NamedTuple):
    """The answer to "does a server answer at this address?".

    Attributes:
        answering: True when the server answered its protocol (for Neo4j: also when the
            credentials were refused).
        detail: a short reason for people, e.g. ``"connection refused"`` or
            ``"answering, but authentication failed"``; empty when there is nothing to add.
    """

    answering: bool
    detail: str


@dataclass(frozen=True)
class ServiceStatus:
    """One service of the local stack, as ``up``, ``down`` and ``status`` report it.

    Attributes:
        name: ``"temporal"``, ``"neo4j"`` or ``"broker"``.
        address: ``host:port`` for Temporal, the Bolt URI for Neo4j (never a password).
        answering: the server answered when last checked.
        pid: pid of the process that ``up`` started (from its pid file), or None.
        external: the server answers but was not started by ``up`` (e.g. docker-compose).
        detail: what happened or why, for people (e.g. ``"started in 4.2 s"``).
    """

    name: str
    address: str
    answering: bool
    pid: int | None
    external: bool
    detail: str = ""


# --------------------------------------------------------------------------------------------
# addresses and ports


def parse_host_port(address: str, default_port: int) -> tuple[str, int]:
    """Split ``host:port``, ``[v6]:port`` or a URI such as ``bolt://host:port``.

    Args:
        address: the address; the port may be missing.
        default_port: the port when the address has none.

    Returns:
        ``(host, port)``; an IPv6 host without brackets.

    Raises:
        DevStackError: the address has no host or an invalid port.
    """
    text = address if "://" in address else f"//{address}"
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise DevStackError(f"invalid address {address!r}: {e}") from None
    if not host:
        raise DevStackError(f"invalid address {address!r}: no host")
    return host, port if port is not None else default_port


def is_local_host(host: str) -> bool:
    """Return True when ``host`` names this machine's loopback (see :data:`LOCAL_HOSTS`)."""
    return host.lower() in LOCAL_HOSTS


def free_port(host: str = BIND_HOST) -> int:
    """Return a TCP port that is free on ``host`` right now (the OS picks it).

    Another process may take it before it is used; good enough for tests.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return True when a TCP connection to ``host:port`` succeeds within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def short_error(e: BaseException) -> str:
    """The first line of an error, or "connection refused" when that is the cause."""
    chain: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(isinstance(c, ConnectionRefusedError) or "refused" in str(c).lower() for c in chain):
        return "connection refused"
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__


# --------------------------------------------------------------------------------------------
# processes


def _read_cmdline(pid: int) -> list[str] | None:
    """The command line of ``pid``; None when the process is gone or a zombie."""
    proc = Path(f"/proc/{pid}/cmdline")
    if proc.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            raw = proc.read_bytes()
        except OSError:
            return None
        if not raw:  # zombie (exited, not yet reaped) or kernel thread
            return None
        return [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]
    # no /proc (e.g. macOS): ask ps; arguments with spaces are not split back exactly
    ps = shutil.which("ps")
    if ps is None:
        return None
    out = subprocess.run(
        [ps, "-p", str(pid), "-o", "state=,args="], capture_output=True, text=True, check=False
    )
    line = out.stdout.strip()
    if out.returncode != 0 or not line or line.startswith("Z"):
        return None
    return line.split()[1:]


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """A server process with a pid file and a log file in a data folder (base class)."""

    name: ClassVar[str] = ""
    stop_timeout_s: ClassVar[float] = 30.0
    """Seconds ``stop`` waits after SIGTERM before SIGKILL, by default."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._proc: _Popen | None = None
        self._started_at: float | None = None

    @property
    def pid_file(self) -> Path:
        """``<data_dir>/run/<name>.pid``: the pid of the process ``start`` ran (by any caller)."""
        return self.data_dir / "run" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        """``<data_dir>/logs/<name>.log``: stdout and stderr of the process (appended)."""
        return self.data_dir / "logs" / f"{self.name}.log"

    def _host_port(self) -> tuple[str, int]:
        raise NotImplementedError

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _is_ours(self, cmdline: Sequence[str]) -> bool:
        raise NotImplementedError

    def running_pid(self) -> int | None:
        """Return the pid from the pid file when that process is alive and is this server.

        "This server" means the child this object started and has not reaped (its pid cannot
        be recycled meanwhile; its command line may not be readable yet: a process that has
        just been exec'd shows an empty one for a moment), else a process whose command line
        is the one ``start`` runs for this data folder, so a recycled pid is never mistaken
        for it. Returns None otherwise (a stale pid file is left in place; ``stop`` removes it).
        """
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if self._proc is not None and self._proc.pid == pid:
            return pid if self._proc.poll() is None else None
        cmdline = _read_cmdline(pid)
        if cmdline is None or not self._is_ours(cmdline):
            return None
        return pid

    def log_tail(self, lines: int = 25) -> str:
        """Return the last ``lines`` lines of the log file (for error messages)."""
        return _log_tail(self.log_file, lines)

    def _spawn(self) -> int:
        """Start the process detached (own session, stdin closed, output to the log file)."""
        host, port = self._host_port()
        running = self.running_pid()
        if running is not None:
            raise DevStackError(f"{self.name} is already running (pid {running})")
        if port_is_open(host, port):
            raise DevStackError(
                f"{self.name}: port {host}:{port} is already taken by another process"
            )
        argv = self._argv()
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._proc = _spawn_detached(argv, self.log_file)
        self._started_at = time.monotonic()
        self.pid_file.write_text(f"{self._proc.pid}\n")
        return self._proc.pid

    def _exited(self) -> int | None:
        """The exit status when the process this object started has exited, else None."""
        if self._proc is None:
            return None
        return self._proc.poll()

    async def prepare(self) -> None:
        """Find (or build) what :meth:`start` runs, starting nothing: a missing prerequisite
        is found before any server of the stack starts. Safe to call more than once.

        Raises:
            DevStackError: something it needs is missing (the message names it, and how to
                get it).
        """
        self._argv()  # resolves the executables

    async def start(self) -> int:
        """Start the server process; returns its pid."""
        raise NotImplementedError

    async def wait_ready(self, timeout_s: float = 60.0) -> float:
        """Wait until the server answers; returns the seconds since start."""
        raise NotImplementedError

    async def start_ready(self, timeout_s: float | None = None) -> tuple[int, float]:
        """Start the server and wait until it answers (``wait_ready``'s default timeout when
        None); stop it again if it does not. Returns ``(pid, seconds since start)``."""
        pid = await self.start()
        try:
            took = await (self.wait_ready() if timeout_s is None else self.wait_ready(timeout_s))
        except BaseException:
            await self.stop()
            raise
        return pid, took

    async def __aenter__(self) -> Self:
        await self.start_ready()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the process named by the pid file, if it is still this server.

        Sends SIGTERM, waits up to ``timeout_s`` seconds (default ``stop_timeout_s``) for a
        clean exit, then SIGKILL (and waits up to 10 s more). Removes the pid file unless the
        process survived, and waits up to 10 s for the port to close.

        Args:
            timeout_s: seconds to wait after SIGTERM.

        Returns:
            True when a process was stopped, False when none was running.

        Raises:
            DevStackError: the process survived SIGKILL.
        """
        pid = self.running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        for sig, wait in (
            (signal.SIGTERM, timeout_s or self.stop_timeout_s),
            (signal.SIGKILL, 10.0),
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not self._alive(pid):
                    self.pid_file.unlink(missing_ok=True)
                    self._proc = None
                    self._started_at = None
                    await self._wait_port_closed()
                    return True
                await asyncio.sleep(_POLL_S)
        raise DevStackError(f"{self.name} (pid {pid}) did not exit after SIGKILL")

    def _alive(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is None
        cmdline = _read_cmdline(pid)
        return cmdline is not None and self._is_ours(cmdline)

    async def _wait_port_closed(self, timeout_s: float = 10.0) -> None:
        host, port = self._host_port()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not port_is_open(host, port, timeout=0.2):
                return
            await asyncio.sleep(_POLL_S)

    def _check_not_exited(self) -> None:
        code = self._exited()
        if code is not None:
            raise DevStackError(
                f"{self.name} exited with status {code} while starting; "
                f"last lines of {self.log_file}:\n{self.log_tail()}"
            )


def _spawn_detached(argv: list[str], log_file: Path) -> _Popen:
    """Start ``argv`` in its own session with output appended to ``log_file``."""
    with log_file.open("ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"\n==== {stamp} starting: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise DevStackError(f"cannot run {argv[0]}: {e}") from None
