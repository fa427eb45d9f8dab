"""The mirror's read of a write, against the local stack (``agent-tasks dev up``): one
``mirror_page`` query against the three queries it replaced (``view``, ``steps``,
``events``), alternating, on one live task with a worker in this process. Prints p50, p95 and
this process's CPU per read (the worker answers the queries here).

    python -m bench.bench_mirror_read [--reads 200] [--payload 800]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from agent_tasks.contract import EventsQuery, MirrorQuery, StepsQuery
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import build_worker, open_services
from agent_tasks.workflows.task import TaskWorkflow


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main(reads: int, payload: int) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None
        queue = f"read-{uuid.uuid4().hex[:6]}"
        history = ConversationHistory(
            services.client,
            project_id=f"read-{uuid.uuid4().hex[:8]}",
            agent_id="bench",
            task_queue=queue,
            graph=services.graph,
        )
        async with build_worker(services.client, services.graph, queue):
            await history.create_task("t", "read")
            await history.record_event("t", "message", "x" * payload)
            handle = services.client.get_workflow_handle(history.workflow_id("t"))

            async def three() -> None:
                await handle.query(TaskWorkflow.view)
                await handle.query(TaskWorkflow.steps, StepsQuery(changed_after_write=1))
                await handle.query(TaskWorkflow.events, EventsQuery(up_to_seq=1, limit=100))

            async def one() -> None:
                await handle.query(TaskWorkflow.mirror_page, MirrorQuery(after_write=1))

            ways: dict[str, Callable[[], Awaitable[None]]] = {"three queries": three, "one": one}
            took: dict[str, list[float]] = {name: [] for name in ways}
            cpu = dict.fromkeys(ways, 0.0)
            for number in range(reads):
                for name in sorted(ways, reverse=number % 2 == 1):
                    started, spent = time.perf_counter(), _cpu()
                    await ways[name]()
                    took[name].append(time.perf_counter() - started)
                    cpu[name] += _cpu() - spent
            for name, values in took.items():
                ordered = sorted(values)
                print(
                    f"{name:13s} p50 {statistics.median(values) * 1000:6.2f} ms  "
                    f"p95 {ordered[int(len(ordered) * 0.95)] * 1000:6.2f} ms  "
                    f"CPU {cpu[name] / reads * 1000:5.2f} ms per read"
                )
            await history.finish_task("t", "done")
            await asyncio.sleep(1.0)  # the finish's mirror call, before the worker stops
        await services.graph.wipe_project(history.project_id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--payload", type=int, default=800)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.reads, arguments.payload))
