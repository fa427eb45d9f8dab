"""Per-write costs by process at several worker counts, on the production cluster or a given
server: the measurement ``docs/scaling.md``'s capacity model is built from and checked against.

    python -m bench.bench_capacity [--workers 1 3] [--writers 20] [--writes 20]
                                   [--batch 2000] [--cluster | --shared] [--port 7633]

For each worker count N: N product workers, each a process of its own
(``bench.rss_worker ours`` on one task queue), then (1) ``--writers`` writers on a task each,
``--writes`` single events back to back each, and (2) one ``record_events`` import of
``--batch`` events into a task; each waited for until the graph store holds it. For each, the
rate (writes or events a second, until acknowledged) and the CPU time per write or event of
every process (``/proc``): this process (the app's writers), the workers (summed), the Temporal
server, PostgreSQL (the postmaster and its backends; the cluster only), the graph store and the
broker. ``--cluster`` starts the production suite's cluster (``tools.cluster``: the Temporal
server built from its Go module, on PostgreSQL 15, its namespace set up by ``agent-tasks
setup``) on ``--port`` and removes it at the end; ``--shared`` uses the configured server
(``TEMPORAL_ADDRESS``, the local stack's dev server). Prints one JSON object a line per
measurement, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from agent_tasks.config import Settings
from agent_tasks.devstack.temporal import TemporalDevServer
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import open_services
from bench.harness import Bench, cpu_seconds, transcript
from bench.peers.processes import tree_pids
from bench.rows import worker_process

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "agent-tasks-capacity"
"""The cluster's namespace for this bench (set up here)."""


def spent(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far by name (each name's processes summed; this process ``app``)."""
    flat = {f"{name}/{pid}": pid for name, group in pids.items() for pid in group}
    seconds = cpu_seconds(flat)
    out: dict[str, float] = {"app": seconds.pop("bench")}
    for key, value in seconds.items():
        name = key.split("/", 1)[0]
        out[name] = out.get(name, 0.0) + value
    return out


# Long: one worker count's two measurements over the same worker processes, in order
async def measure(
    bench: Bench, workers: int, writers: int, writes: int, batch: int, pg_pid: int | None
) -> list[dict[str, Any]]:
    """The two measurements (module docstring) with ``workers`` worker processes."""
    queue = f"{bench.queue}-cap{workers}"
    history = ConversationHistory(
        bench.client,
        project_id=bench.project,
        agent_id="bench",
        task_queue=queue,
        graph=bench.graph,
        timeout_s=300,
        broker=bench.history.broker,
    )
    async with AsyncExitStack() as stack:
        worker_pids = [
            (await stack.enter_async_context(worker_process("ours", queue, bench.worker_env))).pid
            for _ in range(workers)
        ]

        def pids() -> dict[str, list[int]]:
            found = {name: [pid] for name, pid in bench.server_pids.items()}
            found["workers"] = worker_pids
            if pg_pid is not None:
                found["postgres"] = tree_pids(pg_pid)
            return found

        names = [f"cap{workers}-{n}-{uuid.uuid4().hex[:6]}" for n in range(writers)]
        for name in names:
            assert (await history.create_task(name, "capacity")).recorded
            bench.started.append(history.workflow_id(name))
        for name in names:
            await history.wait_mirrored(name, timeout_s=120)
        await asyncio.sleep(6)  # the creations' mirror calls end
        events = transcript(writes)
        results = []

        async def write(name: str) -> None:
            for event in events:
                assert (await history.record_events(name, [event])).recorded

        before, began = spent(pids()), time.perf_counter()
        await asyncio.gather(*map(write, names))
        acknowledged = time.perf_counter() - began
        for name in names:
            await history.wait_mirrored(name, timeout_s=120)
        after = spent(pids())
        results.append(_result("writers", workers, writers * writes, acknowledged, before, after))

        name = f"cap{workers}-batch-{uuid.uuid4().hex[:6]}"
        assert (await history.create_task(name, "capacity")).recorded
        bench.started.append(history.workflow_id(name))
        await history.wait_mirrored(name, timeout_s=120)
        imported = transcript(batch)
        before, began = spent(pids()), time.perf_counter()
        assert (await history.record_events(name, imported)).recorded
        acknowledged = time.perf_counter() - began
        await history.wait_mirrored(name, timeout_s=300)
        after = spent(pids())
        results.append(_result("batch", workers, batch, acknowledged, before, after))
    return results


def _result(
    kind: str,
    workers: int,
    count: int,
    seconds: float,
    before: dict[str, float],
    after: dict[str, float],
) -> dict[str, Any]:
    cpu = {name: round((after[name] - before.get(name, 0.0)) * 1000 / count, 3) for name in after}
    return {
        "kind": kind,
        "workers": workers,
        "count": count,
        "rate": round(count / seconds, 1),
        "cpu_ms": cpu,
        "cpu_ms_all": round(sum(cpu.values()), 3),
        "load": round(os.getloadavg()[0], 2),
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every worker count of ``args`` against the cluster or the configured server."""
    results: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        env_address = None
        pg_pid = None
        temporal_pid: int | None
        if args.cluster:
            from tools.cluster import Cluster

            folder = Path(tempfile.mkdtemp(prefix="agent-tasks-capacity-", dir="/var/tmp"))
            stack.callback(shutil.rmtree, folder, True)
            cluster = Cluster(folder, args.port)
            await cluster.up()
            stack.push_async_callback(cluster.down)
            env_address = cluster.temporal.address
            os.environ["TEMPORAL_ADDRESS"] = env_address
            os.environ["TEMPORAL_NAMESPACE"] = NAMESPACE
            setup = [sys.executable, "-m", "agent_tasks.cli", "setup", "--wait", "60"]
            await asyncio.to_thread(
                subprocess.run, setup, env=os.environ, cwd=ROOT, check=True, capture_output=True
            )
            temporal_pid, pg_pid = cluster.temporal.running_pid(), cluster.postgres.running_pid()
        else:
            settings = Settings()
            temporal_pid = TemporalDevServer(settings.data_dir, 0).running_pid()
        services = await stack.enter_async_context(open_services(Settings(), schema=True))
        bench = Bench(
            services.client,
            services.graph,  # type: ignore[arg-type]
            services.settings,
            temporal_pid,
            services.broker,
        )
        try:
            for workers in args.workers:
                for result in await measure(
                    bench, workers, args.writers, args.writes, args.batch, pg_pid
                ):
                    result["server"] = "cluster" if args.cluster else "dev server"
                    print(json.dumps(result), flush=True)
                    results.append(result)
        finally:
            await bench.cleanup()
            await bench.graph.wipe_project(bench.project)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--writers", type=int, default=20)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=2_000)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cluster", action="store_true")
    where.add_argument("--shared", action="store_true")
    parser.add_argument("--port", type=int, default=7633)
    results = asyncio.run(run(parser.parse_args()))
    names = sorted({name for r in results for name in r["cpu_ms"]})
    print("kind     workers  rate/s  " + "  ".join(f"{n:>9}" for n in names) + "        all")
    for r in results:
        cells = "  ".join(f"{r['cpu_ms'].get(n, 0):9.3f}" for n in names)
        print(f"{r['kind']:8} {r['workers']:7}  {r['rate']:6.1f}  {cells}  {r['cpu_ms_all']:9.3f}")


if __name__ == "__main__":
    main()
