"""The worker and the one bootstrap of the project.

``open_services`` connects to Temporal and opens the Neo4j task graph; ``build_worker`` makes
the worker of ``TaskWorkflow`` and its activities. The CLI, the tests, the benchmarks and
``run_worker`` all start from these two.

``python worker.py`` and ``agent-tasks worker`` run a worker with the settings from the
environment (``config.Settings``) until SIGINT or SIGTERM, then stop cleanly: the worker stops
polling, lets running activities finish (``graceful_shutdown_timeout``), and closes the driver.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from neo4j.exceptions import DriverError, Neo4jError
from temporalio.client import Client
from temporalio.worker import Worker

import telemetry
from activities.mirror import MirrorActivities
from config import Settings, connect, release_runtime
from taskgraph.graph import TaskGraph, open_driver
from workflows.task import TaskWorkflow

SCHEMA_TIMEOUT_S = 10.0
"""How long ``open_services`` waits for Neo4j to create the schema (seconds)."""


@dataclass(frozen=True)
class Services:
    """What the project runs on: the settings, a Temporal client with the pydantic data
    converter, and the Neo4j task graph (None when not asked for)."""

    settings: Settings
    client: Client
    graph: TaskGraph | None


@asynccontextmanager
async def open_graph(settings: Settings, *, schema: bool = False) -> AsyncIterator[TaskGraph]:
    """Open the Neo4j task graph of ``settings``; close its driver on exit.

    Args:
        settings: where Neo4j is (``NEO4J_URI``, credentials, database) and whether its writes
            are traced (``OTEL_TRACES_EXPORTER``).
        schema: create the schema first (idempotent), waiting at most ``SCHEMA_TIMEOUT_S``.

    Raises:
        RuntimeError: no Neo4j password is set or generated.
        ValueError: traces asked for without the ``otel`` extra.
        neo4j.exceptions.Neo4jError, neo4j.exceptions.DriverError, TimeoutError: ``schema``
            was asked and Neo4j refused or did not answer.
    """
    driver = open_driver(settings.neo4j_uri, settings.neo4j_auth())
    try:
        tracer = telemetry.setup(settings.exporters()).tracer
        graph = TaskGraph(driver, settings.neo4j_database, tracer)
        if schema:
            await asyncio.wait_for(graph.init_schema(), SCHEMA_TIMEOUT_S)
        yield graph
    finally:
        await driver.close()


@asynccontextmanager
async def open_services(
    settings: Settings | None = None,
    *,
    client: Client | None = None,
    with_graph: bool = True,
    schema: bool = False,
) -> AsyncIterator[Services]:
    """Connect to Temporal (unless ``client`` is given) and open the Neo4j task graph
    (``open_graph``, unless ``with_graph`` is False); on exit close the driver and wait for
    the Temporal SDK's runtime threads to leave Python (``config.release_runtime``), so a
    process may end right after.

    Args:
        settings: where to connect; from the environment when None.
        client: an existing client to use (for example a test server's).
        with_graph: open the Neo4j task graph (credentials needed: ``Settings.neo4j_auth``).
        schema: create the Neo4j schema first (``open_graph``).

    Raises:
        TaskServiceUnavailable: Temporal cannot be reached.
        RuntimeError, neo4j.exceptions.Neo4jError, neo4j.exceptions.DriverError,
            TimeoutError: as ``open_graph``.
    """
    settings = settings or Settings()
    client = client or await connect(settings)
    try:
        if not with_graph:
            yield Services(settings, client, None)
            return
        async with open_graph(settings, schema=schema) as graph:
            yield Services(settings, client, graph)
    finally:
        await release_runtime()


def build_worker(client: Client, graph: TaskGraph, task_queue: str) -> Worker:
    """A worker for ``TaskWorkflow`` and the mirror activity on ``task_queue``.

    Args:
        client: a connected client with the pydantic data converter (``config.connect``).
        graph: the Neo4j task graph the mirror writes to (it creates the schema before its
            first write if nobody did).
        task_queue: the task queue to poll.
    """
    mirror = MirrorActivities(client, graph)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[TaskWorkflow],
        activities=[mirror.mirror_task],
        graceful_shutdown_timeout=timedelta(seconds=10),
    )


async def run_worker(settings: Settings | None = None) -> None:
    """Run a worker until SIGINT or SIGTERM. Creates the Neo4j schema (idempotent) when Neo4j
    answers; when it does not, the worker starts anyway (writes are accepted during an outage)
    and the mirror creates the schema before its first write.

    Raises:
        TaskServiceUnavailable: Temporal cannot be reached.
        RuntimeError: no Neo4j password is set or generated (``Settings.neo4j_auth``).
    """
    async with open_services(settings) as services:
        assert services.graph is not None
        try:
            await asyncio.wait_for(services.graph.init_schema(), SCHEMA_TIMEOUT_S)
        except (TimeoutError, Neo4jError, DriverError) as err:
            print(f"Neo4j schema not created yet ({err!r}); the mirror will create it", flush=True)
        queue = services.settings.temporal_task_queue
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with build_worker(services.client, services.graph, queue):
            print(f"worker polling task queue {queue!r}", flush=True)
            await stop.wait()
        print("worker stopped", flush=True)


def main() -> None:
    """Entry point of ``python worker.py``."""
    asyncio.run(run_worker())


if __name__ == "__main__":
    main()
