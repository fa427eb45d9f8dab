"""A closed task's read against an open task's, against the local stack (``agent-tasks dev
up``): ``get_task`` and the first page of ``list_events`` of tasks with the same events, one
open (read by query, from the worker in this process) and three closed: one completed (read
from its result and the graph store), one cancelled and one terminated (``temporal workflow
terminate``, the Web UI's Terminate), each read from the graph store; and, for scale, the
completed task read the old way, by a query its worker answers by replaying the run. The ways
alternate, with the worker running; then the worker stops and the closed tasks are read again
(``--reads`` / 5 each), as a person reads them while no worker polls their queue. Prints each
way's median and p95 and the ratio of the medians to the open read's; a read that fails is
counted and its time kept (a client's time limit of ``--timeout`` seconds).

    python -m bench.bench_closed_read [--reads 100] [--events 20] [--timeout 30]
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

Way = Callable[[], Awaitable[None]]


async def timed(ways: dict[str, Way], rounds: int, took: dict[str, list[float]]) -> None:
    """Run every way ``rounds`` times, alternating their order, adding each read's seconds to
    ``took`` (a failed read too, under ``{name} FAILED``)."""
    for number in range(rounds):
        for name in sorted(ways, reverse=number % 2 == 1):
            started = time.perf_counter()
            try:
                await ways[name]()
            except Exception:  # a read that fails is a row of its own, with its time
                took.setdefault(f"{name} FAILED", []).append(time.perf_counter() - started)
                continue
            took.setdefault(name, []).append(time.perf_counter() - started)


def report(took: dict[str, list[float]], base_name: str) -> None:
    """Print each way's p50, p95 and reads, and its p50 over ``base_name``'s."""
    base = statistics.median(took[base_name])
    for name, values in took.items():
        ordered = sorted(values)
        print(
            f"{name:42s} p50 {statistics.median(values) * 1000:8.2f} ms  "
            f"p95 {ordered[int(len(ordered) * 0.95)] * 1000:8.2f} ms  "
            f"x{statistics.median(values) / base:6.2f} of the open read  ({len(values)} reads)"
        )


# Long: the bench's script in order: the tasks, the reads with a worker, then without one
async def main(reads: int, events: int, timeout_s: float) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None
        queue = f"closed-{uuid.uuid4().hex[:6]}"
        history = ConversationHistory(
            services.client,
            project_id=f"closed-{uuid.uuid4().hex[:8]}",
            agent_id="bench",
            task_queue=queue,
            graph=services.graph,
            timeout_s=timeout_s,
        )
        written = [
            EventInput(kind="message", payload=f"event {n} " + "x" * 200) for n in range(events)
        ]
        names = ("open", "closed", "cancelled", "terminated")

        async def read(name: str) -> None:
            view = (await history.get_task(name)).view
            page = await history.list_events(name)
            assert view is not None and len(page.events) >= events  # a cancel adds a note

        async with build_worker(services.client, services.graph, queue):
            for name in names:
                await history.create_task(name, "read")
                await history.record_events(name, written)
            await history.finish_task("closed", "done")
            await history.cancel_task("cancelled")
            for name in ("closed", "cancelled", "terminated"):
                assert await history.wait_mirrored(name, 60)
            terminated = services.client.get_workflow_handle(history.workflow_id("terminated"))
            await terminated.terminate("bench: an operator's terminate")
            await history.wait_task("closed")
            await history.wait_task("cancelled")
            completed = services.client.get_workflow_handle(history.workflow_id("closed"))

            async def replayed() -> None:
                await completed.query(TaskWorkflow.view)
                await completed.query(TaskWorkflow.events, EventsQuery(limit=50))

            ways: dict[str, Way] = {
                "open (query)": lambda: read("open"),
                "completed (result + graph store)": lambda: read("closed"),
                "cancelled (graph store)": lambda: read("cancelled"),
                "terminated (graph store)": lambda: read("terminated"),
                "completed by query (replay)": replayed,
            }
            took: dict[str, list[float]] = {}
            await timed(ways, reads, took)
        print(f"with the worker running ({reads} reads each, alternating):")
        report(took, "open (query)")
        stopped: dict[str, Way] = {
            f"no worker: {name}": way
            for name, way in ways.items()
            if name.startswith(("completed (", "cancelled", "terminated"))
        }
        alone: dict[str, list[float]] = {"open (query)": took["open (query)"]}
        await timed(stopped, max(1, reads // 5), alone)
        print(f"no worker polling the queue ({max(1, reads // 5)} reads each):")
        report(alone, "open (query)")
        async with build_worker(services.client, services.graph, queue):
            await history.finish_task("open", "done")
            await history.wait_task("open")
        await services.graph.wipe_project(history.project_id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=30.0)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.reads, arguments.events, arguments.timeout))
