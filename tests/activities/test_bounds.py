"""Every mirror call is bounded: a Neo4j peer that goes silent (a real TCP proxy, started
here, that stops forwarding without closing anything) cannot hold an activity attempt or a
read, and a worker killed during a mirror call delays the mirror by the heartbeat timeout, not
by the start-to-close timeout. Against the real Temporal and Neo4j of the local stack."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client, WorkflowHistory

from agent_tasks.config import Settings
from agent_tasks.contract import MIRROR_ACTIVITY
from agent_tasks.contract.errors import MIRROR_UNAVAILABLE, GraphUnavailable
from agent_tasks.devstack import free_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.models import TaskFilter
from agent_tasks.taskgraph.neo4j.driver import NEO4J_CALL_TIMEOUT_S, open_driver
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from agent_tasks.workflows.mirroring import MIRROR_HEARTBEAT, MIRROR_START_TO_CLOSE
from tests.conftest import eventually, mirrored

ROOT = Path(__file__).resolve().parents[2]


class SilentProxy:
    """A TCP proxy to Neo4j's Bolt port that can go silent: from ``silence()`` on, every
    connection open then, and every one accepted until ``resume()``, stays open and forwards
    nothing, ever (a half-open peer, a lost NAT entry); connections accepted after
    ``resume()`` forward again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.epoch = 0
        self.silent = False
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []

    @property
    def uri(self) -> str:
        return f"bolt://127.0.0.1:{self.port}"

    def silence(self) -> None:
        self.silent = True
        self.epoch += 1

    def resume(self) -> None:
        self.silent = False

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, epoch: int
    ) -> None:
        while data := await source.read(65536):
            if not self.silent and epoch == self.epoch:
                sink.write(data)
                await sink.drain()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        epoch = self.epoch if not self.silent else -1  # accepted while silent: dead for good
        self.writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers.append(up_writer)
        for pump in (self._pump(reader, up_writer, epoch), self._pump(up_reader, writer, epoch)):
            task = asyncio.create_task(pump)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def __aenter__(self) -> SilentProxy:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        for writer in self.writers:
            writer.close()
        await self.server.wait_closed()


@pytest.fixture
async def proxied_graph(settings: Settings) -> AsyncIterator[tuple[SilentProxy, TaskGraph]]:
    port = int(settings.neo4j_uri.rsplit(":", 1)[1])
    async with SilentProxy(port) as proxy:
        driver = open_driver(proxy.uri, settings.neo4j_auth())
        try:
            yield proxy, TaskGraph(driver, settings.neo4j_database)
        finally:
            await driver.close()


def mirror_attempt_failures(history: WorkflowHistory) -> list[Any]:
    """Every failure of a mirror attempt the history records: the ``last_failure`` of each
    retried attempt's ActivityTaskStarted, and each ActivityTaskFailed / TimedOut."""
    failures: list[Any] = []
    mirror_ids = set()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == MIRROR_ACTIVITY:
                mirror_ids.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in mirror_ids and started.HasField("last_failure"):
                failures.append(started.last_failure)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failures.append(event.activity_task_failed_event_attributes.failure)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            failures.append(event.activity_task_timed_out_event_attributes.failure)
    return failures


def application_types(failure: Any) -> list[str]:
    """The application error types along a failure's cause chain (the server wraps a failure
    over its size limit as "Failure exceeds size limit." with the original as its cause)."""
    types = []
    while failure is not None:
        if failure.HasField("application_failure_info"):
            types.append(failure.application_failure_info.type)
        failure = failure.cause if failure.HasField("cause") else None
    return types


async def test_a_silent_neo4j_holds_no_mirror_attempt_and_no_read(
    client: Client, proxied_graph: tuple[SilentProxy, TaskGraph], project_id: str
) -> None:
    """The issue's case: the proxy stops forwarding for 20 s while writes go on. Writes stay
    fast, a read through the silent connection ends with ``GraphUnavailable`` within the
    bound, every mirror attempt that failed ended by itself (``MirrorUnavailable``, never a
    server-side timeout), and the mirror catches up once the proxy forwards again."""
    proxy, graph = proxied_graph
    queue = f"silent-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(client, project_id=project_id, agent_id="a", task_queue=queue)
    async with build_worker(client, graph, queue):
        await history.create_task("t", "silent peer")
        await mirrored(history, "t")
        proxy.silence()
        read = asyncio.create_task(graph.reads.find_tasks(project_id, TaskFilter()))
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(10):
            write = await asyncio.wait_for(history.record_event("t", "note", f"n{i}"), 10)
            assert write.recorded
            await asyncio.sleep(2)
        with pytest.raises(GraphUnavailable, match="did not answer"):
            await asyncio.wait_for(read, NEO4J_CALL_TIMEOUT_S + 10)
        assert loop.time() - started < NEO4J_CALL_TIMEOUT_S + 10
        proxy.resume()
        await mirrored(history, "t", within=120)
        rows = await graph.reads.find_tasks(project_id, TaskFilter())
        assert [(row.name, row.last_seq, row.mirrored_seq) for row in rows] == [("t", 10, 10)]
        handle = client.get_workflow_handle(history.workflow_id("t"))
        failures = mirror_attempt_failures(await handle.fetch_history())
        assert failures, "the mirror never failed while the proxy was silent"
        for failure in failures:
            assert MIRROR_UNAVAILABLE in application_types(failure), failure
        assert not (await handle.describe()).raw_description.pending_activities


async def test_a_worker_killed_during_a_mirror_call_is_replaced_after_the_heartbeat_timeout(
    client: Client, graph: TaskGraph, settings: Settings, project_id: str
) -> None:
    """A worker process (``python -m agent_tasks.worker``) mirrors through a proxy that goes
    silent, so its mirror attempt is under way when the process is killed with SIGKILL. A worker
    in this process takes over: the attempt is retried after a heartbeat timeout (its failure says
    HEARTBEAT), well before the start-to-close timeout."""
    assert MIRROR_HEARTBEAT < MIRROR_START_TO_CLOSE / 2
    queue = f"killed-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(client, project_id=project_id, agent_id="a", task_queue=queue)
    port = int(settings.neo4j_uri.rsplit(":", 1)[1])
    async with SilentProxy(port) as proxy:
        env = {**os.environ, "NEO4J_URI": proxy.uri, "TEMPORAL_TASK_QUEUE": queue}
        env.setdefault("AGENT_TASKS_DATA_DIR", str(settings.data_dir.resolve()))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent_tasks.worker",
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            while b"polling" not in line:
                line = await asyncio.wait_for(process.stdout.readline(), 60)
            await history.create_task("t", "killed worker")
            await mirrored(history, "t")
            proxy.silence()
            await history.record_event("t", "note", "during the kill")
            handle = client.get_workflow_handle(history.workflow_id("t"))

            async def attempt_running() -> bool:
                pending = (await handle.describe()).raw_description.pending_activities
                return bool(pending) and pending[0].last_started_time.seconds > 0

            await eventually(attempt_running, within=30)
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGKILL)
            await process.wait()
        loop = asyncio.get_running_loop()
        killed = loop.time()
        async with build_worker(client, graph, queue):
            await mirrored(history, "t", within=MIRROR_START_TO_CLOSE.total_seconds())
        assert loop.time() - killed < MIRROR_START_TO_CLOSE.total_seconds()
    failures = mirror_attempt_failures(await handle.fetch_history())
    timeouts = [f.timeout_failure_info.timeout_type for f in failures]
    assert TimeoutType.TIMEOUT_TYPE_HEARTBEAT in timeouts, failures
