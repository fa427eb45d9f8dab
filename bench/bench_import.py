"""Import throughput and mirror catch-up, against the local stack (``agent-tasks dev up``).

Runs in one process, with a worker on a private task queue:
- ``batched``: every shipped trajectory imported the product's way (a few updates per file);
- ``baseline``: the same events of the same files recorded one event per update, the way an
  agent that writes as it goes would, with no batching.
Each is repeated ``--rounds`` times in fresh projects; the medians and their ratio are printed,
with the mirror's catch-up time (last acknowledged write to every task mirrored).

    python bench/bench_import.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from pathlib import Path

from starter.client import ConversationHistory
from starter.importer import EXAMPLES, import_file, mirror_caught_up, trajectory_files
from trajectories import parse_file
from worker import build_worker, open_services


async def batched(history: ConversationHistory, files: list[Path]) -> tuple[float, float, int]:
    started = time.perf_counter()
    reports = [await import_file(history, path, None) for path in files]
    seconds = time.perf_counter() - started
    assert not any(r.error for r in reports), [r.error for r in reports if r.error]
    events = sum(r.events for r in reports)
    return (
        events / seconds,
        await mirror_caught_up(history, [r.task for r in reports if r.task]),
        events,
    )


async def one_per_update(
    history: ConversationHistory, files: list[Path]
) -> tuple[float, float, int]:
    started = time.perf_counter()
    events, tasks = 0, []
    for path in files:
        parsed = parse_file(path)
        await history.create_task(parsed.name, parsed.goal)
        for event in parsed.events:
            assert (await history.record_events(parsed.name, [event])).recorded
        events += len(parsed.events)
        tasks.append(parsed.name)
    seconds = time.perf_counter() - started
    return events / seconds, await mirror_caught_up(history, tasks), events


async def main(rounds: int) -> None:
    async with open_services(schema=True) as services:
        client, graph = services.client, services.graph
        assert graph is not None
        files = list(trajectory_files([EXAMPLES]))
        baseline_files = [f for f in files if "django-14752" in f.name or "pvlib" in f.name]
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        results: dict[str, list[tuple[float, float, int]]] = {"batched": [], "baseline": []}
        async with build_worker(client, graph, queue):
            for _ in range(rounds):
                for name, run, chosen in (
                    ("batched", batched, files),
                    ("baseline", one_per_update, baseline_files),
                ):
                    history = ConversationHistory(
                        client,
                        project_id=f"bench-{uuid.uuid4().hex[:8]}",
                        agent_id="bench",
                        task_queue=queue,
                        graph=graph,
                    )
                    results[name].append(await run(history, chosen))
                    await graph.wipe_project(history.project_id)
    for name, rows in results.items():
        rates = [r[0] for r in rows]
        lags = [r[1] for r in rows]
        print(
            f"{name:9s} events/round {rows[0][2]:5d}  "
            f"events/s median {statistics.median(rates):8.1f} "
            f"(runs {', '.join(f'{r:.0f}' for r in rates)})  mirror catch-up median "
            f"{statistics.median(lags) * 1000:6.0f} ms"
        )
    ratio = statistics.median(r[0] for r in results["batched"]) / statistics.median(
        r[0] for r in results["baseline"]
    )
    print(f"batched / one-event-per-update throughput: {ratio:.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
