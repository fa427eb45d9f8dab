"""The worker: runs the tasks' workflows and the tools, on ``TASK_QUEUE``, until Ctrl-C.

``AgentTasksPlugin`` on the client (the data converter and payload codec every client of the
tasks needs) and ``AgentTasksWorkerPlugin`` on the worker (the task workflow, the Neo4j mirror,
and this project's tools) are all the setup there is; the broker (``AGENT_TASKS_BROKER_URL``)
lets the page and the live streams hear of the worker's new events at once, instead of at
their next read of the tasks. Importing ``agent`` registers the agent.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.worker import Worker

import agent
from agent_tasks.starter import (
    AgentTasksPlugin,
    AgentTasksWorkerPlugin,
    Settings,
    open_broker,
    open_graph,
)
from tools import search_notes


async def main() -> None:
    """Connect, open Neo4j, and run the worker until Ctrl-C."""
    settings = Settings()  # TEMPORAL_ADDRESS, NEO4J_URI ...: the local stack by default
    client = await Client.connect(
        **settings.temporal.connect_config(), plugins=[AgentTasksPlugin()]
    )
    async with (
        open_graph(settings, schema=True) as graph,
        open_broker(settings.broker_url) as broker,
    ):
        worker = Worker(
            client,
            task_queue=agent.TASK_QUEUE,
            plugins=[AgentTasksWorkerPlugin(graph, tools=[search_notes], broker=broker)],
        )
        print(f"worker polling task queue {agent.TASK_QUEUE!r}; Ctrl-C stops it", flush=True)
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
