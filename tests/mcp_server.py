"""The tests' own MCP server (the ``mcp`` SDK's ``MCPServer``, formerly FastMCP), run as a
program over stdio or streamable HTTP: ``python -m tests.mcp_server LEDGER stdio`` or
``python -m tests.mcp_server LEDGER http PORT``.

Every request and every effect is a JSON line appended to the file LEDGER (a stdio server is a
new process per call, so the count lives in the file): ``{"event": "request" | "effect" |
"started" | "cancelled", "tool", "key" (the call's ``_meta`` idempotency key), "header" (its
``Idempotency-Key`` header over HTTP), "tenant" (its ``X-Billing-Tenant`` header)}``, and
``{"event": "launched", "pid"}`` for a program started with a delay (``main``).
``charge`` performs its effect once per key; ``tally`` counts its calls per MCP session.
``charge_garbled`` performs its effect once per key and answers with ``GARBLE`` in its text,
which the program's transport sends as the JSON escape of a lone UTF-16 surrogate (``\\ud800``):
JSON that the client's parser refuses (``garbling``).

With ``MCP_TEST_ANSWERS=json`` in its environment, the HTTP server answers each POST with one
JSON body; with ``MCP_TEST_ANSWERS=events``, with an event stream (``as_events``: the SDK's
server answers a quick call of protocol 2026-07-28 with JSON either way).

Started with ``MCP_TEST_TOOLS=wide`` in its environment, the server also lists ``WIDE_TOOLS``
tools ``wide_000`` ... of ``WIDE_DESCRIPTION_CHARS`` characters of description each, and two
whose names are not tool names once prefixed (``bad name``, and one of 70 characters).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.types import (
    BlobResourceContents,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LEDGER = Path(sys.argv[1]) if __name__ == "__main__" else Path(os.devnull)

server = MCPServer("test-billing")
WIDE_TOOLS = 100
WIDE_DESCRIPTION_CHARS = 1_000
IMAGE_BYTES = 3_000
GARBLE = "~LONE~"
"""Six characters the transport sends as the six of ``\\ud800`` (``garbling``): the lengths
match, so an HTTP answer's ``content-length`` stays true."""
LONE_SURROGATE = b"\\ud800"
"""The image ``blocks`` answers with: this many bytes (4000 characters of base64)."""


def ledger(path: Path) -> list[dict[str, Any]]:
    """The lines the server appended to ``path`` (none when it has not written)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _write(event: str, tool: str, ctx: Context) -> str | None:
    meta: Any = ctx.request_context.meta or {}
    key = meta.get("idempotency_key")
    headers = ctx.headers or {}
    line = {
        "event": event,
        "tool": tool,
        "key": key,
        "header": headers.get("idempotency-key"),
        "tenant": headers.get("x-billing-tenant"),
    }
    with LEDGER.open("a") as out:
        out.write(json.dumps(line) + "\n")
    return key if isinstance(key, str) else None


def _charged(key: str | None) -> bool:
    return any(e["event"] == "effect" and e["key"] == key for e in ledger(LEDGER))


def _charge_once(tool: str, ctx: Context) -> None:
    """Write the request of ``tool``, and its effect unless its key has one already."""
    key = _write("request", tool, ctx)
    if not _charged(key):
        _write("effect", tool, ctx)


@server.tool(description="Charge an account, once per idempotency key.")
async def charge(account: str, cents: int, ctx: Context) -> str:
    """Charge ``cents`` to ``account``: one effect per ``_meta`` idempotency key."""
    _charge_once("charge", ctx)
    return f"charged {account} {cents} cents"


@server.tool(description="Charge, but the first request of a key kills the server.")
async def charge_crashing(account: str, ctx: Context) -> str:
    """The first request of a key ends the server's process before it answers (the client
    loses its connection after the call was sent); later ones charge once per key."""
    key = _write("request", "charge_crashing", ctx)
    if sum(e["event"] == "request" and e["key"] == key for e in ledger(LEDGER)) == 1:
        os._exit(3)
    if not _charged(key):
        _write("effect", "charge_crashing", ctx)
    return f"charged {account}"


@server.tool(description="Charge, then answer with text the client cannot read.")
async def charge_garbled(account: str, ctx: Context) -> str:
    """Charge once per key, then answer with ``GARBLE`` in the text: the client gets JSON
    holding a lone surrogate's escape, which it cannot parse (MemPalace/mempalace#503)."""
    _charge_once("charge_garbled", ctx)
    return f"charged {account} {GARBLE}"


@server.tool(description="Charge, saying so on standard output first.")
async def charge_chatty(account: str, ctx: Context) -> str:
    """Write a log line that is no MCP message to standard output (fd 1: past any diversion of
    ``print``), as servers that log to stdout do (Kapeli/dash-mcp-server#10), then charge once
    per key."""
    os.write(1, b"Processing request of type CallToolRequest\n")
    _charge_once("charge_chatty", ctx)
    return f"charged {account}"


def garbling(app: ASGIApp) -> ASGIApp:
    """``app`` with ``GARBLE`` in every response body replaced by ``LONE_SURROGATE``."""

    async def garbled(scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.body":
                body = message.get("body", b"").replace(GARBLE.encode(), LONE_SURROGATE)
                message = {**message, "body": body}
            await send(message)

        await app(scope, receive, sending)

    return garbled


def as_events(app: ASGIApp) -> ASGIApp:
    """``app`` with each JSON answer to a POST sent as an event stream of one ``message``
    event holding it (as a server sends an answer it streams)."""

    async def streamed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        start: Message | None = None
        body = b""

        async def sending(message: Message) -> None:
            nonlocal start, body
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                if not headers.get(b"content-type", b"").startswith(b"application/json"):
                    await send(message)
                    return
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body += message.get("body", b"")
            if message.get("more_body"):
                return
            events = b"event: message\ndata: " + body + b"\n\n"
            kept = [
                (k, v)
                for k, v in start.get("headers", [])
                if k not in (b"content-type", b"content-length")
            ]
            kept += [
                (b"content-type", b"text/event-stream"),
                (b"content-length", str(len(events)).encode()),
            ]
            await send({**start, "headers": kept})
            await send({"type": "http.response.body", "body": events})

        await app(scope, receive, sending)

    return streamed


class _GarblingOut(io.TextIOWrapper):
    """Standard output with ``GARBLE`` written as ``LONE_SURROGATE`` (stdio's ``garbling``)."""

    def write(self, text: str) -> int:
        return super().write(text.replace(GARBLE, LONE_SURROGATE.decode()))


async def _serve_stdio() -> None:
    """Serve over stdio as ``MCPServer.run("stdio")`` does, through ``_GarblingOut``."""
    import anyio

    out = anyio.wrap_file(_GarblingOut(sys.stdout.buffer, encoding="utf-8"))
    async with stdio_server(stdout=out) as (read_stream, write_stream):
        lowlevel = server._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


@server.tool(description="Charge, then hold the first answer of a key a while.")
async def charge_held(account: str, seconds: float, ctx: Context) -> str:
    """Charge once per key; the first request of a key then waits ``seconds`` before it
    answers (a worker killed meanwhile never gets the answer)."""
    key = _write("request", "charge_held", ctx)
    first = not _charged(key)
    if first:
        _write("effect", "charge_held", ctx)
        await asyncio.sleep(seconds)
    return f"charged {account}"


@server.tool(description="Wait a while.", annotations=ToolAnnotations(readOnlyHint=True))
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep ``seconds``, writing ``started`` and, when the client cancels, ``cancelled``."""
    _write("started", "slow", ctx)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _write("cancelled", "slow", ctx)
        raise
    return "slept"


@server.tool(description="Refuse, always.")
async def refuse(reason: str) -> str:
    """Fail with ``reason``: the client gets a result marked ``isError``."""
    raise ToolError(f"refused: {reason}")


@server.tool(description="Answer with a JSON-RPC error, always.")
async def rpc_error(reason: str) -> str:
    """Raise ``MCPError``: the server answers the request with a JSON-RPC error, not a
    result."""
    raise MCPError(code=-32603, message=f"upstream answered 422: {reason}")


@server.tool(
    description="Look an account's balance up.", annotations=ToolAnnotations(readOnlyHint=True)
)
async def balance(account: str) -> str:
    """A read-only answer."""
    return f"{account}: 1200 cents"


_TALLIES: Counter[str] = Counter()


@server.tool(description="Count this session's calls of tally.")
async def tally(ctx: Context) -> str:
    """How many calls of ``tally`` this MCP session has had, this one included (``1`` for
    its first): one session across calls counts on, a session per call answers ``1``. A
    session is the HTTP session's id (its ``Mcp-Session-Id`` header, which protocol 2026-07-28
    no longer sends: then the server's process, as over stdio, where a process is a session)."""
    session = (ctx.headers or {}).get("mcp-session-id", "process")
    _TALLIES[session] += 1
    return str(_TALLIES[session])


@server.tool(
    description="The server's environment variables of these names (JSON; null when unset).",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def environment(names: list[str]) -> str:
    """What the server's process was started with: ``{name: value or None}``."""
    return json.dumps({name: os.environ.get(name) for name in names})


@server.tool(
    description="A receipt as blocks of every kind.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def blocks() -> list[ContentBlock]:
    """A text, an image, an embedded text resource, an embedded binary resource and a link."""
    image = base64.b64encode(bytes(IMAGE_BYTES)).decode()
    pdf = base64.b64encode(b"%PDF-1.7 receipt").decode()
    return [
        TextContent(type="text", text="receipt follows"),
        ImageContent(type="image", data=image, mime_type="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="file:///receipt.txt", mime_type="text/plain", text="paid 250 cents"
            ),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri="file:///receipt.pdf", mime_type="application/pdf", blob=pdf
            ),
        ),
        ResourceLink(type="resource_link", uri="https://billing.example/r/1", name="r1"),
    ]


@server.tool(
    description="An embedded text resource this many characters long.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def long_resource(chars: int) -> list[ContentBlock]:
    """One embedded text resource of ``chars`` characters: ``0123456789`` repeated."""
    text = ("0123456789" * (chars // 10 + 1))[:chars]
    return [
        EmbeddedResource(
            type="resource", resource=TextResourceContents(uri="file:///long", text=text)
        )
    ]


def _wide() -> None:
    """Register the wide listing's tools (module docstring)."""
    for i in range(WIDE_TOOLS):

        async def wide(n: int) -> str:
            return str(n)

        description = f"Wide tool {i:03d}. " + "x" * WIDE_DESCRIPTION_CHARS
        server.add_tool(
            wide, name=f"wide_{i:03d}", description=description[:WIDE_DESCRIPTION_CHARS]
        )
    for name in ("bad name", "t" * 70):

        async def odd() -> str:
            return "odd"

        server.add_tool(odd, name=name, description="A name no model may call.")


if os.environ.get("MCP_TEST_TOOLS") == "wide":
    _wide()


def main() -> None:
    """Run the server on the transport the command line names. With ``MCP_TEST_START_DELAY_S``
    in its environment, the program first writes a ``launched`` line with its ``pid`` to the
    ledger and sleeps that long before it serves (a listing that waits for its answer)."""
    delay = float(os.environ.get("MCP_TEST_START_DELAY_S") or 0)
    if delay:
        with LEDGER.open("a") as out:
            out.write(json.dumps({"event": "launched", "pid": os.getpid()}) + "\n")
        time.sleep(delay)
    if sys.argv[2] == "stdio":
        asyncio.run(_serve_stdio())
    else:
        import uvicorn

        answers = os.environ.get("MCP_TEST_ANSWERS")
        app: ASGIApp = server.streamable_http_app(json_response=answers == "json")
        app = garbling(as_events(app) if answers == "events" else app)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="error")


if __name__ == "__main__":
    main()
