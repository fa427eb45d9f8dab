"""``agent-tasks serve`` shut down with streams open: a real uvicorn in a subprocess, SIGTERM,
then a new server that the streams' clients resume from with ``Last-Event-ID``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from agent_tasks.contract import Event
from agent_tasks.devstack import free_port
from agent_tasks.server.sessions import parse_cursor
from tests.cli.test_serve import ROOT
from tests.server.conftest import Api, Project, Sse, SseReader
from tests.servers import answering


@asynccontextmanager
async def serving(queue: str, port: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """``agent-tasks serve`` on ``port`` for the tests' task queue (its worker runs in the
    tests' process, so writes go on while no server runs), until the block ends."""
    env = {**os.environ, "TEMPORAL_TASK_QUEUE": queue}
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.cli", "serve", "--port", str(port),
        "--graceful-timeout", "30",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            await answering(http, within=120)
        yield server
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()


async def _rest(reader: SseReader) -> list[Sse]:
    """Every event until the stream ends."""
    seen: list[Sse] = []
    try:
        while True:
            seen.append(await reader.next())
    except EOFError:
        return seen


def _payloads(seen: list[Sse]) -> list[str]:
    return [str(Event.model_validate_json(s.data).payload) for s in seen if s.event == "update"]


async def test_sigterm_ends_open_streams_and_clients_resume_on_the_next_server(
    api: Api, project: Project
) -> None:
    """SIGTERM to ``agent-tasks serve`` with a task's, a session's and the inbox's streams
    open: every stream ends (no error event), the process exits 0 without uvicorn cancelling
    anything at its graceful timeout (the streams ended by themselves); written while no
    server ran, the events reach the clients that resume with their ``Last-Event-ID`` on the
    next server, once each."""
    history = project.history
    assert (await history.create_task("t", "g", session_id="chat")).recorded
    await history.record_event("t", "message", payload="m1", role="user")
    port = free_port()
    headers = {"Authorization": f"Bearer {project.key}"}
    async with serving(api.queue, port) as server:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60
        ) as http:
            async with (
                http.stream("GET", "/tasks/t/stream") as a,
                http.stream("GET", "/sessions/chat/stream") as b,
                http.stream("GET", "/inbox/stream") as c,
            ):
                readers = [SseReader(r) for r in (a, b, c)]
                for reader in readers:
                    await reader.connected()
                task_seen = [await readers[0].next()]
                await history.record_event("t", "message", payload="m2", role="user")
                task_seen.append(await readers[0].next())
                session_seen = [await readers[1].next()]
                assert (await readers[2].next()).event == "ready"
                server.send_signal(signal.SIGTERM)
                rests = await asyncio.gather(*(_rest(r) for r in readers))
            logs, _ = await asyncio.wait_for(server.communicate(), 120)  # a hang's guard
    assert rests == [[], [], []]  # each ended, with nothing after
    assert server.returncode == 0, logs.decode()
    assert "timeout graceful shutdown exceeded" not in logs.decode()
    assert _payloads(task_seen) == ["m1", "m2"] and _payloads(session_seen) == ["m2"]

    await history.record_event("t", "message", payload="m3", role="user")  # no server runs
    async with serving(api.queue, port):
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60
        ) as http:
            task_last, session_last = task_seen[-1].id or "", session_seen[-1].id or ""
            async with (
                http.stream("GET", "/tasks/t/stream", headers={"Last-Event-ID": task_last}) as a,
                http.stream(
                    "GET", "/sessions/chat/stream", headers={"Last-Event-ID": session_last}
                ) as b,
            ):
                readers = [SseReader(a), SseReader(b)]
                for reader in readers:
                    await reader.connected()
                resumed = [[await reader.next()] for reader in readers]
                await history.record_event("t", "message", payload="m4", role="user")
                for seen, reader in zip(resumed, readers, strict=True):
                    seen.append(await reader.next())
    for seen in resumed:  # m3 once, then m4: no gap, no duplicate
        assert _payloads(seen) == ["m3", "m4"]
    assert [s.id for s in resumed[0]] == ["3", "4"]
    cursor = parse_cursor(resumed[1][-1].id or "")
    assert cursor is not None and cursor.seqs == {"t": 4}
