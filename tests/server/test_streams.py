"""The live streams (``server.streams``) against the real stack: uvicorn on a free port,
the worker publishing tokens through the broker, httpx reading the SSE wire format."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from agent_tasks.contract import Event, EventKind, TaskStatus
from agent_tasks.server import GRACEFUL_TIMEOUT_S, KEEPALIVE_S
from agent_tasks.server.grants import GRANT_CHECK_S
from agent_tasks.server.sessions import Cursor, cursor_id, parse_cursor, start_plan
from agent_tasks.server.streams import (
    FEED_EVENTS,
    SESSION_TASKS,
    STREAM_POLL_S,
    TOKENS_QUEUED,
)
from agent_tasks.starter.tasks import TaskEmitter, TaskManager
from agent_tasks.taskgraph.models import TaskRow
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from tests.conftest import eventually, mirrored, payload_texts
from tests.server.conftest import Api, Project, Sse, SseReader
from tests.stream_agents import TALKER, TURNS
from tests.tcp_proxy import TcpProxy
from tests.test_docs import ROOT, python_blocks

MARK = "ephemeral-token-7f3a9c"
"""A token no turn holds: sent to the stream, it must be found nowhere else."""


def updates(seen: list[Sse]) -> list[Event]:
    return [Event.model_validate_json(s.data) for s in seen if s.event == "update"]


async def test_a_stream_from_the_first_event_to_done_with_tokens_between(
    api: Api, project: Project, http: httpx.AsyncClient
) -> None:
    created = await http.post(
        "/tasks",
        json={"name": "talk", "goal": "What is Redis?", "agent": TALKER.model_dump(mode="json")},
    )
    assert created.status_code == 201, created.text
    seen: list[Sse] = []
    async with http.stream("GET", "/tasks/talk/stream") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(response)
        await reader.connected()
        while not any(e.kind is EventKind.INPUT_REQUEST for e in updates(seen)):
            seen.append(await reader.next())
        # a token from app code (TaskEmitter), published as the model's are: never stored
        manager = TaskManager(project.history, broker=api.services.broker)
        await TaskEmitter(manager, "talk").emit_token(MARK)
        answered = await http.post("/tasks/talk/input", json={"answer": "go"})
        assert answered.status_code == 200, answered.text
        seen += await reader.until("done", "failed", "cancelled")

    assert seen[-1].event == "done", seen[-1]
    final = json.loads(seen[-1].data)
    assert final["status"] == "done" and final["result"]["text"] == TURNS[1].content

    # every persisted event once, in seq order, its seq the SSE id; the same as the ledger's
    streamed = updates(seen)
    assert [int(s.id or 0) for s in seen if s.event == "update"] == [e.seq for e in streamed]
    assert [e.seq for e in streamed] == list(range(1, final["last_seq"] + 1))
    ledger = await project.history.list_events("talk", limit=200)
    assert streamed == ledger.events

    # tokens: each model call's tokens, in order, right after the event the model read up to
    # and before the assistant message that records the whole turn
    tokens = [(i, json.loads(s.data)) for i, s in enumerate(seen) if s.event == "token"]
    assert [t["text"] for _, t in tokens if t["after_seq"] is None] == [MARK]
    for turn in TURNS:
        calls = [
            (i, t) for i, t in tokens if t["after_seq"] is not None and t["text"] in turn.content
        ]
        texts = [t for _, t in calls if _message_after(seen, t["after_seq"]) == turn.content]
        assert "".join(t["text"] for t in texts) == turn.content
        assert [t["index"] for t in texts] == list(range(len(texts)))
        for position, token in [(i, t) for i, t in calls if t in texts]:
            before = [u for u in seen[:position] if u.event == "update"]
            after = [u for u in seen[position:] if u.event == "update"]
            assert int(before[-1].id or 0) == token["after_seq"], (
                position,
                token,
                [u.id for u in before],
            )
            message = Event.model_validate_json(after[0].data)
            assert message.kind is EventKind.MESSAGE and message.payload == turn.content

    # tokens are in neither the workflow history nor Neo4j
    handle = project.history.client.get_workflow_handle(project.history.workflow_id("talk"))
    history_text = payload_texts((await handle.fetch_history()).to_json())
    assert MARK not in history_text
    graph = api.services.graph
    assert isinstance(graph, TaskGraph)  # the query below is Neo4j's
    await mirrored(project.history, "talk")
    found = (  # every node of the project's tasks and one hop from them
        "MATCH (:Task {project_id: $p})-[*0..1]-(n) WITH DISTINCT n WHERE any(k IN keys(n) WHERE"
        " (n[k] IS :: STRING AND n[k] CONTAINS $m)"
        " OR (n[k] IS :: LIST<STRING NOT NULL> AND any(x IN n[k] WHERE x CONTAINS $m)))"
        " RETURN count(n) AS n"
    )
    # the search finds text that is there: the answer in its message event and the task's result
    for text, count in ((MARK, 0), ("Redis is an in-memory", 2)):
        records, _, _ = await graph.driver.execute_query(
            found, p=project.project_id, m=text, database_=graph.database
        )
        assert records[0]["n"] == count, text


def _message_after(seen: list[Sse], seq: int) -> str | None:
    """The payload of the update after seq ``seq`` in the stream."""
    for item in seen:
        if item.event == "update" and int(item.id or 0) == seq + 1:
            return str(Event.model_validate_json(item.data).payload)
    return None


async def _record(http: httpx.AsyncClient, task: str, *texts: str) -> None:
    events = [{"kind": "message", "role": "user", "payload": text} for text in texts]
    written = await http.post(f"/tasks/{task}/events", json={"events": events})
    assert written.status_code == 200, written.text


async def test_a_reconnect_with_last_event_id_resumes_with_no_gap_and_no_duplicate(
    http: httpx.AsyncClient,
) -> None:
    assert (await http.post("/tasks", json={"name": "log", "goal": "g"})).status_code == 201
    await _record(http, "log", *(f"m{n}" for n in range(1, 6)))
    async with http.stream("GET", "/tasks/log/stream") as response:
        reader = SseReader(response)
        first = [await reader.next() for _ in range(3)]
    assert [(s.event, s.id) for s in first] == [("update", "1"), ("update", "2"), ("update", "3")]
    await _record(http, "log", *(f"m{n}" for n in range(6, 11)))
    headers = {"Last-Event-ID": first[-1].id or ""}
    async with http.stream("GET", "/tasks/log/stream", headers=headers) as response:
        reader = SseReader(response)
        await reader.connected()
        resumed = [await reader.next() for _ in range(7)]
        done = await http.patch("/tasks/log", json={"status": "done", "result": {"n": 10}})
        assert done.status_code == 200, done.text
        end = await reader.until("done")
    assert [s.id for s in resumed] == [str(n) for n in range(4, 11)]
    assert [e.payload for e in updates(resumed)] == [f"m{n}" for n in range(4, 11)]
    assert [s.event for s in end] == ["done"]  # nothing repeated between


async def test_kind_filters_tokens_off_and_keep_alive_comments(
    http: httpx.AsyncClient,
) -> None:
    assert (await http.post("/tasks", json={"name": "tools", "goal": "g"})).status_code == 201
    params = {"kinds": "tool_call,note", "tokens": "false"}
    async with http.stream("GET", "/tasks/tools/stream", params=params) as response:
        reader = SseReader(response)
        await reader.connected()
        events = [
            {"kind": "message", "role": "user", "payload": "hi"},
            {"kind": "tool_call", "name": "bash", "payload": "{}"},
            {"kind": "tool_result", "name": "bash", "payload": "ok"},
            {"kind": "tool_call", "name": "bash", "payload": "{}"},
        ]
        assert (await http.post("/tasks/tools/events", json={"events": events})).is_success
        got = [await reader.next(), await reader.next()]
        idle = await reader.next(comments=True)  # nothing to send: a keep-alive comment
        assert (idle.event, idle.data) == (":", "keep-alive")
        assert (await http.post("/tasks/tools/cancel", json={"cascade": True})).status_code == 202
        end = await reader.until("cancelled")
    assert [(s.event, s.id) for s in got] == [("update", "2"), ("update", "4")]
    assert [e.kind for e in updates(got)] == [EventKind.TOOL_CALL, EventKind.TOOL_CALL]
    assert end[-1].event == "cancelled"
    assert json.loads(end[-1].data)["status"] == "cancelled"
    assert all(s.event in ("update", "cancelled") for s in end)
    unknown = await http.get("/tasks/tools/stream", params={"kinds": "tool_call,gossip"})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_argument"


async def test_the_session_stream_follows_the_tasks_of_a_session_and_resumes(
    http: httpx.AsyncClient, project: Project
) -> None:
    assert (
        await http.post("/tasks", json={"name": "before", "goal": "g", "session_id": "chat"})
    ).is_success
    await _record(http, "before", "old")  # before the stream: not sent (live from the start)
    async with http.stream("GET", "/sessions/chat/stream") as response:
        reader = SseReader(response)
        await reader.connected()
        await _record(http, "before", "new")
        first = await reader.next()
        assert first.event == "update"
        assert Event.model_validate_json(first.data).payload == "new"
        created = await http.post(
            "/tasks", json={"name": "later", "goal": "g", "session_id": "chat"}
        )
        assert created.is_success
        await _record(http, "later", "hello")
        got = [await reader.next()]
        done = await http.patch("/tasks/later", json={"status": "done", "result": {}})
        assert done.is_success
        got += await reader.until("done")
    assert [(Event.model_validate_json(s.data).payload, s.event) for s in got[:-1]] == [
        ("hello", "update")
    ]
    cursor = parse_cursor(got[-1].id or "")
    assert cursor == Cursor({"before": 2, "later": 1}, {"later"})
    assert got[-1].id == cursor_id(cursor)
    await _record(http, "before", "while away")
    headers = {"Last-Event-ID": got[-1].id or ""}
    async with http.stream("GET", "/sessions/chat/stream", headers=headers) as response:
        reader = SseReader(response)
        await reader.connected()
        resumed = await reader.next()
    assert Event.model_validate_json(resumed.data).payload == "while away"
    assert parse_cursor(resumed.id or "") == Cursor({"before": 3, "later": 1}, {"later"})


async def test_a_client_that_never_reads_holds_up_no_writer_and_no_other_stream(
    api: Api, http: httpx.AsyncClient, project: Project
) -> None:
    """One stream's client connects and never reads a byte (its socket buffers fill); the
    task's writes and another stream go on whole. (Their speed is the benchmark's:
    ``bench/bench_streams.py``.)"""
    assert (await http.post("/tasks", json={"name": "busy", "goal": "g"})).status_code == 201
    address = urlsplit(api.url)
    stalled = socket.create_connection((address.hostname, address.port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(
        (
            f"GET /tasks/busy/stream HTTP/1.1\r\nHost: {address.netloc}\r\n"
            f"Authorization: Bearer {project.key}\r\n\r\n"
        ).encode()
    )
    big = "x" * 20_000
    try:
        async with http.stream("GET", "/tasks/busy/stream") as response:
            reader = SseReader(response)
            await reader.connected()
            for batch in range(10):
                events = [{"kind": "note", "payload": f"{batch}-{n}-{big}"} for n in range(20)]
                written = await http.post("/tasks/busy/events", json={"events": events})
                assert written.status_code == 200, written.text
            got = [await reader.next() for _ in range(200)]
            assert (await http.patch("/tasks/busy", json={"status": "done"})).is_success
            end = await reader.until("done")
        assert [int(s.id or 0) for s in got] == list(range(1, 201))
        assert [s.event for s in end] == ["done"]
    finally:
        stalled.close()


async def test_a_stream_of_a_missing_task_is_404_and_streams_per_key_are_bounded(
    http: httpx.AsyncClient,
) -> None:
    missing = await http.get("/tasks/nothing/stream")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "task_not_found"
    assert (await http.post("/tasks", json={"name": "many", "goal": "g"})).is_success
    async with asyncio.TaskGroup() as group:
        opened: list[httpx.Response] = []
        streams = [http.stream("GET", "/tasks/many/stream") for _ in range(4)]
        for stream in streams:
            response = await stream.__aenter__()
            assert response.status_code == 200
            opened.append(response)
        refused = await http.get("/tasks/many/stream")
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "too_many_streams"
        for stream in streams:
            group.create_task(stream.__aexit__(None, None, None))

    async def freed() -> bool:  # the slots come back once the streams are closed
        async with http.stream("GET", "/tasks/many/stream") as response:
            return response.status_code == 200

    await eventually(freed, within=10)
    assert (await http.patch("/tasks/many", json={"status": "done"})).is_success
    async with http.stream("GET", "/tasks/many/stream") as response:  # closed: ends at once
        seen = await SseReader(response).until("done")
    assert [s.event for s in seen] == ["done"]
    assert json.loads(seen[0].data)["status"] == TaskStatus.DONE.value


async def test_the_http_pages_follower_reconnects_and_prints_every_update_once(
    api: Api, project: Project, http: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/http.md's SSE follower, as written, reading through a link that breaks mid-stream:
    it reconnects with Last-Event-ID and prints each update once, then returns at ``done``."""
    (block,) = [b for b in python_blocks(ROOT / "docs" / "http.md") if "def follow" in b]
    names: dict[str, Any] = {}
    exec(block, names)
    target = urlsplit(api.url)
    assert target.hostname is not None and target.port is not None
    printed: list[str] = []

    def lines() -> list[str]:
        printed.extend(capsys.readouterr().out.splitlines())
        return [line for line in printed if line.startswith("#")]

    async def printed_updates(count: int) -> bool:
        return len(lines()) == count

    assert (await http.post("/tasks", json={"name": "log", "goal": "g"})).status_code == 201
    await _record(http, "log", "m1", "m2", "m3")
    async with TcpProxy(target.hostname, target.port).running() as proxy:
        following = asyncio.ensure_future(
            names["follow"](f"http://127.0.0.1:{proxy.port}", project.key, "log")
        )
        await eventually(lambda: printed_updates(3))
        await proxy.drop()  # the follower's connection breaks
        await _record(http, "log", "m4", "m5")
        await eventually(lambda: printed_updates(5))
        await proxy.drop()
        done = await http.patch("/tasks/log", json={"status": "done", "result": {"n": 5}})
        assert done.status_code == 200, done.text
        await asyncio.wait_for(following, 60)
    assert lines() == [f"#{n} message: m{n}" for n in range(1, 6)]
    assert proxy.connections == 3  # it read through three connections


async def test_a_session_stream_resumed_gets_what_happened_while_away_once(
    http: httpx.AsyncClient, project: Project
) -> None:
    """Resumed with ``Last-Event-ID``, a session stream sends every event of its session
    since that cursor: the rest of a task it followed and its end, and the tasks created while
    the client was away (one that ended since, one still open) from their first event; never
    a task that was closed before the stream first connected, and nothing twice (a second
    resume from the last id sends nothing)."""

    async def task(name: str, *texts: str) -> None:
        body = {"name": name, "goal": "g", "session_id": "chat"}
        assert (await http.post("/tasks", json=body)).status_code == 201
        await _record(http, name, *texts)

    async def end(name: str) -> None:
        assert (await http.patch(f"/tasks/{name}", json={"status": "done"})).is_success

    await task("old", "old-1")
    await end("old")
    await task("kept", "kept-1")
    for name in ("old", "kept"):
        await mirrored(project.history, name)
    async with http.stream("GET", "/sessions/chat/stream") as response:
        reader = SseReader(response)
        await reader.connected()
        await _record(http, "kept", "kept-2")
        first = await reader.next()
    assert Event.model_validate_json(first.data).payload == "kept-2"
    cursor = parse_cursor(first.id or "")
    assert cursor == Cursor({"old": 1, "kept": 2}, {"old"})

    await _record(http, "kept", "kept-3")  # while away
    await end("kept")
    await task("gone", "gone-1", "gone-2")
    await end("gone")
    await task("new", "new-1")
    for name in ("kept", "gone", "new"):
        await mirrored(project.history, name)

    seen: list[Sse] = []
    async with http.stream(
        "GET", "/sessions/chat/stream", headers={"Last-Event-ID": first.id or ""}
    ) as response:
        reader = SseReader(response)
        await reader.connected()
        while True:
            item = await reader.next(comments=True)
            if item.event == ":":  # a keep-alive: nothing more to send
                break
            seen.append(item)
    sent = [
        (json.loads(s.data)["name"], s.event)
        if s.event != "update"
        else (Event.model_validate_json(s.data).payload, "update")
        for s in seen
    ]
    expected = {
        ("kept-3", "update"),
        ("kept", "done"),
        ("gone-1", "update"),
        ("gone-2", "update"),
        ("gone", "done"),
        ("new-1", "update"),
    }
    assert sorted(sent) == sorted(expected)  # each once, and nothing of "old"
    for name in ("kept", "gone"):  # each task's updates before its end
        order = [item for item in sent if item[0].startswith(name)]
        assert order[-1] == (name, "done")
    last = parse_cursor(seen[-1].id or "")
    assert last is not None and last.seqs == {"old": 1, "kept": 3, "gone": 2, "new": 1}
    assert last.ended == {"old", "kept", "gone"}

    async with http.stream(
        "GET", "/sessions/chat/stream", headers={"Last-Event-ID": seen[-1].id or ""}
    ) as response:
        reader = SseReader(response)
        await reader.connected()
        again = await reader.next(comments=True)
    assert (again.event, again.data) == (":", "keep-alive")  # nothing twice


async def _until_keep_alive(reader: SseReader) -> list[Sse]:
    """Every event until the stream has nothing to send (its first keep-alive comment)."""
    seen: list[Sse] = []
    while (item := await reader.next(comments=True)).event != ":":
        seen.append(item)
    return seen


def _task_seqs(seen: list[Sse]) -> list[tuple[str, int]]:
    """The (task, seq) of each update of a session stream."""
    return [
        (json.loads(s.data)["task"], Event.model_validate_json(s.data).seq)
        for s in seen
        if s.event == "update"
    ]


async def test_every_session_stream_id_is_its_own_resume_point(
    http: httpx.AsyncClient,
) -> None:
    """(langgraph#8112: ids made from the clock repeat within a millisecond, so a resume
    skips or repeats.) Twenty events of two tasks written in two bursts: every update's id is
    distinct, and a resume from any of them sends exactly the updates after it."""
    for name in ("a", "b"):
        body = {"name": name, "goal": "g", "session_id": "burst"}
        assert (await http.post("/tasks", json=body)).status_code == 201
    async with http.stream("GET", "/sessions/burst/stream") as response:
        reader = SseReader(response)
        await reader.connected()
        for name in ("a", "b"):
            await _record(http, name, *(f"{name}{n}" for n in range(10)))
        seen = [await reader.next() for _ in range(20)]
    assert len({s.id for s in seen}) == 20
    order = _task_seqs(seen)
    assert sorted(order) == [(t, n) for t in ("a", "b") for n in range(1, 11)]
    for point in (0, 6, 13, 19):
        headers = {"Last-Event-ID": seen[point].id or ""}
        async with http.stream("GET", "/sessions/burst/stream", headers=headers) as response:
            reader = SseReader(response)
            await reader.connected()
            rest = await _until_keep_alive(reader)
        assert sorted(_task_seqs(rest)) == sorted(order[point + 1 :]), point


async def test_a_resume_with_a_kinds_filter_sends_the_filtered_events_after_the_cursor(
    http: httpx.AsyncClient,
) -> None:
    """(langgraph#7778: a join stream with a filter dropped events the first stream sent.)
    The same ``kinds`` on the task's and the session's streams before and after a reconnect:
    the tool calls after the cursor, each once, and no other kind."""
    body = {"name": "t", "goal": "g", "session_id": "s"}
    assert (await http.post("/tasks", json=body)).status_code == 201
    calls = [
        {"kind": kind, "name": "bash", "payload": f"{kind}-{n}"}
        for n in range(4)
        for kind in ("tool_call", "tool_result")
    ]
    params = {"kinds": "tool_call"}
    async with (
        http.stream("GET", "/tasks/t/stream", params=params) as a,
        http.stream("GET", "/sessions/s/stream", params=params) as b,
    ):
        readers = [SseReader(a), SseReader(b)]
        for reader in readers:
            await reader.connected()
        assert (await http.post("/tasks/t/events", json={"events": calls[:4]})).is_success
        firsts = [[await reader.next() for _ in range(2)] for reader in readers]
    assert (await http.post("/tasks/t/events", json={"events": calls[4:]})).is_success
    for route, first in zip(("/tasks/t/stream", "/sessions/s/stream"), firsts, strict=True):
        assert [Event.model_validate_json(s.data).payload for s in first] == [
            "tool_call-0",
            "tool_call-1",
        ]
        headers = {"Last-Event-ID": first[-1].id or ""}
        async with http.stream("GET", route, params=params, headers=headers) as response:
            reader = SseReader(response)
            await reader.connected()
            rest = [await reader.next() for _ in range(2)]
        assert [Event.model_validate_json(s.data).payload for s in rest] == [
            "tool_call-2",
            "tool_call-3",
        ]


async def test_a_task_that_ended_while_away_sends_its_end_on_resume(
    http: httpx.AsyncClient,
) -> None:
    """(langgraphjs#2805: a reconnect after the last event missed the run's terminal event.)
    The task ends while the client is away after its last update: the resume sends ``done``
    alone, and the stream ends."""
    assert (await http.post("/tasks", json={"name": "t", "goal": "g"})).status_code == 201
    await _record(http, "t", "only")
    async with http.stream("GET", "/tasks/t/stream") as response:
        reader = SseReader(response)
        last = await reader.next()
    assert Event.model_validate_json(last.data).payload == "only"
    assert (await http.patch("/tasks/t", json={"status": "done"})).is_success
    headers = {"Last-Event-ID": last.id or ""}
    async with http.stream("GET", "/tasks/t/stream", headers=headers) as response:
        reader = SseReader(response)
        await reader.connected()
        end = await reader.next()
        with pytest.raises(EOFError):
            await reader.next()
    assert end.event == "done" and json.loads(end.data)["last_seq"] == 1


async def test_a_session_cursor_never_replays_another_sessions_task(
    http: httpx.AsyncClient,
) -> None:
    """(frontmcp GHSA-84j6-jc92-77jm: a replay cursor of one session replayed another's
    events.) A session stream resumed with a cursor naming a task of another session of the
    project sends nothing of that task, only its own session's."""
    for name, session in (("theirs", "other"), ("mine", "here")):
        body = {"name": name, "goal": "g", "session_id": session}
        assert (await http.post("/tasks", json=body)).status_code == 201
        await _record(http, name, f"{name}-1")
    forged = cursor_id(Cursor({"theirs": 0, "mine": 0}))
    async with http.stream(
        "GET", "/sessions/here/stream", headers={"Last-Event-ID": forged}
    ) as response:
        reader = SseReader(response)
        await reader.connected()
        await _record(http, "theirs", "theirs-2")
        await _record(http, "mine", "mine-2")
        seen = [await reader.next() for _ in range(2)]
    assert [Event.model_validate_json(s.data).payload for s in seen] == ["mine-1", "mine-2"]
    assert set((parse_cursor(seen[-1].id or "") or Cursor()).seqs) == {"mine"}


async def test_after_seq_tokens_off_and_tokens_missed_while_away(
    api: Api, http: httpx.AsyncClient, project: Project
) -> None:
    """``?after_seq=N`` starts a first connection after seq N; ``?tokens=false`` sends no
    token while a stream with tokens gets it, with no id; a token sent while a stream was
    away is not sent on its resume, and the update written meanwhile is."""
    assert (await http.post("/tasks", json={"name": "t", "goal": "g"})).status_code == 201
    await _record(http, "t", "m1", "m2", "m3")
    emitter = TaskEmitter(TaskManager(project.history, broker=api.services.broker), "t")
    async with (
        http.stream("GET", "/tasks/t/stream", params={"after_seq": 2}) as a,
        http.stream("GET", "/tasks/t/stream", params={"after_seq": 3, "tokens": "false"}) as b,
    ):
        with_tokens, without = SseReader(a), SseReader(b)
        for reader in (with_tokens, without):
            await reader.connected()
        third = await with_tokens.next()
        assert (third.id, updates([third])[0].payload) == ("3", "m3")
        await emitter.emit_token(MARK)
        token = await with_tokens.next()
        assert token.event == "token" and token.id is None
        assert json.loads(token.data)["text"] == MARK
        await _record(http, "t", "m4")
        assert [(s.event, s.id) for s in [await without.next()]] == [("update", "4")]
    await emitter.emit_token(MARK)  # no stream is open
    await _record(http, "t", "m5")
    async with http.stream("GET", "/tasks/t/stream", headers={"Last-Event-ID": "4"}) as c:
        reader = SseReader(c)
        await reader.connected()
        resumed = await _until_keep_alive(reader)
    assert [(s.event, s.id) for s in resumed] == [("update", "5")]


def test_the_numbers_docs_http_quotes_are_the_codes() -> None:
    """docs/http.md's numbers about streams are the constants the code runs with."""
    text = (ROOT / "docs" / "http.md").read_text(encoding="utf-8")
    quoted = {
        "every 15 s of silence": KEEPALIVE_S == 15.0,
        "checks its key every 10 s": GRANT_CHECK_S == 10.0,
        "`--graceful-timeout` seconds (10)": GRACEFUL_TIMEOUT_S == 10,
        "It follows at\nmost 64 tasks": SESSION_TASKS == 64,
        "or every 2 s without one": STREAM_POLL_S == 2.0,
        "the newest\n1,000 in a ring": FEED_EVENTS == 1_000,
        "a queue of 1,024": TOKENS_QUEUED == 1_024,
    }
    assert {sentence: sentence in text and same for sentence, same in quoted.items()} == {
        sentence: True for sentence in quoted
    }


def test_a_session_cursor_names_at_most_its_bound_across_resumes() -> None:
    """A long session whose tasks come and end across many reconnects: each resume's cursor
    keeps the ended tasks among the session's newest only, so it never grows past what
    ``parse_cursor`` takes (it would be refused 422 on the next resume)."""
    cursor: Cursor | None = None
    made = 0
    for _ in range(6):  # six reconnects, 40 tasks made and ended between each
        made += 40
        rows = [  # the session's newest tasks, as Neo4j's find_tasks returns them
            TaskRow(key=f"p/t{n}", project_id="p", name=f"t{n}", status=TaskStatus.DONE, last_seq=1)
            for n in range(max(0, made - SESSION_TASKS), made)
        ]
        resumed = cursor is not None
        cursor = cursor or Cursor()
        plan = start_plan(cursor, rows, resumed)
        for name in plan:  # followed: its log and its end sent
            cursor.seqs[name] = 1
            cursor.ended.add(name)
        assert parse_cursor(cursor_id(cursor)) == cursor
    assert cursor is not None and set(cursor.seqs) == {row.name for row in rows}
