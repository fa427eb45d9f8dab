"""The HTTP API (``server``) on uvicorn against the real stack, with httpx: its routes
over the client's calls, API keys, refusals with the product's codes, bodies it refuses, and
its OpenAPI schema."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from openapi_spec_validator import validate

from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from tests.conftest import eventually, mirrored
from tests.server.conftest import Api, Project
from tests.stream_agents import TALKER


async def test_a_recorded_task_over_http(http: httpx.AsyncClient, project: Project) -> None:
    created = await http.post(
        "/tasks", json={"name": "fix-42", "goal": "Fix the test", "request_id": "c1"}
    )
    assert created.status_code == 201, created.text
    assert created.json()["created"] and created.json()["task"]["status"] == "open"
    again = await http.post("/tasks", json={"name": "fix-42", "goal": "Fix the test"})
    assert again.status_code == 200 and again.json()["duplicate"]
    other = await http.post("/tasks", json={"name": "fix-42", "goal": "Another goal"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "task_exists"

    events = [
        {"kind": "tool_call", "name": "bash", "payload": '{"cmd": "pytest"}'},
        {"kind": "tool_result", "name": "bash", "payload": "1 failed"},
    ]
    written = await http.post("/tasks/fix-42/events", json={"events": events, "request_id": "e1"})
    assert written.status_code == 200 and written.json()["first_seq"] == 1
    assert written.json()["last_seq"] == 2
    retried = await http.post("/tasks/fix-42/events", json={"events": events, "request_id": "e1"})
    assert retried.status_code == 200 and retried.json()["duplicate"]
    reused = await http.post(
        "/tasks/fix-42/events", json={"events": events[:1], "request_id": "e1"}
    )
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "request_id_reused"

    page = (await http.get("/tasks/fix-42/events", params={"after_seq": 1})).json()
    assert [e["payload"] for e in page["events"]] == ["1 failed"]
    ledger = await project.history.list_events("fix-42")
    assert [e["id"] for e in (await http.get("/tasks/fix-42/events")).json()["events"]] == [
        e.id for e in ledger.events
    ]
    view = (await http.get("/tasks/fix-42")).json()
    assert view["found"] and view["view"]["last_seq"] == 2 and view["source"] == "temporal"
    assert (await http.get("/tasks/fix-42/steps")).json()["steps"] == []

    # the Tasks API's update, input from outside, the answer validated
    moved = await http.patch("/tasks/fix-42", json={"status": "in_progress", "message": "on it"})
    assert moved.status_code == 200 and moved.json()["status"] == "in_progress"
    asked = await http.post(
        "/tasks/fix-42/input-requests",
        json={"prompt": "Which branch?", "json_schema": {"type": "string", "minLength": 2}},
    )
    assert asked.status_code == 201, asked.text
    bad = await http.post("/tasks/fix-42/input", json={"answer": "x"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "input_invalid"
    good = await http.post("/tasks/fix-42/input", json={"answer": "main"})
    assert good.status_code == 200, good.text
    summary = (await http.get("/tasks/fix-42/summary")).json()
    assert summary["status"] == "queued" and summary["input_response"] == {"value": "main"}
    none_open = await http.post("/tasks/fix-42/input", json={"answer": "main"})
    assert none_open.status_code == 409
    assert none_open.json()["error"]["code"] == "input_not_requested"

    # a child its app runs, listed and in the tree (Neo4j: once mirrored)
    child = await http.post(
        "/tasks", json={"name": "fix-42-a", "goal": "part", "parent": "fix-42", "spawn_key": "a"}
    )
    assert child.status_code == 201, child.text
    await mirrored(project.history, "fix-42")
    await mirrored(project.history, "fix-42-a")
    listed = (await http.get("/tasks", params={"parent": "fix-42"})).json()
    assert [t["name"] for t in listed["tasks"]] == ["fix-42-a"]
    tree = (await http.get("/tasks/fix-42/tree")).json()
    assert sorted(row["name"] for row in tree) == ["fix-42", "fix-42-a"]

    done = await http.patch("/tasks/fix-42", json={"result": {"commit": "abc123"}})
    assert done.json()["status"] == "done" and done.json()["result"] == {"commit": "abc123"}
    closed = await http.post("/tasks/fix-42/events", json={"events": events})
    assert closed.status_code == 409 and closed.json()["error"]["code"] == "task_closed"
    deleted = await http.delete("/tasks/fix-42")
    assert deleted.status_code == 200 and deleted.json()["recorded"]
    gone = await http.get("/tasks/fix-42")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "task_not_found"


async def test_an_agent_task_over_http_cancel_and_resume(
    http: httpx.AsyncClient, project: Project
) -> None:
    spec = TALKER.model_dump(mode="json")
    assert (await http.post("/tasks", json={"name": "ag", "goal": "g", "agent": spec})).is_success
    outside = await http.patch("/tasks/ag", json={"status": "in_progress"})
    assert outside.status_code == 409 and outside.json()["error"]["code"] == "run_by_agent"
    early = await http.post("/tasks/ag/resume")
    assert early.status_code == 409 and early.json()["error"]["code"] == "not_resumable"
    assert (await http.post("/tasks/ag/cancel", json={"cascade": False})).status_code == 202

    final = await project.history.wait_task("ag")  # the workflow closed
    assert final is not None and final.status.value == "cancelled"
    again = await http.post("/tasks/ag/cancel", json={})
    assert again.status_code == 409 and again.json()["error"]["code"] == "task_closed"
    assert (await http.post("/tasks/ag/resume")).status_code == 202

    async def running() -> bool:
        view = (await http.get("/tasks/ag")).json()["view"]
        return view["status"] in ("in_progress", "awaiting_input")  # its agent runs again

    await eventually(running)
    assert (await http.post("/tasks/ag/cancel", json={})).status_code == 202


async def test_names_with_a_slash_or_a_percent_are_one_escaped_segment(
    http: httpx.AsyncClient, project: Project
) -> None:
    for name in ("parent/child", "50%/off", "x%2Fy"):
        assert (await project.history.create_task(name, "g")).recorded
        escaped = name.replace("%", "%25").replace("/", "%2F")
        got = await http.get(f"/tasks/{escaped}")
        assert got.status_code == 200, (name, got.text)
        assert got.json()["view"]["name"] == name
    assert (await http.get("/tasks/parent")).status_code == 404


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


async def test_api_keys_no_key_wrong_project_revoked_and_never_echoed(
    api: Api, project: Project, logs: pytest.LogCaptureFixture
) -> None:
    assert api.services.graph is not None
    store = ApiKeyStore(api.services.graph)
    other, other_key = await store.create(f"{project.project_id}-b", "other")
    theirs = ConversationHistory(
        api.services.client, other.project_id, "x", task_queue=api.queue, graph=api.services.graph
    )
    assert (await theirs.create_task("secret-task", "theirs")).recorded
    bodies: list[str] = []
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        for headers in (
            {},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer atk_0123456789abcdef_" + "A" * 43},
            {"Authorization": f"Bearer {project.key}x"},
            {"Authorization": "Basic dXNlcjpwYXNz"},
        ):
            refused = await anonymous.get("/tasks/secret-task", headers=headers)
            bodies.append(refused.text)
            assert refused.status_code == 401, headers
            assert refused.json()["error"]["code"] == "unauthorized"
            assert refused.headers["www-authenticate"] == "Bearer"
        mine = {"X-API-Key": project.key}
        across = await anonymous.get(
            f"/projects/{other.project_id}/tasks/secret-task", headers=mine
        )
        bodies.append(across.text)
        assert across.status_code == 403 and across.json()["error"]["code"] == "forbidden"
        stream = await anonymous.get(
            f"/projects/{other.project_id}/tasks/secret-task/stream", headers=mine
        )
        assert stream.status_code == 403
        not_mine = await anonymous.get("/tasks/secret-task", headers=mine)
        assert not_mine.status_code == 404  # the key's project has no such task
        assert (await anonymous.get("/tasks/secret-task/stream", headers=mine)).status_code == 404
        named = await anonymous.get(f"/projects/{project.project_id}/tasks", headers=mine)
        assert named.status_code == 200
        theirs_key = {"Authorization": f"Bearer {other_key}"}
        assert (await anonymous.get("/tasks/secret-task", headers=theirs_key)).status_code == 200
        await store.revoke(other.key_id)
        revoked = await anonymous.get("/tasks/secret-task", headers=theirs_key)
        bodies.append(revoked.text)
        assert revoked.status_code == 401
        keys = await store.list(other.project_id)
        assert [(k.key_id, k.revoked_at is not None) for k in keys] == [(other.key_id, True)]
        assert (await anonymous.get("/health")).json() == {"ok": True}
    for key in (project.key, other_key):
        assert key not in logs.text
        assert all(key not in body for body in bodies)
    assert "GET /tasks/secret-task HTTP/1.1" in logs.text  # the access log did run


async def test_bad_json_oversize_and_malformed_bodies_are_refused_and_store_nothing(
    api: Api, http: httpx.AsyncClient, project: Project
) -> None:
    assert (await http.post("/tasks", json={"name": "t", "goal": "g"})).status_code == 201
    not_json = await http.post(
        "/tasks", content=b'{"name": "u", "goal":', headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 422 and not_json.json()["error"]["code"] == "invalid_json"
    shape = await http.post("/tasks", json={"name": "bad\x00name", "goal": "g"})
    assert shape.status_code == 422 and shape.json()["error"]["code"] == "invalid_argument"
    wrong_kind = await http.post("/tasks/t/events", json={"events": [{"kind": "gossip"}]})
    assert wrong_kind.status_code == 422
    assert wrong_kind.json()["error"]["details"][0]["loc"][:3] == ["body", "events", 0]
    empty = await http.post("/tasks/t/events", json={"events": []})
    assert empty.status_code == 422
    limit = api.services.settings.max_body_bytes
    big = json.dumps({"events": [{"kind": "note", "payload": "x" * limit}]}).encode()
    declared = await http.post(
        "/tasks/t/events", content=big, headers={"Content-Type": "application/json"}
    )
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "body_too_large"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for start in range(0, len(big), 65_536):
            yield big[start : start + 65_536]

    chunked = await http.post(
        "/tasks/t/events", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "body_too_large"
    assert (await http.get("/tasks/u")).status_code == 404
    page = await project.history.list_events("t")
    assert page.found and page.events == []  # nothing of any of them was stored
    view = (await project.history.get_task("t")).view
    assert view is not None and view.last_seq == 0


async def test_the_openapi_schema_is_valid_and_names_every_route(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        schema = (await anonymous.get("/openapi.json")).json()
    validate(schema)  # OpenAPI 3.1, by openapi-spec-validator
    paths = schema["paths"]
    wanted = {
        "/tasks": {"get", "post"},
        "/tasks/{task_id}": {"get", "patch", "delete"},
        "/tasks/{task_id}/events": {"get", "post"},
        "/tasks/{task_id}/steps": {"get"},
        "/tasks/{task_id}/input": {"post"},
        "/tasks/{task_id}/input-requests": {"post"},
        "/tasks/{task_id}/cancel": {"post"},
        "/tasks/{task_id}/resume": {"post"},
        "/tasks/{task_id}/tree": {"get"},
        "/tasks/{task_id}/summary": {"get"},
        "/tasks/{task_id}/stream": {"get"},
        "/sessions/{session_id}/stream": {"get"},
    }
    for path, methods in wanted.items():
        for prefix in ("", "/projects/{project_id}"):
            assert set(paths[prefix + path]) == methods, prefix + path
            for method in methods:
                operation = paths[prefix + path][method]
                assert {"401", "422"} <= set(operation["responses"]), (path, method)
                error = operation["responses"]["401"]["content"]["application/json"]["schema"]
                assert error == {"$ref": "#/components/schemas/ErrorResponse"}
    stream = paths["/tasks/{task_id}/stream"]["get"]["responses"]["200"]["content"]
    assert list(stream) == ["text/event-stream"]
    named = paths["/projects/{project_id}/tasks"]["get"]["parameters"]
    assert any(p["name"] == "project_id" and p["in"] == "path" for p in named)
