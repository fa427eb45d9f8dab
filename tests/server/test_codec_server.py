"""The codec server (``server.codec``): the Temporal CLI's ``--codec-endpoint`` shows a
task's compressed and sealed payloads decoded for a key of the task's project, its sealed text
never for another project's key; and the refusals, by httpx."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from urllib.parse import urlsplit

import httpx

from agent_tasks.codec import ENCODING
from agent_tasks.devstack import find_temporal_binary
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.retention import HistoryRetention
from tests.conftest import payload_texts
from tests.server.conftest import Api, Project

GOAL = "plan the trip, " * 100
"""A goal long enough to travel compressed (``codec.COMPRESS_MIN_BYTES``)."""


async def history_shown(api: Api, workflow_id: str, *codec: str) -> str:
    """The payloads' text in ``temporal workflow show --output json`` of ``workflow_id``, with
    ``codec`` flags."""
    settings = api.services.settings
    shown = await asyncio.create_subprocess_exec(
        str(find_temporal_binary()),
        "workflow",
        "show",
        "--address",
        settings.temporal.address,
        "--namespace",
        settings.temporal.namespace,
        "--workflow-id",
        workflow_id,
        "--output",
        "json",
        *codec,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await shown.communicate()
    assert shown.returncode == 0, err.decode()
    return payload_texts(out.decode())


def origin(api: Api) -> str:
    url = urlsplit(api.services.settings.temporal_ui)
    return f"{url.scheme}://{url.netloc}"


async def test_the_cli_shows_payloads_decoded_sealed_text_only_to_its_project(
    api: Api, project: Project
) -> None:
    secret = f"the passport number is {uuid.uuid4().hex}"
    history: ConversationHistory = project.history
    assert (await history.create_task("trip", GOAL)).recorded
    assert (await history.record_event("trip", "message", secret, role="user")).recorded
    workflow_id = history.workflow_id("trip")
    endpoint = f"{api.url}/codec"

    raw = await history_shown(api, workflow_id)
    assert secret not in raw and "plan the trip" not in raw  # sealed, compressed

    ours = await history_shown(
        api, workflow_id, "--codec-endpoint", endpoint, "--codec-auth", f"Bearer {project.key}"
    )
    assert secret in ours and "plan the trip" in ours

    assert api.services.graph is not None
    _, other_key = await ApiKeyStore(api.services.graph).create(f"other-{project.project_id}", "t")
    theirs = await history_shown(
        api, workflow_id, "--codec-endpoint", endpoint, "--codec-auth", f"Bearer {other_key}"
    )
    assert "plan the trip" in theirs  # compression is no secret
    assert secret not in theirs  # the sealed text is: another project's key opens nothing

    event = (await history.list_events("trip", after_seq=0, limit=1)).events[0]
    retention = HistoryRetention(
        history.client, history.project_id, "admin", graph=history.graph, task_queue=api.queue
    )
    assert (await retention.redact_event(event.id)).recorded
    redacted = await history_shown(
        api, workflow_id, "--codec-endpoint", endpoint, "--codec-auth", f"Bearer {project.key}"
    )
    assert secret not in redacted and '"redacted":true' in redacted  # its key is destroyed
    await history.finish_task("trip", "done")


def payload(data: bytes, encoding: bytes = b"json/plain") -> dict[str, object]:
    return {
        "metadata": {"encoding": base64.b64encode(encoding).decode()},
        "data": base64.b64encode(data).decode(),
    }


async def test_encode_then_decode_gives_back_the_payloads(api: Api, project: Project) -> None:
    big = json.dumps({"text": "x" * 5000}).encode()
    small = b'"hi"'
    body = {"payloads": [payload(big), payload(small)]}
    async with httpx.AsyncClient(base_url=api.url, headers=project.headers) as http:
        encoded = (await http.post("/codec/encode", json=body)).json()
        first, second = encoded["payloads"]
        assert base64.b64decode(first["metadata"]["encoding"]) == ENCODING
        assert second == body["payloads"][1]  # small: unchanged
        decoded = (await http.post("/codec/decode", json=encoded)).json()
    assert decoded == body


async def test_refusals_with_cors_for_the_ui_only(api: Api, project: Project) -> None:
    ui = origin(api)
    body = {"payloads": [payload(b'"hi"')]}
    async with httpx.AsyncClient(base_url=api.url) as http:
        anonymous = await http.post("/codec/decode", json=body, headers={"Origin": ui})
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "unauthorized"
        assert anonymous.headers["access-control-allow-origin"] == ui  # the UI can read why

        bad_key = await http.post(
            "/codec/decode", json=body, headers={"Authorization": "Bearer nope"}
        )
        assert bad_key.status_code == 401

        headers = {**project.headers, "Origin": ui}
        namespace = await http.post(
            "/codec/decode", json=body, headers={**headers, "X-Namespace": "elsewhere"}
        )
        assert namespace.status_code == 403

        not_json = await http.post("/codec/decode", content=b"{not json", headers=headers)
        assert not_json.status_code == 422
        assert not_json.json()["error"]["code"] == "invalid_json"

        corrupt = {"payloads": [payload(b"not zlib", ENCODING)]}
        broken = await http.post("/codec/decode", json=corrupt, headers=headers)
        assert broken.status_code == 422
        assert "zlib" in broken.json()["error"]["message"]

        elsewhere = {**project.headers, "Origin": "http://evil.example"}
        taken = await http.post("/codec/decode", json=body, headers=elsewhere)
        assert taken.status_code == 200
        assert "access-control-allow-origin" not in taken.headers  # a browser hides it

        asked = {
            "Origin": ui,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
        }
        preflight = await http.options("/codec/decode", headers=asked)
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == ui
        assert preflight.headers["access-control-allow-credentials"] == "true"
        assert "x-namespace" in preflight.headers["access-control-allow-headers"]
        refused = await http.options(
            "/codec/decode", headers={**asked, "Origin": "http://evil.example"}
        )
        assert refused.status_code == 403
        assert "access-control-allow-origin" not in refused.headers


async def test_a_web_ui_that_drops_the_endpoints_last_segment_still_decodes(
    api: Api, project: Project
) -> None:
    """temporalio/ui#3399: Web UI releases that resolve ``new URL("decode", endpoint)`` ask
    ``http://host:port/decode?preserveStorageRefs=true`` for the endpoint
    ``http://host:port/codec`` (the last segment dropped), which was 404 here: the codec answers
    there too, preflight included, with the UI's query parameter."""
    ui = origin(api)
    big = json.dumps({"text": "y" * 5000}).encode()
    async with httpx.AsyncClient(base_url=api.url, headers=project.headers) as http:
        encoded = (await http.post("/codec/encode", json={"payloads": [payload(big)]})).json()
        dropped = await http.post(
            "/decode?preserveStorageRefs=true", json=encoded, headers={"Origin": ui}
        )
        assert dropped.status_code == 200, dropped.text
        assert dropped.json() == {"payloads": [payload(big)]}
        assert dropped.headers["access-control-allow-origin"] == ui
        asked = {"Origin": ui, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace"}  # fmt: skip
        preflight = await http.options("/decode?preserveStorageRefs=true", headers=asked)
        assert preflight.status_code == 204
        assert (await http.post("/encode", json={"payloads": [payload(big)]})).json() == encoded
    assert "/decode" not in await openapi_paths(api)  # the schema names /codec's only


async def openapi_paths(api: Api) -> set[str]:
    """The paths the HTTP API's schema documents."""
    async with httpx.AsyncClient(base_url=api.url) as http:
        return set((await http.get("/openapi.json")).json()["paths"])
