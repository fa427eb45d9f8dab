"""Import throughput and mirror catch-up, against the local stack (``agent-tasks dev up``).

Runs in one process, with a worker on a private task queue, each round in a fresh project:
- ``shipped``: the 16 shipped trajectories imported the product's way (``import_paths``: a few
  updates per task, ``CONCURRENCY`` tasks at a time);
- ``sequential``: the same files, one task at a time (concurrency 1), the importer's old way;
- ``one-per-update``: the events of two shipped files recorded one event per update, the way an
  agent that writes as it goes would (the baseline: no batching, no concurrency);
- ``corpus``: a corpus of ``--files`` distinct files built from the shipped ones with altered
  ids (``bench.corpus``), imported like ``shipped``.

For each: events per second acknowledged (an acknowledged update is in the workflow history,
so durable in Temporal), events per second visible in Neo4j (writes plus the mirror's
catch-up), and the catch-up itself (last acknowledged write to every task mirrored). Medians of
the rounds, and each rate against the one-per-update baseline of the same run.

    python -m bench.bench_import [--rounds 3] [--corpus-rounds 1] [--files 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

from agent_tasks.cli.importer import import_tasks, mirror_caught_up
from agent_tasks.cli.planning import EXAMPLES, plan_import
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_worker, open_services
from bench.corpus import build_corpus

Round = tuple[float, float, float, int]
"""events/s acknowledged, events/s in Neo4j, catch-up seconds, events."""


async def _timed(
    history: ConversationHistory, write: Callable[[], Awaitable[tuple[list[str], int]]]
) -> Round:
    started = time.perf_counter()
    tasks, events = await write()
    written = time.perf_counter() - started
    catch_up = await mirror_caught_up(history, tasks, within=600)
    return events / written, events / (written + catch_up), catch_up, events


def importing(
    files: list[Path], concurrency: int
) -> Callable[[ConversationHistory], Awaitable[Round]]:
    tasks, refused = plan_import(files)
    assert not refused, refused

    async def go(history: ConversationHistory) -> Round:
        async def write() -> tuple[list[str], int]:
            reports = await import_tasks(history, tasks, concurrency=concurrency)
            assert all(r.status == "created" for r in reports), [r.error for r in reports]
            return [r.task or "" for r in reports], sum(r.new_events for r in reports)

        return await _timed(history, write)

    return go


def one_per_update(files: list[Path]) -> Callable[[ConversationHistory], Awaitable[Round]]:
    tasks, _ = plan_import(files)

    async def go(history: ConversationHistory) -> Round:
        async def write() -> tuple[list[str], int]:
            events = 0
            for task in tasks:
                run = task.head
                await history.create_task(run.name, run.goal)
                for event in run.events:
                    assert (await history.record_events(run.name, [event])).recorded
                events += len(run.events)
            return [task.head.name for task in tasks], events

        return await _timed(history, write)

    return go


async def _round(
    client: Client,
    graph: GraphStore,
    queue: str,
    run: Callable[[ConversationHistory], Awaitable[Round]],
) -> Round:
    history = ConversationHistory(
        client,
        project_id=f"bench-{uuid.uuid4().hex[:8]}",
        agent_id="bench",
        task_queue=queue,
        graph=graph,
        timeout_s=120,
    )
    try:
        return await run(history)
    finally:
        await graph.wipe_project(history.project_id)


def _print(name: str, rows: list[Round], baseline: float) -> None:
    acked = statistics.median(r[0] for r in rows)
    print(
        f"{name:15s} {rows[0][3]:6d} events  acknowledged {acked:7.1f} events/s "
        f"({acked / baseline:5.1f}x; runs {', '.join(f'{r[0]:.0f}' for r in rows)})  "
        f"in Neo4j {statistics.median(r[1] for r in rows):7.1f} events/s  "
        f"mirror catch-up {statistics.median(r[2] for r in rows) * 1000:6.0f} ms"
    )


async def main(rounds: int, corpus_rounds: int, files: int) -> None:
    shipped = sorted(
        p for p in EXAMPLES.rglob("*") if p.is_file() and p.suffix in (".json", ".traj")
    )
    small = [f for f in shipped if "django-14752" in f.name or "pvlib" in f.name]
    with tempfile.TemporaryDirectory() as folder:
        corpus = build_corpus(Path(folder), files, shipped)
        plans = {
            "shipped": (importing(shipped, 16), rounds),
            "sequential": (importing(shipped, 1), rounds),
            "one-per-update": (one_per_update(small), rounds),
            "corpus": (importing(corpus, 16), corpus_rounds),
        }
        results: dict[str, list[Round]] = {name: [] for name in plans}
        async with open_services(schema=True) as services:
            assert services.graph is not None
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            async with build_worker(services.client, services.graph, queue):
                for number in range(max(rounds, corpus_rounds)):
                    for name, (run, count) in plans.items():
                        if number < count:
                            row = await _round(services.client, services.graph, queue, run)
                            results[name].append(row)
                            print(f"round {number + 1} {name}: {row}", flush=True)
    baseline = statistics.median(r[0] for r in results["one-per-update"])
    for name, rows in results.items():
        _print(name, rows, baseline)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus-rounds", type=int, default=1)
    parser.add_argument("--files", type=int, default=1000)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rounds, arguments.corpus_rounds, arguments.files))
