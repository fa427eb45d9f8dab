"""A runtime's processes as the bench drives them: its worker (killed with SIGKILL, started
again) and its client (``bench.peers.protocol``'s JSON lines), and the CPU and memory of each
read from ``/proc``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers.ledger import Ledger
from bench.peers.script import Script

ROOT = Path(__file__).resolve().parents[2]
READY_S = 120.0
"""Longest a process may take to say it is ready (seconds; a cold import of a peer's SDK on a
busy machine takes several)."""
REAP_S = 10.0
"""Longest the bench waits for a killed process to be reaped, or for its output to end
(seconds); past it the process is left to the system."""


@dataclass(frozen=True)
class RuntimeDef:
    """One column of the table."""

    key: str
    """Its short name (``ours``, ``pydantic_temporal``...): the module ``bench.peers.rt_KEY``."""
    title: str
    """Its column's title."""
    peer: bool
    """Runs in the peers' environment (``.venv-peers``)."""
    one_process: bool = False
    """The app runs the agent in its own process (no worker apart): the client process is
    the worker, and a kill of the worker kills it."""
    server: str | None = "temporal"
    """The server process it needs (``temporal``) or None."""
    database: str | None = None
    """Its database process (``postgres``, ``neo4j``) or None."""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(tree.get(current, []))
    return out


def cpu_s(pid: int | None) -> float:
    """CPU time (user and system, seconds) so far of ``pid`` and its descendants (0 when
    gone or None)."""
    if pid is None:
        return 0.0
    ticks, total = os.sysconf("SC_CLK_TCK"), 0
    for one in tree_pids(pid):
        try:
            text = Path(f"/proc/{one}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants (a runtime's helper processes with it), each by
    its pid; the tree is read before the first kill."""
    for one in reversed(tree_pids(pid)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(one, signal.SIGKILL)


async def reap(process: asyncio.subprocess.Process) -> None:
    """Wait, at most ``REAP_S``, for the killed ``process`` to be reaped. (asyncio's ``wait``
    returns only once the process exited and its pipes closed: output nobody reads keeps it
    waiting for ever, hence the bound.)"""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), REAP_S)


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (KiB)."""
    total = 0
    for one in tree_pids(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


class RuntimeProcesses:
    """The worker and client processes of one runtime, with the environment ``env``."""

    def __init__(self, runtime: RuntimeDef, python: Path, env: dict[str, str], queue: str):
        self.runtime = runtime
        self.python = python
        self.env = env
        self.queue = queue
        self.worker: asyncio.subprocess.Process | None = None
        self.client: asyncio.subprocess.Process | None = None
        self._answers: dict[int, asyncio.Future[Any]] = {}
        self._numbers = itertools.count()
        self._reader: asyncio.Task[None] | None = None
        self._drains: set[asyncio.Task[None]] = set()
        self.logs = Path(env["BENCH_LOGS"])

    async def _spawn(self, role: str) -> asyncio.subprocess.Process:
        log = open(self.logs / f"{self.runtime.key}-{role}.log", "ab")  # noqa: ASYNC230
        process = await asyncio.create_subprocess_exec(
            str(self.python), "-m", f"bench.peers.rt_{self.runtime.key}", role, self.queue,
            cwd=ROOT, env=self.env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
        log.close()
        assert process.stdout is not None
        try:
            async with asyncio.timeout(READY_S):
                while True:
                    line = await process.stdout.readline()
                    if not line:
                        raise RuntimeError(f"{self.runtime.key} {role} exited: see its log")
                    if line.strip() in (b"ready", b'{"ready": true}'):
                        break
        except BaseException:
            kill_tree(process.pid)
            raise
        if role == "worker":  # the client's output is read by ``_read``
            drain = asyncio.create_task(self._drain(process, role))
            self._drains.add(drain)
            drain.add_done_callback(self._drains.discard)
        return process

    async def _drain(self, process: asyncio.subprocess.Process, role: str) -> None:
        """Copy what ``process`` writes to its standard output after "ready" to its log.
        Temporal's Rust core logs its warnings there: unread, they fill the pipe, and then the
        core blocks on its next warning (the worker stalls) and a kill is never reaped
        (``reap``)."""
        assert process.stdout is not None
        with open(self.logs / f"{self.runtime.key}-{role}.log", "ab") as log:  # noqa: ASYNC230
            while line := await process.stdout.readline():
                log.write(b"stdout: " + line)
                log.flush()

    async def start(self) -> None:
        """Start the worker (unless the app is the worker) and the client."""
        if not self.runtime.one_process:
            self.worker = await self._spawn("worker")
        await self._start_client()

    async def _start_client(self) -> None:
        self.client = await self._spawn("client")
        self._reader = asyncio.create_task(self._read(self.client))

    @property
    def worker_pid(self) -> int:
        process = self.client if self.runtime.one_process else self.worker
        assert process is not None
        return process.pid

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        log = open(self.logs / f"{self.runtime.key}-client.log", "ab")  # noqa: ASYNC230
        with log:
            await self._answer_lines(process, log)
        for future in self._answers.values():
            if not future.done():
                future.set_exception(RuntimeError(f"{self.runtime.key} client exited"))
        self._answers.clear()

    async def _answer_lines(self, process: asyncio.subprocess.Process, log: Any) -> None:
        """Hand each answer line to its caller's future; any other line (a library's print,
        Temporal's core logs) goes to the client's log."""
        assert process.stdout is not None
        while line := await process.stdout.readline():
            try:
                reply = json.loads(line)
            except ValueError:
                log.write(b"stdout: " + line)
                log.flush()
                continue
            if not isinstance(reply, dict) or "id" not in reply:
                continue
            future = self._answers.pop(reply["id"], None)
            if future is not None and not future.done():
                if reply["ok"]:
                    future.set_result(reply["result"])
                else:
                    future.set_exception(RuntimeError(reply["error"]))

    async def call(self, op: str, within: float = 600.0, **args: Any) -> Any:
        """Run ``op`` in the client; its result (raises ``RuntimeError`` with its error)."""
        assert self.client is not None and self.client.stdin is not None
        number = next(self._numbers)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers[number] = future
        self.client.stdin.write(json.dumps({"id": number, "op": op, **args}).encode() + b"\n")
        await self.client.stdin.drain()
        return await asyncio.wait_for(future, within)

    async def kill_worker(self) -> None:
        """SIGKILL the worker (the app's process when it is the worker) and its descendants,
        and reap it (each wait bounded: ``REAP_S``)."""
        process = self.client if self.runtime.one_process else self.worker
        assert process is not None
        kill_tree(process.pid)
        await reap(process)
        if self.runtime.one_process:
            await self._end_reader()

    async def _end_reader(self) -> None:
        """Wait, at most ``REAP_S``, for the client's reader to see its output end (its
        callers told the client exited); then stop it."""
        if self._reader is None:
            return
        await asyncio.wait({self._reader}, timeout=REAP_S)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader

    async def restart_worker(self) -> None:
        """A new worker (a new app process when it is the worker)."""
        if self.runtime.one_process:
            await self._start_client()
        else:
            self.worker = await self._spawn("worker")

    async def stop(self) -> None:
        """End both processes and their descendants (SIGKILL by pid: nothing of theirs is
        kept but what they made durable); every wait bounded (``REAP_S``)."""
        for process in (self.client, self.worker):
            if process is not None and process.returncode is None:
                kill_tree(process.pid)
                await reap(process)
        await self._end_reader()
        for drain in list(self._drains):
            drain.cancel()


def python_of(runtime: RuntimeDef, peers_python: Path) -> Path:
    """The interpreter a runtime runs on."""
    return peers_python if runtime.peer else Path(sys.executable)


@dataclass
class Bench:
    """What every measure uses."""

    script: Script
    ledger: Ledger
    running: dict[str, RuntimeProcesses]
    servers: dict[str, int]
    """Process ids by name: ``temporal``, ``postgres``, ``neo4j``."""
    run_id: str
    runtimes: tuple[RuntimeDef, ...]
    """The runtimes of this run, in the table's order."""

    def task(self, prefix: str) -> str:
        return f"{prefix}-{self.run_id}-{uuid.uuid4().hex[:6]}"
