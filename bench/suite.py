"""``python -m bench``: what a task costs per event, each row against its floor, in one run.

Every row runs our product and its baselines on the same servers in the same process, in
blocks whose order rotates from round to round (``harness.in_turn``), so the machine's noise
falls on all alike; the table gives medians, p95 and the ratios of the medians (ours /
baseline). The baseline of every write is ``bench.bare.BareWorkflow``, a workflow whose update
appends to a list, sent the same events through a client without our payload codec. The
write rows have a second baseline, bare with a minimal mirror (``bench.mirror``): the same bare
writes, and a plain projector that tails their histories and writes the same nodes and
relationships into the same graph store, one ``UNWIND`` per statement kind per batch, no
sealing and no checks; the least a mirror of the same events costs on these services, and so
the architecture's limit.

- single write, quiet: ``record_event`` after a pause (an idle mirror); bare: one update.
- single write, back to back: the same with no pause.
- CPU per write: CPU time of this process, Temporal and Neo4j over the back-to-back block
  (ours, and bare with the minimal mirror: until Neo4j holds the last event), per write.
- batch import: ``record_events`` of N events into one task, acknowledged; bare: the same
  chunks (``split_events``) as updates.
- replay: ``cli.replay_check`` of every run of that task; bare: the bare workflow's history.
- 20 writers: 20 tasks, one writer each, single events back to back; bare: 20 workflows.
- workers apart: the batch import and the 20 writers again, each side's worker in a process
  of its own (``bench.rss_worker``) and this process the clients' alone, as an app and its
  workers are deployed (in the rows above one process runs the clients and both workers).
- transcript, one write each: ``record_event`` per event, acknowledged; baseline: a
  Neo4j-only ledger, one write transaction per event (MERGE on the key, NEXT link). The row
  after it is Temporal's own floor of that ledger (a bare update per event) against the same
  baseline: no ledger written by Temporal updates goes above it.
- CPU by process: the CPU, batch and writers rows (and their rows apart) also split their
  CPU time per event by process (this one, which runs the clients and, but apart, both
  workers; the worker apart; Temporal; Neo4j), printed below the table.
- mirror lag: 20 writes/s of 5 events into one task, sent to visible in Neo4j; baseline: the
  same writes, sent to acknowledged; bare with the minimal mirror: bare writes, sent to
  visible. And again with the 20 writers (a task each, single events back to back).
- list by status: ``TaskGraph.find_tasks``, pages of 50 of 10,000 tasks; baseline: the
  hand-written Cypher of that one filter.
- one step: an agent task's steps of an echo tool (``bench.bench_step``), per step from the
  history; baseline: a workflow running as many bare activities one after another.
- worker RSS per open task: a worker process holding N open tasks; bare: a bare worker
  holding N bare workflows with the same events.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from agent_tasks.config import Settings, connect
from agent_tasks.devstack import free_port
from agent_tasks.devstack.temporal import TemporalDevServer
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker, open_services
from bench.bare import bare_worker
from bench.bench_step import bench_echo
from bench.harness import Bench, Row, Sizes
from bench.rows import (
    batch_and_replay,
    list_by_status,
    mirror_lag,
    neo4j_ledger,
    one_step,
    seed_tasks,
    single_writes,
    worker_rss,
    workers_apart,
    writers,
)

FULL = Sizes()
"""The sizes of the issue's rows."""
QUICK = Sizes(
    rounds=1,
    writes=10,
    batch_events=2_000,
    writer_events=3,
    transcript_events=50,
    lag_s=4.0,
    list_reads=20,
    steps=4,
    rss_tasks=100,
)
"""A run in under two minutes, every row once."""


def make_rows(sizes: Sizes) -> dict[str, Row]:
    """The table's rows, in print order, empty. A goal "m" is against bare with the minimal
    mirror (the architecture's limit), else against the row's baseline."""
    return {
        "quiet": Row("single write, quiet (p50)", "ms", "m <= 1.10"),
        "b2b": Row("single write, back to back", "ms", "m <= 1.10"),
        "cpu": Row("CPU per write, all processes", "ms", "m <= 1.10"),
        "batch": Row(f"batch import, {sizes.batch_events:,} events", "events/s", "m >= 0.9"),
        "writers": Row(f"{sizes.writers} writers on {sizes.writers} tasks", "events/s", "m >= 0.9"),
        "batch_apart": Row(
            f"batch import, {sizes.batch_events:,} events, workers apart", "events/s", "m >= 0.9"
        ),
        "writers_apart": Row(f"{sizes.writers} writers, workers apart", "events/s", "m >= 0.9"),
        "ledger": Row(
            f"transcript of {sizes.transcript_events} events, one write each",
            "events/s",
            "m >= 0.9",
            base_name="Neo4j-only ledger",
        ),
        "floor": Row(
            "the same, Temporal's floor (bare updates)",
            "events/s",
            "(bounds the row above)",
            base_name="Neo4j-only ledger",
        ),
        "lag": Row("mirror lag at 100 events/s", "ms", "p95 <= 500 ms", base_name="acknowledged"),
        "writers_lag": Row(
            f"mirror lag at {sizes.writers} writers",
            "ms",
            "p95 <= 500 ms",
            base_name="acknowledged",
        ),
        "list": Row(
            f"list by status, {sizes.list_tasks:,} tasks, page of 50",
            "ms",
            "p95 <= 20 ms",
            base_name="hand-written Cypher",
        ),
        "replay": Row(f"replay of {sizes.batch_events:,} events", "ms", "<= 2 s"),
        "step": Row("one step of an agent task", "ms", "<= 1.5", base_name="bare activity"),
        "rss": Row(f"worker RSS per open task ({sizes.rss_tasks})", "KiB", "m <= 1.2"),
    }


SECONDS_ROWS = ("quiet", "b2b", "cpu", "lag", "writers_lag", "list", "replay", "step")
"""Rows measured in seconds and shown in ms."""


GROUPS = ("writes", "batch", "writers", "apart", "ledger", "lag", "list", "step", "rss")
"""The row groups, in run order: ``writes`` (quiet, back to back, CPU), ``batch`` (import and
replay), ``writers``, ``apart`` (the batch import and the writers with workers apart),
``ledger`` (the transcript and its floor), then one group per row."""


# Long: the bench's whole run: its own server and workers, the rounds of each group, then the
# summaries
async def run_bench(
    sizes: Sizes,
    settings: Settings | None = None,
    *,
    only: set[str] | None = None,
    private: bool = True,
) -> dict[str, Any]:
    """Run every row (or the groups in ``only``, ``GROUPS``) ``sizes.rounds`` times,
    alternating ours and the baseline; returns the machine, the sizes and one summary per row
    (``Row.summary``; rows not run have no numbers).

    With ``private`` (the default) ours and the baseline run on a Temporal dev server of the
    bench's own (the project's dev configuration, a SQLite file in a temporary folder,
    stopped at the end), so that other users of the configured server neither slow it nor
    add to its CPU time; otherwise on the configured server. Neo4j is always the configured
    one (the local stack's by default)."""
    rows = make_rows(sizes)
    only = set(GROUPS) if only is None else only
    settings = settings or Settings()
    async with AsyncExitStack() as stack:
        client, temporal_pid = None, None
        if private:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            server = TemporalDevServer(folder, free_port())
            temporal_pid, _ = await server.start_ready()
            stack.push_async_callback(server.stop)
            client = await connect(settings, address=server.address)
        else:
            temporal_pid = TemporalDevServer(settings.data_dir, 0).running_pid()
        services = await stack.enter_async_context(
            open_services(settings, client=client, schema=True)
        )
        assert isinstance(services.graph, TaskGraph)  # the harness reads Neo4j's driver
        bench = Bench(
            services.client, services.graph, services.settings, temporal_pid, services.broker
        )
        await stack.enter_async_context(
            build_worker(
                bench.client, bench.graph, bench.queue, tools=[bench_echo], broker=services.broker
            )
        )
        await stack.enter_async_context(bare_worker(bench.plain, bench.bare_queue))
        await stack.enter_async_context(bench.mirror.running())
        about = await machine(bench)
        try:
            list_project = await seed_tasks(bench, sizes.list_tasks) if "list" in only else ""
            groups: dict[str, Callable[[Bench, Sizes, dict[str, Row], int], Awaitable[None]]] = {
                "writes": single_writes,
                "batch": batch_and_replay,
                "writers": writers,
                "apart": workers_apart,
                "ledger": neo4j_ledger,
                "lag": mirror_lag,
                "list": partial(list_by_status, project=list_project),
                "step": one_step,
                "rss": worker_rss,
            }
            for number in range(sizes.rounds):
                for group in GROUPS:
                    if group in only:
                        await bench.settle()  # the rows before it do not run on in this one
                        await groups[group](bench, sizes, rows, number)
                print(f"round {number + 1} of {sizes.rounds} done", file=sys.stderr, flush=True)
        finally:
            await bench.cleanup()
            for project in (bench.project, f"{bench.project}-list", bench.mirror_project):
                await bench.graph.wipe_project(project)
    summaries = []
    for key, row in rows.items():
        if key in SECONDS_ROWS:
            row.ours = [v * 1000 for v in row.ours]
            row.base = [v * 1000 for v in row.base]
            row.mirror = [v * 1000 for v in row.mirror]
        summaries.append(row.summary())
    return {"machine": about, "sizes": sizes.__dict__, "rows": summaries}


def _proc_field(path: str, key: str) -> str:
    """The value of ``key`` in a ``/proc`` file of ``key: value`` lines."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(key):
            return line.split(":", 1)[1].strip()
    return "?"


async def machine(bench: Bench) -> dict[str, str]:
    """What the numbers were measured on: processor, cores, memory, load, versions."""
    cpu = _proc_field("/proc/cpuinfo", "model name")
    memory = _proc_field("/proc/meminfo", "MemTotal")
    info = await bench.client.workflow_service.get_system_info(GetSystemInfoRequest(), retry=True)
    records, _, _ = await bench.graph.driver.execute_query(
        "CALL dbms.components() YIELD name, versions, edition RETURN name, versions[0], edition",
        database_=bench.graph.database,
    )
    versions = {}
    for package in ("temporalio", "neo4j", "neo4j-rust-ext", "pydantic"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory": memory,
        "load average": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "os": platform.platform(),
        "python": platform.python_version(),
        "temporal server": info.server_version or "?",
        "neo4j server": " ".join(str(v) for v in records[0].values()) if records else "?",
        **versions,
    }
