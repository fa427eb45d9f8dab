"""``examples/hello_agent`` end to end, as its README runs it: its own worker (a process with
the plugins, on its own task queue), its starter answering from the notes and, when the notes
do not answer, asking a person; ``agent-tasks run`` starting the same agent with a worker in
its own process; and ``run demo --path`` answering about its folder while another worker polls
the task queue."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.files import file_tools
from starter import ConversationHistory, EventKind, TaskStatus
from taskgraph.graph import TaskGraph
from tests.conftest import eventually
from worker import build_worker

ROOT = Path(__file__).resolve().parents[1]


async def python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the repository's root, as the README runs it."""
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "COLUMNS": "400", **(env or {})}, timeout=300,
    )  # fmt: skip


@pytest.fixture
async def example_worker() -> AsyncIterator[None]:
    """``python -m examples.hello_agent.worker``, until the test ends."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.hello_agent.worker", cwd=ROOT,
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
    example_worker: None, client: Client
) -> None:
    task = f"hello-{uuid.uuid4().hex[:8]}"
    noted = await python(
        "-m", "examples.hello_agent.starter", "What does Temporal keep?", "--task", task
    )
    assert noted.returncode == 0, noted.stdout + noted.stderr
    expected = "From the notes: Temporal keeps every task's history: a crash loses nothing."
    assert noted.stdout.splitlines()[-1] == expected

    asked = f"{task}-asked"
    person = await python(
        "-m", "examples.hello_agent.starter", "Who wrote this?", "--answer", "Ada", "--task", asked
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
    client: Client, project_id: str
) -> None:
    """`agent-tasks run hello_agent ... --import examples.hello_agent.worker --with-worker`:
    the agent found by its module, its tools by the module's names, the question answered by
    a person through `agent-tasks input`'s update."""
    task = "cli-hello"
    history = ConversationHistory(client, project_id, "test")
    question = json.dumps({"question": "Who wrote this?"})
    args = ["run", "hello_agent", "Who wrote this?", "--input", question, "--name", task]
    args += ["--import", "examples.hello_agent.worker", "--with-worker", "--project", project_id]
    running = asyncio.create_task(python("-m", "starter", *args, "--json"))

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
        "-m", "starter", "run", "nobody", "x", "--import", "examples.hello_agent.agent"
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
            "-m", "starter", "run", "demo", 'Which files mention "needle"?', "--path", str(here),
            "--project", project_id, "--json", env={"TEMPORAL_TASK_QUEUE": queue},
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)["view"]["result"]["text"]
    assert "right.txt" in answer and "wrong.txt" not in answer
