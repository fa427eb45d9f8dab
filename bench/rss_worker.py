"""A worker in a process of its own, so that its memory and CPU can be read (``bench.suite``'s
RSS and workers-apart rows).

    python -m bench.rss_worker ours|bare|mirror TASK_QUEUE [PROJECT]

``ours`` runs the product's worker (``worker.build_worker``: ``TaskWorkflow`` and the mirror),
``bare`` the bare worker (``bench.bare``) on a client with the plain pydantic data converter,
``mirror`` the bare worker and the minimal mirror (``bench.mirror``), which follows each
workflow id given as a line on standard input, into the graph store under ``PROJECT``.
Prints ``ready`` once polling, and stops when its standard input closes.
"""

from __future__ import annotations

import asyncio
import sys

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker, open_services
from bench.bare import bare_worker
from bench.mirror import MinimalMirror


async def main(kind: str, queue: str, project: str = "bench-mirror") -> None:
    async with open_services(with_graph=kind != "bare") as services:
        if kind == "ours":
            assert services.graph is not None
            running = build_worker(services.client, services.graph, queue, broker=services.broker)
            async with running:
                print("ready", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            return
        client = services.client
        plain = Client(
            client.service_client,
            namespace=client.namespace,
            data_converter=pydantic_data_converter,
        )
        async with bare_worker(plain, queue):
            if kind == "bare":
                print("ready", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
                return
            graph = services.graph
            assert isinstance(graph, TaskGraph)
            mirror = MinimalMirror(plain, graph.driver, graph.database, project, "bench")
            async with mirror.running():
                print("ready", flush=True)
                lines = asyncio.StreamReader()
                loop = asyncio.get_running_loop()
                await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
                while line := await lines.readline():
                    mirror.follow(line.decode().strip())


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
