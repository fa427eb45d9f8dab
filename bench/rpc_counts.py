"""Temporal RPCs and worker CPU per write of the 20 writers, ours against bare (issue 36).

    python -m bench.rpc_counts rpcs [WRITES]   # RPCs per write by operation, in one process
    python -m bench.rpc_counts cpu [WRITES]    # the worker's CPU per write, the worker apart

``rpcs`` runs both workers in this process on a runtime whose metrics are kept in a buffer
(the SDK core's ``temporal_request`` and ``temporal_long_request`` counters, by operation: the
clients' calls, the workers' polls and completions, the followers' long polls, the queries),
writes ``WRITES`` single events with 20 writers on 20 tasks (ours, then bare), waits for our
mirror, and prints each side's calls per write by operation. ``cpu`` runs the same writes
with each side's worker in a process of its own (``bench.rows.worker_process``) and prints
the CPU per write (``/proc``) of the worker and of the local stack's Temporal and Neo4j (the
others' load on them included), and the writes' rate. Both use the configured Temporal
server and Neo4j (the local stack's).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from collections.abc import Callable

from temporalio.client import Client
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from agent_tasks.broker import open_broker
from agent_tasks.config import Settings
from agent_tasks.devstack.temporal import TemporalDevServer
from agent_tasks.plugin import AgentTasksPlugin
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_worker, open_graph
from bench.bare import bare_worker
from bench.harness import Bench, Row, cpu_seconds, replace_queue, transcript
from bench.rows import apart_task, worker_process, write_bare, write_ours

WRITERS = 20
REQUESTS = ("temporal_request", "temporal_long_request")


def _calls(buffer: MetricBuffer, counts: Counter[str]) -> None:
    """Add the buffer's request counters since its last read to ``counts`` by operation."""
    for update in buffer.retrieve_updates():
        if update.metric.name in REQUESTS:
            counts[str(update.attributes.get("operation"))] += int(update.value)


async def _side(
    bench: Bench, side: str, queue: str, writes: int, phase: Callable[[str], None]
) -> float:
    """Write ``writes`` single events with ``WRITERS`` writers on ``side``'s workflows of
    ``queue`` (ours: mirrored before it returns); returns the writes per second. Calls
    ``phase`` with each phase's name as it ends (``create``, ``writes``, ``mirror``)."""
    events = transcript(writes // WRITERS)
    row = Row("writes", "events/s", "")
    if side == "ours":
        history = replace_queue(bench.history, queue)
        names = [await apart_task(bench, history) for _ in range(WRITERS)]
        await asyncio.sleep(6)  # the creations' followers end (MIRROR_FOLLOW_IDLE)
        base = await bench.mirrored_seqs(names)
        phase("create")
        await write_ours(bench, history, names, events, row)
        phase("writes")
        for name in names:
            await bench.mirrored(name, base[name] + len(events))
        phase("mirror")
        return float(row.ours[0])
    handles = [await bench.bare(queue) for _ in range(WRITERS)]
    phase("create")
    await write_bare(bench, handles, events, row)
    phase("writes")
    return float(row.base[0])


async def _rpcs(
    bench: Bench, graph: GraphStore, buffer: MetricBuffer, side: str, writes: int
) -> None:
    """Print ``side``'s Temporal RPCs per write by operation, its worker in this process."""
    queue = f"{bench.queue}-{side}"
    worker = (
        build_worker(bench.client, graph, queue, broker=bench.history.broker)
        if side == "ours"
        else bare_worker(bench.plain, queue)
    )
    phases: dict[str, Counter[str]] = {}

    def phase(name: str) -> None:
        _calls(buffer, phases.setdefault(name, Counter()))

    async with worker:
        rate = await _side(bench, side, queue, writes, phase)
    print(f"{side}: {rate:.0f} writes/s")
    for name in ("writes", "mirror"):
        counts = phases.get(name, Counter())
        per = {op: round(n / writes, 3) for op, n in counts.most_common()}
        total = round(sum(counts.values()) / writes, 2)
        print(f"  {name}: RPCs per write {total}: {per}")


async def _cpu(bench: Bench, side: str, writes: int) -> None:
    """Print ``side``'s CPU per write by process (the worker, in a process of its own, and
    ``bench.server_pids``), from the writes' start to their mirror."""
    queue = f"{bench.queue}-{side}"
    marks: dict[str, tuple[dict[str, float], float]] = {}
    async with worker_process(side, queue, {**os.environ}) as worker:

        def mark(name: str) -> None:
            pids = {"worker": worker.pid, **bench.server_pids}
            marks[name] = (cpu_seconds(pids), time.perf_counter())

        rate = await _side(bench, side, queue, writes, mark)
        mark("end")
    (start, began), (end, ended) = marks["create"], marks["end"]
    per = ", ".join(
        f"{name} {(end[name] - start[name]) * 1000 / writes:.2f}"
        for name in ("worker", *bench.server_pids)
    )
    print(
        f"{side}: CPU ms/write: {per}; {rate:.0f} writes/s,"
        f" {ended - began:.1f} s with mirror, load {os.getloadavg()[0]:.1f}"
    )


async def main(mode: str, writes: int) -> None:
    """Run ``mode`` (``rpcs`` or ``cpu``, the module docstring) with ``writes`` writes a
    side, ours first."""
    buffer = MetricBuffer(100_000)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    settings = Settings()
    client = await Client.connect(
        **settings.temporal.connect_config(), plugins=[AgentTasksPlugin()], runtime=runtime
    )
    async with open_graph(settings) as graph, open_broker(settings.broker_url) as broker:
        temporal_pid = TemporalDevServer(settings.data_dir, 0).running_pid()
        bench = Bench(client, graph, settings, temporal_pid, broker)  # type: ignore[arg-type]
        try:
            for side in ("ours", "bare"):
                if mode == "rpcs":
                    await _rpcs(bench, graph, buffer, side, writes)
                else:
                    await _cpu(bench, side, writes)
        finally:
            await bench.cleanup()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 400))
