"""The mirror's Neo4j write, against the local stack's Neo4j: ``TaskGraph.write_task`` of
``--pages`` pages of ``--events`` events each (800-character payloads) into each of
``--writers`` tasks at once (one agent writes them all, as an import's tasks share theirs).
Prints the p50 and the slowest page, this process's CPU per page (packing the parameters,
building the rows), the events per second of all writers, and whether the driver's Rust
extension is loaded.

    python -m bench.bench_graph_write [--pages 60] [--events 100] [--writers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
import uuid
from datetime import UTC, datetime
from importlib.util import find_spec

from taskgraph.graph import TaskGraph
from taskgraph.seeds import seed_event, seed_view
from worker import open_services


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def write(
    graph: TaskGraph, project: str, task: str, pages: int, per_page: int
) -> list[float]:
    """Write ``pages`` pages into ``task``; returns each page's seconds."""
    now, took = datetime.now(UTC), []
    for page in range(pages):
        view = seed_view(project, task, last_seq=(page + 1) * per_page, now=now)
        first = page * per_page + 1
        events = [
            seed_event(view.workflow_id, n, "x" * 800, now) for n in range(first, first + per_page)
        ]
        started = time.perf_counter()
        await graph.write_task(view, events, [])
        took.append(time.perf_counter() - started)
    return took


async def main(pages: int, per_page: int, writers: int) -> None:
    async with open_services(with_graph=True, schema=True) as services:
        graph = services.graph
        assert graph is not None
        project = f"gw-{uuid.uuid4().hex[:8]}"
        started, spent = time.perf_counter(), _cpu()
        took = [
            page
            for pages_of in await asyncio.gather(
                *(write(graph, project, f"t{n}", pages, per_page) for n in range(writers))
            )
            for page in pages_of
        ]
        wall, cpu = time.perf_counter() - started, _cpu() - spent
        rust = find_spec("neo4j._rust") is not None
        print(
            f"neo4j-rust-ext {'loaded' if rust else 'absent'}: {writers} writer(s), pages of "
            f"{per_page} events, p50 {statistics.median(took) * 1000:.1f} ms, slowest "
            f"{max(took) * 1000:.0f} ms, CPU {cpu / len(took) * 1000:.1f} ms per page, "
            f"{writers * pages * per_page / wall:,.0f} events/s"
        )
        await graph.wipe_project(project)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--writers", type=int, default=1)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.pages, arguments.events, arguments.writers))
