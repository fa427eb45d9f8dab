"""``python -m bench peers``: set up the servers (a Temporal dev server and PostgreSQL of the
bench's own, the configured Neo4j for ours, the scripted model server, the ledger), start each
runtime's processes, measure the costs in rounds that alternate the runtimes, run the fault
scripts, and return the cells of the table (``bench.peers.table``)."""

from __future__ import annotations

import asyncio
import contextlib
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

from agent_tasks.config import Settings
from agent_tasks.devstack import free_port
from agent_tasks.devstack.temporal import TemporalDevServer
from agent_tasks.worker import open_services
from bench.peers import faults
from bench.peers.ledger import Ledger
from bench.peers.measures import Cell, p50, spread
from bench.peers.processes import (
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
    stack.push_async_callback(server.stop)
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
    await _start_waiting(processes, names)
    deadline = time.monotonic() + 60 + sizes.waiting
    while time.monotonic() < deadline:
        asked = sum(1 for name in names if bench.script.calls(name))
        if asked == len(names):
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(3)
    used = rss_kib(processes.worker_pid) - base
    await processes.kill_worker()  # the waiting tasks stay behind (private servers)
    await processes.restart_worker()
    return Cell(
        f"{used / len(names):,.1f} KiB (RSS {base / 1024:,.0f} MiB before, "
        f"{asked} of {len(names)} asked)",
        used / len(names),
    )


async def _start_waiting(processes: RuntimeProcesses, names: list[str]) -> None:
    """Start ``names``, each a task whose one turn is a charge that waits for an approval."""
    gate = asyncio.Semaphore(20)

    async def start(name: str) -> None:
        async with gate:
            await processes.call("start", task=name, turns=1, amount=APPROVAL_AMOUNT)

    await asyncio.gather(*(start(name) for name in names))


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


PROJECT = "bench-peers"
"""Ours' project (``rt_ours.PROJECT``): its graph nodes are wiped at the end."""
WIPE_S = 120.0
"""Longest the wipe of ours' graph nodes may take (seconds): a wipe scans the shared graph
store, slow on a busy one; what is left is the bench's own project."""


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
        stack.push_async_callback(server.stop)
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
        "servers": f"Temporal CLI dev server (a private one, SQLite); {postgres}; Neo4j (ours)",
    }


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


# Long: the whole run: servers, processes, the three phases, the clean-up
Report = Callable[[dict[str, str], dict[str, dict[str, Cell]], list[str]], None]
"""What takes a run's results: the machine, the cells (measure -> runtime -> cell) and what
broke (a phase that broke leaves its cells unmeasured)."""


# Long: one run in its order: the servers up, each phase of each runtime, the table, the clean-up
async def run_peers(
    sizes: Sizes,
    logs: Path,
    report: Report,
    phases: set[str] | None = None,
    only: set[str] | None = None,
) -> None:
    """Run everything once (the ``phases`` of ``PHASES``, the runtimes in ``only``: all by
    default) and hand the results to ``report`` before the clean-up (a clean-up that hangs
    loses nothing)."""
    runtimes = tuple(r for r in RUNTIMES if not only or r.key in only)
    phases = set(PHASES) if phases is None else phases
    loads = [_load()]
    peers = peers_python()
    results: dict[str, dict[str, Cell]] = {m.key: {} for m in MEASURES}
    broke: list[str] = []
    settings = Settings()
    async with AsyncExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir="/var/tmp")))
        os.chmod(folder, 0o755)  # PostgreSQL's own user reads it (tools.cluster)
        temporal = TemporalDevServer(folder / "temporal", free_port())
        temporal_pid, _ = await temporal.start_ready()
        stack.push_async_callback(temporal.stop)
        pg_port, pg_pid = await _postgres(stack, folder / "pg")
        script = Script()
        stack.enter_context(script.server.running())
        ledger = Ledger(folder / "ledger.sqlite")
        run_id = uuid.uuid4().hex[:6]
        services = await stack.enter_async_context(open_services(settings, schema=True))
        neo4j = _neo4j_pid(settings)
        servers = {"temporal": temporal_pid, "postgres": pg_pid}
        if neo4j is not None:
            servers["neo4j"] = neo4j
        dsn = f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{pg_port}"
        running: dict[str, RuntimeProcesses] = {}
        for runtime in runtimes:
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "TEMPORAL_ADDRESS": temporal.address,
                "OPENAI_BASE_URL": script.server.url,
                "OPENAI_API_KEY": "bench",
                "BENCH_LEDGER": str(ledger.path),
                "BENCH_RUNTIME": runtime.key,
                "BENCH_PG": f"{dsn}/{'dbos' if runtime.key == 'pydantic_dbos' else 'langgraph'}",
                "BENCH_LOGS": str(logs),
                "PYTHONUNBUFFERED": "1",
                **OFFLINE,
            }
            processes = RuntimeProcesses(
                runtime, python_of(runtime, peers), env, f"peers-{runtime.key}-{run_id}"
            )
            stack.push_async_callback(processes.stop)
            await processes.start()
            running[runtime.key] = processes
        bench = Bench(script, ledger, running, servers, run_id, runtimes)
        try:
            for phase, measure in PHASES.items():
                if phase in phases:
                    try:
                        await measure(bench, sizes, results)
                    except Exception as err:  # the table keeps what the other phases measured
                        broke.append(f"the phase {phase} broke: {type(err).__name__}: {err}")
                        print(broke[-1], file=sys.stderr, flush=True)
            loads.append(_load())
            report(_machine(sizes, peers, loads), results, broke)  # before the clean-up
        finally:
            with contextlib.suppress(Exception):
                assert services.graph is not None
                await asyncio.wait_for(services.graph.wipe_project(PROJECT), WIPE_S)


def _neo4j_pid(settings: Settings) -> int | None:
    from agent_tasks.devstack.neo4j_server import Neo4jServer

    return Neo4jServer(settings.data_dir, 0).running_pid()
