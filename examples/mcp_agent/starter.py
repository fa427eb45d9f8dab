"""The starter: starts a task of the agent for a product, over the shop's stdio or HTTP
transport, and prints the task's result.

    python starter.py espresso --transport stdio
    python starter.py espresso --transport http --url http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

from temporalio.client import Client

import agent
from agent_tasks.starter import AgentTasksPlugin, ConversationHistory, Settings


async def main(product: str, transport: str, url: str, task: str) -> str:
    """Start the task, wait for its end, print and return its result."""
    settings = Settings()
    client = await Client.connect(
        **settings.temporal.connect_config(), plugins=[AgentTasksPlugin()]
    )
    async with ConversationHistory(
        client, project_id="shop", agent_id="starter", task_queue=agent.TASK_QUEUE
    ) as history:
        await history.create_task(task, product, agent=agent.spec(product, transport, url))
        final = await history.wait_task(task)
        assert final is not None
        result = final.result.text if final.result else final.error.text if final.error else ""
        print(f"task {task!r}: {final.status.value}\n{result}")
        return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("product")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--url", default="http://127.0.0.1:8765/mcp", help="the shop's MCP URL")
    parser.add_argument("--task", default=f"shop-{uuid.uuid4().hex[:8]}", help="task name")
    args = parser.parse_args()
    asyncio.run(main(args.product, args.transport, args.url, args.task))
