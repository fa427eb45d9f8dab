"""A worker with the agent tests' tools, in a process a test can kill:
``python -m tests.agent_worker TASK_QUEUE [--pages]`` (settings from the environment; with
``--pages`` it has the broker, so its followers take the pages writers publish)."""

from __future__ import annotations

import asyncio
import sys

from agent_tasks.worker import build_worker, open_services
from tests.agent_tools import SCRIPTS, TOOLS
from tests.http_tools import HTTP_TOOLS


async def main(queue: str, pages: bool) -> None:
    async with open_services() as services:
        assert services.graph is not None
        async with build_worker(
            services.client,
            services.graph,
            queue,
            tools=[*TOOLS, *HTTP_TOOLS],
            scripts=SCRIPTS,
            broker=services.broker if pages else None,
        ):
            print("polling", flush=True)
            await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], "--pages" in sys.argv[2:]))
