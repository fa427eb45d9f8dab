"""What sealing event text costs, against the local stack (``agent-tasks dev up``).

Alternating rounds, in one process, of a client without a key store (plain text: the
baseline) and one with Neo4j as its key store (each event sealed under its own AES-GCM key,
a leaf of the task's key tree, whose root the first write of a round stores):
- ``write``: one ``record_event`` call (seal, update round trip; the first of a round also
  stores the task's key tree);
- ``batch``: one ``record_events`` call of ``--batch`` events (no key-store transaction);
- ``read``: one ``list_events`` page of 50 events from the workflow (sealed: one key read,
  50 keys derived and 50 decryptions).
Prints the medians in ms and sealed / plain.

    python -m bench.bench_sealing [--writes 30] [--rounds 5] [--batch 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable

from temporalio.client import Client

from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_worker, open_services

TEXT = "a tool result of a few hundred characters: " + "output line\n" * 30


async def timed(call: Awaitable[object]) -> float:
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


async def round_of(
    client: Client, graph: GraphStore, queue: str, sealed: bool, writes: int, batch: int
) -> dict[str, list[float]]:
    """One round of one client kind; returns the times of each operation in seconds."""
    history = ConversationHistory(
        client,
        f"seal-{uuid.uuid4().hex[:8]}",
        "bench",
        task_queue=queue,
        graph=graph if sealed else None,
    )
    await history.create_task("t", "sealing cost")
    times: dict[str, list[float]] = {"write": [], "batch": [], "read": []}
    for i in range(writes):
        write = history.record_event("t", "tool_result", f"{i} {TEXT}")
        times["write"].append(await timed(write))
    events = [{"kind": "tool_result", "payload": f"{i} {TEXT}"} for i in range(batch)]
    times["batch"].append(await timed(history.record_events("t", events)))
    for _ in range(writes):
        times["read"].append(await timed(history.list_events("t", limit=50)))
    await graph.wipe_project(history.project_id)
    return times


async def main(writes: int, rounds: int, batch: int) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None
        queue = f"sealing-{uuid.uuid4().hex[:6]}"
        results: dict[bool, dict[str, list[float]]] = {
            False: {"write": [], "batch": [], "read": []},
            True: {"write": [], "batch": [], "read": []},
        }
        async with build_worker(services.client, services.graph, queue):
            for number in range(rounds):
                for sealed in (False, True):
                    got = await round_of(
                        services.client, services.graph, queue, sealed, writes, batch
                    )
                    for name, values in got.items():
                        results[sealed][name] += values
                print(f"round {number + 1} of {rounds} done", flush=True)
    for name in ("write", "batch", "read"):
        plain = statistics.median(results[False][name]) * 1000
        sealed_ms = statistics.median(results[True][name]) * 1000
        print(
            f"{name:6s} plain {plain:7.1f} ms  sealed {sealed_ms:7.1f} ms  "
            f"({sealed_ms / plain:.2f}x, n={len(results[True][name])})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.writes, args.rounds, args.batch))
