"""Write-to-Neo4j latency of the mirror, against the local stack (``agent-tasks dev up``).

For ``--writes`` single-event writes to one task (one at a time), measures:
- ``ack``: the update round trip (write acknowledged: durable in the Temporal history);
- ``visible``: from sending the write until the event is readable in Neo4j.
Prints medians and p95 in ms and the ratio visible / ack (the baseline, in the same process).

    python -m bench.bench_mirror_latency [--writes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from temporalio.client import Client

from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_worker, open_services


async def measure(
    client: Client, graph: GraphStore, writes: int
) -> tuple[list[float], list[float]]:
    """Write ``writes`` single events to one task; returns (ack, visible) times in seconds."""
    queue = f"latency-{uuid.uuid4().hex[:6]}"
    history = ConversationHistory(
        client, project_id=f"lat-{uuid.uuid4().hex[:8]}", agent_id="bench", task_queue=queue
    )
    ack: list[float] = []
    visible: list[float] = []
    async with build_worker(client, graph, queue):
        await history.create_task("t", "latency")
        for i in range(writes):
            await asyncio.sleep(0.5)  # an idle mirror before each write, as for a lone agent
            started = time.perf_counter()
            seq = (await history.record_event("t", "message", f"m{i}")).seq
            assert seq is not None
            ack.append(time.perf_counter() - started)
            workflow_id = history.workflow_id("t")
            while True:
                if await graph.reads.events(history.project_id, workflow_id, seq - 1, seq, 1):
                    break
                await asyncio.sleep(0.005)
            visible.append(time.perf_counter() - started)
        await graph.wipe_project(history.project_id)
    return ack, visible


async def main(writes: int) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None
        ack, visible = await measure(services.client, services.graph, writes)

    def p95(values: list[float]) -> float:
        return sorted(values)[max(0, round(len(values) * 0.95) - 1)]

    for name, values in (("ack", ack), ("visible", visible)):
        print(
            f"{name:8s} median {statistics.median(values) * 1000:7.1f} ms  "
            f"p95 {p95(values) * 1000:7.1f} ms  (n={len(values)})"
        )
    print(f"visible / ack (median): {statistics.median(visible) / statistics.median(ack):.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=20)
    asyncio.run(main(parser.parse_args().writes))
