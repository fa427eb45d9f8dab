"""An open stream's right to read (``server.grants``) against the real stack: a key
revoked by ``agent-tasks keys revoke``, a page session signed out or expired, a revocation the
broker never carried; a project's streams; a malformed ``Last-Event-ID``; the broker
subscriptions and stream slots a stream holds, given back when its client leaves."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import pytest

from agent_tasks.broker import key_channel, project_channel, session_channel, task_channel
from agent_tasks.contract import Event
from agent_tasks.devstack import parse_host_port
from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKey, ApiKeyStore
from agent_tasks.server.grants import Grant, GrantChecks
from agent_tasks.server.pagesessions import PageSessionStore
from agent_tasks.starter.tasks import TaskEmitter, TaskManager
from agent_tasks.worker import Services, open_graph
from tests.cli.test_serve import cli
from tests.conftest import eventually
from tests.server.conftest import STREAMS_PER_KEY, Api, Project, Sse, SseReader
from tests.server.test_people import _sign_in
from tests.servers import served
from tests.tcp_proxy import TcpProxy

LATE = "written-after-the-revocation"
"""An event's payload written after the stream's right ended: it must never reach it."""
LATE_TOKEN = "token-after-the-revocation"


def payloads(seen: list[Sse]) -> list[str]:
    return [str(Event.model_validate_json(s.data).payload) for s in seen if s.event == "update"]


async def _record(http: httpx.AsyncClient, task: str, *texts: str) -> None:
    events = [{"kind": "message", "role": "user", "payload": text} for text in texts]
    written = await http.post(f"/tasks/{task}/events", json={"events": events})
    assert written.status_code == 200, written.text


async def _until_payload(reader: SseReader, text: str) -> list[Sse]:
    """Every event up to and with the update whose payload is ``text``."""
    seen: list[Sse] = []
    while text not in payloads(seen):
        seen.append(await reader.next())
    return seen


async def _ended_unauthorized(reader: SseReader) -> list[Sse]:
    """The rest of a stream: it must end with ``unauthorized`` and then close."""
    rest = await reader.until("unauthorized")
    error = json.loads(rest[-1].data)["error"]
    assert error["code"] == "unauthorized" and "sign in again" in error["message"]
    with pytest.raises(EOFError):
        await reader.next()
    return rest


@pytest.fixture
async def writer(api: Api, project: Project) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the project with a second key (it writes after the first one's end)."""
    assert api.services.graph is not None
    _, key = await ApiKeyStore(api.services.graph).create(project.project_id, "writer")
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=api.url, headers=headers, timeout=30) as client:
        yield client


async def test_keys_revoke_ends_the_open_task_and_session_streams_before_anything_later(
    api: Api, project: Project, http: httpx.AsyncClient, writer: httpx.AsyncClient
) -> None:
    """``agent-tasks keys revoke`` (the CLI, another process) while a task's stream and its
    session's stream are open: each ends with ``unauthorized``, and neither the token
    published nor the event written after the command returned reaches them (the token is
    gated by nothing but the broker's word: the 10 s periodic check would let it through)."""
    created = await http.post("/tasks", json={"name": "t", "goal": "g", "session_id": "chat"})
    assert created.status_code == 201, created.text
    await _record(http, "t", "before")
    manager = TaskManager(project.history, broker=api.services.broker)
    async with (
        http.stream("GET", "/tasks/t/stream") as task_response,
        http.stream("GET", "/sessions/chat/stream") as session_response,
    ):
        task_reader, session_reader = SseReader(task_response), SseReader(session_response)
        await task_reader.connected()
        await session_reader.connected()
        await _record(writer, "t", "live")
        assert payloads(await _until_payload(task_reader, "live"))[-2:] == ["before", "live"]
        assert payloads(await _until_payload(session_reader, "live")) == ["live"]

        code, out = await cli("keys", "revoke", project.key_id)
        assert code == 0 and "revoked" in out, out
        await TaskEmitter(manager, "t").emit_token(LATE_TOKEN)
        await _record(writer, "t", LATE)
        for reader in (task_reader, session_reader):
            rest = await _ended_unauthorized(reader)
            assert [s.event for s in rest] == ["unauthorized"]  # no token, no update
    refused = await http.get("/tasks/t/stream")
    assert refused.status_code == 401
    ledger = await project.history.list_events("t", limit=50)
    assert [e.payload for e in ledger.events][-1] == LATE  # it was written, never streamed


async def test_a_page_sign_out_ends_that_sessions_streams_only(
    api: Api, project: Project, http: httpx.AsyncClient
) -> None:
    """The page's sign-out ends the streams its session opened (the task's, its session's and
    the inbox's) at once, before a token and an event that come after it; a stream of the
    same key opened with the key itself goes on and gets both."""
    created = await http.post("/tasks", json={"name": "t", "goal": "g", "session_id": "chat"})
    assert created.status_code == 201, created.text
    manager = TaskManager(project.history, broker=api.services.broker)
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as site:
        assert (await _sign_in(site, project.key)).status_code == 303
        csrf = site.cookies["atk_csrf"]
        async with (
            site.stream("GET", "/tasks/t/stream") as page_response,
            site.stream("GET", "/inbox/stream") as inbox_response,
            site.stream("GET", "/sessions/chat/stream") as session_response,
            http.stream("GET", "/tasks/t/stream") as key_response,
        ):
            page, inbox, session, keyed = (
                SseReader(page_response),
                SseReader(inbox_response),
                SseReader(session_response),
                SseReader(key_response),
            )
            for reader in (page, inbox, session, keyed):
                await reader.connected()
            assert (await inbox.next()).event == "ready"
            out = await site.post("/ui/signout", headers={"X-CSRF-Token": csrf})
            assert out.status_code == 204
            await TaskEmitter(manager, "t").emit_token(LATE_TOKEN)
            await _record(http, "t", LATE)
            for reader in (page, inbox, session):
                assert [s.event for s in await _ended_unauthorized(reader)] == ["unauthorized"]
            got = await _until_payload(keyed, LATE)
            assert LATE_TOKEN in [json.loads(s.data)["text"] for s in got if s.event == "token"]


@pytest.fixture
async def rechecking(api: Api) -> AsyncIterator[str]:
    """The API again, its idle streams checking their key every 0.5 s."""
    app = create_app(api.services, keepalive_s=0.5, grant_check_s=0.5)
    async with served(app) as url:
        yield url


async def test_a_revocation_the_broker_never_carried_still_ends_streams_before_later_events(
    api: Api, project: Project, http: httpx.AsyncClient, writer: httpx.AsyncClient, rechecking: str
) -> None:
    """A key revoked in the store alone (no word on the broker: as with the broker down): a
    stream that is sent a later event (on a server that checks idle streams every 10 s, so
    the event comes first) checks the key first and ends without it; an idle one ends at its
    periodic check."""
    assert api.services.graph is not None
    assert (await http.post("/tasks", json={"name": "t", "goal": "g"})).status_code == 201
    headers = {"Authorization": f"Bearer {project.key}"}
    async with httpx.AsyncClient(base_url=rechecking, headers=headers, timeout=30) as client:
        async with (
            http.stream("GET", "/tasks/t/stream") as busy,  # its server checks every 10 s
            client.stream("GET", "/sessions/quiet/stream") as idle,
        ):
            busy_reader, idle_reader = SseReader(busy), SseReader(idle)
            await busy_reader.connected()
            await idle_reader.connected()
            await ApiKeyStore(api.services.graph).revoke(project.key_id)
            await _record(writer, "t", LATE)
            for reader in (busy_reader, idle_reader):
                rest = await _ended_unauthorized(reader)
                assert LATE not in payloads(rest)


async def test_an_expired_page_session_ends_its_stream(
    api: Api, project: Project, rechecking: str
) -> None:
    """A page session that expires while its stream is open: the stream ends at its check."""
    assert api.services.graph is not None
    record = await ApiKeyStore(api.services.graph).check(project.key)
    assert record is not None
    token = await PageSessionStore(api.services.graph).create(record, timedelta(seconds=4))
    cookies = {"atk_session": token}
    async with httpx.AsyncClient(base_url=rechecking, cookies=cookies, timeout=30) as site:
        async with site.stream("GET", "/inbox/stream") as response:
            assert response.status_code == 200
            reader = SseReader(response)
            await reader.connected()
            rest = await _ended_unauthorized(reader)
        assert [s.event for s in rest] == ["ready", "unauthorized"]
        assert (await site.get("/inbox/stream")).status_code == 401


async def test_a_key_never_reads_another_projects_streams(
    api: Api, project: Project, http: httpx.AsyncClient, project_id: str
) -> None:
    """Two projects with a task of the same name in a session of the same id: each key's
    task, session and inbox streams show its own project's only, another project in the
    path is 403, and a session cursor naming the other project's task sends nothing of it."""
    assert api.services.graph is not None
    other_id = f"{project_id}-b"
    _, other_key = await ApiKeyStore(api.services.graph).create(other_id, "other")
    other_headers = {"Authorization": f"Bearer {other_key}"}
    async with httpx.AsyncClient(base_url=api.url, headers=other_headers, timeout=30) as other:
        for client, texts in ((http, "mine"), (other, "theirs")):
            body = {"name": "t", "goal": "g", "session_id": "chat"}
            assert (await client.post("/tasks", json=body)).status_code == 201
            body = {"name": f"only-{texts}", "goal": "g", "session_id": "chat"}
            assert (await client.post("/tasks", json=body)).status_code == 201
            await _record(client, "t", f"{texts}-1")
        forbidden = await http.get(f"/projects/{other_id}/tasks/t/stream")
        assert forbidden.status_code == 403
        assert (await http.get("/tasks/only-theirs/stream")).status_code == 404
        cursor = {"s": {"t": 1, "only-theirs": 0}, "e": []}
        last_id = base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode().rstrip("=")
        async with (
            http.stream("GET", "/tasks/t/stream") as task_response,
            http.stream("GET", "/sessions/chat/stream", headers={"Last-Event-ID": last_id}) as s,
        ):
            task_reader, session_reader = SseReader(task_response), SseReader(s)
            await task_reader.connected()
            await session_reader.connected()
            await _record(other, "t", "theirs-2")
            await _record(other, "only-theirs", "theirs-3")
            await _record(http, "t", "mine-2")
            got = await _until_payload(task_reader, "mine-2")
            session_got = await _until_payload(session_reader, "mine-2")
    assert all(p.startswith("mine") for p in payloads(got) + payloads(session_got))
    assert "mine-1" in payloads(got)


@pytest.mark.parametrize(
    ("route", "last_event_id"),
    [
        ("/tasks/t/stream", b"abc"),
        ("/tasks/t/stream", b"-1"),
        ("/tasks/t/stream", b"1.5"),
        ("/tasks/t/stream", b"\xb2"),  # a superscript two (latin-1): str.isdigit says digit
        ("/tasks/t/stream", b"9" * 19),
        ("/sessions/chat/stream", b"not a cursor!"),
        ("/sessions/chat/stream", base64.urlsafe_b64encode(b"[1, 2]")),
        ("/sessions/chat/stream", base64.urlsafe_b64encode(b'{"t": -1}')),
        ("/sessions/chat/stream", base64.urlsafe_b64encode(b'{"s": {"t": 1}, "e": ["u"]}')),
    ],
)
async def test_a_malformed_last_event_id_is_a_clear_422(
    http: httpx.AsyncClient, route: str, last_event_id: bytes
) -> None:
    assert (await http.post("/tasks", json={"name": "t", "goal": "g"})).status_code == 201
    refused = await http.get(route, headers={b"Last-Event-ID": last_event_id})
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_argument" and "Last-Event-ID" in error["message"]
    ledger = await http.get("/tasks/t/events")
    assert ledger.status_code == 200 and ledger.json()["events"] == []  # nothing written


async def test_an_empty_last_event_id_is_none(http: httpx.AsyncClient) -> None:
    """(parsec-cloud#7034: an empty ``Last-Event-ID`` is as none, as the spec's clients never
    send one.) The task's stream starts from ``after_seq``, the session's afresh."""
    body = {"name": "t", "goal": "g", "session_id": "chat"}
    assert (await http.post("/tasks", json=body)).status_code == 201
    await _record(http, "t", "m1", "m2")
    empty = {"Last-Event-ID": ""}
    async with (
        http.stream("GET", "/tasks/t/stream", params={"after_seq": 1}, headers=empty) as a,
        http.stream("GET", "/sessions/chat/stream", headers=empty) as b,
    ):
        assert (a.status_code, b.status_code) == (200, 200)
        task_reader, session_reader = SseReader(a), SseReader(b)
        await session_reader.connected()
        assert payloads([await task_reader.next()]) == ["m2"]
        await _record(http, "t", "m3")
        assert payloads([await session_reader.next()]) == ["m3"]


async def _numsub(api: Api, channels: list[str]) -> list[int]:
    """How many connections of the real broker subscribe to each channel (``PUBSUB NUMSUB``)."""
    assert api.services.broker is not None
    reply = await api.services.broker.redis.pubsub_numsub(*channels)
    return [int(n) for _, n in reply]


async def test_a_client_that_leaves_frees_the_servers_subscriptions_and_slots(
    api: Api, project: Project, http: httpx.AsyncClient
) -> None:
    """A task's, a session's and the inbox's streams subscribe the server to their channels
    (and their key's); when their clients leave, Redis sees every subscription go. Clients
    that reset their connection right after the request, before any of the answer, leave no
    stream slot taken."""
    assert (
        await http.post("/tasks", json={"name": "t", "goal": "g", "session_id": "chat"})
    ).status_code == 201
    history = project.history
    channels = [
        task_channel(history.workflow_id("t")),
        session_channel(project.project_id, "chat"),
        project_channel(project.project_id),
        key_channel(project.key_id),
    ]
    assert await _numsub(api, channels) == [0, 0, 0, 0]
    async with (
        http.stream("GET", "/tasks/t/stream") as a,
        http.stream("GET", "/sessions/chat/stream") as b,
        http.stream("GET", "/inbox/stream") as c,
    ):
        for response in (a, b, c):
            await SseReader(response).connected()
        assert await _numsub(api, channels) == [1, 1, 1, 1]  # one server connection each

    async def unsubscribed() -> bool:
        return await _numsub(api, channels) == [0, 0, 0, 0]

    await eventually(unsubscribed)

    address = urlsplit(api.url)
    assert address.hostname is not None and address.port is not None
    for _ in range(3 * STREAMS_PER_KEY):
        rude = socket.create_connection((address.hostname, address.port))
        request = (
            f"GET /sessions/chat/stream HTTP/1.1\r\nHost: {address.netloc}\r\n"
            f"Authorization: Bearer {project.key}\r\n\r\n"
        )
        rude.sendall(request.encode())
        rude.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        rude.close()  # a reset, before a byte of the answer

    async def every_slot_free() -> bool:
        opened = [http.stream("GET", "/tasks/t/stream") for _ in range(STREAMS_PER_KEY)]
        codes = [(await stream.__aenter__()).status_code for stream in opened]
        for stream in opened:
            await stream.__aexit__(None, None, None)
        return codes == [200] * STREAMS_PER_KEY

    await eventually(every_slot_free)
    await eventually(unsubscribed)


async def test_a_stream_whose_key_cannot_be_checked_ends_unavailable_and_resumes(
    api: Api, project: Project, http: httpx.AsyncClient
) -> None:
    """The key store goes away under a server (its Neo4j connections through a proxy that
    stops): a stream sent a new event cannot vouch for its key, so it ends with
    ``unavailable`` instead of sending it; resumed with its ``Last-Event-ID`` on a server
    that reaches the store, it gets that event."""
    assert api.services.graph is not None
    settings = api.services.settings
    host, port = parse_host_port(settings.neo4j_uri, 7687)
    assert (await http.post("/tasks", json={"name": "t", "goal": "g"})).status_code == 201
    await _record(http, "t", "first")
    async with TcpProxy(host, port).running() as proxy:
        through = settings.model_copy(update={"neo4j_uri": f"bolt://127.0.0.1:{proxy.port}"})
        async with open_graph(through) as graph:
            services = Services(settings, api.services.client, graph, api.services.broker)
            async with (
                served(create_app(services, keepalive_s=0.5)) as url,
                httpx.AsyncClient(base_url=url, headers=project.headers, timeout=90) as client,
                client.stream("GET", "/tasks/t/stream") as response,
            ):
                reader = SseReader(response)
                await reader.connected()
                first = await reader.next()
                assert payloads([first]) == ["first"]
                await proxy.stop()
                await _record(http, "t", "second")
                rest = await reader.until("unavailable", within=120)
                with pytest.raises(EOFError):
                    await reader.next()
    assert [s.event for s in rest] == ["unavailable"]
    assert json.loads(rest[0].data)["error"]["code"] == "unavailable"
    headers = {"Last-Event-ID": first.id or ""}
    async with http.stream("GET", "/tasks/t/stream", headers=headers) as response:
        reader = SseReader(response)
        await reader.connected()
        assert payloads([await reader.next()]) == ["second"]


async def test_the_streams_of_a_key_share_its_checks(api: Api, project: Project) -> None:
    """Fifty streams woken by one write need a check begun after the same moment: they share
    one read of the store; a check needed after that read began is a read of its own, and it
    sees a revocation made in between."""
    assert api.services.graph is not None
    keys = ApiKeyStore(api.services.graph)
    checks = GrantChecks(keys, PageSessionStore(api.services.graph))
    record = await keys.check(project.key)
    assert record is not None
    grant = Grant(record, project.key, session=False)
    reads: list[float] = []
    store_check = keys.check

    async def counted(key: str) -> ApiKey | None:
        reads.append(asyncio.get_running_loop().time())
        return await store_check(key)

    keys.check = counted  # type: ignore[method-assign]
    since = asyncio.get_running_loop().time()
    assert await asyncio.gather(*(checks.valid(grant, since) for _ in range(50))) == [True] * 50
    assert len(reads) == 1
    await keys.revoke(project.key_id)
    assert await checks.valid(grant, asyncio.get_running_loop().time()) is False
    assert len(reads) == 2 and checks.running == {}
