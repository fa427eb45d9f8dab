"""The live inbox's whole reads (docs/page.md, "The inbox"): without a broker the stream reads
the whole inbox (every ``STREAM_POLL_S``), and with one it reads it every ``INBOX_REFRESH_S``
too, so a request whose word never came (its worker publishes none) still reaches it."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import JsonValue

from agent_tasks.contract import AgentSpec, TaskStatus
from agent_tasks.server import inbox
from agent_tasks.server.app import create_app
from agent_tasks.server.inbox import INBOX_REFRESH_S
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker
from tests.approval_tools import approval_spec, effects, goal
from tests.conftest import eventually, mirrored
from tests.server.conftest import KEEPALIVE_S, Api, Project, SseReader
from tests.servers import served
from tests.workflows.test_approvals import asked

NUMBER: dict[str, JsonValue] = {"type": "integer", "minimum": 1}


async def watch_inbox(http: httpx.AsyncClient, history: ConversationHistory, within: float) -> None:
    """Open ``/inbox/stream`` over one open request ``old``/``q1``; ask ``q2`` in a new task
    and answer ``q1`` through ``history``: the stream sends ``ask`` for the new one and
    ``closed`` for the answered one within ``within`` seconds each."""
    assert (await history.create_task("old", "goal of old")).recorded
    assert (await history.request_input("old", "q1", "Old question?", NUMBER)).recorded
    await mirrored(history, "old")
    async with http.stream("GET", "/inbox/stream") as response:
        assert response.status_code == 200
        reader = SseReader(response)
        await reader.connected()
        start = await reader.until("ready")
        assert [e.event for e in start] == ["ask", "ready"]
        assert '"input_id":"q1"' in start[0].data
        assert (await history.create_task("new", "goal of new")).recorded
        assert (await history.request_input("new", "q2", "New question?", NUMBER)).recorded
        fresh = await reader.until("ask", within=within)
        assert [e.event for e in fresh] == ["ask"]
        assert '"task":"new"' in fresh[0].data and '"input_id":"q2"' in fresh[0].data
        assert (await history.respond("old", 2, input_id="q1")).recorded
        closed = await reader.until("closed", within=within)
        assert [e.event for e in closed] == ["closed"]
        assert closed[0].data == '{"task": "old", "input_id": "q1"}'


@pytest.fixture
async def no_broker(api: Api) -> AsyncIterator[str]:
    """The API served again, with no broker (its worker, ``api.queue``'s, still has one)."""
    services = api.services
    unbrokered = Services(services.settings, services.client, services.graph, None)
    async with served(create_app(unbrokered, keepalive_s=KEEPALIVE_S)) as url:
        yield url


async def test_without_a_broker_the_inbox_stream_reads_the_whole_inbox(
    no_broker: str, project: Project
) -> None:
    headers = project.headers
    async with httpx.AsyncClient(base_url=no_broker, headers=headers, timeout=30) as http:
        await watch_inbox(http, project.history, within=60)


async def test_with_a_broker_a_request_whose_word_never_came_is_read_in_the_whole_read(
    api: Api, http: httpx.AsyncClient, project_id: str
) -> None:
    """Tasks on a worker with no broker: their mirror sends no word on the project's channel,
    so the stream (which has a broker) learns of them only by its whole read, every
    ``INBOX_REFRESH_S``."""
    services = api.services
    assert services.graph is not None
    queue = f"wordless-{uuid.uuid4().hex[:8]}"
    async with build_worker(services.client, services.graph, queue):
        history = ConversationHistory(
            services.client, project_id, "tests", task_queue=queue, graph=services.graph
        )
        await watch_inbox(http, history, within=INBOX_REFRESH_S + 30)


async def test_a_request_closed_by_a_cancel_leaves_the_inbox_and_its_stream(
    api: Api, http: httpx.AsyncClient, project: Project, tmp_path: Path
) -> None:
    """page.md: a closed request (not only an answered one) is gone from the next read, and
    the live inbox sends ``closed`` for it: an approval whose task is cancelled while it
    waits."""
    log = tmp_path / "mail.log"
    call = ("send_mail", {"log": str(log), "to": "ops@example.com", "subject": "hello"})
    async with http.stream("GET", "/inbox/stream") as response:
        reader = SseReader(response)
        await reader.connected()
        assert [e.event for e in await reader.until("ready")] == ["ready"]
        created = await project.history.create_task("mail", goal(call), agent=approval_spec())
        assert created.recorded
        (fresh,) = await reader.until("ask", within=60)
        item = json.loads(fresh.data)
        assert item["task"] == "mail" and item["approval"]["tool"] == "send_mail"
        assert (await project.history.cancel_task("mail")).recorded
        closed = await reader.until("closed", within=60)
        assert [e.event for e in closed] == ["closed"]
        assert json.loads(closed[0].data) == {"task": "mail", "input_id": item["input_id"]}
    final = await project.history.wait_task("mail")
    assert final is not None and final.status is TaskStatus.CANCELLED
    assert (await http.get("/inbox")).json()["items"] == []
    assert (await http.get("/tasks/mail/inputs")).json()["items"] == []
    assert effects(log) == []


async def test_the_inbox_lists_an_approval_with_its_call_and_a_question_with_its_deadline(
    api: Api, http: httpx.AsyncClient, project: Project, tmp_path: Path
) -> None:
    """page.md: ``GET /inbox`` gives each item's task, the call of an approval (tool,
    arguments, description as Markdown and as HTML, the key it will run with), when it was
    asked, its deadline and its answer's JSON Schema, newest first."""
    log = tmp_path / "mail.log"
    call = ("send_mail", {"log": str(log), "to": "ops@example.com", "subject": "hello"})
    history = project.history
    assert (await history.create_task("mail", goal(call), agent=approval_spec())).recorded
    await asked(history, "mail")
    timed = AgentSpec(name="ask_timeout")
    assert (await history.create_task("timed", "wait a day", agent=timed)).recorded

    async def both() -> bool:
        return len((await http.get("/inbox")).json()["items"]) == 2

    await eventually(both, within=60)
    question, approval = (await http.get("/inbox")).json()["items"]
    assert (question["task"], question["input_id"], question["prompt"]) == (
        "timed",
        "wait",
        "Anyone?",
    )
    asked_at = datetime.fromisoformat(question["asked_at"])
    assert datetime.fromisoformat(question["deadline"]) - asked_at == timedelta(hours=24)
    assert question["approval"] is None
    assert approval["task"] == "mail" and approval["deadline"] is None
    assert datetime.fromisoformat(approval["asked_at"]) <= asked_at
    item = approval["approval"]
    assert item["tool"] == "send_mail"
    assert json.loads(item["arguments"]) == call[1]
    assert item["description"] == "Sends **hello** to `ops@example.com` (1 copy)."
    assert "<strong>hello</strong>" in item["description_html"]
    view = (await history.get_task("mail")).view
    assert view is not None
    assert item["idempotency_key"] == f"{view.workflow_id}/{item['step_name']}/1"
    assert approval["input_id"] == f"approve-{item['call_seq']}"
    assert set(approval["json_schema"]["properties"]["type"]["enum"]) == {
        "accept",
        "edit",
        "answer",
        "ignore",
    }


async def test_the_inbox_reads_at_most_inbox_tasks_tasks_the_first_by_name(
    http: httpx.AsyncClient, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """page.md: Neo4j names the tasks with an open request, at most ``INBOX_TASKS`` (200), the
    first by name. With the bound set to 3 (the same code path; 201 tasks would only make the
    test slow): of four tasks asking, ``GET /inbox`` lists the first three by name, newest
    first; once one of them is answered the fourth comes in."""
    monkeypatch.setattr(inbox, "INBOX_TASKS", 3)
    history = project.history
    names = ["t-d", "t-b", "t-a", "t-c"]  # created (and asked) in this order
    for name in names:
        assert (await history.create_task(name, f"goal of {name}")).recorded
        assert (await history.request_input(name, "q", f"{name}?", NUMBER)).recorded
    for name in names:
        await mirrored(history, name)

    async def listed() -> list[str]:
        answer = await http.get("/inbox")
        assert answer.status_code == 200, answer.text
        return [item["task"] for item in answer.json()["items"]]

    assert await listed() == ["t-c", "t-a", "t-b"]  # t-a..t-c by name; newest asked first
    assert (await history.respond("t-a", 2, input_id="q")).recorded
    await mirrored(history, "t-a")
    assert await listed() == ["t-c", "t-b", "t-d"]


async def test_a_deleted_tasks_request_leaves_the_inbox_and_its_stream(
    http: httpx.AsyncClient, project: Project
) -> None:
    """Agent Inbox's kind (langchain-ai/agent-inbox-langgraph-example#1: items the inbox
    showed could no longer be acted on): a task deleted while its request is open leaves
    ``GET /inbox``, and the live inbox sends ``closed`` for its request."""
    history = project.history
    async with http.stream("GET", "/inbox/stream") as response:
        reader = SseReader(response)
        await reader.connected()
        assert [e.event for e in await reader.until("ready")] == ["ready"]
        assert (await history.create_task("gone", "goal of gone")).recorded
        assert (await history.request_input("gone", "q", "Still there?", NUMBER)).recorded
        (fresh,) = await reader.until("ask", within=60)
        assert json.loads(fresh.data)["task"] == "gone"
        await mirrored(history, "gone")
        deleted = await http.delete("/tasks/gone")
        assert deleted.status_code in (200, 204), deleted.text
        closed = await reader.until("closed", within=INBOX_REFRESH_S + 10)
        assert [json.loads(e.data) for e in closed] == [{"task": "gone", "input_id": "q"}]
    assert (await http.get("/inbox")).json()["items"] == []
