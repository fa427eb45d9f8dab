"""Which mirror design costs the write path least: three prototypes (``bench.designs``) against
the bare workflow, on a Temporal dev server of the bench's own and the local stack's Neo4j.

Every design is the bare workflow (an update appends items to a list) with a mirror activity
that reads the items back by query and merges them into Neo4j in one transaction per page;
they differ only in when the activity runs (``bench.designs``: one call per waiting write,
a call per batch by a workflow timer, or one call per run that follows the run's history by a
long poll). For each design and the bare workflow, in alternating blocks, ``--rounds`` times:

- ``b2b``: single-item writes back to back, the update round trip (ms, median);
- ``cpu``: CPU time of this process, Temporal and Neo4j per write over the back-to-back block
  until Neo4j holds the last item (ms);
- ``events`` and ``tasks``: history events and workflow tasks per write (from the history);
- ``lag``: 20 writes/s of 5 items, each write's time from sent to visible in Neo4j (p50, p95).

    python -m bench.bench_mirror_designs [--writes 40] [--rounds 3] [--lag-s 6] [--age-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from neo4j import AsyncManagedTransaction
from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Worker

from agent_tasks.config import Settings, connect
from agent_tasks.devstack import free_port
from agent_tasks.devstack.neo4j_server import Neo4jServer
from agent_tasks.devstack.temporal import TemporalDevServer
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import open_services
from bench.bare import BareWorkflow, bare_worker
from bench.designs import DESIGN_MIRROR, Cadence, Follower, MirrorCall, Page, PerWrite
from bench.harness import cpu_seconds, event_json, transcript

DESIGNS: dict[str, type[Any]] = {
    "per-write": PerWrite,
    "cadence": Cadence,
    "follower": Follower,
}
FOLLOW_AGE_S = 0.1
"""The follower's cadence: after a wake-up it lets the next 100 ms of writes join its copy."""
FOLLOW_IDLE_S = 5.0
"""The follower ends once the run has had no new workflow task for this long."""
FOLLOW_MAX_S = 30.0
"""The follower ends after this long (the workflow starts another when a write waits)."""
POLL_S = 5.0
"""One history long poll at most (the server answers empty when nothing came)."""

_WRITE: Any = """
MERGE (t:DesignTask {key: $key})
WITH t UNWIND $items AS item
MERGE (e:DesignEvent {key: $key + '#' + toString(item.seq)})
SET e.payload = item.payload, e.kind = item.kind
WITH t, max(item.seq) AS top
SET t.mirrored = CASE WHEN coalesce(t.mirrored, 0) < top THEN top ELSE t.mirrored END
"""


class DesignMirror:
    """The prototype mirror activity (``bench.designs.DESIGN_MIRROR``)."""

    def __init__(self, client: Client, graph: TaskGraph, age_s: float) -> None:
        self.client = client
        self.graph = graph
        self.age_s = age_s
        """The follower's cadence (``FOLLOW_AGE_S`` unless told)."""

    async def _copy(self, handle: WorkflowHandle[Any, Any], after: int) -> tuple[int, bool]:
        """Copy every item after ``after`` in pages; returns how far and whether closed."""
        while True:
            page: Page = await handle.query("page", after, result_type=Page)
            if page.items:
                rows = [
                    {"seq": after + 1 + n, "payload": str(i.get("payload")), "kind": i.get("kind")}
                    for n, i in enumerate(page.items)
                ]

                async def work(tx: AsyncManagedTransaction, rows: list[dict[str, Any]]) -> None:
                    await (await tx.run(_WRITE, key=handle.id, items=rows)).consume()

                async with self.graph.driver.session(database=self.graph.database) as session:
                    await session.execute_write(work, rows)
                after += len(rows)
            if after >= page.total:
                return after, page.closed

    async def _grew(self, call: MirrorCall, token: bytes) -> tuple[bool, bytes]:
        """Wait (one long poll) for the run's history to grow past ``token``."""
        request = GetWorkflowExecutionHistoryRequest(
            namespace=self.client.namespace,
            execution=WorkflowExecution(workflow_id=call.workflow_id, run_id=call.run_id),
            next_page_token=token,
            wait_new_event=True,
            skip_archival=True,
        )
        response = await self.client.workflow_service.get_workflow_execution_history(
            request, timeout=timedelta(seconds=POLL_S), retry=True
        )
        return bool(response.history.events), response.next_page_token or token

    @activity.defn(name=DESIGN_MIRROR)
    async def mirror(self, call: MirrorCall) -> int:
        """Copy items ``after < n <= up_to``; a ``follow`` call goes on while the run grows."""
        handle = self.client.get_workflow_handle(call.workflow_id, run_id=call.run_id)
        after, closed = await self._copy(handle, call.after)
        if not call.follow:
            return after
        loop = asyncio.get_running_loop()
        started = idle = loop.time()
        token = b""
        while not closed and loop.time() - started < FOLLOW_MAX_S:
            activity.heartbeat(after)
            grew, token = await self._grew(call, token)
            if not grew:
                if loop.time() - idle >= FOLLOW_IDLE_S:
                    break
                continue
            idle = loop.time()
            await asyncio.sleep(self.age_s)
            after, closed = await self._copy(handle, after)
        return after


async def _mirrored(graph: TaskGraph, key: str) -> int:
    records, _, _ = await graph.driver.execute_query(
        "MATCH (t:DesignTask {key: $key}) RETURN t.mirrored AS m", key=key, database_=graph.database
    )
    return int(records[0]["m"] or 0) if records else 0


async def _per_write(handle: WorkflowHandle[Any, Any], writes: int) -> tuple[float, float]:
    """History events and workflow tasks per write (the start's own left out)."""
    events = (await handle.fetch_history()).events
    tasks = sum(e.HasField("workflow_task_completed_event_attributes") for e in events)
    return (len(events) - 4) / writes, (tasks - 1) / writes


async def block(
    client: Client,
    graph: TaskGraph,
    queue: str,
    design: str,
    items: list[dict[str, Any]],
    pids: dict[str, int],
    lag_s: float,
) -> dict[str, Any]:
    """One block of one design (or ``bare``): back-to-back writes, then the lag run."""
    workflow = BareWorkflow if design == "bare" else DESIGNS[design]
    name = f"design/{design}/{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(workflow.run, id=name, task_queue=queue)
    took = []
    before = sum(cpu_seconds(pids).values())
    for item in items:
        started = time.perf_counter()
        await handle.execute_update(BareWorkflow.append, [item])
        took.append(time.perf_counter() - started)
    if design != "bare":
        while await _mirrored(graph, name) < len(items):  # noqa: ASYNC110 (Neo4j is polled)
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    cpu = (sum(cpu_seconds(pids).values()) - before) / len(items)
    events, tasks = await _per_write(handle, len(items))
    await handle.signal(BareWorkflow.close)
    lag: list[float] = []
    if design != "bare":
        lag = await _lag(client, graph, queue, design, items[:5], lag_s)
    b2b = statistics.median(took)
    return {"b2b": b2b, "cpu": cpu, "events": events, "tasks": tasks, "lag": lag}


async def _lag(
    client: Client,
    graph: TaskGraph,
    queue: str,
    design: str,
    batch: list[dict[str, Any]],
    lag_s: float,
) -> list[float]:
    """20 writes/s of 5 items for ``lag_s`` seconds; each write's sent-to-visible time."""
    name = f"design/{design}/{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(DESIGNS[design].run, id=name, task_queue=queue)
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    start = time.perf_counter()
    total = 0
    for number in range(round(lag_s * 20)):
        await asyncio.sleep(max(0.0, start + number * 0.05 - time.perf_counter()))
        began = time.perf_counter()
        total = await handle.execute_update(BareWorkflow.append, batch)
        sent[total] = began
        reached = await _mirrored(graph, name)
        now = time.perf_counter()
        seen.update((n, now) for n in sent if n <= reached and n not in seen)
    while len(seen) < len(sent):
        reached = await _mirrored(graph, name)
        now = time.perf_counter()
        seen.update((n, now) for n in sent if n <= reached and n not in seen)
        await asyncio.sleep(0.01)
    await handle.signal(BareWorkflow.close)
    return [seen[n] - sent[n] for n in sent]


@contextlib.asynccontextmanager
async def private_server(settings: Settings) -> AsyncIterator[tuple[Client, int]]:
    """A Temporal dev server of the bench's own (the project's dev configuration)."""
    with tempfile.TemporaryDirectory() as folder:
        server = TemporalDevServer(Path(folder), free_port())
        pid, _ = await server.start_ready()
        try:
            client = await connect(settings, address=server.address)
            yield (
                Client(
                    client.service_client,
                    namespace=client.namespace,
                    data_converter=pydantic_data_converter,
                ),
                pid,
            )
        finally:
            await server.stop()


async def main(writes: int, rounds: int, lag_s: float, age_s: float) -> None:
    settings = Settings()
    items = event_json(transcript(writes))
    async with private_server(settings) as (client, temporal_pid):
        async with open_services(settings, client=client, schema=True) as services:
            graph = services.graph
            assert isinstance(graph, TaskGraph)  # the designs are Neo4j's
            neo4j_pid = Neo4jServer(settings.data_dir, 0).running_pid()
            pids = {
                name: pid
                for name, pid in (("temporal", temporal_pid), ("neo4j", neo4j_pid))
                if pid is not None
            }
            queue = f"designs-{uuid.uuid4().hex[:6]}"
            mirror = DesignMirror(client, graph, age_s)
            worker = Worker(
                client,
                task_queue=queue,
                workflows=list(DESIGNS.values()),
                activities=[mirror.mirror],
            )
            results: dict[str, list[dict[str, Any]]] = {d: [] for d in ("bare", *DESIGNS)}
            async with worker, bare_worker(client, queue + "-bare"):
                for number in range(rounds):
                    order = list(results) if number % 2 == 0 else list(reversed(results))
                    for design in order:
                        on = queue + "-bare" if design == "bare" else queue
                        results[design].append(
                            await block(client, graph, on, design, items, pids, lag_s)
                        )
            with contextlib.suppress(RPCError):
                await graph.driver.execute_query(
                    "MATCH (n) WHERE n:DesignTask OR n:DesignEvent DETACH DELETE n",
                    database_=graph.database,
                )
    _print(results)


def _print(results: dict[str, list[dict[str, Any]]]) -> None:
    bare = results["bare"]
    floor = {k: statistics.median(r[k] for r in bare) for k in ("b2b", "cpu")}
    print(
        f"{'design':10s} {'b2b ms':>8s} {'x':>5s} {'cpu ms':>8s} {'x':>5s} "
        f"{'events':>7s} {'tasks':>6s} {'lag p50':>8s} {'lag p95':>8s}"
    )
    for design, rows in results.items():
        b2b = statistics.median(r["b2b"] for r in rows)
        cpu = statistics.median(r["cpu"] for r in rows)
        events = statistics.median(r["events"] for r in rows)
        tasks = statistics.median(r["tasks"] for r in rows)
        lags = sorted(x for r in rows for x in r["lag"])
        p50 = f"{statistics.median(lags) * 1000:8.0f}" if lags else f"{'-':>8s}"
        p95 = f"{lags[round(len(lags) * 0.95) - 1] * 1000:8.0f}" if lags else f"{'-':>8s}"
        print(
            f"{design:10s} {b2b * 1000:8.1f} {b2b / floor['b2b']:5.2f} {cpu * 1000:8.1f} "
            f"{cpu / floor['cpu']:5.2f} {events:7.1f} {tasks:6.2f} {p50} {p95}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lag-s", type=float, default=6.0)
    parser.add_argument("--age-ms", type=float, default=FOLLOW_AGE_S * 1000)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.writes, arguments.rounds, arguments.lag_s, arguments.age_ms / 1000))
