"""The HTTP API's routes for people, on uvicorn against the real stack: the inbox and its live
stream, an approval answered over HTTP with its decision, the tasks list's filters, branch and
continue, and the page's sign-in (a session, never the key; CSRF on every change; sign out and
a revoked key end it) with its assets the product's own."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from agent_tasks.contract import EventKind
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.server.page import PAGE_FILES
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import build_worker
from tests.approval_tools import approval_spec, effects, goal
from tests.conftest import eventually, mirrored
from tests.server.conftest import Api, Project, SseReader

NUMBER = {"type": "integer", "minimum": 1}


async def ask(http: httpx.AsyncClient, task: str, input_id: str, prompt: str) -> None:
    """A recorded task ``task`` that asks ``prompt`` (``NUMBER``)."""
    created = await http.post("/tasks", json={"name": task, "goal": f"goal of {task}"})
    assert created.status_code == 201, created.text
    asked = await http.post(
        f"/tasks/{task}/input-requests",
        json={"prompt": prompt, "json_schema": NUMBER, "input_id": input_id},
    )
    assert asked.status_code == 201, asked.text


async def inbox(http: httpx.AsyncClient) -> list[tuple[str, str]]:
    answer = await http.get("/inbox")
    assert answer.status_code == 200, answer.text
    return [(i["task"], i["input_id"]) for i in answer.json()["items"]]


async def test_the_inbox_lists_the_projects_open_requests_newest_first(
    api: Api, http: httpx.AsyncClient, project: Project
) -> None:
    await ask(http, "a", "qa", "How many, a?")
    await asyncio.sleep(0.05)  # asked at a later workflow time
    await ask(http, "b", "qb", "How many, b?")
    for task in ("a", "b"):
        await mirrored(project.history, task)

    items = (await http.get("/inbox")).json()["items"]
    assert [(i["task"], i["input_id"], i["prompt"]) for i in items] == [
        ("b", "qb", "How many, b?"),
        ("a", "qa", "How many, a?"),
    ]
    first = items[1]
    assert first["json_schema"] == NUMBER and first["approval"] is None
    assert first["deadline"] is None and first["asked_seq"] == 1
    assert datetime.fromisoformat(first["asked_at"]) <= datetime.fromisoformat(items[0]["asked_at"])
    assert [i["input_id"] for i in (await http.get("/tasks/a/inputs")).json()["items"]] == ["qa"]

    assert api.services.graph is not None
    _, theirs = await ApiKeyStore(api.services.graph).create("another-project", "tests")
    async with httpx.AsyncClient(
        base_url=api.url, headers={"Authorization": f"Bearer {theirs}"}, timeout=30
    ) as other:
        assert await inbox(other) == []
        assert (await other.get("/tasks/a/inputs")).json()["items"] == []

    answered = await http.post("/tasks/a/input", json={"input_id": "qa", "answer": 3})
    assert answered.status_code == 200, answered.text
    assert await inbox(http) == [("b", "qb")]  # gone from the next read


async def test_the_inbox_stream_sends_new_requests_and_closes_answered_ones(
    api: Api, http: httpx.AsyncClient, project: Project
) -> None:
    await ask(http, "old", "q1", "Old question?")
    await mirrored(project.history, "old")
    async with http.stream("GET", "/inbox/stream") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(response)
        await reader.connected()
        start = await reader.until("ready")
        assert [e.event for e in start] == ["ask", "ready"]
        assert '"input_id":"q1"' in start[0].data

        await ask(http, "new", "q2", "New question?")
        (fresh,) = await reader.until("ask", within=30)
        assert '"task":"new"' in fresh.data and '"prompt":"New question?"' in fresh.data

        assert (await http.post("/tasks/old/input", json={"answer": 2})).status_code == 200
        closed = await reader.until("closed", within=30)
        assert closed[-1].data == '{"task": "old", "input_id": "q1"}'


async def test_an_approval_answered_over_http_is_a_decision_citing_the_call(
    api: Api, http: httpx.AsyncClient, project: Project, tmp_path: Path
) -> None:
    log = tmp_path / "mail.log"
    call = ("send_mail", {"log": str(log), "to": "ops@example.com", "subject": "hello"})
    created = await project.history.create_task("mail", goal(call), agent=approval_spec())
    assert created.recorded, created

    async def asking() -> bool:
        return bool((await http.get("/tasks/mail/inputs")).json()["items"])

    await eventually(asking)
    (item,) = (await http.get("/tasks/mail/inputs")).json()["items"]
    approval = item["approval"]
    assert item["input_id"] == f"approve-{approval['call_seq']}"
    assert approval["tool"] == "send_mail" and '"ops@example.com"' in approval["arguments"]
    assert "<strong>hello</strong>" in approval["description_html"]
    bad = {"log": str(log), "to": "nobody", "subject": "x"}
    edit = {"type": "edit", "arguments": bad, "digest": approval["digest"]}
    refused = await http.post(
        "/tasks/mail/input", json={"input_id": item["input_id"], "answer": edit}
    )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "input_invalid"
    assert "to" in refused.json()["error"]["message"]
    unbound = await http.post(
        "/tasks/mail/input", json={"input_id": item["input_id"], "answer": {"type": "accept"}}
    )
    assert unbound.status_code == 422 and "'digest' is a required property" in unbound.text
    stale = {"type": "accept", "digest": "0" * 64}
    refused = await http.post(
        "/tasks/mail/input", json={"input_id": item["input_id"], "answer": stale}
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "approval_stale"
    shown = {"type": "accept", "digest": approval["digest"]}
    accepted = await http.post(
        "/tasks/mail/input", json={"input_id": item["input_id"], "answer": shown}
    )
    assert accepted.status_code == 200, accepted.text

    view = await project.history.wait_task("mail")
    assert view is not None and view.result is not None
    assert view.result.text == "the tools said: sent 'hello' to ops@example.com"
    assert effects(log) == [f"{approval['idempotency_key']} mail ops@example.com hello x1"]
    await mirrored(project.history, "mail")
    decisions = (await http.get("/tasks/mail/decisions")).json()["decisions"]
    assert len(decisions) == 1 and decisions[0]["needs_review"] is False
    assert decisions[0]["cites"]["events"] == [approval["call_seq"]]
    steps = (await http.get("/tasks/mail/steps")).json()["steps"]
    assert [s["idempotency_key"] for s in steps] == [approval["idempotency_key"]]


async def test_two_keys_of_one_person_are_one_approver(
    api: Api, project: Project, tmp_path: Path
) -> None:
    """``wire`` needs two approvers. Ann holds two keys (``keys create --person ann``) and a
    page session of the second: the first key's accept is a decision by ``ann``; the second
    key's, and the session's, are refused 409 ``approver_repeated`` (one person is one
    approver, however many keys: before, each key was its own author ``key-{id}`` and the
    call ran on ann's word alone), and so is her accept as ``ANN`` from the Python client
    (another channel); ``/me`` names the person; a key of ``Bob`` runs the call once. A key
    made before persons (none given) is its own person, ``key-{id}``."""
    assert api.services.graph is not None
    keys = ApiKeyStore(api.services.graph)
    pid = project.project_id
    (laptop, ann_1), (_, ann_2), (_, bob) = [
        await keys.create(pid, name, person) for name, person in (
            ("laptop", "ann"), ("phone", "ann"), ("desk", "Bob"))
    ]  # fmt: skip
    legacy, _ = await keys.create(pid, "old")
    assert (laptop.person, laptop.author, legacy.person) == ("ann", "ann", None)
    assert legacy.author == f"key-{legacy.key_id}"
    log = tmp_path / "wire.log"
    created = await project.history.create_task(
        "w", goal(("wire", {"log": str(log), "amount": 500})), agent=approval_spec()
    )
    assert created.recorded, created

    def as_(key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=api.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    async with as_(ann_1) as first, as_(ann_2) as second, as_(bob) as third:
        me = (await second.get("/me")).json()
        assert (me["person"], me["key_name"]) == ("ann", "phone")

        async def asking(input_id: str | None = None) -> dict[str, Any]:
            found: list[dict[str, Any]] = []

            async def listed() -> bool:
                items = (await first.get("/tasks/w/inputs")).json()["items"]
                found[:] = [i for i in items if input_id in (None, i["input_id"])]
                return bool(found)

            await eventually(listed)
            return found[0]

        item = await asking()
        digest = item["approval"]["digest"]
        accept = {"type": "accept", "digest": digest}
        taken = await first.post(
            "/tasks/w/input", json={"input_id": item["input_id"], "answer": accept}
        )
        assert taken.status_code == 200, taken.text
        again = await asking(f"{item['input_id']}-2")
        assert again["approval"]["approved_by"] == ["ann"]
        body = {"input_id": again["input_id"], "answer": accept}
        refused = await second.post("/tasks/w/input", json=body)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "approver_repeated"
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as site:
            assert (await _sign_in(site, ann_2)).status_code == 303
            assert (await site.get("/me")).json()["person"] == "ann"
            csrf = {"X-CSRF-Token": site.cookies["atk_csrf"]}
            by_page = await site.post("/tasks/w/input", json=body, headers=csrf)
            assert by_page.status_code == 409 and "approver_repeated" in by_page.text
        # go-gitea/gitea#7680: one approval counted twice (its author in two teams); here
        # the same person through another channel, the Python client, as "ANN"
        by_python = ConversationHistory(
            api.services.client, pid, "ANN", task_queue=api.queue, graph=api.services.graph
        )
        python = await by_python.respond("w", accept, input_id=again["input_id"])
        assert (python.recorded, python.error) == (False, ErrorCode.APPROVER_REPEATED)
        assert effects(log) == []
        assert (await third.post("/tasks/w/input", json=body)).status_code == 200
    final = await project.history.wait_task("w")
    assert final is not None and final.result is not None
    assert effects(log) == [f"{item['approval']['idempotency_key']} wire 500"]
    events = (await project.history.list_events("w", limit=200)).events
    assert [e.author for e in events if e.kind is EventKind.DECISION] == ["ann", "Bob"]


async def test_the_tasks_list_by_agent_name_and_creation_time(
    api: Api, http: httpx.AsyncClient, project: Project
) -> None:
    other = ConversationHistory(
        api.services.client, project.project_id, "other-agent", task_queue=api.queue,
        graph=api.services.graph,
    )  # fmt: skip
    assert (await project.history.create_task("Fix-Login", "one")).recorded
    await mirrored(project.history, "Fix-Login")
    between = datetime.now(UTC)
    await asyncio.sleep(0.05)
    assert (await other.create_task("fix-logout", "two")).recorded
    assert (await other.create_task("deploy", "three")).recorded
    for task in ("fix-logout", "deploy"):
        await mirrored(project.history, task)

    async def names(**params: str) -> list[str]:
        answer = await http.get("/tasks", params=params)
        assert answer.status_code == 200, answer.text
        return [row["name"] for row in answer.json()["tasks"]]

    assert await names() == ["Fix-Login", "deploy", "fix-logout"]
    assert await names(agent_id="other-agent") == ["deploy", "fix-logout"]
    assert await names(name="FIX-LOG") == ["Fix-Login", "fix-logout"]
    assert await names(since=between.isoformat()) == ["deploy", "fix-logout"]
    assert await names(until=between.isoformat()) == ["Fix-Login"]
    assert await names(name="fix", agent_id="tests") == ["Fix-Login"]
    naive = await http.get("/tasks", params={"since": "2026-01-01T00:00:00"})
    assert naive.status_code == 422  # a time without its zone is refused


async def test_branch_and_continue_over_http(http: httpx.AsyncClient, project: Project) -> None:
    assert (await http.post("/tasks", json={"name": "src", "goal": "g"})).status_code == 201
    events = [{"kind": "message", "payload": f"line {n}"} for n in (1, 2, 3)]
    assert (await http.post("/tasks/src/events", json={"events": events})).status_code == 200
    branched = await http.post("/tasks/src/branch", json={"seq": 2, "name": "src-b"})
    assert branched.status_code == 201, branched.text
    copied = (await http.get("/tasks/src-b/events")).json()["events"]
    assert [e["payload"] for e in copied] == ["line 1", "line 2"]
    past = await http.post("/tasks/src/branch", json={"seq": 9, "name": "src-c"})
    assert past.status_code >= 400 and past.json()["error"]["code"] == "event_not_found"
    nothing = await http.post("/tasks/src/continue")
    assert nothing.status_code >= 400, nothing.text  # a recorded task has no turn to continue
    assert nothing.json()["error"]["code"]


def _signin_token(page: str) -> str:
    found = re.search(r'name="signin" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


async def _sign_in(site: httpx.AsyncClient, key: str) -> httpx.Response:
    form = await site.get("/ui/signin")
    token = _signin_token(form.text)
    return await site.post("/ui/signin", data={"signin": token, "key": key})


async def test_the_pages_session_csrf_sign_out_and_revoked_key(api: Api, project: Project) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as site:
        gone = await site.get("/ui/inbox")
        assert gone.status_code == 303 and gone.headers["location"] == "/ui/signin"
        form = await site.get("/ui/signin")
        assert "default-src 'self'" in form.headers["content-security-policy"]
        forged = await site.post("/ui/signin", data={"signin": "forged", "key": project.key})
        assert forged.status_code == 403 and "atk_session" not in site.cookies
        bad = await _sign_in(site, "atk_0000000000000000_" + "x" * 43)
        assert bad.status_code == 401 and "not valid" in bad.text

        signed = await _sign_in(site, project.key)
        assert signed.status_code == 303 and signed.headers["location"] == "/ui/inbox"
        cookies = signed.headers.get_list("set-cookie")
        session = next(c for c in cookies if c.startswith("atk_session="))
        assert "HttpOnly" in session and "SameSite=strict" in session
        assert all(project.key not in c for c in cookies)  # a session, never the key
        csrf = site.cookies["atk_csrf"]

        page = await site.get("/ui/inbox")
        assert page.status_code == 200 and "inbox.js" in page.text
        assert page.headers["x-content-type-options"] == "nosniff"
        assert (await site.get("/ui/static/form.js")).status_code == 200
        assert (await site.get("/me")).json()["project_id"] == project.project_id
        body = {"name": "by-page", "goal": "g"}
        refused = await site.post("/tasks", json=body)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
        wrong = await site.post("/tasks", json=body, headers={"X-CSRF-Token": csrf[:-2] + "xx"})
        assert wrong.status_code == 403
        taken = await site.post("/tasks", json=body, headers={"X-CSRF-Token": csrf})
        assert taken.status_code == 201, taken.text
        assert (await site.get("/projects/another/tasks")).status_code == 403

        assert (await site.post("/ui/signout")).status_code == 403  # a change: CSRF too
        out = await site.post("/ui/signout", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 204
        assert (await site.get("/tasks")).status_code == 401

    async with httpx.AsyncClient(base_url=api.url, timeout=30) as site:
        assert (await _sign_in(site, project.key)).status_code == 303
        assert (await site.get("/tasks")).status_code == 200
        assert api.services.graph is not None
        await ApiKeyStore(api.services.graph).revoke(project.key_id)
        assert (await site.get("/tasks")).status_code == 401  # from the next request on
        assert (await site.get("/ui/tasks")).status_code == 303


def test_every_asset_of_the_page_is_the_products_own() -> None:
    """No CDN, no other origin: nothing in the page's files names a URL with a host, and no
    HTML file holds an inline script (the Content-Security-Policy would refuse it)."""
    files = [p for p in PAGE_FILES.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} == {".html", ".css", ".js", ".svg"}  # .svg: the favicon
    for path in files:
        # an SVG's namespace is a name, never fetched
        text = path.read_text(encoding="utf-8").replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), path
        if path.suffix == ".html":
            assert not re.search(r"<script(?![^>]*\bsrc=)", text), path


async def test_a_branch_over_http_runs_on_the_tasks_own_task_queue(
    http: httpx.AsyncClient, project: Project, api: Api
) -> None:
    """Issue 32: a branch started on the caller's task queue (the API's), not where its source
    ran. A task created on a second worker's queue branches onto that queue, and a
    ``task_queue`` in the body moves it nowhere: an API key is a project's, the queues (and the
    tools and secrets of the workers on them) the namespace operator's."""
    assert api.services.graph is not None
    elsewhere = f"other-{uuid.uuid4().hex[:8]}"
    source = ConversationHistory(
        api.services.client,
        project.project_id,
        "tests",
        task_queue=elsewhere,
        graph=api.services.graph,
    )
    async with build_worker(api.services.client, api.services.graph, elsewhere):
        assert (await source.create_task("src", "g")).recorded
        assert (await source.record_event("src", "message", "one", role="user")).recorded
        kept = await http.post("/tasks/src/branch", json={"seq": 1, "name": "src-b"})
        named = await http.post(
            "/tasks/src/branch", json={"seq": 1, "name": "src-c", "task_queue": api.queue}
        )
        assert kept.status_code == named.status_code == 201, (kept.text, named.text)
        # read while the branches' own workers run: an open task is read by a query
        copied = (await http.get("/tasks/src-c/events")).json()["events"]
    assert [e["payload"] for e in copied] == ["one"]
    queues = {}
    for task in ("src", "src-b", "src-c"):
        handle = api.services.client.get_workflow_handle(project.history.workflow_id(task))
        queues[task] = (await handle.describe()).task_queue
    assert queues == {"src": elsewhere, "src-b": elsewhere, "src-c": elsewhere}
