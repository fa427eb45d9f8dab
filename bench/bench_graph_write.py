"""The mirror's Neo4j write, against the local stack's Neo4j: ``TaskGraph.write_task`` of
``--pages`` pages of ``--events`` events each (800-character payloads) into each of
``--writers`` tasks at once (one agent writes them all, as an import's tasks share theirs).
``--sealed``: each event's text sealed under a leaf of its task's key tree, as a client with a
graph sends it, so the page also reads and derives its keys. Prints the p50 and the slowest
page, this process's CPU per page (packing the parameters, building the rows, opening sealed
text), the events per second of all writers, and whether the driver's Rust extension is
loaded.

    python -m bench.bench_graph_write [--pages 60] [--events 100] [--writers 1] [--sealed]
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

from agent_tasks.contract import EventInput
from agent_tasks.sealing.seal import seal_events
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.seeds import seed_event, seed_view
from agent_tasks.worker import open_services


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def write(
    graph: GraphStore, project: str, task: str, pages: int, per_page: int, sealed: bool
) -> list[float]:
    """Write ``pages`` pages into ``task``; returns each page's seconds."""
    now, took = datetime.now(UTC), []
    for page in range(pages):
        view = seed_view(project, task, last_seq=(page + 1) * per_page, now=now)
        first = page * per_page + 1
        events = [
            seed_event(view.workflow_id, n, "x" * 800, now) for n in range(first, first + per_page)
        ]
        if sealed:
            inputs = [EventInput(kind=e.kind, payload=e.payload) for e in events]
            with_keys = await seal_events(graph, project, view.workflow_id, inputs)
            events = [
                e.model_copy(update={"payload": "", "sealed": s.sealed, "key_id": s.key_id})
                for e, s in zip(events, with_keys, strict=True)
            ]
        started = time.perf_counter()
        await graph.write_task(view, events, [])
        took.append(time.perf_counter() - started)
    return took


async def main(pages: int, per_page: int, writers: int, sealed: bool) -> None:
    async with open_services(with_graph=True, schema=True) as services:
        graph = services.graph
        assert graph is not None
        project = f"gw-{uuid.uuid4().hex[:8]}"
        started, spent = time.perf_counter(), _cpu()
        took = [
            page
            for pages_of in await asyncio.gather(
                *(write(graph, project, f"t{n}", pages, per_page, sealed) for n in range(writers))
            )
            for page in pages_of
        ]
        wall, cpu = time.perf_counter() - started, _cpu() - spent
        rust = find_spec("neo4j._rust") is not None
        print(
            f"neo4j-rust-ext {'loaded' if rust else 'absent'}: {writers} writer(s), pages of "
            f"{per_page} {'sealed ' if sealed else ''}events, "
            f"p50 {statistics.median(took) * 1000:.1f} ms, slowest "
            f"{max(took) * 1000:.0f} ms, CPU {cpu / len(took) * 1000:.1f} ms per page, "
            f"{writers * pages * per_page / wall:,.0f} events/s"
        )
        await graph.wipe_project(project)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--writers", type=int, default=1)
    parser.add_argument("--sealed", action="store_true")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.pages, arguments.events, arguments.writers, arguments.sealed))
