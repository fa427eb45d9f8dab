"""The CLI's refusals name what to fix, and leave nothing stored: a bad --project names the
option and the value; an unknown task is exit 1 with task_not_found; importing a folder with
no trajectory is exit 1; a cut payload is said in the plain output of a write and of an
import, which does not then say "verified" alone; an unreachable Temporal is named with the
task queue."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client

from agent_tasks.starter import ConversationHistory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (
    ROOT
    / "examples/trajectories/mini-swe-agent/mswea__deepseek-chat__django__django-12184.traj.json"
)


async def cli(*args: str, queue: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m agent_tasks.cli ARGS``, wide enough that no message is wrapped."""
    extra = {"COLUMNS": "400", **({"TEMPORAL_TASK_QUEUE": queue} if queue else {}), **env}
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "agent_tasks.cli", *args], capture_output=True,
        text=True, cwd=ROOT, env={**os.environ, **extra}, timeout=300,
    )  # fmt: skip


async def stored(client: Client, project_id: str) -> int:
    return (await client.count_workflows(f"ProjectId = '{project_id}'")).count


async def test_a_bad_project_names_the_option_and_the_value(client: Client) -> None:
    done = await cli("task", "create", "t1", "--goal", "g", "--project", "bad project!")
    assert done.returncode == 2
    assert "Invalid value for --project: 'bad project!' is not a project id" in done.stderr
    assert await stored(client, "bad project!") == 0
    from_env = await cli("task", "list", AGENT_TASKS_PROJECT="-dash")
    assert from_env.returncode == 2 and "'-dash' is not a project id" in from_env.stderr


async def test_an_unknown_task_is_exit_1_everywhere(project_id: str, task_queue: str) -> None:
    for args in (["tree", "no-such-task"], ["task", "show", "no-such-task"]):
        plain = await cli(*args, "--project", project_id, queue=task_queue)
        assert plain.returncode == 1, plain.stdout + plain.stderr
        assert "task_not_found: no task 'no-such-task'" in plain.stdout
        assert f"in project '{project_id}' (--project" in " ".join(plain.stdout.split())
        as_json = await cli(*args, "--project", project_id, "--json", queue=task_queue)
        assert as_json.returncode == 1
        assert json.loads(as_json.stdout)["error"] == "task_not_found"


async def test_importing_a_folder_without_a_trajectory_is_exit_1(
    client: Client, project_id: str, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("not a trajectory", encoding="utf-8")
    done = await cli("import", str(tmp_path), "--project", project_id, queue=task_queue)
    assert done.returncode == 1
    assert f"no_trajectory: no trajectory file in {tmp_path}" in done.stdout
    assert await stored(client, project_id) == 0


async def test_a_cut_payload_is_said_in_the_plain_output(
    history: ConversationHistory, task_queue: str, tmp_path: Path
) -> None:
    project = history.project_id
    await history.create_task("big", "g")
    big = tmp_path / "big.txt"
    big.write_text("x" * 5_000_000, encoding="utf-8")
    args = ["task", "event", "big", "--kind", "message", "--payload-file", str(big)]
    written = await cli(*args, "--project", project, queue=task_queue)
    assert written.returncode == 0, written.stdout + written.stderr
    assert "payload cut: 32,000 of 5,000,000 characters kept" in written.stdout
    event = (await history.list_events("big", after_seq=0, limit=10)).events[-1]
    assert (len(event.payload), event.full_length) == (32_000, 5_000_000)

    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data["messages"][1]["content"] = "y" * 100_000
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "cut.traj.json").write_text(json.dumps(data), encoding="utf-8")
    imported = await cli(
        "import", str(tmp_path / "cut"), "--verify", "--project", project, queue=task_queue
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "payloads cut: 1 events of 1 runs kept the first 32,000 characters" in imported.stdout
    said = " ".join(imported.stdout.split())
    assert "the 1 cut payloads above keep only their first 32,000 characters" in said
    assert "checked by those, their full length and SHA-256" in said
    assert "not whole" not in said  # the unexplained words of before


async def test_an_unreachable_temporal_is_named_with_where_its_address_comes_from() -> None:
    """A refused connection says the address, the variable that sets it and how the local
    stack starts; not the task queue, which a connection never reached (a newcomer read the
    queue's name as the cause)."""
    done = await cli("task", "show", "t1", queue="my-queue", TEMPORAL_ADDRESS="127.0.0.1:1")
    said = " ".join(done.stdout.split())
    assert done.returncode == 3
    assert "cannot reach Temporal at" in said and "127.0.0.1:1" in said
    assert "TEMPORAL_ADDRESS" in said and "agent-tasks dev up" in said
    assert "my-queue" not in said


async def test_every_refused_option_is_named_with_its_value(
    client: Client, project_id: str, task_queue: str
) -> None:
    """Typer's own range check names only the option; pydantic's errors name an internal
    argument: the CLI's refusals name the option and the value, and store nothing."""
    bad = "Invalid value for"
    cases = [
        (["task", "list", "--limit", "0"], f"{bad} '--limit': 0 is not from 1 to 200"),
        (["task", "events", "t", "--after", "-2"], f"{bad} '--after': -2 is not at least 0"),
        (["tree", "t", "--depth", "-1"], "--depth -1: Input should be greater than or equal to 0"),
        (["task", "create", "t", "--goal", "g", "--agent", ""], "--agent '': String should have"),
        (["graph", "events", "--since", "soon"], f"{bad} '--since': 'soon' is not an ISO time"),
        (["run", "demo", "g", "--input", "[1]"], f"{bad} --input: '[1]' is not a JSON object"),
    ]
    for args, said in cases:
        done = await cli(*args, "--project", project_id, queue=task_queue)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert said in done.stdout + done.stderr, (args, done.stdout, done.stderr)
    assert await stored(client, project_id) == 0
