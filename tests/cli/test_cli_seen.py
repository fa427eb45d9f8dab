"""What a person sees at the terminal: ``run`` prints each question and approval as it is
asked with the command that answers it (and no such hint for an agent that never asks);
``task list`` is a table of status, agent, created and the whole name in name order, said
in its help, with ``--json``; names to copy are never cut; failed tools count ``bash`` and
``Bash`` as one; ``--help`` shows flags without a type; an unreachable graph store fails at
once naming its address and the setting."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from agent_tasks.contract import task_workflow_id
from agent_tasks.starter import ConversationHistory
from tests.approval_tools import effects
from tests.cli.test_cli_errors import EXAMPLE, ROOT, cli
from tests.conftest import eventually
from tests.workflows.test_approval_binding import expected_digest


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def said(done: subprocess.CompletedProcess[str]) -> str:
    """A command's whole output with its wrapping undone (one space between words)."""
    return " ".join(f"{done.stdout}\n{done.stderr}".split())


async def until_answer_line(process: asyncio.subprocess.Process) -> tuple[list[str], str]:
    """Read ``agent-tasks run``'s output up to its ``answer:`` line (within 120 s): the lines
    before it, and that line; fails if the run ends before it asks."""
    assert process.stdout is not None
    seen: list[str] = []
    async with asyncio.timeout(120):
        while (
            not (line := (await process.stdout.readline()).decode()).lstrip().startswith("answer:")
        ):
            assert line, f"ended before asking: {''.join(seen)}"
            seen.append(line)
    return seen, line


async def test_run_prints_the_question_as_asked_and_the_printed_command_answers_it(
    project_id: str,
) -> None:
    schema = json.dumps({"schema": {"type": "boolean"}})
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.cli", "run", "ask_schema", "deploy it",
        "--name", "asks", "--import", "tests.agent_tools", "--with-worker", "--input", schema,
        "--project", project_id, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    seen, line = await until_answer_line(process)
    assert "question 'q': Answer?" in "".join(seen)  # the question, before any answer
    assert 'the answer\'s JSON Schema: {"type": "boolean"}' in "".join(seen)
    command = shlex.split(line.split("answer:", 1)[1])
    assert command[:2] == ["agent-tasks", "input"] and "VALUE" in command
    answered = await cli(*[("true" if word == "VALUE" else word) for word in command[1:]])
    assert answered.returncode == 0, said(answered)
    async with asyncio.timeout(120):
        rest, errors = await process.communicate()
    assert process.returncode == 0, rest.decode() + errors.decode()
    assert f"task 'asks' in project '{project_id}': done" in rest.decode()


async def test_run_with_worker_tells_the_page_of_its_events_through_the_broker(
    project_id: str,
) -> None:
    """A newcomer's walkthrough: the inbox showed a question asked by ``run --with-worker``
    about 30 s late (its next read of the tasks), since that worker had no broker and sent the
    page no word. Its mirror now publishes each task's ``written`` word on the project's
    channel, as ``agent-tasks worker`` and ``serve`` do."""
    from redis.asyncio import Redis

    from agent_tasks.broker import WrittenMessage, project_channel
    from agent_tasks.config import Settings

    redis = Redis.from_url(Settings().broker_url)
    pubsub = redis.pubsub()
    await pubsub.subscribe(project_channel(project_id))
    schema = json.dumps({"schema": {"type": "boolean"}})
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.cli", "run", "ask_schema", "deploy it",
        "--name", "heard", "--import", "tests.agent_tools", "--with-worker", "--input", schema,
        "--project", project_id, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    words: list[WrittenMessage] = []
    try:
        async with asyncio.timeout(120):
            while not any(w.task == "heard" and w.status == "awaiting_input" for w in words):
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None:
                    words.append(WrittenMessage.model_validate_json(message["data"]))
    finally:
        process.kill()
        await process.wait()
        await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        await redis.aclose()
    seqs = [w.seq for w in words if w.task == "heard"]
    assert seqs == sorted(seqs) and seqs[0] >= 1, words


async def test_run_prints_the_approval_as_asked_and_the_printed_command_answers_it(
    project_id: str, tmp_path: Path
) -> None:
    """An approval request is printed as it is asked (the tool and what the call does) with
    ``agent-tasks approve ... --accept --digest D``, D the first 12 characters of the call's
    digest (computed here); that command, run as printed, accepts the call: it runs once."""
    log = tmp_path / "mail.log"
    arguments = {"log": str(log), "to": "ops@example.com", "subject": "deploy"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.cli", "run", "mail_once", "mail ops",
        "--name", "mails", "--import", "tests.approval_tools", "--with-worker",
        "--input", json.dumps({"args": arguments}), "--project", project_id, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    seen, line = await until_answer_line(process)
    assert "may it call send_mail? Sends **deploy** to `ops@example.com`" in "".join(seen)
    assert effects(log) == []  # asked before it ran
    words = shlex.split(line.split("answer:", 1)[1].split("(or", 1)[0])
    assert words[:5] == ["agent-tasks", "approve", "mails", words[3], "--accept"]
    assert words[3].startswith("approve")  # the request's id, as the task named it
    key = f"{task_workflow_id(project_id, 'mails')}/mail/1"
    digest = expected_digest("send_mail", arguments, key)
    assert words[5:] == ["--digest", digest[:12], "--project", project_id]
    answered = await cli(*words[1:])
    assert answered.returncode == 0, said(answered)
    async with asyncio.timeout(120):
        rest, errors = await process.communicate()
    assert process.returncode == 0, rest.decode() + errors.decode()
    assert f"task 'mails' in project '{project_id}': done" in rest.decode()
    assert effects(log) == [f"{key} mail ops@example.com deploy x1"]


async def test_run_of_an_agent_that_never_asks_prints_no_answer_hint(project_id: str) -> None:
    done = await cli(
        "run", "counter", "count", "--input", '{"rounds": 1}', "--import", "tests.agent_tools",
        "--with-worker", "--project", project_id,
    )  # fmt: skip
    assert done.returncode == 0, said(done)
    assert "agent-tasks input" not in done.stdout and "question" not in done.stdout
    assert ": done" in done.stdout


async def test_task_list_is_a_table_in_name_order_with_whole_names_and_json(
    history: ConversationHistory, task_queue: str
) -> None:
    project = history.project_id
    long = "a-" + "very-long-name-" * 8 + "end"
    for name, agent in (("b-task", "bot-b"), ("A-task", "bot-a"), (long, "bot-l")):
        history.agent_id = agent
        assert (await history.create_task(name, f"goal of {name}")).recorded

    async def listed() -> bool:
        return len(await history.find_tasks(limit=10)) == 3

    await eventually(listed)
    plain = await cli("task", "list", "--project", project, queue=task_queue)
    assert plain.returncode == 0, said(plain)
    lines = plain.stdout.splitlines()
    header = next(line for line in lines if "status" in line)
    assert re.findall(r"\w+", header) == ["status", "agent", "created", "name"]
    rows = [line for line in lines if "task" in line or "end" in line]
    order = ["A-task", long, "b-task"]  # code point order: capitals first
    assert [next(n for n in order if n in row) for row in rows] == order  # each name whole
    assert all("open" in row for row in rows) and "bot-l" in rows[1]
    assert "…" not in plain.stdout and "..." not in plain.stdout
    as_json = await cli("task", "list", "--json", "--limit", "2", "--project", project)
    assert [row["name"] for row in json.loads(as_json.stdout)] == order[:2]
    more = await cli("task", "list", "--limit", "2", "--project", project)
    assert f"more: --after {long}" in more.stdout  # the next page's option, to copy
    helped = await cli("task", "list", "--help")
    assert "in name order" in said(helped)


async def test_the_import_table_shows_each_task_name_whole(
    project_id: str, task_queue: str, tmp_path: Path
) -> None:
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / f"{'a-long-trajectory-name-' * 5}end.traj.json").write_bytes(EXAMPLE.read_bytes())
    imported = await cli("import", str(folder), "--project", project_id, queue=task_queue)
    assert imported.returncode == 0, said(imported)
    listed = await cli("task", "list", "--json", "--project", project_id, queue=task_queue)
    (task,) = [row["name"] for row in json.loads(listed.stdout)]
    assert len(task) > 40 and task in imported.stdout  # whole, on one line
    assert "…" not in imported.stdout


async def test_failed_tools_count_the_spellings_of_one_tool_as_one_row(
    history: ConversationHistory, task_queue: str
) -> None:
    for task, tool in (("t1", "bash"), ("t2", "Bash"), ("t3", "bash")):
        assert (await history.create_task(task, "g")).recorded
        result = await history.record_event(task, "tool_result", "exit 1", name=tool)
        assert result.recorded and result.first_seq is not None
        failed = await history.set_step(task, "s1", "failed", kind="tool",
            result_event_seq=result.first_seq)  # fmt: skip
        assert failed.recorded

    async def counted() -> bool:
        return sum(r.failed for r in await history.failed_tool_calls()) == 3

    await eventually(counted)
    done = await cli("graph", "failed-tools", "--project", history.project_id, queue=task_queue)
    assert done.returncode == 0, said(done)
    (row,) = [line for line in done.stdout.splitlines() if "bash" in line.lower()]
    assert re.findall(r"[\w,]+", row) == ["bash", "Bash,", "bash", "3", "3"]
    as_json = await cli("graph", "failed-tools", "--json", "--project", history.project_id)
    assert json.loads(as_json.stdout) == [
        {"tool": "bash", "spellings": ["Bash", "bash"], "failed": 3, "tasks": 3}
    ]


async def test_help_shows_flags_as_flags() -> None:
    for args in (["run", "--help"], ["task", "list", "--help"], ["--help"]):
        done = await cli(*args)
        assert done.returncode == 0
        assert "<bool>" not in done.stdout, done.stdout
        assert "--help" in done.stdout
    assert "--with-worker " in (await cli("run", "--help")).stdout


async def test_an_unreachable_graph_store_fails_at_once_naming_its_address_and_setting(
    task_queue: str,
) -> None:
    port = closed_port()
    neo4j = await cli("task", "list", queue=task_queue, NEO4J_URI=f"bolt://127.0.0.1:{port}")
    assert neo4j.returncode == 3, said(neo4j)
    assert said(neo4j).startswith("unavailable: Neo4j unavailable:")
    assert f"(the graph store: Neo4j at bolt://127.0.0.1:{port}, NEO4J_URI)" in said(neo4j)
    assert "retried" not in said(neo4j)  # no retry of the driver's, no lines of it
    falkor = await cli("task", "list", queue=task_queue, AGENT_TASKS_GRAPH="falkordb",
        AGENT_TASKS_FALKORDB_URL=f"falkor://user:secret@127.0.0.1:{port}")  # fmt: skip
    assert falkor.returncode == 3, said(falkor)
    assert f"FalkorDB at 127.0.0.1:{port}, AGENT_TASKS_FALKORDB_URL" in said(falkor)
    assert "secret" not in said(falkor)


async def test_page_names_the_command_that_makes_a_key_of_its_project(project_id: str) -> None:
    """``page`` (the last line of ``./run main``) said "a key of agent-tasks keys create",
    which refuses to run without ``--project``; it names the project, and the command as
    printed makes a key of it."""
    shown = await cli("page", "--project", project_id)
    assert shown.returncode == 0, said(shown)
    command = shlex.split(said(shown).split("sign in with a key of ", 1)[1].rstrip(")"))
    assert command[:3] == ["agent-tasks", "keys", "create"]
    made = await cli(*command[1:])
    assert made.returncode == 0, said(made)
    listed = await cli("keys", "list", "--project", project_id)
    assert listed.returncode == 0 and f"{project_id}  page" in listed.stdout, said(listed)


def table_cells(output: str, first: str) -> dict[str, str]:
    """The cells of the row of a rich table in ``output`` whose cells include ``first``, by
    the header's column names."""
    lines = output.splitlines()
    header = next(line for line in lines if "┃" in line)
    names = [cell.strip() for cell in header.strip().strip("┃").split("┃")]
    row = next(line for line in lines if "│" in line and first in line)
    cells = [cell.strip() for cell in row.strip().strip("│").split("│")]
    return dict(zip(names, cells, strict=True))


async def test_the_import_table_says_each_tasks_status_as_task_list_does(
    project_id: str, task_queue: str, tmp_path: Path
) -> None:
    """The import table's status column said ``created`` (what the import did) for a task
    that ``task list`` shows ``done``: its status is the task's, as ``task list`` shows it,
    and what the import did is in its own column, ``import``."""
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "run.traj.json").write_bytes(EXAMPLE.read_bytes())
    listed_status = ""
    for attempt, done_by in (("first", "created"), ("again", "already imported")):
        imported = await cli("import", str(folder), "--project", project_id, queue=task_queue)
        assert imported.returncode == 0, said(imported)
        listed = await cli("task", "list", "--json", "--project", project_id, queue=task_queue)
        (row,) = json.loads(listed.stdout)
        listed_status = row["status"]
        cells = table_cells(imported.stdout, row["name"])
        assert (cells["status"], cells["import"]) == (row["status"], done_by), (attempt, cells)
    assert listed_status in ("done", "failed")
