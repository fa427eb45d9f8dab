"""A worker in a process of its own, so that its memory can be read (``bench.suite``'s RSS row).

    python -m bench.rss_worker ours|bare TASK_QUEUE

``ours`` runs the product's worker (``worker.build_worker``: ``TaskWorkflow`` and the mirror),
``bare`` the bare worker (``bench.bare``) on a client with the plain pydantic data converter.
Prints ``ready`` once polling, and stops when its standard input closes.
"""

from __future__ import annotations

import asyncio
import sys

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from agent_tasks.worker import build_worker, open_services
from bench.bare import bare_worker


async def main(kind: str, queue: str) -> None:
    async with open_services(with_graph=kind == "ours") as services:
        if kind == "ours":
            assert services.graph is not None
            running = build_worker(services.client, services.graph, queue, broker=services.broker)
        else:
            client = services.client
            plain = Client(
                client.service_client,
                namespace=client.namespace,
                data_converter=pydantic_data_converter,
            )
            running = bare_worker(plain, queue)
        async with running:
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
