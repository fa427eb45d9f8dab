"""``python -m bench peers``: set up the servers (a Temporal dev server, PostgreSQL and Neo4j
of the bench's own, the scripted model server, the ledger), start each runtime's processes,
measure the costs in rounds that alternate the runtimes, run the fault scripts, and hand the
cells of the table (``bench.peers.table``) to the caller before a bounded clean-up."""

from __future__ import annotations

import asyncio
import faulthandler
import itertools
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from agent_tasks.config import Settings
from agent_tasks.devstack import free_port
from agent_tasks.devstack.neo4j_server import Neo4jServer
from agent_tasks.devstack.temporal import TemporalDevServer
from agent_tasks.worker import open_graph
from bench.peers import faults
from bench.peers.ledger import Ledger
from bench.peers.measures import Cell, p50, spread
from bench.peers.processes import (
    READY_S,
    ROOT,
    Bench,
    RuntimeDef,
    RuntimeProcesses,
    cpu_s,
    python_of,
    rss_kib,
)
from bench.peers.rows import MEASURES
from bench.peers.script import APPROVAL_AMOUNT, Script
from bench.peers.venv import peers_python, versions
from tools.cluster import PG_BIN, PG_PASSWORD, PG_USER, PostgresServer

RUNTIMES: tuple[RuntimeDef, ...] = (
    RuntimeDef("ours", "ours (agent task, tool_loop)", peer=False, database="neo4j"),
    RuntimeDef("pydantic_temporal", "pydantic-ai on Temporal", peer=True),
    RuntimeDef("openai_temporal", "OpenAI Agents SDK on Temporal", peer=True),
    RuntimeDef("pydantic_dbos", "pydantic-ai on DBOS", peer=True, server=None, database="postgres"),
    RuntimeDef(
        "langgraph",
        "LangGraph + PostgresSaver",
        peer=True,
        one_process=True,
        server=None,
        database="postgres",
    ),
)
OFFLINE = {
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
}
"""Every runtime's telemetry to its vendor off: the bench talks to loopback only (the OpenAI
Agents SDK sends traces to OpenAI unless told not to)."""
PEER_PACKAGES = [
    "pydantic-ai-slim", "temporalio", "temporalio-openai-agents", "openai-agents", "dbos",
    "langgraph", "langgraph-prebuilt", "langgraph-checkpoint-postgres", "langchain-openai",
    "psycopg", "openai",
]  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    """How much a run does."""

    rounds: int = 3
    tasks: int = 4
    """Tasks per runtime per round (one after another)."""
    turns: int = 8
    """Turns of each task (``turns - 1`` lookups, then a charge): 9 model calls, under the
    OpenAI Agents SDK's default ``max_turns`` of 10 (the long task crosses it)."""
    waiting: int = 500
    """Open tasks waiting for an approval, for the memory row."""
    fault_runs: int = 3
    long_turns: int = 40
    """Turns of the long task: past ``LONG_LIMITS`` on Temporal, past LangGraph's default
    recursion limit of 25 steps."""


FULL = Sizes()
QUICK = Sizes(rounds=1, tasks=2, turns=4, waiting=50, fault_runs=1)


async def _postgres(stack: AsyncExitStack, folder: Path) -> tuple[int, int]:
    """PostgreSQL of the bench's own (``tools.cluster.PostgresServer``) with the databases
    ``dbos`` and ``langgraph``; returns its port and pid."""
    port = free_port()
    server = PostgresServer(folder, port)
    pid, _ = await server.start_ready()
    stack.push_async_callback(bounded, "PostgreSQL's stop", server.stop)
    env = {**os.environ, "PGPASSWORD": PG_PASSWORD}
    for name in ("dbos", "langgraph"):
        subprocess.run(  # noqa: ASYNC221 (once, before anything is measured)
            [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", PG_USER,
             "-d", "postgres", "-c", f"create database {name}"],
            env=env, capture_output=True, check=True,
        )  # fmt: skip
    return port, pid


async def _cost_round(
    bench: Bench, sizes: Sizes, order: list[RuntimeDef], samples: dict[str, dict[str, Any]]
) -> None:
    for runtime in order:
        processes = bench.running[runtime.key]
        pids = {
            "client": None if runtime.one_process else processes.client.pid,  # type: ignore[union-attr]
            "worker": processes.worker_pid,
            "server": bench.servers.get(runtime.server or ""),
            "database": bench.servers.get(runtime.database or ""),
        }
        before = {name: cpu_s(pid) for name, pid in pids.items()}
        names = []
        for _ in range(sizes.tasks):
            name = bench.task("cost")
            names.append(name)
            took = await processes.call("run", task=name, turns=sizes.turns)
            samples["task"][runtime.key].append(took["took_s"])
        after = {name: cpu_s(pid) for name, pid in pids.items()}
        turns = sizes.tasks * sizes.turns
        samples["cpu"][runtime.key].append(
            {name: (after[name] - before[name]) / turns for name, pid in pids.items() if pid}
        )
        for name in names:
            starts = [exchange.started_at for _, exchange in bench.script.calls(name)]
            samples["turn"][runtime.key].extend(b - a for a, b in itertools.pairwise(starts))
        samples["last"][runtime.key] = names[-1]


def _cpu_cell(per_round: list[dict[str, float]]) -> Cell:
    names = ["client", "worker", "server", "database"]
    medians = {
        name: p50([spent[name] for spent in per_round if name in spent])
        for name in names
        if any(name in spent for spent in per_round)
    }
    total = sum(medians.values())
    parts = ", ".join(f"{name} {1000 * value:.1f}" for name, value in medians.items())
    return Cell(f"{1000 * total:.1f} ms ({parts})", total)


async def costs(bench: Bench, sizes: Sizes, results: dict[str, dict[str, Cell]]) -> None:
    """The whole task, one turn, CPU per turn and storage per turn, rounds alternated."""
    keys = [r.key for r in bench.runtimes]
    samples: dict[str, dict[str, Any]] = {
        row: {k: [] for k in keys} for row in ("task", "turn", "cpu")
    }
    samples["last"] = {}
    for number in range(sizes.rounds):
        shift = number % len(bench.runtimes)
        order = list(bench.runtimes[shift:] + bench.runtimes[:shift])
        await _cost_round(bench, sizes, order, samples)
        print(f"cost round {number + 1} of {sizes.rounds} done", file=sys.stderr, flush=True)
    for key in keys:
        results["task"][key] = spread(samples["task"][key], "ms", 1000)
        results["turn"][key] = spread(samples["turn"][key], "ms", 1000)
        results["cpu"][key] = _cpu_cell(samples["cpu"][key])
        stored = await bench.running[key].call("storage", task=samples["last"][key])
        per_turn = stored["bytes"] / sizes.turns
        results["storage"][key] = Cell(
            f"{per_turn:,.0f} bytes ({stored['rows'] / sizes.turns:.1f} {stored['unit']})",
            per_turn,
        )
        replayed = await bench.running[key].call("replay", task=samples["last"][key])
        results["replay"][key] = Cell(
            replayed["detail"],
            good=replayed["passed"] if replayed["offered"] else None,
            offered=replayed["offered"],
        )


async def memory(bench: Bench, sizes: Sizes, results: dict[str, dict[str, Cell]]) -> None:
    """Worker memory per open task waiting for an approval, ``sizes.waiting`` of them."""
    for runtime in bench.runtimes:
        try:
            results["memory"][runtime.key] = await _memory_of(bench, sizes, runtime)
        except Exception as err:  # one runtime's broken run is its cell
            results["memory"][runtime.key] = Cell(f"the run broke: {err}"[:300])
            await faults.fresh(bench.running[runtime.key])
        print(f"memory of {runtime.key} done", file=sys.stderr, flush=True)


async def _memory_of(bench: Bench, sizes: Sizes, runtime: RuntimeDef) -> Cell:
    """``memory`` of one runtime, in a new worker."""
    processes = bench.running[runtime.key]
    await processes.kill_worker()
    await processes.restart_worker()
    await asyncio.sleep(5)  # the new worker polls before the first task comes
    warm = bench.task("warm")
    await processes.call("run", task=warm, turns=1)
    await asyncio.sleep(2)
    base = rss_kib(processes.worker_pid)
    names = [bench.task("wait") for _ in range(sizes.waiting)]
    await _start_waiting(bench, processes, names)
    deadline = time.monotonic() + 60 + sizes.waiting
    while time.monotonic() < deadline:
        asked = sum(1 for name in names if bench.script.calls(name))
        if asked == len(names):
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(SETTLE_S)
    used = rss_kib(processes.worker_pid) - base
    await processes.kill_worker()  # the waiting tasks stay behind (private servers)
    await processes.restart_worker()
    return Cell(
        f"{used / len(names):,.1f} KiB (RSS {base / 1024:,.0f} MiB before, "
        f"{asked} of {len(names)} asked)",
        used / len(names),
    )


SETTLE_S = 15.0
"""How long the waiting tasks settle before the worker's memory is read (seconds): past the
work a turn leaves behind (ours' mirror follower ends 5 s after the run's last write)."""
STARTING = 10
"""Tasks at most started and not yet at their approval, while the memory row starts its
tasks: the row measures what waiting tasks hold, not how fast a runtime takes a burst."""
ON_WAY_S = 120.0
"""Longest the memory row waits for one of its started tasks to ask the model (seconds)."""


async def _start_waiting(bench: Bench, processes: RuntimeProcesses, names: list[str]) -> None:
    """Start ``names``, each a task whose one turn is a charge that waits for an approval, at
    most ``STARTING`` of them on their way at once (started, the model not asked yet)."""
    on_way: list[str] = []
    for name in names:
        while True:
            seen = len(bench.script.server.requests)
            on_way = [n for n in on_way if not bench.script.calls(n)]
            if len(on_way) < STARTING:
                break
            if not await bench.script.next_request(seen, ON_WAY_S):
                raise RuntimeError(f"{STARTING} tasks started, none asked the model")
        await processes.call("start", task=name, turns=1, amount=APPROVAL_AMOUNT)
        on_way.append(name)


FaultScript = Callable[[Bench, RuntimeProcesses], Awaitable[Cell]]


async def fault_rows(bench: Bench, sizes: Sizes, results: dict[str, dict[str, Cell]]) -> None:
    """Each fault script ``sizes.fault_runs`` times per runtime, the runtimes alternated."""
    recoveries: dict[str, list[float]] = {r.key: [] for r in bench.runtimes}
    for key, script in faults.SCRIPTS.items():
        runs: dict[str, list[Cell]] = {r.key: [] for r in bench.runtimes}
        for number in range(sizes.fault_runs):
            shift = number % len(bench.runtimes)
            for runtime in bench.runtimes[shift:] + bench.runtimes[:shift]:
                processes = bench.running[runtime.key]
                try:
                    cell = await script(bench, processes)
                except Exception as err:  # a run that broke is a cell that says so
                    cell = Cell(f"the run broke: {err}"[:300], good=False)
                    await faults.fresh(processes)
                runs[runtime.key].append(cell)
                if key == "kill_model" and cell.value is not None:
                    recoveries[runtime.key].append(cell.value)
        for runtime_key, cells in runs.items():
            results[key][runtime_key] = faults.combine(cells)
        print(f"fault {key} done", file=sys.stderr, flush=True)
    for runtime_key, seconds in recoveries.items():
        results["recovery"][runtime_key] = spread(seconds, "s", digits=1)


LONG_LIMITS = {
    "limit.historyCount.suggestContinueAsNew": "150",
    "limit.historyCount.warn": "300",
    "limit.historyCount.error": "600",
}
"""The history limits of the long task's Temporal server: the dev server's defaults (4,096
events suggested, 51,200 the end) scaled down a hundredfold, so that a task of
``Sizes.long_turns`` turns crosses them as a task of thousands would cross the real ones."""


LONG_WAIT_S = 300.0
"""How long the long task may take (seconds)."""


async def long_tasks(bench: Bench, sizes: Sizes, results: dict[str, dict[str, Cell]]) -> None:
    """A task of ``sizes.long_turns`` turns: on a Temporal server whose history limits are
    ``LONG_LIMITS`` (continue-as-new suggested, then the run terminated), and as it is on
    LangGraph (its recursion limit) and DBOS (none)."""
    async with AsyncExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir="/var/tmp")))
        server = TemporalDevServer(folder, free_port(), extra_dynamic_config=LONG_LIMITS)
        await server.start_ready()
        stack.push_async_callback(bounded, "the long task's Temporal's stop", server.stop)
        for runtime in bench.runtimes:
            processes = bench.running[runtime.key]
            if runtime.server == "temporal":
                env = {**processes.env, "TEMPORAL_ADDRESS": server.address}
                processes = RuntimeProcesses(runtime, processes.python, env, processes.queue + "-l")
                await processes.start()
            task = bench.task("long")
            try:
                await processes.call("start", task=task, turns=sizes.long_turns)
                ended = await processes.call("wait", within=630, task=task, within_s=LONG_WAIT_S)
            except Exception as err:  # one runtime's broken run is its cell
                ended = {"status": "not measured", "output": f"the run broke: {err}"}
            finally:
                if processes is not bench.running[runtime.key]:
                    await processes.stop()
            raw = len(bench.ledger.effects(task, "charge"))
            said = str(ended["output"]).replace("\n", " ")[:120]
            results["long_task"][runtime.key] = Cell(
                f"task {ended['status']}, {raw} charge: {said}",
                good=ended["status"] == "done" and raw == 1,
            )
            print(f"long task of {runtime.key} done", file=sys.stderr, flush=True)


PHASES = {"costs": costs, "faults": fault_rows, "long": long_tasks, "memory": memory}


def _machine(sizes: Sizes, peers: Path, loads: list[str]) -> dict[str, str]:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    ours = versions(Path(sys.executable), ["temporalio", "openai", "neo4j", "pydantic"])
    theirs = versions(peers, PEER_PACKAGES)
    postgres = subprocess.run(
        [str(PG_BIN / "postgres"), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{cpu}, {os.cpu_count()} cores, shared with other work",
        "load average (1, 5, 15 min) at start / end": " / ".join(loads),
        "os, python": f"{platform.platform()}, Python {platform.python_version()}",
        "sizes": ", ".join(f"{k} {v}" for k, v in sizes.__dict__.items()),
        "ours": ", ".join(f"{k} {v}" for k, v in ours.items()),
        "peers (.venv-peers)": ", ".join(f"{k} {v}" for k, v in theirs.items()),
        "servers": f"the bench's own: Temporal CLI dev server (SQLite); {postgres}; Neo4j "
        "Community (ours' graph store)",
    }


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


Report = Callable[[dict[str, str], dict[str, dict[str, Cell]], list[str]], None]
"""What takes a run's results: the machine, the cells (measure -> runtime -> cell) and what
broke (a phase that broke leaves its cells unmeasured)."""
CLEANUP_S = 90.0
"""Longest one clean-up step may take (seconds: a server's stop waits 60 s for a clean exit
before its SIGKILL); a step past it is left, and the next one runs."""
NEO4J_PASSWORD = "bench-peers-neo4j"
"""The password of ours' private Neo4j (on loopback, for the run's length)."""


async def bounded(
    what: str, step: Callable[[], Awaitable[Any]], within_s: float = CLEANUP_S
) -> None:
    """Run the clean-up ``step``, at most ``within_s``: one that hangs or fails is reported
    on stderr and left behind, so the clean-up ends whatever one step does."""
    job = asyncio.ensure_future(step())
    done, _ = await asyncio.wait({job}, timeout=within_s)
    if not done:
        job.cancel()
        print(f"clean-up: {what} did not end within {within_s:.0f} s: left", file=sys.stderr)
    elif not job.cancelled() and job.exception() is not None:
        print(f"clean-up: {what} failed: {job.exception()!r}", file=sys.stderr)


@dataclass
class Servers:
    """The servers of a run, each the bench's own: their addresses and process ids."""

    temporal: str
    postgres_dsn: str
    neo4j: Settings
    """Ours' graph store (its ``neo4j_uri`` and password)."""
    pids: dict[str, int]
    """Process ids by name: ``temporal``, ``postgres``, ``neo4j``."""


async def _neo4j(stack: AsyncExitStack, folder: Path) -> tuple[Settings, int]:
    """A Neo4j of the bench's own for ours (``Neo4jServer``), its schema made: the graph
    store's CPU is then ours' alone, and nothing is left in anyone's store."""
    server = Neo4jServer(folder, free_port(), password=NEO4J_PASSWORD)
    pid, _ = await server.start_ready()
    stack.push_async_callback(bounded, "Neo4j's stop", server.stop)
    settings = Settings(
        neo4j_uri=server.uri, neo4j_password=SecretStr(NEO4J_PASSWORD), graph="neo4j"
    )
    async with open_graph(settings) as graph:  # a new store's first schema takes its time
        await asyncio.wait_for(graph.ensure_ready(), READY_S)
    return settings, pid


async def _servers(stack: AsyncExitStack, folder: Path) -> Servers:
    temporal = TemporalDevServer(folder / "temporal", free_port())
    temporal_pid, _ = await temporal.start_ready()
    stack.push_async_callback(bounded, "Temporal's stop", temporal.stop)
    pg_port, pg_pid = await _postgres(stack, folder / "pg")
    neo4j, neo4j_pid = await _neo4j(stack, folder / "neo4j")
    return Servers(
        temporal=temporal.address,
        postgres_dsn=f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{pg_port}",
        neo4j=neo4j,
        pids={"temporal": temporal_pid, "postgres": pg_pid, "neo4j": neo4j_pid},
    )


def _env(
    runtime: RuntimeDef, servers: Servers, script: Script, ledger: Ledger, logs: Path
) -> dict[str, str]:
    """A runtime's processes' environment: the bench's servers, model and ledger."""
    database = "dbos" if runtime.key == "pydantic_dbos" else "langgraph"
    assert servers.neo4j.neo4j_password is not None
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TEMPORAL_ADDRESS": servers.temporal,
        "NEO4J_URI": servers.neo4j.neo4j_uri,
        "NEO4J_PASSWORD": servers.neo4j.neo4j_password.get_secret_value(),
        "AGENT_TASKS_GRAPH": "neo4j",
        "AGENT_TASKS_BROKER_URL": "",
        "OPENAI_BASE_URL": script.server.url,
        "OPENAI_API_KEY": "bench",
        "BENCH_LEDGER": str(ledger.path),
        "BENCH_RUNTIME": runtime.key,
        "BENCH_PG": f"{servers.postgres_dsn}/{database}",
        "BENCH_LOGS": str(logs),
        "PYTHONUNBUFFERED": "1",
        **OFFLINE,
    }


async def _phases(
    bench: Bench, sizes: Sizes, phases: set[str], results: dict[str, dict[str, Cell]]
) -> list[str]:
    """Run the ``phases`` chosen, in ``PHASES``' order; returns what broke."""
    broke: list[str] = []
    for phase, measure in PHASES.items():
        if phase in phases:
            print(f"phase {phase}: load {_load()}", file=sys.stderr, flush=True)
            try:
                await measure(bench, sizes, results)
            except Exception as err:  # the table keeps what the other phases measured
                broke.append(f"the phase {phase} broke: {type(err).__name__}: {err}")
                print(broke[-1], file=sys.stderr, flush=True)
    return broke


CLEANUP_WATCH_S = 600.0
"""Past this long in the clean-up (seconds), every thread's stack is written to stderr: what a
clean-up that still hangs waits for."""


# Long: one run in its order: the servers up, each phase of each runtime, the table, the clean-up
async def run_peers(
    sizes: Sizes,
    logs: Path,
    report: Report,
    phases: set[str] | None = None,
    only: set[str] | None = None,
) -> None:
    """Run everything once (the ``phases`` of ``PHASES``, the runtimes in ``only``: all by
    default) and hand the results to ``report`` before the clean-up; every clean-up step is
    bounded (``bounded``), and the processes are killed by pid."""
    runtimes = tuple(r for r in RUNTIMES if not only or r.key in only)
    loads = [_load()]
    peers = peers_python()
    results: dict[str, dict[str, Cell]] = {m.key: {} for m in MEASURES}
    async with AsyncExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir="/var/tmp")))
        os.chmod(folder, 0o755)  # PostgreSQL's own user reads it (tools.cluster)
        servers = await _servers(stack, folder)
        script = Script()
        stack.enter_context(script.server.running())
        ledger = Ledger(folder / "ledger.sqlite")
        run_id = uuid.uuid4().hex[:6]
        running: dict[str, RuntimeProcesses] = {}
        for runtime in runtimes:
            processes = RuntimeProcesses(
                runtime,
                python_of(runtime, peers),
                _env(runtime, servers, script, ledger, logs),
                f"peers-{runtime.key}-{run_id}",
            )
            stack.push_async_callback(bounded, f"{runtime.key}'s processes", processes.stop)
            await processes.start()
            running[runtime.key] = processes
        bench = Bench(script, ledger, running, servers.pids, run_id, runtimes)
        broke = await _phases(bench, sizes, set(PHASES) if phases is None else phases, results)
        loads.append(_load())
        report(_machine(sizes, peers, loads), results, broke)  # before the clean-up
        faulthandler.dump_traceback_later(CLEANUP_WATCH_S, exit=False)
    faulthandler.cancel_dump_traceback_later()
