"""``examples/hello_agent`` end to end, as its README runs it, from a copy of the folder outside
the repository that holds an app's own ``config.py``, ``workflows.py`` and ``activities.py``
beside its ``worker.py`` and ``starter.py`` (each of the app's files that ours could be
confused with; ours import only ``agent_tasks.*``): its own worker (a process with the plugins,
on its own task queue), its starter answering from the notes and, when the notes do not answer,
asking a person; ``agent-tasks run`` starting the same agent with a worker in its own process;
and ``run demo --path`` answering about its folder while another worker polls the task
queue."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_tasks.activities.files import file_tools
from agent_tasks.contract import task_workflow_id
from agent_tasks.starter import ConversationHistory, EventKind, TaskStatus
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.conftest import eventually

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hello_agent"

THE_APPS_OWN = ("config", "workflows", "activities")
"""Modules an app may have beside its ``worker.py`` and ``starter.py``; in the copy, each
fails loudly when imported."""


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``examples/hello_agent`` copied out of the repository, with the app's own modules."""
    folder = tmp_path_factory.mktemp("apps") / "my_agent"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in THE_APPS_OWN:
        text = f"raise ImportError('the app's own {name}.py was imported')\n"
        (folder / f"{name}.py").write_text(text, encoding="utf-8")
    return folder


def test_the_copy_holds_the_apps_own_modules(copy: Path) -> None:
    """The copy is a folder of its own, and its decoys fail when imported."""
    assert not copy.is_relative_to(ROOT)
    assert {p.stem for p in copy.glob("*.py")} >= {"worker", "starter", *THE_APPS_OWN}
    done = subprocess.run(
        [sys.executable, "-c", "import config"], cwd=copy, capture_output=True, text=True
    )
    assert "the app's own config.py was imported" in done.stderr


async def python(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from ``cwd``, as the README runs it."""
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, *args], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "COLUMNS": "400", **(env or {})}, timeout=300,
    )  # fmt: skip


@pytest.fixture
async def example_worker(copy: Path) -> AsyncIterator[None]:
    """``python worker.py`` in the copy, until the test ends."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "worker.py", cwd=copy,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 120)
    assert b"worker polling task queue 'hello-agent'" in line, line
    try:
        yield
    finally:
        process.terminate()
        await process.wait()


async def test_the_example_answers_from_its_notes_and_from_a_person(
    example_worker: None, client: Client, copy: Path
) -> None:
    task = f"hello-{uuid.uuid4().hex[:8]}"
    noted = await python("starter.py", "What does Temporal keep?", "--task", task, cwd=copy)
    assert noted.returncode == 0, noted.stdout + noted.stderr
    expected = "From the notes: Temporal keeps every task's history: a crash loses nothing."
    assert noted.stdout.splitlines()[-1] == expected

    asked = f"{task}-asked"
    person = await python(
        "starter.py", "Who wrote this?", "--answer", "Ada", "--task", asked, cwd=copy
    )
    assert person.returncode == 0, person.stdout + person.stderr
    assert "The notes do not say. Who wrote this?\n> Ada" in person.stdout
    assert person.stdout.splitlines()[-1] == "From a person: Ada"
    history = ConversationHistory(client, "hello", "test", task_queue="hello-agent")
    view = (await history.get_task(asked)).view
    assert view is not None and view.status is TaskStatus.DONE
    events = (await history.list_events(asked, after_seq=0, limit=50)).events
    kinds = [e.kind for e in events]
    assert EventKind.INPUT_REQUEST in kinds and EventKind.TOOL_CALL in kinds
    assert view.result is not None and view.result.text == "From a person: Ada"


async def test_run_starts_a_registered_agent_with_a_worker_of_its_own(
    client: Client, project_id: str, copy: Path
) -> None:
    """`agent-tasks run hello_agent ... --import worker --with-worker` in the app's folder:
    the agent found by its module, its tools by the module's names, the question answered by
    a person through `agent-tasks input`'s update."""
    task = "cli-hello"
    history = ConversationHistory(client, project_id, "test")
    question = json.dumps({"question": "Who wrote this?"})
    args = ["run", "hello_agent", "Who wrote this?", "--input", question, "--name", task]
    args += ["--import", "worker", "--with-worker", "--project", project_id]
    running = asyncio.create_task(python("-m", "agent_tasks.cli", *args, "--json", cwd=copy))

    async def asking() -> bool:
        view = (await history.get_task(task)).view
        return view is not None and bool(view.pending_inputs)

    await eventually(asking, within=120)
    assert (await history.respond(task, "Grace")).recorded
    done = await running
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["view"]["result"]["text"] == "From a person: Grace"
    assert [s["step_name"] for s in out["steps"]] == ["search"]

    missing = await python(
        "-m", "agent_tasks.cli", "run", "nobody", "x", "--import", "agent", cwd=copy
    )
    assert missing.returncode == 2
    assert "agent 'nobody' is not registered: pass --import MODULE" in missing.stderr
    assert (await history.get_task("nobody")).view is None


async def test_run_demo_with_a_path_answers_about_that_folder(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """A worker already polls the task queue with file tools over another folder: the run's
    own worker, on a task queue of its own, answers about --path."""
    elsewhere, here = tmp_path / "elsewhere", tmp_path / "here"
    for folder, name in ((elsewhere, "wrong.txt"), (here, "right.txt")):
        folder.mkdir()
        (folder / name).write_text("a needle in a haystack\n", encoding="utf-8")
    queue = f"tests-demo-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, graph, queue, tools=file_tools(elsewhere)):
        done = await python(
            "-m", "agent_tasks.cli", "run", "demo", 'Which files mention "needle"?',
            "--path", str(here),
            "--project", project_id, "--json", cwd=ROOT, env={"TEMPORAL_TASK_QUEUE": queue},
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)["view"]["result"]["text"]
    assert "right.txt" in answer and "wrong.txt" not in answer


MCP_EXAMPLE = ROOT / "examples" / "mcp_agent"


@pytest.fixture
async def shop(tmp_path: Path) -> AsyncIterator[tuple[Path, int]]:
    """``examples/mcp_agent`` copied out of the repository, its shop served over HTTP
    (``python shop_server.py --port PORT``) and its worker running, from the copy."""
    folder = tmp_path / "my_shop"
    shutil.copytree(MCP_EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = await asyncio.create_subprocess_exec(
        sys.executable, "shop_server.py", "--port", str(port), cwd=folder
    )
    env = {**os.environ, "MCP_AGENT_NOTIFY_URL": f"http://127.0.0.1:{port}/notify"}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "worker.py", cwd=folder, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert worker.stdout is not None
    try:
        line = await asyncio.wait_for(worker.stdout.readline(), 120)
        assert b"worker polling task queue 'mcp-agent'" in line, line
        yield folder, port
    finally:
        for process in (worker, server):
            process.terminate()
            await process.wait()


async def test_the_mcp_example_orders_over_stdio_and_http(
    shop: tuple[Path, int], client: Client
) -> None:
    """The example's agent finds a price and places an order with two tools of its own MCP
    server, over stdio (a server the worker starts per call) and over streamable HTTP, and
    notifies by its HTTP tool; the shop recorded one order and one notification per task,
    each under the step's idempotency key (``{workflow id}/{step}/1``)."""
    folder, port = shop
    prices = {"espresso": 250, "tea": 200}
    tasks = {}
    for product, transport in (("espresso", "http"), ("tea", "stdio")):
        task = f"shop-{uuid.uuid4().hex[:8]}"
        url = f"http://127.0.0.1:{port}/mcp"
        done = await python(
            "starter.py", product, "--transport", transport, "--url", url, "--task", task,
            cwd=folder,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        said = f"{product}: {prices[product]} cents"
        assert done.stdout.splitlines()[-1] == f"ordered 1 x {product}; {said}"
        tasks[task] = product
    lines = [json.loads(line) for line in (folder / "shop.jsonl").read_text().splitlines()]
    expected: list[dict[str, object]] = []
    for task, product in tasks.items():
        key = f"{task_workflow_id('shop', task)}/{{}}/1"
        order = {"product": product, "quantity": 1}
        message = f"ordered 1 x {product} ({product}: {prices[product]} cents)"
        expected.append({"order": order, "key": key.format("order")})
        expected.append({"notify": {"message": message}, "key": key.format("notify")})
    assert lines == expected
    history = ConversationHistory(client, "shop", "test", task_queue="mcp-agent")
    for task in tasks:
        steps = (await history.list_steps(task)).steps
        states = {s.step_name: s.state.value for s in steps}
        assert states == {"find": "completed", "order": "completed", "notify": "completed"}
