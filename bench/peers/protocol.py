"""How the bench drives a runtime's processes (standard library only: both environments run
it). Each runtime module (``rt_*``) is run as

    python -m bench.peers.rt_NAME worker QUEUE   # prints "ready", runs until killed
    python -m bench.peers.rt_NAME client QUEUE   # JSON lines: requests in, answers out

A client reads one request a line (``{"id": n, "op": ..., ...}``), runs each at once (many
may be in flight) and writes ``{"id": n, "ok": true, "result": ...}`` or ``{"id": n, "ok":
false, "error": ...}``. The operations (each a coroutine of the runtime's ``Client``):

- ``start(task, turns, amount)``: start the task; returns when the runtime took it.
- ``wait(task, within_s)``: ``{"status": done|failed|cancelled|timeout, "output": text}``.
- ``run(task, turns)``: start and wait; ``{"took_s": ...}`` measured in the client.
- ``pending(task)``: the approval the task waits for, ``{"args": ...}``, or null.
- ``approve(task)``: accept the pending approval (``{"sent": true}``).
- ``cancel(task)``: ask the runtime to cancel the task.
- ``storage(task)``: ``{"bytes": ..., "rows": ...}`` the task's durable record takes.
- ``replay(task)``: replay the task's saved run against changed agent code:
  ``{"offered": bool, "passed": bool | None, "detail": text}``.
- ``recover(tasks)``: what an app of the runtime does after its worker died (most: nothing).
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

Operation = Callable[..., Awaitable[Any]]


async def serve(operations: dict[str, Operation]) -> None:
    """Answer requests from standard input until it closes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending: set[asyncio.Task[None]] = set()

    async def answer(request: dict[str, Any]) -> None:
        number = request.pop("id")
        operation = operations.get(request.pop("op"))
        try:
            if operation is None:
                raise ValueError("not offered")
            reply = {"id": number, "ok": True, "result": await operation(**request)}
        except Exception as err:  # every failure goes back to the bench as text
            text = f"{type(err).__name__}: {err}"
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            reply = {"id": number, "ok": False, "error": text[:2000]}
        sys.stdout.write(json.dumps(reply, default=str) + "\n")
        sys.stdout.flush()

    print(json.dumps({"ready": True}), flush=True)
    while line := await reader.readline():
        job = asyncio.create_task(answer(json.loads(line)))
        pending.add(job)
        job.add_done_callback(pending.discard)


async def timed_run(client: Any, task: str, turns: int) -> dict[str, float]:
    """``run``: start, wait until done, measured here (the runtime's own client)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    await client.start(task, turns)
    ended = await client.wait(task, 300.0)
    if ended["status"] != "done":
        raise RuntimeError(f"task {task} ended {ended}")
    return {"took_s": loop.time() - began}


def main(worker: Callable[[str], Coroutine[Any, Any, None]], client: Callable[[str], Any]) -> None:
    """The module's entry: ``worker QUEUE`` or ``client QUEUE`` (``client(queue)`` returns an
    async context manager yielding the operations)."""
    role, queue = sys.argv[1], sys.argv[2]

    async def run_client() -> None:
        async with client(queue) as operations:
            await serve(operations)

    asyncio.run(worker(queue) if role == "worker" else run_client())
