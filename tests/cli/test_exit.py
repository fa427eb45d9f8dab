"""Process exit: an app that connects, writes and exits ends cleanly, every time, in a process
of its own (``async with ConversationHistory(...)``: ``close`` waits for the Temporal SDK's
runtime threads to leave Python), and a create_task that times out leaves no unretrieved
future behind."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

APP = """
import asyncio, sys
from agent_tasks import starter

async def main() -> None:
    project, queue, timeout_s, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    client = await starter.connect()
    async with starter.ConversationHistory(
        client, project_id=project, agent_id="exit-app", task_queue=queue, timeout_s=timeout_s
    ) as history:
        try:
            created = await history.create_task(name, "exit cleanly")
        except starter.TaskServiceUnavailable:
            print("unavailable")
            return
        written = await history.record_event(name, "message", "bye")
        print(created.recorded, written.seq)

asyncio.run(main())
"""
"""The app: connect, create a task, write an event, leave the ``async with``, exit."""

RUNS = 12
"""Runs of the app; before the fix 3 of 16 such runs aborted at interpreter exit."""


async def run_app(project: str, queue: str, timeout_s: float, name: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        APP,
        project,
        queue,
        str(timeout_s),
        name,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_an_app_that_writes_and_exits_ends_cleanly_every_time(
    task_queue: str, project_id: str
) -> None:
    for batch in range(RUNS // 4):
        runs = await asyncio.gather(
            *(run_app(project_id, task_queue, 30, f"t-{batch}-{i}") for i in range(4))
        )
        for returncode, out, err in runs:
            assert (returncode, out.strip(), err) == (0, "True 1", ""), (returncode, out, err)


async def test_a_create_task_that_times_out_leaves_no_unretrieved_future(project_id: str) -> None:
    """No worker polls this task queue, so the update-with-start gets no answer within 0.5 s:
    the call raises ``TaskServiceUnavailable`` and the process exits with nothing on stderr."""
    no_worker = f"nobody-{uuid.uuid4().hex[:8]}"
    for returncode, out, err in await asyncio.gather(
        *(run_app(project_id, no_worker, 0.5, f"t-{i}") for i in range(2))
    ):
        assert (returncode, out.strip(), err) == (0, "unavailable", ""), (returncode, out, err)
