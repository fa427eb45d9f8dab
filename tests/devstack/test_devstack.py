"""The local stack manager against real servers, no mocks.

Every test runs private servers on free ports in its own tmp folder: the default stack
(``agent-tasks dev up`` on 7233/7687) is never touched. About 1 minute in all, most of it
Neo4j starting (about 8-10 s per start) and stopping (about 3 s).
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import neo4j
import neo4j.exceptions
import pytest
from pydantic import SecretStr
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    ListTaskQueuePartitionsRequest,
)
from temporalio.client import Client, WorkflowExecutionStatus

from agent_tasks import devstack
from agent_tasks.cli.dev import up
from agent_tasks.config import Settings, TemporalProfile
from agent_tasks.devstack import (
    BIND_HOST,
    SEARCH_ATTRIBUTES,
    DevStackError,
    Neo4jServer,
    TemporalDevServer,
    free_port,
    port_is_open,
    probe_neo4j,
    probe_temporal,
)


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def _pid_files(data_dir: Path) -> list[Path]:
    return list(data_dir.glob("run/*.pid"))


def _settings(data_dir: Path, temporal_address: str, neo4j_port: int) -> Settings:
    return Settings(
        temporal=TemporalProfile().with_overrides(address=temporal_address, namespace="default"),
        neo4j_uri=f"bolt://{BIND_HOST}:{neo4j_port}",
        neo4j_username="neo4j",
        neo4j_password=None,
        AGENT_TASKS_DATA_DIR=data_dir,
        AGENT_TASKS_BROKER_URL="",  # the broker's own test: tests/devstack/test_redis_server.py
    )


async def test_temporal_dev_server_keeps_workflows_across_restart(tmp_path: Path) -> None:
    port = free_port()
    namespace = "devstack-test"
    server = TemporalDevServer(
        tmp_path, port, namespace, {"limit.historyCount.suggestContinueAsNew": "200"}
    )
    pid = await server.start()
    try:
        assert await server.wait_ready(60) < 60
        assert server.running_pid() == pid
        assert "limit.historyCount.suggestContinueAsNew=200" in _cmdline(pid)
        assert "frontend.WorkflowTimeSkippingEnabled=true" in _cmdline(pid)
        with pytest.raises(DevStackError, match="already running"):
            await server.start()

        client = await Client.connect(server.address, namespace=namespace)
        attrs = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace), retry=True
        )
        for name in SEARCH_ATTRIBUTES:
            assert attrs.custom_attributes[name] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        partitions = await client.workflow_service.list_task_queue_partitions(
            ListTaskQueuePartitionsRequest(namespace=namespace, task_queue=TaskQueue(name="q")),
            retry=True,
        )  # one per task queue (DEFAULT_DYNAMIC_CONFIG), where the server's default is four
        assert [p.key for p in partitions.workflow_task_queue_partitions] == ["q"]
        # no worker is needed: the workflow just stays running in the SQLite file
        await client.start_workflow("NoSuchWorkflow", id="persist-me", task_queue="nobody")

        assert await server.stop()
        assert not port_is_open(BIND_HOST, port)
        assert server.running_pid() is None
        assert not server.pid_file.exists()
        assert not await server.stop()  # nothing to stop any more

        await server.start()
        await server.wait_ready(60)
        client = await Client.connect(server.address, namespace=namespace)
        description = await client.get_workflow_handle("persist-me").describe()
        assert description.status == WorkflowExecutionStatus.RUNNING
    finally:
        await server.stop()
    assert not port_is_open(BIND_HOST, port)
    assert not (await probe_temporal(server.address, timeout_s=1.0)).answering


async def test_start_refuses_a_taken_port_and_stop_spares_foreign_pids(tmp_path: Path) -> None:
    async with TemporalDevServer(tmp_path / "a", free_port()) as first:
        second = TemporalDevServer(tmp_path / "b", first.port)
        with pytest.raises(DevStackError, match="already taken"):
            await second.start()
        assert not second.pid_file.exists()

        # A pid file naming a process that is not this server (here: the test process itself)
        # is ignored, and stop() does not signal that process.
        second.pid_file.parent.mkdir(parents=True, exist_ok=True)
        second.pid_file.write_text(f"{os.getpid()}\n")
        assert second.running_pid() is None
        assert not await second.stop()
        assert not second.pid_file.exists()
        assert (await probe_temporal(first.address)).answering


async def test_neo4j_server_auth_and_data_survive_restart(tmp_path: Path) -> None:
    port = free_port()
    server = Neo4jServer(tmp_path, port)
    await server.start()
    try:
        await server.wait_ready(120)
        assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
        user, password = server.auth()
        assert user == "neo4j" and len(password) >= 8

        wrong = await probe_neo4j(server.uri, (user, password + "-wrong"))
        assert wrong.answering and "authentication failed" in wrong.detail
        async with neo4j.AsyncGraphDatabase.driver(server.uri, auth=(user, "neo4j")) as driver:
            with pytest.raises(neo4j.exceptions.AuthError):
                await driver.verify_connectivity()

        key = uuid.uuid4().hex
        async with neo4j.AsyncGraphDatabase.driver(server.uri, auth=(user, password)) as driver:
            await driver.execute_query(
                "CREATE (:DevstackProbe {key: $key})", key=key, database_="neo4j"
            )

        assert await server.stop()
        assert not port_is_open(BIND_HOST, port)
        await server.start()
        await server.wait_ready(120)
        async with neo4j.AsyncGraphDatabase.driver(server.uri, auth=(user, password)) as driver:
            records, _, _ = await driver.execute_query(
                "MATCH (n:DevstackProbe {key: $key}) RETURN count(n) AS n",
                key=key,
                database_="neo4j",
            )
        assert records[0]["n"] == 1
    finally:
        await server.stop()
    assert not port_is_open(BIND_HOST, port)


async def test_up_status_down_use_an_answering_temporal_as_external(tmp_path: Path) -> None:
    async with TemporalDevServer(tmp_path / "elsewhere", free_port()) as external:
        settings = _settings(tmp_path / "stack", external.address, free_port())
        try:
            temporal, neo = await devstack.up(settings)
            assert temporal.answering and temporal.external and temporal.pid is None
            assert neo.answering and not neo.external and neo.pid is not None
            assert "started in" in neo.detail
            # the generated password is where the settings look for it, and it works
            assert stat.S_IMODE(settings.neo4j_password_file.stat().st_mode) == 0o600
            assert (await probe_neo4j(settings.neo4j_uri, settings.neo4j_auth())) == (True, "")

            again = await devstack.up(settings)
            assert again[1].pid == neo.pid and again[1].detail == "already running"
            assert again[0].external

            now = await devstack.status(settings)
            assert [(s.name, s.answering, s.pid, s.external) for s in now] == [
                ("temporal", True, None, True),
                ("neo4j", True, neo.pid, False),
            ]
            assert "answering" in devstack.format_status(now)
        finally:
            stopped = await devstack.down(settings)
        assert [(s.name, s.pid) for s in stopped] == [("temporal", None), ("neo4j", neo.pid)]
        assert (await probe_temporal(external.address)).answering  # not ours: left alone
        after = await devstack.status(settings)
        assert not after[1].answering and after[1].pid is None


async def test_up_refuses_an_unreachable_remote_address_and_starts_nothing(
    tmp_path: Path,
) -> None:
    # 192.0.2.1 is TEST-NET-1: never routed.
    settings = _settings(tmp_path, "192.0.2.1:7233", free_port())
    with pytest.raises(DevStackError, match="not on this host"):
        await devstack.up(settings, probe_timeout_s=1.0)
    assert not _pid_files(tmp_path)
    assert not (await probe_neo4j(settings.neo4j_uri, None, timeout_s=1.0)).answering


async def test_dev_up_sets_the_retention_of_the_local_temporal(
    tmp_path: Path, settings: Settings
) -> None:
    """``agent-tasks dev up`` (``cli.dev.up``) starts a Temporal dev server, which
    makes its namespace with one day of retention, and sets the retention asked for; the
    running Neo4j of the test session is used as it is (external)."""
    port = free_port()
    local = _settings(tmp_path, f"{BIND_HOST}:{port}", 0).model_copy(
        update={
            "neo4j_uri": settings.neo4j_uri,
            "neo4j_password": SecretStr(settings.neo4j_auth()[1]),
        }
    )
    try:
        temporal, neo = await up(local, timedelta(days=45))
        assert temporal.pid is not None and neo.external
        assert "retention 1 days -> 45 days" in temporal.detail
        client = await Client.connect(local.temporal.address)
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default"), retry=True
        )
        assert described.config.workflow_execution_retention_ttl.ToTimedelta() == timedelta(days=45)
        again, _ = await up(local, timedelta(days=45))  # already running: nothing to change
        assert again.pid == temporal.pid and again.detail.endswith(
            "retention 45 days (how long Temporal keeps a closed task's history; --retention-days)"
        )
    finally:
        stopped = await devstack.down(local)
    assert [s.name for s in stopped if s.pid is not None] == ["temporal"]


APP = """
import asyncio
from agent_tasks import starter

async def main() -> None:
    client = await starter.connect()
    async with starter.open_graph(starter.Settings()) as graph:  # the password: data folder
        history = starter.ConversationHistory(client, "p", "app", graph=graph)
        print("tasks", await history.list_tasks(), await history.find_tasks())
        await history.close()

asyncio.run(main())
"""
"""An app: Temporal (visibility) and Neo4j (the generated password from the data folder)."""


def _cli(here: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_tasks.cli", *args],
        cwd=here, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


async def test_dev_up_down_the_cli_and_an_app_agree_from_any_folder(tmp_path: Path) -> None:
    """Without AGENT_TASKS_DATA_DIR the data folder is the user's (here XDG_DATA_HOME), so
    `dev up` in one folder, an app, `dev status` and `dev down` in others find the same
    stack; `dev down` then says what it did not stop, and why."""
    folders = {name: tmp_path / name for name in ("up", "app", "status", "down", "x/y")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "AGENT_TASKS_DATA_DIR"}
    t_port, n_port = free_port(), free_port()
    env |= {
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "TEMPORAL_ADDRESS": f"{BIND_HOST}:{t_port}",
        "NEO4J_URI": f"bolt://{BIND_HOST}:{n_port}",
        "AGENT_TASKS_BROKER_URL": "",
    }
    env.pop("NEO4J_PASSWORD", None)
    data = tmp_path / "xdg" / "agent-tasks"
    try:
        up = await asyncio.to_thread(_cli, folders["up"], env, "dev", "up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.startswith(f"data folder {data}\n")
        assert len(_pid_files(data)) == 2
        app = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", APP], cwd=folders["app"], env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert (app.returncode, app.stdout, app.stderr) == (0, "tasks [] []\n", "")
        status = await asyncio.to_thread(_cli, folders["status"], env, "dev", "status")
        pids = {int(p.read_text()) for p in _pid_files(data)}
        assert all(f"pid {pid}" in status.stdout for pid in pids), status.stdout
    finally:
        down = await asyncio.to_thread(_cli, folders["down"], env, "dev", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert down.stdout.count("stopped (pid") == 2
    assert not _pid_files(data)
    assert not port_is_open(BIND_HOST, t_port) and not port_is_open(BIND_HOST, n_port)
    again = await asyncio.to_thread(_cli, folders["down"], env, "dev", "down")
    assert (again.returncode, again.stdout.count("nothing to stop")) == (0, 2)

    # something else answers at the address: left running, exit 1, the line says why; a
    # stack of the old default data folder (.agent-tasks above the current folder) is named
    old = folders["x/y"].parent / ".agent-tasks"
    (old / "run").mkdir(parents=True)
    (old / "run" / "temporal.pid").write_text("1\n")
    with socket.create_server((BIND_HOST, t_port)):
        left = await asyncio.to_thread(_cli, folders["x/y"], env, "dev", "down")
    assert left.returncode == 1, left.stdout
    assert f"left running: not started by `dev up` with the data folder {data}" in left.stdout
    assert f"AGENT_TASKS_DATA_DIR={old} agent-tasks dev down" in left.stdout
    assert "nothing to stop" in left.stdout  # Neo4j's address is quiet
