"""The worker: runs the tasks' workflows, the HTTP tool and the MCP servers' calls, on
``TASK_QUEUE``, until Ctrl-C. Nothing registers the MCP tools: each agent run lists them from
the servers its spec names."""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.worker import Worker

import agent
from agent_tasks.starter import AgentTasksPlugin, AgentTasksWorkerPlugin, Settings, open_graph
from tools import notify


async def main() -> None:
    """Connect, open the graph store, and run the worker until Ctrl-C."""
    settings = Settings()
    client = await Client.connect(
        **settings.temporal.connect_config(), plugins=[AgentTasksPlugin()]
    )
    async with open_graph(settings, schema=True) as graph:
        worker = Worker(
            client,
            task_queue=agent.TASK_QUEUE,
            plugins=[AgentTasksWorkerPlugin(graph, tools=[notify])],
        )
        print(f"worker polling task queue {agent.TASK_QUEUE!r}; Ctrl-C stops it", flush=True)
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
