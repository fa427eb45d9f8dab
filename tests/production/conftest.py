"""Fixtures of the production suite: a Temporal cluster on PostgreSQL started by the project's
script (``tools.cluster``) in a data folder of this session, ``agent-tasks setup`` run
against it (the namespace and the search attributes through the operator API), the local
stack's Neo4j, and three worker processes on one task queue (``tests.agent_worker``).

Run by ``./run test-production``; the environment names the cluster (``TEMPORAL_ADDRESS``,
``TEMPORAL_NAMESPACE``) for this process and for every process it starts."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_tasks.config import connect
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, open_services
from tools.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("AGENT_TASKS_PRODUCTION") == "1"
"""The suite runs only when asked (``./run test-production`` sets it): it builds and starts a
cluster of its own, which the main suite (``./run test``) does not."""
NAMESPACE = "agent-tasks-production"
WORKERS = 3
CONTINUING_NAMESPACE = "agent-tasks-production-continuing"
"""A second namespace, whose runs Temporal suggests to continue as new at
``CONTINUE_AS_NEW_AT`` history events (the server's default, 4,096 in ``NAMESPACE``, is more
than a test writes); scoped by the dynamic config's namespace constraint."""
CONTINUE_AS_NEW_AT = 25
"""Under the events the README's agent writes before its children end (at 40 the whole task fit
in one run when the mirror's calls happened to batch, and the suggestion came after it)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip this folder's tests unless ``ENABLED``."""
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="the production suite: ./run test-production")
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(skip)


async def setup(namespace: str) -> None:
    """``agent-tasks setup`` of ``namespace`` on the cluster (the namespace, its retention and
    the search attributes, through the operator API)."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agent_tasks.cli", "setup", "--wait", "60"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TEMPORAL_NAMESPACE": namespace},
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="session")
async def cluster() -> AsyncIterator[Cluster]:
    """The cluster, set up; stopped and its folder removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix="agent-tasks-cluster-", dir="/var/tmp"))
    port = int(os.environ.get("AGENT_TASKS_CLUSTER_PORT", "7433"))
    suggest = [{"value": CONTINUE_AS_NEW_AT, "constraints": {"namespace": CONTINUING_NAMESPACE}}]
    cluster = Cluster(folder, port, {"limit.historyCount.suggestContinueAsNew": suggest})
    try:
        await cluster.up()
        os.environ["TEMPORAL_ADDRESS"] = cluster.temporal.address
        os.environ["TEMPORAL_NAMESPACE"] = NAMESPACE
        await setup(NAMESPACE)
        yield cluster
    finally:
        await cluster.down()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def services(cluster: Cluster) -> AsyncIterator[Services]:
    """The project's bootstrap against the cluster (the local stack's Neo4j)."""
    async with open_services(schema=True) as services:
        assert services.client.service_client.config.target_host == cluster.temporal.address
        yield services


async def start_worker(queue: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    """A worker process (``tests.agent_worker``: the agent tests' tools) on ``queue``, once it
    polls (its first line, within 60 s); its environment is this process's updated by
    ``env``. A worker that exits first fails the caller with the end of its stderr."""
    stderr = tempfile.TemporaryFile()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.agent_worker",
        queue,
        cwd=ROOT,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    stderr.seek(0)
    assert line.strip() == b"polling", stderr.read()[-3000:].decode(errors="replace")
    stderr.close()
    return process


@dataclass
class Workers:
    """Worker processes on one task queue (their environment updated by ``env``)."""

    queue: str
    processes: list[asyncio.subprocess.Process]
    env: dict[str, str] | None = None

    def by_pid(self, pid: int) -> asyncio.subprocess.Process:
        """The worker process ``pid``."""
        (found,) = [p for p in self.processes if p.pid == pid]
        return found

    async def stop(self, index: int) -> None:
        """Stop worker ``index`` as a deploy does: SIGTERM, then wait for its exit."""
        self.processes[index].terminate()
        await self.processes[index].wait()

    async def start(self, index: int) -> None:
        """Start the replacement of worker ``index`` in its place (``start_worker``)."""
        self.processes[index] = await start_worker(self.queue, self.env)


@asynccontextmanager
async def worker_processes(
    env: dict[str, str] | None = None, count: int = WORKERS
) -> AsyncIterator[Workers]:
    """``count`` worker processes (the agent tests' tools) on a fresh task queue, their
    environment updated by ``env``; stopped on exit."""
    found = Workers(f"prod-{uuid.uuid4().hex[:8]}", [], env)
    try:
        for _ in range(count):
            found.processes.append(await start_worker(found.queue, env))
        yield found
    finally:
        for process in found.processes:
            if process.returncode is None:
                process.terminate()
            await process.wait()


@pytest.fixture
async def workers(services: Services) -> AsyncIterator[Workers]:
    """``WORKERS`` worker processes on a fresh task queue (``worker_processes``)."""
    async with worker_processes() as found:
        yield found


@pytest.fixture
def history(services: Services, workers: Workers) -> ConversationHistory:
    """A client of a fresh project on the workers' task queue."""
    assert services.graph is not None
    return ConversationHistory(
        services.client,
        f"prod-{uuid.uuid4().hex[:12]}",
        "tests",
        task_queue=workers.queue,
        graph=services.graph,
    )


@pytest.fixture
async def continuing(services: Services) -> AsyncIterator[tuple[Client, Workers]]:
    """A client of ``CONTINUING_NAMESPACE`` (set up here) and ``WORKERS`` workers on it."""
    await setup(CONTINUING_NAMESPACE)
    client = await connect(services.settings, namespace=CONTINUING_NAMESPACE)
    async with worker_processes({"TEMPORAL_NAMESPACE": CONTINUING_NAMESPACE}) as found:
        yield client, found
