"""``graph rebuild --task`` of a task that continued-as-new, the new way against the old one.

On a private Temporal dev server that suggests continue-as-new after ``--history-limit``
history events (the real default is 4,096; a lower one makes many runs from few writes), with
the local stack's Neo4j: writes ``--events`` events in updates of ``--per-update``, waits for
the mirror, then times, in the same process:
- ``replay``: ``activities.rebuild.rebuild`` (one history fetch and one in-process replay per
  run, no worker needed);
- ``query``: the old way, a query per page of each closed run (``copy_run`` over
  ``QueriedRun``; Temporal replays the whole run on the worker for every page).
Both write the same nodes; prints seconds, runs, events and the ratio.

    python -m bench.bench_rebuild [--events 4000] [--per-update 10] [--history-limit 400]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from agent_tasks.activities.mirror import QueriedRun, copy_run
from agent_tasks.activities.rebuild import rebuild
from agent_tasks.cli.importer import mirror_caught_up
from agent_tasks.config import connect
from agent_tasks.devstack import free_port
from agent_tasks.devstack.temporal import TemporalDevServer
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_worker, open_services


async def old_rebuild(client: Client, graph: GraphStore, workflow_id: str) -> int:
    """The rebuild before issue 9: each run copied by queries (pages of 100 events)."""
    runs = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    copied = 0
    for execution in sorted(runs, key=lambda e: e.start_time):
        source = QueriedRun(client, workflow_id, execution.run_id)
        copied += (await copy_run(source, graph, workflow_id)).events
    return copied


async def main(events: int, per_update: int, history_limit: int) -> None:
    async with open_services(schema=True) as services:
        graph = services.graph
        assert graph is not None
        limit = {"limit.historyCount.suggestContinueAsNew": str(history_limit)}
        with tempfile.TemporaryDirectory() as tmp:
            async with TemporalDevServer(Path(tmp), free_port(), extra_dynamic_config=limit) as dev:
                client = await connect(services.settings, address=dev.address)
                queue, project = "bench-rebuild", f"rbb-{uuid.uuid4().hex[:8]}"
                history = ConversationHistory(
                    client, project_id=project, agent_id="bench", task_queue=queue, graph=graph
                )
                async with build_worker(client, graph, queue):
                    await history.create_task("t", "long")
                    for start in range(0, events, per_update):
                        batch = [
                            {"kind": "message", "payload": f"m{i} " + "x" * 200}
                            for i in range(start, min(start + per_update, events))
                        ]
                        assert (await history.record_events("t", batch)).recorded
                    await mirror_caught_up(history, ["t"], within=600)
                    started = time.perf_counter()
                    old = await old_rebuild(client, graph, history.workflow_id("t"))
                    query_s = time.perf_counter() - started
                started = time.perf_counter()
                report = await rebuild(client, graph, project, "t")
                replay_s = time.perf_counter() - started
                assert not report.failed and report.events == old == events, (report, old)
                print(f"runs {report.runs}, events {report.events}")
                print(f"query  {query_s:7.2f} s")
                print(f"replay {replay_s:7.2f} s  ({query_s / replay_s:.1f}x faster)")
                await graph.wipe_project(project)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--per-update", type=int, default=10)
    parser.add_argument("--history-limit", type=int, default=400)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.per_update, args.history_limit))
