"""An agent of one's own, served by the CLI: ``agent-tasks worker --import MODULE`` and
``agent-tasks serve --with-worker --import MODULE``, run in the folder that holds the module (as
``run --import`` finds it: the caller's folder first), run its agent and its tools beside the
demo's; the worker's agent, started over the HTTP API, ends with its tool's answer. A module
that is not there is named before anything starts."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from agent_tasks.cli.agents import demo_spec
from agent_tasks.contract import AgentSpec, TaskStatus
from agent_tasks.devstack import free_port
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter import ConversationHistory
from agent_tasks.worker import Services
from tests.conftest import eventually
from tests.servers import answering

OWN = """
from pydantic import BaseModel

from agent_tasks.starter import AgentContext, ToolContext, agent, tool


class Text(BaseModel):
    text: str


@tool("shout", arguments=Text, idempotent=True, description="Upper-case a text.")
async def shout(args: Text, context: ToolContext) -> str:
    return args.text.upper() + "!"


@agent("shouter")
async def shouter(ctx: AgentContext) -> str:
    said = await ctx.step("shout", "shout", {"text": str(ctx.input["text"])})
    return said.text
"""
"""A user's module: an agent and the tool it calls."""
SHOUT = AgentSpec(name="shouter", tools=["shout"], input={"text": "hello"})


@asynccontextmanager
async def started(folder: Path, queue: str, *args: str) -> AsyncIterator[list[str]]:
    """``python -m agent_tasks.cli ARGS`` in ``folder`` polling ``queue``, until the block ends
    (then SIGTERM, as a person's Ctrl-C); yields the lines it printed so far."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.cli", *args, cwd=folder,
        env={**os.environ, "TEMPORAL_TASK_QUEUE": queue},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    lines: list[str] = []

    async def read() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            lines.append(line.decode())

    reading = asyncio.create_task(read())
    try:
        yield lines
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 60)
        await reading


def own_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "shouter.py").write_text(OWN)
    return folder


async def test_worker_import_serves_the_callers_agent_and_its_tools(
    services: Services, project_id: str, tmp_path: Path
) -> None:
    queue = f"own-{uuid.uuid4().hex[:8]}"
    async with started(own_folder(tmp_path), queue, "worker", "--import", "shouter") as said:

        async def polling() -> bool:
            return any(f"worker polling task queue {queue!r}" in line for line in said)

        await eventually(polling, within=60)
        history = ConversationHistory(
            services.client, project_id, "tests", task_queue=queue, graph=services.graph
        )
        assert (await history.create_task("t", "shout", agent=SHOUT)).recorded
        view = await history.wait_task("t")
        assert view is not None and view.status is TaskStatus.DONE, view
        assert view.result is not None and view.result.text == "HELLO!"
        assert (await history.create_task("d", "Which files?", agent=demo_spec())).recorded
        ended = await history.wait_task("d")  # the demo's file tools are still served
        assert ended is not None and ended.status is TaskStatus.DONE, ended


async def test_serve_with_worker_import_runs_the_callers_agent_over_http(
    services: Services, project_id: str, tmp_path: Path
) -> None:
    assert services.graph is not None
    _, key = await ApiKeyStore(services.graph).create(project_id, "own agent")
    port, queue = free_port(), f"own-{uuid.uuid4().hex[:8]}"
    args = ["serve", "--port", str(port), "--with-worker", "--import", "shouter"]
    async with (
        started(own_folder(tmp_path), queue, *args),
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}
        ) as http,
    ):
        await answering(http)
        body = {"name": "t", "goal": "shout", "agent": SHOUT.model_dump(mode="json")}
        created = await http.post("/tasks", json=body)
        assert created.status_code == 201, created.text

        async def finished() -> bool:
            view = (await http.get("/tasks/t")).json()["view"]
            return view["status"] in ("done", "failed")

        await eventually(finished, within=120)
        view = (await http.get("/tasks/t")).json()["view"]
        assert (view["status"], view["result"]["text"]) == ("done", "HELLO!"), view


def test_a_module_that_is_not_there_is_named_before_anything_starts(tmp_path: Path) -> None:
    for args in (["worker"], ["serve", "--with-worker"]):
        done = subprocess.run(
            [sys.executable, "-m", "agent_tasks.cli", *args, "--import", "nowhere"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
            env={**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"},
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"no module 'nowhere' in {tmp_path}" in " ".join(done.stderr.split())
