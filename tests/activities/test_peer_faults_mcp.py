"""Peers' faults on the MCP surface (``activities.mcp``), each reproduced against ours with the
tests' own MCP server (``tests.mcp_server``: it counts requests and effects per idempotency key
in its ledger) over stdio and streamable HTTP, real Temporal and Neo4j. Each test's docstring
names the public report it comes from."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent_tasks.contract import EventKind, McpServer, StepState, task_workflow_id
from agent_tasks.worker import Services
from tests.activities.test_mcp import (  # noqa: F401  (fixtures)
    _free_port,
    _gateway,
    _run,
    http_server,
    ledger_path,
    queue,
)
from tests.agent_tools import answer, calls
from tests.mcp_server import ledger


@contextmanager
def _http_server(ledger_file: Path, **env: str) -> Iterator[str]:
    """The tests' MCP server over streamable HTTP (uvicorn in a subprocess) with ``env`` added
    to its environment: its endpoint URL."""
    port = _free_port()
    args = [sys.executable, "-m", "tests.mcp_server", str(ledger_file), "http", str(port)]
    process = subprocess.Popen(args, env={**os.environ, **env})
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise AssertionError("the MCP test server exited") from None
                subprocess.run(["sleep", "0.1"], check=True)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(params=["stdio", "http-sse", "http-json"])
def transport(request: pytest.FixtureRequest, ledger_path: Path) -> Iterator[McpServer]:  # noqa: F811
    """The tests' server as a spec names it (a call's attempt bounded to 30 s), over stdio, over
    HTTP answering with an event stream, and over HTTP answering with one JSON body."""
    if request.param == "stdio":
        args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
        yield McpServer(name="bill", command=sys.executable, args=args, start_to_close_s=30)
        return
    answers = "json" if request.param == "http-json" else "events"
    with _http_server(ledger_path, MCP_TEST_ANSWERS=answers) as url:
        yield McpServer(name="bill", url=url, start_to_close_s=30)


async def test_an_answer_the_client_cannot_parse_is_unknown_and_runs_again_under_its_key(
    services: Services,
    project_id: str,
    queue: str,  # noqa: F811
    transport: McpServer,
    ledger_path: Path,  # noqa: F811
) -> None:
    """MemPalace/mempalace#503: a server performs a call and answers with JSON the MCP SDK's
    parser refuses (a lone UTF-16 surrogate's escape). Over HTTP the SDK makes that a JSON-RPC
    error of its own ("Failed to parse JSON response", "Failed to parse SSE message"), which
    was taken as the server's refusal: the step failed, and the model's same call again ran as
    a new step under a new key, so the server charged twice. Over stdio the SDK drops the line
    and the call waited for its attempt's timeout. Now the step ends ``unknown`` at once, the
    model reads that the server may have performed the call (never "refused"), and the same
    call again runs as that step, under its key: two requests, one effect."""
    call = ("bill_charge_garbled", {"account": "acme"})
    turns = [calls(call), calls(call), answer("done")]
    history = await _run(services, project_id, queue, transport, turns, [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done", final
    steps = (await history.list_steps("t")).steps
    assert [s.state for s in steps] == [StepState.UNKNOWN]
    key = f"{task_workflow_id(project_id, 't')}/{steps[0].name}/1"
    seen = [(e["event"], e["key"]) for e in ledger(ledger_path)]
    assert seen == [("request", key), ("effect", key), ("request", key)]
    events = (await history.list_events("t", limit=100)).events
    results = [e.payload for e in events if e.kind is EventKind.TOOL_RESULT]
    assert len(results) == 2
    for text in results:
        assert "its effect is unknown" in text
        assert "may have performed the call" in text
        assert "refused" not in text


@pytest.mark.parametrize(
    ("status", "headers", "body", "made_up"),
    [
        (202, {}, b"", "server answered a request with 202 Accepted"),
        (200, {"content-type": "text/html"}, b"<p>ok</p>", "Unexpected content type: text/html"),
        (307, {"location": "http://127.0.0.1:9/mcp"}, b"", "Redirect to http://127.0.0.1:9/mcp"),
        (404, {"content-type": "text/plain"}, b"no route", "Not Found"),
    ],
)
async def test_what_the_sdk_makes_up_for_a_gateways_answer_is_no_answer_of_the_servers(
    services: Services,
    project_id: str,
    queue: str,  # noqa: F811
    http_server: str,  # noqa: F811
    ledger_path: Path,  # noqa: F811
    status: int,
    headers: dict[str, str],
    body: bytes,
    made_up: str,
) -> None:
    """modelcontextprotocol/python-sdk#1382 (an HTML page where the answer should be; the SDK
    since raises it as an ``McpError`` of its own, PR #1506): a gateway answers a call the
    server performed with a page of HTML, a 202, a redirect or a 404 of its own. The MCP SDK
    makes each a JSON-RPC error of its own making, which was taken as the server's refusal
    (the step failed, so the model's next call would charge again under a new key). Now the
    step ends ``unknown`` and the model reads what the client got and that the server may
    have performed the call."""
    with _gateway(http_server, status, headers, body) as url:
        server = McpServer(name="bill", url=url)
        turns = [calls(("bill_charge", {"account": "acme", "cents": 9})), answer("ok")]
        history = await _run(services, project_id, queue, server, turns, [])
        final = await history.wait_task("t")
    assert final is not None and final.status.value == "done", final
    steps = (await history.list_steps("t")).steps
    assert [s.state for s in steps] == [StepState.UNKNOWN]
    events = (await history.list_events("t", limit=100)).events
    (result,) = [e.payload for e in events if e.kind is EventKind.TOOL_RESULT]
    assert made_up in result and "the server may have performed the call" in result
    assert [e["event"] for e in ledger(ledger_path)] == ["request", "effect"]
