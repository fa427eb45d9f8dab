"""The Neo4j server of the local stack (Neo4j Community 5.26 run by the Maven-built launcher
in ``devstack/neo4j-launcher``) and the probe of a Bolt server."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import neo4j
import neo4j.exceptions

from agent_tasks.config import Settings
from agent_tasks.devstack.process import (
    BIND_HOST,
    DevStackError,
    ManagedProcess,
    Probe,
    parse_host_port,
    short_error,
)

NEO4J_MIN_PASSWORD_LENGTH = 8
"""Neo4j refuses shorter passwords."""

LAUNCHER_DIR = Path(__file__).resolve().parent / "neo4j-launcher"
"""The Maven project of the Neo4j launcher (in the source tree, in ``devstack/``)."""

LAUNCHER_JAR = "target/neo4j-launcher.jar"
"""The launcher's runnable jar, relative to :data:`LAUNCHER_DIR`."""


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
        return Probe(False, short_error(e))
    finally:
        await driver.close()


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
        raise DevStackError(
            "Maven (mvn) is needed once to build the Neo4j launcher: it is not on PATH "
            "(Debian: apt-get install maven)"
        )
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
    raise DevStackError(
        "Java 17 (or 21) is needed to run Neo4j: `java` is not on PATH and JAVA_HOME is not "
        "set (Debian: apt-get install openjdk-17-jdk-headless maven)"
    )


JAVA_MIN_VERSION = 17
"""The oldest Java that Neo4j 5.26 runs on (it supports 17 and 21)."""


async def require_java() -> Path:
    """:func:`find_java`, checked to be Java :data:`JAVA_MIN_VERSION` or newer (by ``java
    -version``: ``version "17.0.15"``, or ``"1.8.0_392"`` for Java 8).

    Raises:
        DevStackError: no Java, one that does not run, or an older one.
    """
    java = find_java()
    proc = await asyncio.create_subprocess_exec(
        str(java), "-version",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await proc.communicate()
    text = output.decode(errors="replace")
    found = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if proc.returncode != 0 or found is None:
        raise DevStackError(f"{java} -version failed: {text.strip()[:200]}")
    major = int(found[1]) if found[1] != "1" else int(found[2] or 0)
    if major < JAVA_MIN_VERSION:
        raise DevStackError(
            f"Neo4j needs Java {JAVA_MIN_VERSION} or newer; {java} is Java {major} (set "
            "JAVA_HOME to a newer one)"
        )
    return java


class Neo4jServer(ManagedProcess):
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

    async def prepare(self) -> None:
        """Check Java (17 or newer) and build the launcher if needed (Maven), starting nothing.

        Raises:
            DevStackError: no Java, an older one, no Maven for a build, or the build failed.
        """
        await require_java()
        await ensure_launcher_built(self.launcher_dir)

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
