"""A closed task's read against an open task's, against the local stack (``agent-tasks dev
up``): ``get_task`` and the first page of ``list_events`` of two tasks with the same events, one
open (read by query, from the worker in this process) and one finished (read from its result
and the graph store, no worker involved), alternating; and, for scale, the finished task read
the old way, by a query its worker answers by replaying the run. Prints each way's median and
p95 and the ratio of the medians.

    python -m bench.bench_closed_read [--reads 100] [--events 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from agent_tasks.contract import EventInput, EventsQuery
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import build_worker, open_services
from agent_tasks.workflows.task import TaskWorkflow


async def main(reads: int, events: int) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None
        queue = f"closed-{uuid.uuid4().hex[:6]}"
        history = ConversationHistory(
            services.client,
            project_id=f"closed-{uuid.uuid4().hex[:8]}",
            agent_id="bench",
            task_queue=queue,
            graph=services.graph,
        )
        written = [
            EventInput(kind="message", payload=f"event {n} " + "x" * 200) for n in range(events)
        ]
        async with build_worker(services.client, services.graph, queue):
            for name in ("open", "closed"):
                await history.create_task(name, "read")
                await history.record_events(name, written)
            await history.finish_task("closed", "done")
            await history.wait_task("closed")
            closed = services.client.get_workflow_handle(history.workflow_id("closed"))

            async def read(name: str) -> None:
                view = (await history.get_task(name)).view
                page = await history.list_events(name)
                assert view is not None and len(page.events) == events

            async def replayed() -> None:
                await closed.query(TaskWorkflow.view)
                await closed.query(TaskWorkflow.events, EventsQuery(limit=50))

            ways: dict[str, Callable[[], Awaitable[None]]] = {
                "open (query)": lambda: read("open"),
                "closed (result + graph)": lambda: read("closed"),
                "closed by query (replay)": replayed,
            }
            took: dict[str, list[float]] = {name: [] for name in ways}
            for number in range(reads):
                for name in sorted(ways, reverse=number % 2 == 1):
                    started = time.perf_counter()
                    await ways[name]()
                    took[name].append(time.perf_counter() - started)
            await history.finish_task("open", "done")
            await history.wait_task("open")
        base = statistics.median(took["open (query)"])
        for name, values in took.items():
            ordered = sorted(values)
            print(
                f"{name:25s} p50 {statistics.median(values) * 1000:6.2f} ms  "
                f"p95 {ordered[int(len(ordered) * 0.95)] * 1000:6.2f} ms  "
                f"x{statistics.median(values) / base:4.2f} of the open read"
            )
        await services.graph.wipe_project(history.project_id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--events", type=int, default=20)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.reads, arguments.events))
