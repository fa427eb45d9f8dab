"""The live streams under load, on the local stack (``agent-tasks dev up``, with its broker):
the HTTP API in a process of its own (``python -m agent_tasks.server``), the SSE clients in another
(``bench.stream_clients``), the worker here.

- **Latency**: one reader of a recorded task; ``--tokens`` tokens (``TaskEmitter.emit_token``)
  and ``--writes`` single-event writes whose text is the send time (``time.time_ns()``): the
  milliseconds from the send (the token's publish, the write's call) to the reader's arrival,
  p50 and p95.
- **200 readers**: an agent task that waits for a go-ahead, runs ``--steps`` echo steps, waits
  again while ``--bulk`` notes of 1 KB are written, and ends; in ``--rounds`` rounds, once
  with no stream and once with ``--readers`` readers and one client that connects and never
  reads. Per round: the time per step (from the history's event times, as
  ``bench.bench_step``), whether every reader saw every event and the end, and the server's
  resident memory (``VmRSS``) idle, with the readers connected, and after the bulk writes.

    python -m bench.bench_streams [--readers 200] [--steps 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from agent_tasks.contract import AgentSpec, EventInput, EventKind
from agent_tasks.devstack import free_port
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.tasks import TaskEmitter, TaskManager
from agent_tasks.worker import Services, build_worker, open_services
from agent_tasks.workflows.agents import AgentContext, agent
from bench.bench_step import bench_echo, per_step

ROOT = Path(__file__).resolve().parents[1]


@agent("bench_stream_steps")
async def bench_stream_steps(ctx: AgentContext) -> str:
    """Wait for ``go``, run ``input["steps"]`` echo steps, wait for ``end``."""
    await ctx.ask("go", "Start?")
    count = ctx.input["steps"]
    assert isinstance(count, int)
    for i in range(count):
        await ctx.step(f"s{i:04d}", "bench_echo", {"text": f"step {i}"})
    await ctx.ask("end", "Finish?")
    return "done"


async def until(check: Callable[[], Awaitable[bool]], within: float = 300.0) -> None:
    """Poll ``check`` every 50 ms until it is true (``TimeoutError`` after ``within`` s)."""
    for _ in range(int(within / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"not within {within} s")


async def answered(history: ConversationHistory, task: str, answer: str) -> bool:
    """Answer the task's open request; False while none is open yet."""
    return (await history.respond(task, answer)).recorded


async def asking(history: ConversationHistory, task: str) -> bool:
    """True once the task waits for an answer (its steps are done)."""
    view = (await history.get_task(task)).view
    return view is not None and bool(view.pending_inputs)


def rss_mib(pid: int) -> float:
    """Resident memory of a process (MiB), from ``/proc``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def start_server(queue: str, streams: int) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    env = {
        **os.environ,
        "TEMPORAL_TASK_QUEUE": queue,
        "AGENT_TASKS_HTTP_PORT": str(port),
        "AGENT_TASKS_STREAMS_PER_KEY": str(streams),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.server", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(300):
            try:
                if (await client.get("/health")).status_code == 200:
                    return process, url
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("the HTTP API did not start")


async def clients(url: str, key: str, task: str, readers: int) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.stream_clients", url, key, task, str(readers), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    line = (await process.stdout.readline()).decode().split()
    if line != ["ready", str(readers)]:
        raise RuntimeError(f"the readers did not all connect: {line}")
    return process


async def report(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdout is not None
    out, _ = await process.communicate()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def latency(services: Services, url: str, history: ConversationHistory, key: str,
                  tokens: int, writes: int) -> dict[str, Any]:  # fmt: skip
    await history.create_task("latency", "measure")
    reader = await clients(url, key, "latency", 1)
    emitter = TaskEmitter(TaskManager(history, broker=services.broker), "latency")
    for _ in range(tokens):
        await emitter.emit_token(str(time.time_ns()))
        await asyncio.sleep(0.01)
    for _ in range(writes):
        await history.record_event("latency", EventKind.NOTE, str(time.time_ns()))
        await asyncio.sleep(0.05)
    await history.finish_task("latency", "done")
    delays = (await report(reader))["delays_ms"]
    return {
        kind: (percentile(delays[kind], 0.5), percentile(delays[kind], 0.95), len(delays[kind]))
        for kind in ("token", "update")
    }


async def one_round(services: Services, url: str, server_pid: int, history: ConversationHistory,
                    key: str, readers: int, steps: int, bulk: int) -> dict[str, Any]:  # fmt: skip
    name = f"steps-{uuid.uuid4().hex[:6]}"
    spec = AgentSpec(name="bench_stream_steps", tools=["bench_echo"], input={"steps": steps})
    await history.create_task(name, "steps", agent=spec)
    row: dict[str, Any] = {"readers": readers, "rss_idle": rss_mib(server_pid)}
    process = None
    if readers:
        process = await clients(url, key, name, readers)
        row["rss_connected"] = rss_mib(server_pid)
    await until(lambda: answered(history, name, "go"))
    await until(lambda: asking(history, name))
    row["per_step_ms"], row["events_per_step"] = await per_step(
        services.client, history.workflow_id(name), steps
    )
    row["per_step_ms"] *= 1000
    for start in range(0, bulk, 100):
        notes = [EventInput(kind=EventKind.NOTE, payload=f"{n:08d}" + "x" * 1016)
                 for n in range(start, min(start + 100, bulk))]  # fmt: skip
        await history.record_events(name, notes)
    await asyncio.sleep(1.0)
    row["rss_after_bulk"] = rss_mib(server_pid)
    await until(lambda: answered(history, name, "end"))
    final = await history.wait_task(name)
    assert final is not None
    if process is not None:
        seen = (await report(process))["readers"]
        row["readers_whole"] = sum(
            r["ended"] and r["last_seq"] == final.last_seq and r["updates"] == final.last_seq
            for r in seen
        )
    return row


async def main(readers: int, steps: int, rounds: int, bulk: int, tokens: int, writes: int) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None and services.broker is not None, "needs the broker"
        queue = f"bench-streams-{uuid.uuid4().hex[:8]}"
        project = f"bench-streams-{uuid.uuid4().hex[:8]}"
        _, key = await ApiKeyStore(services.graph).create(project, "bench")
        history = ConversationHistory(
            services.client, project, "bench", task_queue=queue, graph=services.graph
        )
        async with build_worker(
            services.client, services.graph, queue, tools=[bench_echo], broker=services.broker
        ):
            server, url = await start_server(queue, 2 * readers + 10)
            try:
                lat = await latency(services, url, history, key, tokens, writes)
                rows = []
                for _ in range(rounds):
                    for count in (0, readers):
                        rows.append(await one_round(
                            services, url, server.pid, history, key, count, steps, bulk
                        ))  # fmt: skip
            finally:
                server.terminate()
                await server.wait()
    for kind, (p50, p95, n) in lat.items():
        print(f"{kind} to an SSE reader: p50 {p50:.1f} ms, p95 {p95:.1f} ms ({n} measured)")
    base = statistics.median(r["per_step_ms"] for r in rows if not r["readers"])
    loaded = statistics.median(r["per_step_ms"] for r in rows if r["readers"])
    print(f"step: {base:.1f} ms with no stream, {loaded:.1f} ms with {readers} readers and one "
          f"stalled client ({loaded / base:.2f}x)")  # fmt: skip
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bulk", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--writes", type=int, default=50)
    a = parser.parse_args()
    asyncio.run(main(a.readers, a.steps, a.rounds, a.bulk, a.tokens, a.writes))
    sys.stdout.flush()
    os._exit(0)
