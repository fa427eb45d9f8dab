"""The harness of ``python -m bench``: the sizes, the rows and their summaries, the servers,
clients and workers a run shares (``Bench``), and the helpers of the rows (``bench.rows``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from agent_tasks.broker import Broker
from agent_tasks.cli.planning import EXAMPLES, plan_import, trajectory_files
from agent_tasks.config import Settings
from agent_tasks.contract import (
    AgentSpec,
    EventInput,
)
from agent_tasks.devstack.neo4j_server import Neo4jServer
from agent_tasks.devstack.process import parse_host_port
from agent_tasks.devstack.redis_server import RedisServer
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from bench.bare import start_bare
from bench.mirror import MinimalMirror


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


@dataclass
class Row:
    """One row of the table: samples of ours and of the baseline."""

    name: str
    unit: str
    goal: str
    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    base_name: str = "bare"
    mirror: list[float] = field(default_factory=list)
    """Samples of the second baseline: bare Temporal with the least a mirror of the same
    events into the graph store costs (``bench.mirror.MinimalMirror``); empty in the rows
    that have none."""
    cpu: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """CPU time per event (seconds) by side (``ours``, ``bare``, ``mirror``) and process
    (``cpu_profile``), for the rows that profile it."""

    def samples(self, side: str) -> list[float]:
        """The samples of ``side`` (``ours``, ``bare`` or ``mirror``)."""
        return {"ours": self.ours, "bare": self.base, "mirror": self.mirror}[side]

    def summary(self) -> dict[str, Any]:
        """Medians, p95 and the ratios of the medians (ours / baseline, ours / bare with the
        minimal mirror)."""
        ours, base, mirror = _p50(self.ours), _p50(self.base), _p50(self.mirror)
        return {
            "row": self.name,
            "unit": self.unit,
            "ours_p50": ours,
            "ours_p95": _p95(self.ours),
            "baseline": self.base_name,
            "base_p50": base,
            "base_p95": _p95(self.base),
            "ratio": ours / base if ours is not None and base else None,
            "mirror_p50": mirror,
            "mirror_p95": _p95(self.mirror),
            "mirror_ratio": ours / mirror if ours is not None and mirror else None,
            "goal": self.goal,
            "n": len(self.ours),
            "cpu_ms": {
                side: {name: 1000 * statistics.median(v) for name, v in processes.items()}
                for side, processes in self.cpu.items()
            },
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


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user and system, seconds) so far of this process (``bench``) and of each of
    ``pids`` (a name per process; one that is gone counts 0)."""
    own = os.times()
    spent = {"bench": own.user + own.system}
    ticks = os.sysconf("SC_CLK_TCK")
    for name, pid in pids.items():
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            spent[name] = 0.0
            continue
        fields = text[text.rindex(")") + 2 :].split()
        spent[name] = (int(fields[11]) + int(fields[12])) / ticks
    return spent


@contextlib.contextmanager
def cpu_profile(bench: Bench, row: Row, side: str, events: int) -> Iterator[None]:
    """Add to ``row.cpu`` the CPU time per event (seconds) of each process (``cpu_seconds``
    of ``bench.server_pids``) over the block inside: which process a row's cost falls on."""
    before = cpu_seconds(bench.server_pids)
    yield
    after = cpu_seconds(bench.server_pids)
    for name, seconds in after.items():
        row.cpu.setdefault(side, {}).setdefault(name, []).append((seconds - before[name]) / events)


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


WORKER_PROCESS_PREFIX = "proc-"
"""The names of the tasks whose worker is a process of their row's own (the RSS and the
workers-apart rows) begin so: their row waits for their mirror, ``Bench.settle`` skips them."""
SETTLE_S = 120.0
"""How long ``Bench.settle`` waits for one task's mirror (seconds)."""


class Bench:
    """The servers, the clients, the workers and what the rows created (for clean-up)."""

    def __init__(
        self,
        client: Client,
        graph: TaskGraph,
        settings: Settings,
        temporal_pid: int | None,
        broker: Broker | None = None,
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
        self.mirror_project = f"bench-{run}-mirror"
        """The project of the minimal mirror's tasks (``bench.mirror``)."""
        self.mirror = MinimalMirror(
            client, graph.driver, graph.database, self.mirror_project, "bench"
        )
        """The minimal mirror of the bare workflows of this process's rows (running while the
        suite runs: ``MinimalMirror.running``)."""
        self.history = ConversationHistory(
            client,
            project_id=self.project,
            agent_id="bench",
            task_queue=self.queue,
            graph=graph,
            timeout_s=300,
            broker=broker,
        )
        self.started: list[str] = []
        """Workflow ids to terminate at the end."""
        self.numbers = itertools.count()
        neo4j_pid = Neo4jServer(settings.data_dir, 0).running_pid()
        broker_port = parse_host_port(settings.broker_url, 6379)[1]
        broker_pid = RedisServer(settings.data_dir, broker_port).running_pid() if broker else None
        servers = (("temporal", temporal_pid), ("neo4j", neo4j_pid), ("broker", broker_pid))
        self.server_pids = {name: pid for name, pid in servers if pid is not None}
        """Temporal's, the local stack's Neo4j and its broker (when the bench publishes
        pages) by name (for their CPU time); none when external."""
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

    async def bare(
        self, queue: str | None = None, follow: Callable[[str], None] | None = None
    ) -> Any:
        """Start a bare workflow, followed by a minimal mirror when ``follow`` is given (this
        process's, ``Bench.mirror.follow``, or a worker process's); returns its handle."""
        workflow_id = f"{self.bare_queue}/{uuid.uuid4().hex[:12]}"
        self.started.append(workflow_id)
        handle = await start_bare(self.plain, workflow_id, queue or self.bare_queue)
        if follow is not None:
            follow(workflow_id)
        return handle

    async def mirrored(self, name: str, seq: int) -> None:
        """Wait until Neo4j holds the task's events up to ``seq`` (polled every 20 ms)."""
        await self.held(self.history.workflow_id(name), seq)

    async def held(self, key: str, seq: int) -> None:
        """Wait until Neo4j holds the events of the task node ``key`` (a task's workflow id,
        or a bare workflow's id for the minimal mirror) up to ``seq`` (polled every 20 ms)."""
        while (await self.held_seqs([key]))[key] < seq:  # noqa: ASYNC110 (Neo4j is polled)
            await asyncio.sleep(0.02)

    async def mirrored_seqs(self, names: list[str]) -> dict[str, int]:
        """The mirror watermarks of some tasks in Neo4j, by name (0 before a first event), in
        one read."""
        keys = {self.history.workflow_id(name): name for name in names}
        held = await self.held_seqs(list(keys))
        return {name: held[key] for key, name in keys.items()}

    async def held_seqs(self, keys: list[str]) -> dict[str, int]:
        """The mirror watermarks (``mirrored_seq``) of some task nodes by key (0 before a
        first event), in one read."""
        records, _, _ = await self.graph.driver.execute_query(
            "MATCH (t:Task) WHERE t.key IN $keys "
            "RETURN t.key AS k, coalesce(t.mirrored_seq, 0) AS s",
            keys=keys,
            database_=self.graph.database,
        )
        held = {r["k"]: int(r["s"]) for r in records}
        return {key: held.get(key, 0) for key in keys}

    async def settle(self) -> None:
        """Wait until Neo4j holds every write of every task of ours this run started (at most
        ``SETTLE_S`` each), and the minimal mirror has written what it took, so that a row
        starts with our worker as idle as the bare one is, not still mirroring what the rows
        before it wrote."""
        prefix = self.history.workflow_id("x")[:-1]
        names = [  # a worker process's tasks waited for their mirror in their row, whose
            # worker is gone (a read of their view would find no worker)
            w.removeprefix(prefix)
            for w in self.started
            if w.startswith(prefix) and not w.startswith(f"{prefix}{WORKER_PROCESS_PREFIX}")
        ]
        gate = asyncio.Semaphore(20)

        async def one(name: str) -> None:
            async with gate:
                await self.history.wait_mirrored(name, timeout_s=SETTLE_S)

        await asyncio.gather(*(one(name) for name in names))
        await self.mirror.settled()

    async def cleanup(self) -> None:
        """Terminate every workflow the run started (they would stay open on the server)."""
        gate = asyncio.Semaphore(20)

        async def end(workflow_id: str) -> None:
            async with gate:
                with contextlib.suppress(RPCError):  # already closed
                    await self.plain.get_workflow_handle(workflow_id).terminate("bench done")

        await asyncio.gather(*(end(w) for w in self.started))


async def timed(call: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


def event_json(events: list[EventInput]) -> list[dict[str, Any]]:
    return [event.model_dump(mode="json") for event in events]


Side = Callable[[], Awaitable[None]]
SIDES = ("ours", "bare", "mirror")
"""The sides of a row: the product, bare Temporal, and bare Temporal with the minimal mirror
(``bench.mirror``)."""


async def in_turn(turn: int, *sides: Side) -> None:
    """Run one block of each side (ours, the baseline, and bare with the minimal mirror where
    the row has it), in an order that rotates with ``turn`` (the round's number): each side
    comes first, second and last in turn, so the machine's drift falls on all alike."""
    start = turn % len(sides)
    for side in sides[start:] + sides[:start]:
        await side()


def replace_queue(history: ConversationHistory, queue: str) -> ConversationHistory:
    """``history`` on another task queue."""
    return ConversationHistory(
        history.client,
        project_id=history.project_id,
        agent_id=history.agent_id,
        task_queue=queue,
        graph=history.graph,
        timeout_s=history.timeout_s,
        broker=history.broker,
    )
