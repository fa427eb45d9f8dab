"""Peers' faults on the MCP surface (``activities.mcp``), each reproduced against ours with the
tests' own MCP server (``tests.mcp_server``: it counts requests and effects per idempotency key
in its ledger) over stdio and streamable HTTP, real Temporal and Neo4j. Each test's docstring
names the public report it comes from."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent_tasks.contract import AgentSpec, EventKind, McpServer, StepState, task_workflow_id
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services
from tests.activities.test_mcp import (  # noqa: F401  (fixtures)
    Answer,
    _gateway,
    _run,
    _tallied,
    forwarding_gateway,
    http_server,
    ledger_path,
    queue,
    served_mcp,
)
from tests.agent_tools import answer, calls
from tests.conftest import eventually
from tests.mcp_server import ledger


@pytest.fixture(params=["stdio", "http-sse", "http-json"])
def transport(request: pytest.FixtureRequest, ledger_path: Path) -> Iterator[McpServer]:  # noqa: F811
    """The tests' server as a spec names it (a call's attempt bounded to 30 s), over stdio, over
    HTTP answering with an event stream, and over HTTP answering with one JSON body."""
    if request.param == "stdio":
        args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
        yield McpServer(name="bill", command=sys.executable, args=args, start_to_close_s=30)
        return
    answers = "json" if request.param == "http-json" else "events"
    with served_mcp(ledger_path, MCP_TEST_ANSWERS=answers) as url:
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


@contextmanager
def _resuming_gateway(upstream: str, retry_ms: int | None) -> Iterator[tuple[str, list[str]]]:
    """A gateway in front of the MCP server at ``upstream`` that answers a ``tools/call`` (after
    the server performed it) with an event stream holding one priming event (an id, no data;
    ``retry: retry_ms`` when given) and then ends it, cleanly: the client resumes with a GET
    naming the event's id, which the gateway answers the same way, for ever. Yields the URL
    and the ids the resuming GETs named."""
    retry = b"" if retry_ms is None else f"retry: {retry_ms}\n".encode()
    events = b"id: e1\n" + retry + b"data: \n\n"
    primed: Answer = (200, {"content-type": "text/event-stream"}, events)
    resumed: list[str] = []

    def resume(headers: Mapping[str, str]) -> Answer | None:
        event_id = {k.lower(): v for k, v in headers.items()}.get("last-event-id")
        if not event_id:
            return None
        resumed.append(event_id)
        return primed

    with forwarding_gateway(upstream, primed, resume) as url:
        yield url, resumed


@pytest.mark.parametrize("retry_ms", [86_400_000, None])
async def test_a_stream_that_asks_to_resume_a_day_later_or_for_ever_ends_at_the_attempts_bound(
    services: Services,
    project_id: str,
    queue: str,  # noqa: F811
    http_server: str,  # noqa: F811
    ledger_path: Path,  # noqa: F811
    retry_ms: int | None,
) -> None:
    """modelcontextprotocol/ruby-sdk#504 (a server primes a stream with an event id, ends it
    cleanly and asks, by the SSE ``retry:`` field, for a day's wait before the client resumes:
    the client slept as asked) and modelcontextprotocol/python-sdk#2393 (a server that ends
    every resumed stream again: the client resumed for ever). The MCP SDK here does both, so
    the call is bounded by its attempt's start-to-close timeout (5 s): the step (not
    idempotent) ends ``unknown``, the effect once, the task goes on, and the resumes end with
    the call's session (none after it)."""
    with _resuming_gateway(http_server, retry_ms) as (url, resumes):
        server = McpServer(name="bill", url=url, start_to_close_s=5)
        turns = [calls(("bill_charge", {"account": "acme", "cents": 9})), answer("ok")]
        began = time.monotonic()
        history = await _run(services, project_id, queue, server, turns, [])
        final = await history.wait_task("t")
        took = time.monotonic() - began
        resumed = len(resumes)
        await asyncio.sleep(3)
        assert len(resumes) == resumed  # no resume after the call's end
    assert final is not None and final.status.value == "done", final
    assert took < 30
    steps = (await history.list_steps("t")).steps
    assert [s.state for s in steps] == [StepState.UNKNOWN]
    assert [e["event"] for e in ledger(ledger_path)] == ["request", "effect"]
    assert resumed == 0 if retry_ms else resumed >= 2


async def test_a_log_line_on_a_stdio_servers_output_is_no_answer(
    services: Services,
    project_id: str,
    queue: str,  # noqa: F811
    ledger_path: Path,  # noqa: F811
) -> None:
    """Kapeli/dash-mcp-server#10 (a server that writes "Processing request of type ..." to
    stdout on every request): the MCP SDK drops the line it cannot parse and takes the answer
    that follows. A line that is no JSON-RPC answer must not end the call: the step completes
    with the server's answer, one effect."""
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, start_to_close_s=30)
    turns = [calls(("bill_charge_chatty", {"account": "acme"})), answer("done")]
    history = await _run(services, project_id, queue, server, turns, [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done", final
    steps = (await history.list_steps("t")).steps
    assert [s.state for s in steps] == [StepState.COMPLETED]
    events = (await history.list_events("t", limit=100)).events
    assert [e.payload for e in events if e.kind is EventKind.TOOL_RESULT] == ["charged acme"]
    assert [e["event"] for e in ledger(ledger_path)] == ["request", "effect"]


async def test_a_json_rpc_error_in_an_error_status_is_the_servers_own_answer(
    services: Services,
    project_id: str,
    queue: str,  # noqa: F811
    http_server: str,  # noqa: F811
) -> None:
    """modelcontextprotocol/python-sdk#1212 (a server's 400 with its own message in the body:
    the client disregarded the message): an HTTP error status whose body is a JSON-RPC error is
    the server's own answer, not an unknown outcome. The step fails with the server's code and
    message (``McpToolError``), which the model reads."""
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": "no account x"}}
    body = json.dumps(error).encode()
    with _gateway(http_server, 400, {"content-type": "application/json"}, body) as url:
        server = McpServer(name="bill", url=url)
        turns = [calls(("bill_balance", {"account": "x"})), answer("ok")]
        history = await _run(services, project_id, queue, server, turns, [])
        final = await history.wait_task("t")
    assert final is not None and final.status.value == "done", final
    steps = (await history.list_steps("t")).steps
    assert [s.state for s in steps] == [StepState.FAILED]
    events = (await history.list_events("t", limit=100)).events
    (result,) = [e.payload for e in events if e.kind is EventKind.TOOL_RESULT]
    assert result == (
        "McpToolError: 'balance' of MCP server 'bill' answered the call with an error "
        "(JSON-RPC -32602): no account x"
    )


async def test_a_call_past_its_timeout_leaves_the_stateful_session_and_its_state(
    services: Services,
    project_id: str,
    queue: str,  # noqa: F811
    ledger_path: Path,  # noqa: F811
) -> None:
    """unslothai/unsloth PR #7625 (a call stopped, or past its longest duration, killed the
    whole stdio server and its state, not just the call): in a stateful session over stdio, a
    call that outlasts its attempt's timeout (5 s) is cancelled on the server, its step ends
    by the timeout, and the session lives on: the run's next call counts on (1, then 2)."""
    import tests.http_tools  # noqa: F401  (registers the agent mcp_in_turn)

    assert services.graph is not None
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(
        name="bill",
        command=sys.executable,
        args=args,
        stateful=True,
        start_to_close_s=5,
        max_attempts=1,
    )
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    planned = [["bill_tally", {}], ["bill_slow", {"seconds": 60}], ["bill_tally", {}]]
    spec = AgentSpec(name="mcp_in_turn", mcp_servers=[server], input={"calls": planned})
    assert (await history.create_task("t", "in turn", agent=spec)).recorded
    steps = await _tallied(history)
    assert [state for state, _ in steps] == ["completed", "failed", "completed"]
    assert "timeout" in steps[1][1].lower()
    assert (steps[0][1], steps[2][1]) == ("1", "2")  # one session, its state kept

    async def cancelled() -> bool:
        return "cancelled" in [e["event"] for e in ledger(ledger_path)]

    await eventually(cancelled, within=10)
