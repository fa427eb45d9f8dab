"""The worker: runs TaskWorkflow and the Neo4j mirror activity on the task queue.

``python worker.py`` and ``agent-tasks worker`` run it with the settings from the environment
(``starter.settings``) until SIGINT or SIGTERM, then stop cleanly: the worker stops polling,
lets running activities finish (``graceful_shutdown_timeout``), and closes the driver.
"""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta

from neo4j.exceptions import DriverError, Neo4jError
from temporalio.client import Client
from temporalio.worker import Worker

from activities.graph import TaskGraph, open_driver
from activities.mirror import MirrorActivities
from starter.client import connect
from starter.settings import Settings
from workflows.task import TaskWorkflow


def build_worker(client: Client, graph: TaskGraph, task_queue: str) -> Worker:
    """A worker for ``TaskWorkflow`` and the mirror activity on ``task_queue``.

    Args:
        client: a connected client with the pydantic data converter (``starter.connect``).
        graph: the Neo4j task graph the mirror writes to (its schema already created).
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
    """Connect to Temporal, create the Neo4j schema (idempotent), and run the worker until
    SIGINT or SIGTERM. Neo4j need not be up: then the worker starts anyway, and the mirror
    creates the schema before its first write and retries while Neo4j is down.

    Raises:
        TaskServiceUnavailable: Temporal cannot be reached.
        RuntimeError: no Neo4j password is set or generated (``Settings.neo4j_auth``).
    """
    settings = settings or Settings()
    client = await connect(settings)
    driver = open_driver(settings.neo4j_uri, settings.neo4j_auth())
    try:
        graph = TaskGraph(driver, settings.neo4j_database)
        try:
            await asyncio.wait_for(graph.init_schema(), 10)
        except (TimeoutError, Neo4jError, DriverError) as err:
            # Neo4j may be down: start anyway (writes are accepted during an outage); the
            # mirror creates the schema before its first write.
            print(f"Neo4j schema not created yet ({err!r}); the mirror will create it", flush=True)
        worker = build_worker(client, graph, settings.temporal_task_queue)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with worker:
            print(f"worker polling task queue {settings.temporal_task_queue!r}", flush=True)
            await stop.wait()
        print("worker stopped", flush=True)
    finally:
        await driver.close()


def main() -> None:
    """Entry point of ``python worker.py``."""
    asyncio.run(run_worker())


if __name__ == "__main__":
    main()
