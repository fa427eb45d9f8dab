"""The codec server of the Temporal Web UI and CLI: Temporal's remote codec protocol at
``POST /codec/decode`` and ``POST /codec/encode`` (the endpoint to configure is
``http(s)://<serve's host and port>/codec``), each taking and returning
``{"payloads": [{"metadata": {name: base64}, "data": base64}, ...]}`` (the protobuf JSON of
``temporal.api.common.v1.Payloads``), so that a history's payloads show as their JSON instead of
``binary/zlib`` bytes (``codec.ZlibCodec``) or sealed ciphertext (``sealing.seal``).

- ``decode`` restores each compressed payload, then opens the sealed event text in it (an event
  input's ``sealed`` and ``key_id``: ``payload`` gets the text, ``sealed`` becomes null) with
  the keys of the CALLER's project only (``KeyStore.get_keys`` reads one project's keys): a key
  of another project is never found, so another project's sealed text stays ciphertext; a key a
  redaction destroyed shows the event ``redacted``. The plain payloads around it are compressed,
  not secret: whoever may read the namespace's histories can inflate them anyway.
- ``encode`` compresses as the product's clients do (``codec.compress``), for a payload a person
  types into the UI or the CLI (a signal's input, say); it seals nothing.

The caller is authorized as the API's routes authorize (``server.auth``): an API key in
``Authorization: Bearer <key>`` (the CLI's ``--codec-auth 'Bearer <key>'``), or the page's
session cookie, which the Web UI sends when its codec setting "include cross-origin credentials"
is on and the person has signed in to the page on the same site (SameSite=Strict). Decoding and
encoding change nothing, so a session's request needs no CSRF token; the answer is readable in
a browser only by the Temporal Web UI's origin (``Settings.temporal_ui``, CORS with
credentials). An ``X-Namespace`` header (the UI and the CLI send it) must name the namespace the
server serves.

The same routes answer at ``/decode`` and ``/encode`` too (``root_router``): Web UI releases
that join the endpoint and ``decode`` as URLs resolve a relative reference
(``new URL("decode", "http://host:8700/codec")``) drop its last segment and ask
``http://host:8700/decode``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag
from fastapi import APIRouter, Request, Response
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from agent_tasks.codec import compress, decompress
from agent_tasks.sealing.seal import open_text
from agent_tasks.server.auth import SESSION_COOKIE, authenticate, presented_key
from agent_tasks.server.errors import ApiError, error_response
from agent_tasks.server.pagesessions import PageSessionStore

router = APIRouter(prefix="/codec", tags=["codec"])

JSON_ENCODING = b"json/plain"
"""The encoding of the JSON payloads whose sealed text ``decode`` opens."""
CORS_HEADERS = "authorization,content-type,x-namespace"
"""The request headers the Web UI's codec calls may carry."""


def ui_origin(request: Request) -> str:
    """The origin (scheme, host and port) of the Temporal Web UI that may read the answers:
    that of ``Settings.temporal_ui`` (``AGENT_TASKS_TEMPORAL_UI_URL``, else the dev server's)."""
    url = urlsplit(request.app.state.api.settings.temporal_ui)
    return f"{url.scheme}://{url.netloc}"


def _cors(request: Request, response: Response) -> Response:
    """``response`` with the CORS headers of the UI's origin when the request comes from it."""
    origin = ui_origin(request)
    response.headers["Vary"] = "Origin"
    if request.headers.get("origin") == origin:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Credentials"] = "true"
    return response


async def caller_project(request: Request) -> str:
    """The project of the caller: its API key's (``auth.authenticate``), else its page
    session's (no CSRF token asked: decode and encode change nothing).

    Raises:
        ApiError: 401 ``unauthorized`` (no key, one that is not valid, or an ended session),
            403 ``forbidden`` (``X-Namespace`` names another namespace).
    """
    state = request.app.state.api
    sessions: PageSessionStore = state.sessions
    namespace, served = request.headers.get("x-namespace"), state.settings.temporal.namespace
    if namespace is not None and namespace != served:
        raise ApiError(403, "forbidden", f"this codec server serves namespace {served!r} only")
    session = request.cookies.get(SESSION_COOKIE)
    if presented_key(request) is None and session:
        record = await sessions.check(session)
        if record is None:
            raise ApiError(401, "unauthorized", "the session has ended: sign in again")
        return record.project_id
    return (await authenticate(request, state.keys, state.sessions)).project_id


def _sealed_in(value: Any, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects in a JSON value that carry sealed text (a ``sealed`` and a ``key_id``)."""
    if isinstance(value, dict):
        if isinstance(value.get("sealed"), str) and isinstance(value.get("key_id"), str):
            found.append(value)
        for item in value.values():
            _sealed_in(item, found)
    elif isinstance(value, list):
        for item in value:
            _sealed_in(item, found)
    return found


async def open_sealed(request: Request, project_id: str, payload: Payload) -> Payload:
    """``payload`` (decompressed) with the sealed text in it opened by ``project_id``'s keys
    (the module docstring); unchanged when it holds none, or none of that project's."""
    if payload.metadata.get("encoding") != JSON_ENCODING:
        return payload
    try:
        value = json.loads(payload.data)
    except ValueError:
        return payload
    sealed = _sealed_in(value, [])
    graph = request.app.state.api.services.graph
    if not sealed or graph is None:
        return payload
    keys = await graph.get_keys(project_id, sorted({s["key_id"] for s in sealed}))
    opened = 0
    for event in sealed:
        if event["key_id"] not in keys:
            continue  # another project's key, or one the store lost: left sealed
        key = keys[event["key_id"]]
        if key is None:
            event.update(sealed=None, payload="", redacted=True)
        else:
            try:
                event.update(sealed=None, payload=open_text(event["sealed"], key, event["key_id"]))
            except InvalidTag:
                continue
        opened += 1
    if not opened:
        return payload
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return Payload(metadata=dict(payload.metadata), data=data)


async def _apply(
    request: Request, change: Callable[[str, Payload], Awaitable[Payload]]
) -> Response:
    """Authorize the caller, read the body's payloads, ``change`` each (with the caller's
    project) and answer them as JSON, with CORS; refusals as ``ErrorResponse`` JSON."""
    try:
        project_id = await caller_project(request)
        try:
            payloads = json_format.Parse(await request.body(), Payloads())
        except json_format.ParseError as err:
            raise ApiError(422, "invalid_json", f"not a JSON object of payloads: {err}") from err
        try:
            changed = [await change(project_id, p) for p in payloads.payloads]
        except ValueError as err:
            raise ApiError(422, "invalid_argument", str(err)) from err
        body = json_format.MessageToJson(Payloads(payloads=changed), indent=None)
        response = Response(body, media_type="application/json")
    except ApiError as err:
        response = error_response(err)
    return _cors(request, response)


@router.post("/decode")
async def decode(request: Request) -> Response:
    """Temporal's remote codec ``decode``: compressed payloads restored, the sealed text of the
    caller's project opened (the module docstring)."""

    async def change(project_id: str, payload: Payload) -> Payload:
        return await open_sealed(request, project_id, decompress(payload))

    return await _apply(request, change)


@router.post("/encode")
async def encode(request: Request) -> Response:
    """Temporal's remote codec ``encode``: payloads compressed as the product's clients do."""

    async def change(project_id: str, payload: Payload) -> Payload:
        return compress(payload)

    return await _apply(request, change)


@router.options("/decode")
@router.options("/encode")
async def preflight(request: Request) -> Response:
    """The browser's CORS preflight: allowed for the Temporal Web UI's origin only (403 for
    another)."""
    if request.headers.get("origin") != ui_origin(request):
        return _cors(request, error_response(ApiError(403, "forbidden", "origin not allowed")))
    response = _cors(request, Response(status_code=204))
    response.headers["Access-Control-Allow-Methods"] = "POST"
    response.headers["Access-Control-Allow-Headers"] = CORS_HEADERS
    response.headers["Access-Control-Max-Age"] = "600"
    return response


root_router = APIRouter(tags=["codec"], include_in_schema=False)
"""The codec's routes without ``/codec`` (the module docstring)."""
root_router.post("/decode")(decode)
root_router.post("/encode")(encode)
root_router.options("/decode")(preflight)
root_router.options("/encode")(preflight)
