"""``agent-tasks bench``: what a task costs per event, each row against its floor, in one run.

Every row runs our product and its baseline on the same servers in the same process, in
blocks that alternate (ours first in odd rounds, the baseline first in even ones), so the
machine's noise falls on both alike; the table gives medians, p95 and the ratio of the
medians (ours / baseline). The baseline of every write is ``bench.bare.BareWorkflow``, a
workflow whose update appends to a list, sent the same events through a client without our
payload codec.

- single write, quiet: ``record_event`` after a pause (an idle mirror); bare: one update.
- single write, back to back: the same with no pause.
- CPU per write: CPU time of this process, Temporal and Neo4j over the back-to-back block
  (ours: until Neo4j holds the last event), per write.
- batch import: ``record_events`` of N events into one task, acknowledged; bare: the same
  chunks (``split_events``) as updates.
- replay: ``starter.replay`` of every run of that task; bare: the bare workflow's history.
- 20 writers: 20 tasks, one writer each, single events back to back; bare: 20 workflows.
- transcript, one write each: ``record_event`` per event, acknowledged; baseline: a
  Neo4j-only ledger, one write transaction per event (MERGE on the key, NEXT link).
- mirror lag: 20 writes/s of 5 events into one task, sent to visible in Neo4j; baseline: the
  same writes, sent to acknowledged.
- list by status: ``TaskGraph.find_tasks``, pages of 50 of 10,000 tasks; baseline: the
  hand-written Cypher of that one filter.
- one step: an agent task's steps of an echo tool (``bench.bench_step``), per step from the
  history; baseline: a workflow running as many bare activities one after another.
- worker RSS per open task: a worker process holding N open tasks; bare: a bare worker
  holding N bare workflows with the same events.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any, LiteralString

from neo4j import AsyncManagedTransaction
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from bench.bare import BareSteps, BareWorkflow, bare_worker, start_bare
from bench.bench_step import bench_echo, per_step
from config import Settings, connect
from devstack import free_port
from devstack.neo4j_server import Neo4jServer
from devstack.temporal import TemporalDevServer
from starter.client import ConversationHistory
from starter.planning import EXAMPLES, plan_import, trajectory_files
from starter.replay import replay_histories
from starter.writes import split_events
from taskgraph.graph import TaskGraph
from taskgraph.models import TaskFilter
from taskgraph.writes import task_properties
from worker import build_worker, open_services
from workflows.models import (
    AgentSpec,
    EventInput,
    StepState,
    TaskStatus,
    TaskView,
    task_workflow_id,
)
from workflows.task import TaskWorkflow


@dataclass(frozen=True)
class Sizes:
    """How much each row does (counts per block, one block of ours and one of the baseline
    per round)."""

    rounds: int = 3
    writes: int = 30
    """Single writes per block (quiet and back to back)."""
    pause_s: float = 0.3
    """The pause before each quiet write (seconds): the mirror is idle when it comes."""
    batch_events: int = 10_000
    """Events of the batch import (and so of the replay)."""
    writers: int = 20
    writer_events: int = 10
    """Single writes per writer per block."""
    transcript_events: int = 200
    """Events of the Neo4j-only ledger row."""
    lag_s: float = 15.0
    """Seconds of writing at 100 events/s (20 writes/s of 5) per block."""
    list_tasks: int = 10_000
    """Task nodes the list row reads from (half ``done``)."""
    list_reads: int = 40
    """Pages read per block."""
    steps: int = 10
    rss_tasks: int = 500
    """Open tasks a worker holds in the RSS row."""
    rss_events: int = 10
    """Events of each of those tasks."""

    def scaled(self, factor: float) -> Sizes:
        """These sizes with every count times ``factor`` (at least 2; rounds and the pause
        stay)."""
        counts = {
            name: max(2, round(getattr(self, name) * factor))
            for name in self.__dataclass_fields__
            if name not in ("rounds", "pause_s", "lag_s")
        }
        return replace(self, **counts, lag_s=max(1.0, self.lag_s * factor))


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


@dataclass
class Row:
    """One row of the table: samples of ours and of the baseline."""

    name: str
    unit: str
    goal: str
    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    base_name: str = "bare"

    def samples(self, side: str) -> list[float]:
        """The samples of ``side`` (``ours`` or ``bare``)."""
        return self.ours if side == "ours" else self.base

    def summary(self) -> dict[str, Any]:
        """Medians, p95 and the ratio of the medians (ours / baseline)."""
        ours, base = _p50(self.ours), _p50(self.base)
        return {
            "row": self.name,
            "unit": self.unit,
            "ours_p50": ours,
            "ours_p95": _p95(self.ours),
            "baseline": self.base_name,
            "base_p50": base,
            "base_p95": _p95(self.base),
            "ratio": ours / base if ours is not None and base else None,
            "goal": self.goal,
            "n": len(self.ours),
        }


def _p50(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, round(len(ordered) * 0.95) - 1)]


def transcript(count: int) -> list[EventInput]:
    """``count`` events cycled from the shipped trajectories (real payloads, about 850 bytes
    of JSON each)."""
    planned, _ = plan_import(list(trajectory_files([EXAMPLES])))
    source = [event for task in planned for event in task.head.events]
    return list(itertools.islice(itertools.cycle(source), count))


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user and system, seconds) of this process and of ``pids`` so far."""
    own = os.times()
    total = own.user + own.system
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Bench:
    """The servers, the clients, the workers and what the rows created (for clean-up)."""

    def __init__(
        self, client: Client, graph: TaskGraph, settings: Settings, temporal_pid: int | None
    ) -> None:
        self.client = client
        self.plain = Client(
            client.service_client,
            namespace=client.namespace,
            data_converter=pydantic_data_converter,
        )
        """The baseline's client: the plain pydantic converter, no payload codec."""
        self.graph = graph
        run = uuid.uuid4().hex[:8]
        self.queue = f"bench-{run}"
        self.bare_queue = f"bench-bare-{run}"
        self.project = f"bench-{run}"
        self.history = ConversationHistory(
            client,
            project_id=self.project,
            agent_id="bench",
            task_queue=self.queue,
            graph=graph,
            timeout_s=300,
        )
        self.started: list[str] = []
        """Workflow ids to terminate at the end."""
        self.numbers = itertools.count()
        neo4j_pid = Neo4jServer(settings.data_dir, 0).running_pid()
        self.server_pids = [pid for pid in (temporal_pid, neo4j_pid) if pid is not None]
        """Temporal's and the local stack's Neo4j (for their CPU time); none when external."""
        address = client.service_client.config.target_host
        self.worker_env = {**os.environ, "TEMPORAL_ADDRESS": address}
        """The environment of the RSS row's worker processes (they reach the same server)."""

    async def task(self, agent: AgentSpec | None = None) -> str:
        """Create a new task of the bench's project (an agent task with ``agent``); returns
        its name."""
        name = f"t-{next(self.numbers)}"
        result = await self.history.create_task(name, "bench", agent=agent)
        assert result.recorded, result
        self.started.append(self.history.workflow_id(name))
        return name

    async def bare(self, queue: str | None = None) -> Any:
        """Start a bare workflow; returns its handle."""
        workflow_id = f"{self.bare_queue}/{uuid.uuid4().hex[:12]}"
        self.started.append(workflow_id)
        return await start_bare(self.plain, workflow_id, queue or self.bare_queue)

    async def mirrored(self, name: str, seq: int) -> None:
        """Wait until Neo4j holds the task's events up to ``seq`` (polled every 20 ms)."""
        while await self.mirrored_seq(name) < seq:  # noqa: ASYNC110 (Neo4j is polled)
            await asyncio.sleep(0.02)

    async def mirrored_seq(self, name: str) -> int:
        """The task's mirror watermark in Neo4j (0 before its first event)."""
        records, _, _ = await self.graph.driver.execute_query(
            "MATCH (t:Task {key: $key}) RETURN coalesce(t.mirrored_seq, 0) AS s",
            key=self.history.workflow_id(name),
            database_=self.graph.database,
        )
        return int(records[0]["s"]) if records else 0

    async def cleanup(self) -> None:
        """Terminate every workflow the run started (they would stay open on the server)."""
        gate = asyncio.Semaphore(20)

        async def end(workflow_id: str) -> None:
            async with gate:
                with contextlib.suppress(RPCError):  # already closed
                    await self.plain.get_workflow_handle(workflow_id).terminate("bench done")

        await asyncio.gather(*(end(w) for w in self.started))


async def _timed(call: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


def _event_json(events: list[EventInput]) -> list[dict[str, Any]]:
    return [event.model_dump(mode="json") for event in events]


# ------------------------------------------------------------------------------ the rows

Side = Callable[[], Awaitable[None]]


async def both(first: str, ours: Side, bare: Side) -> None:
    """Run one block of ours and one of the baseline, ``first`` (``ours`` or ``bare``) first."""
    for side in (ours, bare) if first == "ours" else (bare, ours):
        await side()


async def single_writes(bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str) -> None:
    """Quiet and back-to-back single writes, and CPU per write (back to back, until
    mirrored)."""
    events = transcript(sizes.writes)
    name = await bench.task()
    handle = await bench.bare()

    async def write_ours(pause: float) -> list[float]:
        took = []
        for event in events:
            await asyncio.sleep(pause)
            took.append(await _timed(bench.history.record_events(name, [event])))
        return took

    async def write_bare(pause: float) -> list[float]:
        took = []
        for event in _event_json(events):
            await asyncio.sleep(pause)
            took.append(await _timed(handle.execute_update(BareWorkflow.append, [event])))
        return took

    async def cpu_ours() -> list[float]:
        took = await write_ours(0.0)
        view = (await bench.history.get_task(name)).view
        assert view is not None
        await bench.mirrored(name, view.last_seq)
        return took

    async def block(write: Callable[[float], Awaitable[list[float]]], side: str) -> None:
        rows["quiet"].samples(side).extend(await write(sizes.pause_s))
        before = cpu_seconds(bench.server_pids)
        rows["b2b"].samples(side).extend(await (cpu_ours() if side == "ours" else write(0.0)))
        await asyncio.sleep(0.3)  # the same settling time for both
        spent = cpu_seconds(bench.server_pids) - before
        rows["cpu"].samples(side).append(spent / len(events))

    await both(first, lambda: block(write_ours, "ours"), lambda: block(write_bare, "bare"))


async def batch_and_replay(bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str) -> None:
    """``batch_events`` events into one task by ``record_events`` against the same chunks as
    bare updates; then the replay of each history (every run of the task)."""
    events = transcript(sizes.batch_events)

    async def ours() -> None:
        name = await bench.task()
        took = await _timed(bench.history.record_events(name, events))
        rows["batch"].ours.append(len(events) / took)
        workflow_id = bench.history.workflow_id(name)
        runs = [e async for e in bench.client.list_workflows(f"WorkflowId = '{workflow_id}'")]
        histories = [
            await bench.client.get_workflow_handle(workflow_id, run_id=e.run_id).fetch_history()
            for e in runs
        ]
        rows["replay"].ours.append(await _replay(histories, TaskWorkflow))

    async def bare() -> None:
        handle = await bench.bare()
        chunks = [_event_json(chunk) for chunk in split_events(events)]
        started = time.perf_counter()
        for chunk in chunks:
            await handle.execute_update(BareWorkflow.append, chunk)
        rows["batch"].base.append(len(events) / (time.perf_counter() - started))
        rows["replay"].base.append(await _replay([await handle.fetch_history()], BareWorkflow))

    await both(first, ours, bare)


async def _replay(histories: list[WorkflowHistory], workflow: type) -> float:
    """Seconds to replay ``histories`` (one ``Replayer`` pass, as ``agent-tasks replay``)."""
    started = time.perf_counter()
    results = await replay_histories([("server", h) for h in histories], (workflow,))
    took = time.perf_counter() - started
    assert all(r.result == "ok" for r in results), results
    return took


async def writers(bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str) -> None:
    """``writers`` writers, each on its own task, single events back to back."""
    events = transcript(sizes.writer_events)
    total = sizes.writers * len(events)

    async def write(name: str) -> None:
        for event in events:
            assert (await bench.history.record_events(name, [event])).recorded

    async def append(handle: Any) -> None:
        for event in _event_json(events):
            await handle.execute_update(BareWorkflow.append, [event])

    async def ours() -> None:
        names = [await bench.task() for _ in range(sizes.writers)]
        rows["writers"].ours.append(total / await _timed(asyncio.gather(*map(write, names))))

    async def bare() -> None:
        handles = [await bench.bare() for _ in range(sizes.writers)]
        rows["writers"].base.append(total / await _timed(asyncio.gather(*map(append, handles))))

    await both(first, ours, bare)


_LEDGER_EVENT: LiteralString = """
MERGE (t:Task {key: $task_key})
  ON CREATE SET t.project_id = $project_id, t.last_seq = 0
SET t.last_seq = t.last_seq + 1
WITH t, t.last_seq AS seq
MERGE (e:Event {key: $task_key + '#' + toString(seq)})
SET e += $event, e.seq = seq, e.project_id = $project_id, e.time = datetime()
MERGE (t)-[:HAS_EVENT]->(e)
WITH t, e, seq
OPTIONAL MATCH (previous:Event {key: $task_key + '#' + toString(seq - 1)})
FOREACH (p IN CASE WHEN previous IS NULL THEN [] ELSE [previous] END | MERGE (p)-[:NEXT]->(e))
"""
"""A Neo4j-only ledger's write of one event: the task's counter gives the seq, the event is
merged on its key and linked after the previous one, in one write transaction."""


async def neo4j_ledger(bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str) -> None:
    """The same transcript written one event per write: ours by update, a Neo4j-only ledger
    by one write transaction each."""
    events = transcript(sizes.transcript_events)

    async def ours() -> None:
        name = await bench.task()
        started = time.perf_counter()
        for event in events:
            assert (await bench.history.record_events(name, [event])).recorded
        rows["ledger"].ours.append(len(events) / (time.perf_counter() - started))

    async def ledger() -> None:
        key = f"ledger/{bench.project}/{uuid.uuid4().hex[:8]}"

        async def write(tx: AsyncManagedTransaction, event: dict[str, Any]) -> None:
            parameters = {"task_key": key, "project_id": bench.project, "event": event}
            await (await tx.run(_LEDGER_EVENT, parameters)).consume()

        started = time.perf_counter()
        async with bench.graph.driver.session(database=bench.graph.database) as session:
            for event in _event_json(events):
                await session.execute_write(write, event)
        rows["ledger"].base.append(len(events) / (time.perf_counter() - started))

    await both(first, ours, ledger)


async def mirror_lag(bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str) -> None:
    """100 events/s into one task as 20 writes/s of 5 events: each write's time from sent to
    visible in Neo4j (ours), and from sent to acknowledged (the baseline: nothing is visible
    before it is acknowledged). Neo4j is polled every 10 ms. One block serves both."""
    name = await bench.task()
    batch = transcript(5)
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set() or len(seen) < len(sent):
            watermark = await bench.mirrored_seq(name)
            now = time.perf_counter()
            seen.update((seq, now) for seq in sent if seq <= watermark and seq not in seen)
            await asyncio.sleep(0.01)

    poller = asyncio.create_task(poll())
    start = time.perf_counter()
    for number in range(round(sizes.lag_s * 20)):
        await asyncio.sleep(max(0.0, start + number * 0.05 - time.perf_counter()))
        began = time.perf_counter()
        result = await bench.history.record_events(name, batch)
        rows["lag"].base.append(time.perf_counter() - began)
        assert result.last_seq is not None
        sent[result.last_seq] = began
    done.set()
    await asyncio.wait_for(poller, 120)
    rows["lag"].ours += [seen[seq] - began for seq, began in sent.items()]


async def seed_tasks(bench: Bench, count: int) -> str:
    """``count`` task nodes (the mirror's own properties) in a project of their own, half
    ``done`` and half ``open``, written by UNWIND in batches; returns the project id."""
    project = f"{bench.project}-list"
    now = datetime.now(UTC)
    rows = [
        task_properties(
            TaskView(
                project_id=project,
                name=f"task-{n:06d}",
                workflow_id=task_workflow_id(project, f"task-{n:06d}"),
                goal="seeded",
                agent_id="bench",
                session_id=None,
                parent=None,
                metadata={},
                status=TaskStatus.DONE if n % 2 else TaskStatus.OPEN,
                result=None,
                error=None,
                step_counts=dict.fromkeys(StepState, 0),
                last_seq=0,
                mirrored_seq=0,
                unmirrored_writes=0,
                mirror_error=None,
                run_first_seq=1,
                runs=1,
                created_at=now,
                updated_at=now,
            )
        )
        for n in range(count)
    ]
    for at in range(0, len(rows), 2_000):
        await bench.graph.driver.execute_query(
            """
            MERGE (p:Project {project_id: $project})
            WITH p UNWIND $rows AS row
            MERGE (t:Task {key: row.key}) SET t += row
            MERGE (p)-[:HAS_TASK]->(t)
            """,
            project=project,
            rows=rows[at : at + 2_000],
            database_=bench.graph.database,
        )
    return project


async def list_by_status(
    bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str, *, project: str
) -> None:
    """Pages of 50 ``done`` tasks in name order: ``find_tasks`` against the hand-written
    Cypher of that one filter (its best form: ordered by the properties of the index on
    ``(project_id, status, name)``, so that Neo4j reads the page in index order when the
    index exists), page by page in turn."""
    cursor: dict[str, str | None] = {"ours": None, "bare": ""}

    async def ours() -> None:
        where = TaskFilter(status=TaskStatus.DONE, after_name=cursor["ours"], limit=50)
        started = time.perf_counter()
        page = await bench.graph.find_tasks(project, where)
        rows["list"].ours.append(time.perf_counter() - started)
        cursor["ours"] = page[-1].name if len(page) == 50 else None

    async def cypher() -> None:
        started = time.perf_counter()
        records, _, _ = await bench.graph.driver.execute_query(
            """
            MATCH (t:Task {project_id: $p, status: $s}) WHERE t.name > $after
            RETURN t ORDER BY t.project_id, t.status, t.name LIMIT 50
            """,
            p=project,
            s="done",
            after=cursor["bare"],
            database_=bench.graph.database,
            routing_="r",
        )
        rows["list"].base.append(time.perf_counter() - started)
        cursor["bare"] = records[-1]["t"]["name"] if len(records) == 50 else ""

    for _ in range(sizes.list_reads):
        await both(first, ours, cypher)


async def one_step(bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str) -> None:
    """An agent task of ``steps`` steps of the echo tool (``bench.bench_step``: each step its
    tool_call event and in_progress, the tool's activity, tool_result and completed) against a
    workflow running as many bare activities; the time per step, from each history."""
    spec = AgentSpec(name="bench_steps", tools=["bench_echo"], input={"steps": sizes.steps})

    async def ours() -> None:
        name = await bench.task(agent=spec)
        await bench.history.wait_task(name)
        seconds, _ = await per_step(bench.client, bench.history.workflow_id(name), sizes.steps)
        rows["step"].ours.append(seconds)

    async def bare() -> None:
        workflow_id = f"{bench.bare_queue}/steps-{uuid.uuid4().hex[:12]}"
        await bench.plain.execute_workflow(
            BareSteps.run, sizes.steps, id=workflow_id, task_queue=bench.bare_queue
        )
        seconds, _ = await per_step(bench.plain, workflow_id, sizes.steps)
        rows["step"].base.append(seconds)

    await both(first, ours, bare)


@asynccontextmanager
async def worker_process(kind: str, queue: str, env: dict[str, str]) -> AsyncIterator[int]:
    """A worker in a process of its own (``bench.rss_worker``); yields its pid."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.rss_worker",
        kind,
        queue,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line.strip() == b"ready", line
        yield process.pid
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def worker_rss(bench: Bench, sizes: Sizes, rows: dict[str, Row], first: str) -> None:
    """The resident memory a worker process gains per open task it holds (``rss_tasks``
    tasks of ``rss_events`` events each, 20 opened at a time), ours against bare."""
    events = transcript(sizes.rss_events)
    gate = asyncio.Semaphore(20)

    async def open_ours(history: ConversationHistory, number: int) -> None:
        async with gate:
            name = f"rss-{history.task_queue}-{number}"
            assert (await history.create_task(name, "rss")).recorded
            bench.started.append(history.workflow_id(name))
            assert (await history.record_events(name, events)).recorded
            await bench.mirrored(name, len(events))

    async def open_bare(queue: str, number: int) -> None:
        async with gate:
            handle = await bench.bare(queue)
            await handle.execute_update(BareWorkflow.append, _event_json(events))

    async def block(side: str) -> None:
        queue = f"{bench.queue}-rss-{side}"
        history = replace_queue(bench.history, queue)
        async with worker_process(side, queue, bench.worker_env) as pid:
            await asyncio.sleep(1.0)
            before = rss_kib(pid)
            await asyncio.gather(
                *(
                    open_ours(history, n) if side == "ours" else open_bare(queue, n)
                    for n in range(sizes.rss_tasks)
                )
            )
            await asyncio.sleep(1.0)
            rows["rss"].samples(side).append((rss_kib(pid) - before) / sizes.rss_tasks)

    await both(first, lambda: block("ours"), lambda: block("bare"))


def replace_queue(history: ConversationHistory, queue: str) -> ConversationHistory:
    """``history`` on another task queue."""
    return ConversationHistory(
        history.client,
        project_id=history.project_id,
        agent_id=history.agent_id,
        task_queue=queue,
        graph=history.graph,
        timeout_s=history.timeout_s,
    )


def make_rows(sizes: Sizes) -> dict[str, Row]:
    """The table's rows, in print order, empty."""
    return {
        "quiet": Row("single write, quiet (p50)", "ms", "<= 1.10"),
        "b2b": Row("single write, back to back", "ms", "<= 1.10"),
        "cpu": Row("CPU per write, all processes", "ms", "<= 2.0"),
        "batch": Row(f"batch import, {sizes.batch_events:,} events", "events/s", ">= 1.0"),
        "writers": Row(f"{sizes.writers} writers on {sizes.writers} tasks", "events/s", ">= 0.9"),
        "ledger": Row(
            f"transcript of {sizes.transcript_events} events, one write each",
            "events/s",
            "",
            base_name="Neo4j-only ledger",
        ),
        "lag": Row("mirror lag at 100 events/s", "ms", "p95 <= 500 ms", base_name="acknowledged"),
        "list": Row(
            f"list by status, {sizes.list_tasks:,} tasks, page of 50",
            "ms",
            "p95 <= 20 ms",
            base_name="hand-written Cypher",
        ),
        "replay": Row(f"replay of {sizes.batch_events:,} events", "ms", "<= 2 s"),
        "step": Row("one step of an agent task", "ms", "", base_name="bare activity"),
        "rss": Row(f"worker RSS per open task ({sizes.rss_tasks})", "KiB", "<= 1.2"),
    }


SECONDS_ROWS = ("quiet", "b2b", "cpu", "lag", "list", "replay", "step")
"""Rows measured in seconds and shown in ms."""


GROUPS = ("writes", "batch", "writers", "ledger", "lag", "list", "step", "rss")
"""The row groups, in run order: ``writes`` (quiet, back to back, CPU), ``batch`` (import and
replay), then one group per row."""


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
        assert services.graph is not None
        bench = Bench(services.client, services.graph, services.settings, temporal_pid)
        await stack.enter_async_context(
            build_worker(bench.client, bench.graph, bench.queue, tools=[bench_echo])
        )
        await stack.enter_async_context(bare_worker(bench.plain, bench.bare_queue))
        about = await machine(bench)
        try:
            list_project = await seed_tasks(bench, sizes.list_tasks) if "list" in only else ""
            groups: dict[str, Callable[[Bench, Sizes, dict[str, Row], str], Awaitable[None]]] = {
                "writes": single_writes,
                "batch": batch_and_replay,
                "writers": writers,
                "ledger": neo4j_ledger,
                "lag": mirror_lag,
                "list": partial(list_by_status, project=list_project),
                "step": one_step,
                "rss": worker_rss,
            }
            for number in range(sizes.rounds):
                first = "ours" if number % 2 == 0 else "bare"
                for group in GROUPS:
                    if group in only:
                        await groups[group](bench, sizes, rows, first)
                print(f"round {number + 1} of {sizes.rounds} done", file=sys.stderr, flush=True)
        finally:
            await bench.cleanup()
            for project in (bench.project, f"{bench.project}-list"):
                await bench.graph.wipe_project(project)
    summaries = []
    for key, row in rows.items():
        if key in SECONDS_ROWS:
            row.ours = [v * 1000 for v in row.ours]
            row.base = [v * 1000 for v in row.base]
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
    info = await bench.client.workflow_service.get_system_info(GetSystemInfoRequest())
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
