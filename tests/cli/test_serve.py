"""``agent-tasks keys`` and ``agent-tasks serve`` as a person runs them: the CLI in
subprocesses against the local stack."""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
import sys
from pathlib import Path

import httpx

from agent_tasks.devstack import free_port
from tests.servers import answering

ROOT = Path(__file__).resolve().parents[2]


async def cli(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.cli", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def test_keys_create_list_revoke_and_serve(project_id: str) -> None:
    code, out = await cli("keys", "create", "--project", project_id, "--name", "ci")
    assert code == 0, out
    key = out.strip().splitlines()[-1]
    assert key.startswith("atk_")
    code, listed = await cli("keys", "list", "--project", project_id)
    assert code == 0 and key not in listed  # ids and names, never the key
    key_id = key.split("_")[1]
    assert listed.split()[:3] == [key_id, project_id, "ci"]

    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_tasks.cli", "serve", "--port", str(port), cwd=ROOT,
        env={**os.environ}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            await answering(http)
            mine = {"Authorization": f"Bearer {key}"}
            assert (await http.get("/tasks", headers=mine)).json() == {
                "tasks": [],
                "next_after_name": None,
            }
            code, out = await cli("keys", "revoke", key_id)
            assert code == 0 and "revoked" in out
            assert (await http.get("/tasks", headers=mine)).status_code == 401
    finally:
        server.send_signal(signal.SIGINT)
        logs, _ = await asyncio.wait_for(server.communicate(), 30)
    assert key not in logs.decode()  # the server's log never shows a key
    assert "GET /tasks HTTP/1.1" in logs.decode()
    code, out = await cli("keys", "revoke", "0000000000000000")
    assert code == 1


async def test_keys_create_names_the_person_who_holds_the_key(project_id: str) -> None:
    """``keys create --person`` stores who holds the key (its writes' author, one approver
    however many keys); without it, the login name of whoever runs the command; a blank
    person is refused (exit 2) and no key is made."""
    code, out = await cli(
        "keys", "create", "--project", project_id, "--name", "laptop", "--person", "Ann Lee"
    )
    assert code == 0 and "held by 'Ann Lee'" in out, out
    code, out = await cli("keys", "create", "--project", project_id, "--name", "ci")
    assert code == 0 and f"held by {getpass.getuser()!r}" in out, out
    code, out = await cli("keys", "create", "--project", project_id, "--person", "  ")
    assert code == 2 and "invalid arguments" in out, out
    code, listed = await cli("keys", "list", "--project", project_id)
    rows = sorted(line.split("  ")[2:4] for line in listed.strip().splitlines())
    assert rows == sorted([["laptop", "held by Ann Lee"], ["ci", f"held by {getpass.getuser()}"]])
