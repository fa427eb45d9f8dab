"""MCP servers as an agent's tool sources (``activities.mcp``) against a real MCP server of the
tests' own (``tests.mcp_server``: the ``mcp`` SDK's server, a program started over stdio for
each call, or served over streamable HTTP by uvicorn), real Temporal and Neo4j: the server
counts requests and effects by the ``_meta`` idempotency key the step sends."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from agent_tasks.contract import (
    AgentSpec,
    EventKind,
    InputRequest,
    McpServer,
    ModelSpec,
    StepState,
    TaskView,
    task_workflow_id,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker
from tests.agent_tools import SCRIPTS, answer, calls
from tests.conftest import eventually
from tests.mcp_server import ledger
from tests.workflows.conftest import worker_process
from tests.workflows.test_approval_binding import expected_digest

ROOT = Path(__file__).resolve().parents[2]
"""The repository (the killed worker's folder)."""
HEADER_SET = {"billing": {"X-Billing-Tenant": "tests"}}


def _listing_env() -> Any:
    """An ``ActivityEnvironment`` whose attempt has the listing's start-to-close timeout
    (``registry.MCP_LIST_TIMEOUT``; the environment's default is 1 second, which the listing
    now keeps to)."""
    import dataclasses

    from temporalio.testing import ActivityEnvironment

    from agent_tasks.workflows.agents.registry import MCP_LIST_TIMEOUT

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, start_to_close_timeout=MCP_LIST_TIMEOUT)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def http_server(ledger_path: Path) -> Iterator[str]:
    """The test server over streamable HTTP (uvicorn in a subprocess): its endpoint URL."""
    with served_mcp(ledger_path) as url:
        yield url


@contextmanager
def served_mcp(ledger_file: Path, **env: str) -> Iterator[str]:
    """The test server over streamable HTTP (uvicorn in a subprocess) writing ``ledger_file``,
    with ``env`` added to its environment: its endpoint URL."""
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


@pytest.fixture(params=["stdio", "http"])
def billing(request: pytest.FixtureRequest, ledger_path: Path) -> McpServer:
    """The test server as an agent's spec names it, over each transport."""
    if request.param == "stdio":
        args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
        return McpServer(name="bill", command=sys.executable, args=args)
    url = request.getfixturevalue("http_server")
    return McpServer(name="bill", url=url, headers="billing")


@pytest.fixture
async def queue(services: Services) -> AsyncIterator[str]:
    assert services.graph is not None
    name = f"mcp-{uuid.uuid4().hex[:8]}"
    async with build_worker(
        services.client, services.graph, name, scripts=SCRIPTS, mcp_headers=HEADER_SET
    ):
        yield name


async def _run(
    services: Services,
    project_id: str,
    queue: str,
    server: McpServer,
    turns: list[Any],
    tools: list[str],
) -> ConversationHistory:
    """Start task ``t`` of an agent with the scripted ``turns`` and the MCP server."""
    assert services.graph is not None
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    goal = json.dumps([t.model_dump(mode="json") for t in turns])
    spec = AgentSpec(
        tools=tools,
        mcp_servers=[server],
        model=ModelSpec(provider="scripted", model="from-goal"),
    )
    assert (await history.create_task("t", goal, agent=spec)).recorded
    return history


@pytest.mark.parametrize("stateful", [False, True])
async def test_a_call_is_a_step_carrying_its_key(
    services: Services,
    project_id: str,
    queue: str,
    billing: McpServer,
    ledger_path: Path,
    stateful: bool,
) -> None:
    """One call of the server's ``charge``: one step, completed with the server's text, and the
    server saw one request whose ``_meta`` key is the step's ``{workflow}/{step}/1`` (and, over
    HTTP, the same ``Idempotency-Key`` header: also in a stateful session, whose client was
    opened before the call, with no key)."""
    turns = [calls(("bill_charge", {"account": "acme", "cents": 250})), answer("done")]
    server = billing.model_copy(update={"stateful": stateful})
    history = await _run(services, project_id, queue, server, turns, [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    (step,) = (await history.list_steps("t")).steps
    assert step.state is StepState.COMPLETED
    events = (await history.list_events("t", limit=100)).events
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert result.payload == "charged acme 250 cents"
    key = f"{task_workflow_id(project_id, 't')}/{step.name}/1"
    seen = ledger(ledger_path)
    assert [(e["event"], e["key"]) for e in seen] == [("request", key), ("effect", key)]
    header = key if billing.url else None
    assert {e["header"] for e in seen} == {header}
    tenant = HEADER_SET["billing"]["X-Billing-Tenant"] if billing.url else None
    assert {e["tenant"] for e in seen} == {tenant}  # the worker's named header set


async def test_calls_at_once_in_one_http_session_each_send_their_own_key_header(
    services: Services, project_id: str, queue: str, http_server: str, ledger_path: Path
) -> None:
    """Three calls at once of a stateful server over HTTP share the run's one session (one
    HTTP client, opened before them): each request the server took carries its own step's key
    as the ``Idempotency-Key`` header, the same as its ``_meta`` key."""
    import tests.http_tools  # noqa: F401  (registers the agent mcp_at_once)

    assert services.graph is not None
    server = McpServer(name="bill", url=http_server, headers="billing", stateful=True)
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    args = [{"account": f"a{n}", "cents": n} for n in (1, 2, 3)]
    spec = AgentSpec(
        name="mcp_at_once", mcp_servers=[server], input={"tool": "bill_charge", "args": args}
    )
    assert (await history.create_task("t", "three at once", agent=spec)).recorded
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done", final
    assert final.result is not None and json.loads(final.result.text) == ["completed"] * 3
    prefix = task_workflow_id(project_id, "t")
    requests = [(e["key"], e["header"]) for e in ledger(ledger_path) if e["event"] == "request"]
    expected = {f"{prefix}/c{n}/1" for n in (1, 2, 3)}
    assert sorted(requests) == sorted((key, key) for key in expected)


async def test_the_listing_is_the_models_offer(services: Services, queue: str) -> None:
    """The listing activity names the server's tools ``{server}_{tool}`` with their input JSON
    Schemas, marks read-only tools idempotent and applies the server's approval rule."""

    from agent_tasks.activities.mcp import McpActivities

    async def no_arguments(_: object) -> str:
        raise AssertionError("a listing reads no call")

    server = McpServer(
        name="bill",
        command=sys.executable,
        args=["-m", "tests.mcp_server", "/dev/null", "stdio"],
        approval=["charge"],
    )
    specs = (await _listing_env().run(McpActivities(no_arguments).list_tools, server)).specs
    assert set(specs) == {
        "bill_charge",
        "bill_charge_crashing",
        "bill_charge_held",
        "bill_charge_garbled",
        "bill_charge_chatty",
        "bill_slow",
        "bill_refuse",
        "bill_rpc_error",
        "bill_balance",
        "bill_environment",
        "bill_blocks",
        "bill_long_resource",
        "bill_tally",
    }
    charge = specs["bill_charge"]
    assert charge.parameters["required"] == ["account", "cents"]
    assert charge.approval and not charge.idempotent
    assert specs["bill_balance"].idempotent and not specs["bill_balance"].approval
    assert charge.mcp is not None and charge.mcp.tool == "charge"


async def test_a_retried_call_carries_the_same_key(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """The server dies after it took the first request (its connection is lost after the call
    was sent): an idempotent tool's retry sends the same key, and the effect happens once."""
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(
        name="bill", command=sys.executable, args=args, idempotent=["charge_crashing"]
    )
    turns = [calls(("bill_charge_crashing", {"account": "acme"})), answer("done")]
    history = await _run(services, project_id, queue, server, turns, [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    (step,) = (await history.list_steps("t")).steps
    assert step.state is StepState.COMPLETED
    key = f"{task_workflow_id(project_id, 't')}/{step.name}/1"
    events = [(e["event"], e["key"]) for e in ledger(ledger_path)]
    assert events == [("request", key), ("request", key), ("effect", key)]


async def test_a_lost_connection_leaves_a_non_idempotent_call_unknown(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """Not idempotent, the same lost connection ends the step ``unknown`` and nothing runs it
    again: the server saw one request and performed no effect."""
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args)
    turns = [calls(("bill_charge_crashing", {"account": "acme"})), answer("done")]
    history = await _run(services, project_id, queue, server, turns, [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    (step,) = (await history.list_steps("t")).steps
    assert step.state is StepState.UNKNOWN
    events = (await history.list_events("t", limit=100)).events
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert "its effect is unknown" in result.payload
    assert [e["event"] for e in ledger(ledger_path)] == ["request"]


@pytest.mark.parametrize("tool", ["refuse", "rpc_error"])
async def test_a_server_error_is_a_result_the_model_reads(
    services: Services,
    project_id: str,
    queue: str,
    billing: McpServer,
    ledger_path: Path,
    tool: str,
) -> None:
    """openai/openai-agents-python#879 and #3212: a tool error from the server (a result marked
    ``isError``, or a JSON-RPC error answer) fails the step with its text; the model reads it in
    its next turn and the task ends ``done``, not failed (nor the step ``unknown``)."""
    turns = [calls((f"bill_{tool}", {"reason": "card declined"})), answer("told the user")]
    history = await _run(services, project_id, queue, billing, turns, [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    (step,) = (await history.list_steps("t")).steps
    assert step.state is StepState.FAILED
    events = (await history.list_events("t", limit=100)).events
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert result.payload.startswith("McpToolError: ")
    assert "card declined" in result.payload


async def test_a_cancel_reaches_the_server(
    services: Services, project_id: str, queue: str, billing: McpServer, ledger_path: Path
) -> None:
    """A cancel of the task during a slow MCP tool reaches the server as
    ``notifications/cancelled``: the server's tool is cancelled (it writes so) and the step
    ends ``unknown``."""
    turns = [calls(("bill_slow", {"seconds": 120})), answer("never")]
    history = await _run(services, project_id, queue, billing, turns, [])

    async def started() -> bool:
        return any(e["event"] == "started" for e in ledger(ledger_path))

    await eventually(started)
    await history.cancel_task("t")

    async def cancelled() -> bool:
        return any(e["event"] == "cancelled" for e in ledger(ledger_path))

    await eventually(cancelled, within=5.0)
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "cancelled"
    (step,) = (await history.list_steps("t")).steps
    assert step.state is StepState.UNKNOWN
    key = f"{task_workflow_id(project_id, 't')}/{step.name}/1"
    assert {e["key"] for e in ledger(ledger_path)} == {key}


def test_a_spec_names_one_transport() -> None:
    """An MCP server with both a command and a URL, or neither, or headers over stdio, is refused
    with its name in the error (nothing is started)."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="give one of command"):
        McpServer(name="x", command="prog", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValidationError, match="give one of command"):
        McpServer(name="x")
    with pytest.raises(ValidationError, match="headers are for a url"):
        McpServer(name="x", command="prog", headers="billing")


def _once(server: McpServer, tool: str, args: dict[str, Any]) -> AgentSpec:
    """The agent ``http_once`` (``tests.http_tools``): one step ``charge`` of ``tool``."""
    return AgentSpec(name="http_once", mcp_servers=[server], input={"tool": tool, "args": args})


async def test_a_persons_retry_of_an_unknown_call_sends_its_key(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """The server took the call and its connection was lost before it answered: the step (not
    idempotent) ends ``unknown`` and the task fails; a person's ``retry_step`` sends the same
    key, and the server performs the effect once."""
    import tests.http_tools  # noqa: F401  (registers the agent http_once)

    assert services.graph is not None
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args)
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    spec = _once(server, "bill_charge_crashing", {"account": "acme"})
    assert (await history.create_task("t", "charge once", agent=spec)).recorded
    failed = await history.wait_task("t")
    assert failed is not None and failed.status.value == "failed"
    key = f"{task_workflow_id(project_id, 't')}/charge/1"
    assert [(e["event"], e["key"]) for e in ledger(ledger_path)] == [("request", key)]
    assert failed.error is not None
    assert "the server's program ended before it answered" in failed.error.text
    await retried_to_done(history)
    events = [(e["event"], e["key"]) for e in ledger(ledger_path)]
    assert events == [("request", key), ("request", key), ("effect", key)]


async def retried_to_done(history: ConversationHistory) -> None:
    """A person's retry of task ``t``'s unknown step ``charge``, then its end ``done``."""
    assert (await history.retry_step("t", "charge", reason="the server dedupes")).recorded

    async def done() -> bool:
        view = (await history.get_task("t")).view
        return view is not None and view.status.value == "done"

    await eventually(done, within=60)


CHARGE = {"account": "acme", "cents": 5}
"""The arguments of the charge the approval tests ask a person about."""


async def _asked_to_approve_a_charge(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> tuple[ConversationHistory, InputRequest]:
    """Start task ``t``: one call of ``bill_charge`` (``CHARGE``) on the tests' stdio server
    with ``approval=["charge"]``; return the history and the approval request once the task
    waits for it (``awaiting_input``, its only request)."""
    import tests.http_tools  # noqa: F401  (registers the agent http_once)

    assert services.graph is not None
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, approval=["charge"])
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    spec = _once(server, "bill_charge", CHARGE)
    assert (await history.create_task("t", "charge once", agent=spec)).recorded

    async def asked() -> bool:
        view = (await history.get_task("t")).view
        return view is not None and bool(view.pending_inputs)

    await eventually(asked, within=60)
    view = (await history.get_task("t")).view
    assert view is not None and view.status.value == "awaiting_input"
    (request,) = view.pending_inputs
    return history, request


async def test_a_tool_the_server_rule_names_is_approved_before_it_runs(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """``approval=["charge"]``: the call waits for a person (nothing reaches the server), and
    the accepted call runs once under the step's key."""
    history, request = await _asked_to_approve_a_charge(services, project_id, queue, ledger_path)
    assert request.approval is not None
    assert ledger(ledger_path) == []
    assert (await history.approve("t", request.input_id, "accept")).recorded
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    key = f"{task_workflow_id(project_id, 't')}/charge/1"
    assert [(e["event"], e["key"]) for e in ledger(ledger_path)] == [
        ("request", key),
        ("effect", key),
    ]


async def test_an_mcp_calls_approval_names_its_digest_and_another_is_refused_stale(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """The request of an MCP tool call names the digest of the exact call (SHA-256 of the
    canonical JSON of the tool, arguments and key, computed here); a decision naming another
    call's digest is refused ``approval_stale`` and nothing reaches the server; the shown
    digest runs the call once under its key."""
    history, request = await _asked_to_approve_a_charge(services, project_id, queue, ledger_path)
    ask = request.approval
    key = f"{task_workflow_id(project_id, 't')}/charge/1"
    assert ask is not None and ask.idempotency_key == key
    assert ask.digest == expected_digest("bill_charge", CHARGE, key)
    other = expected_digest("bill_charge", {**CHARGE, "cents": 500}, key)
    stale = await history.approve("t", request.input_id, "accept", digest=other)
    assert (stale.recorded, stale.error) == (False, ErrorCode.APPROVAL_STALE)
    assert ledger(ledger_path) == []
    view = (await history.get_task("t")).view
    assert view is not None and [r.input_id for r in view.pending_inputs] == [request.input_id]
    shown = await history.approve("t", request.input_id, "accept", digest=ask.digest)
    assert shown.recorded, shown
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    assert [(e["event"], e["key"]) for e in ledger(ledger_path)] == [
        ("request", key),
        ("effect", key),
    ]


async def test_a_header_set_the_worker_lacks_is_refused() -> None:
    """A server whose spec names a header set this worker's configuration lacks is refused
    (``McpServerRefused``, not retried) before anything is sent."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from agent_tasks.activities.mcp import MCP_SERVER_REFUSED, McpActivities

    async def no_arguments(_: object) -> str:
        raise AssertionError("a listing reads no call")

    server = McpServer(name="bill", url="http://127.0.0.1:9/mcp", headers="missing")
    activities = McpActivities(no_arguments, {"billing": {"X-Billing-Tenant": "tests"}})
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(activities.list_tools, server)
    assert refused.value.type == MCP_SERVER_REFUSED and refused.value.non_retryable
    assert "no header set 'missing'" in str(refused.value)


async def test_a_worker_killed_during_a_call_leaves_it_unknown_and_a_retry_sends_its_key(
    services: Services, project_id: str, ledger_path: Path
) -> None:
    """The worker (a process of its own) is killed with SIGKILL after the server performed the
    charge and before it answered: the step (not idempotent) ends ``unknown`` when its
    heartbeat times out and the task fails; a person's ``retry_step`` sends the same key, and
    the server performs the effect once."""

    import tests.http_tools  # noqa: F401  (registers the agent http_once)

    assert services.graph is not None
    queue = f"mcp-kill-{uuid.uuid4().hex[:8]}"
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, heartbeat_s=2)
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    process = await worker_process(queue)
    try:
        spec = _once(server, "bill_charge_held", {"account": "acme", "seconds": 300})
        assert (await history.create_task("t", "charge once", agent=spec)).recorded

        async def charged() -> bool:
            return any(e["event"] == "effect" for e in ledger(ledger_path))

        await eventually(charged, within=60)
    finally:
        process.kill()  # SIGKILL: no shutdown of any kind
        await process.wait()
    key = f"{task_workflow_id(project_id, 't')}/charge/1"
    async with build_worker(services.client, services.graph, queue, scripts=SCRIPTS):
        failed = await history.wait_task("t")
        assert failed is not None and failed.status.value == "failed"
        (step,) = (await history.list_steps("t")).steps
        assert step.state is StepState.UNKNOWN
        await retried_to_done(history)
    events = [(e["event"], e["key"]) for e in ledger(ledger_path)]
    assert events == [("request", key), ("effect", key), ("request", key)]


async def test_an_api_model_is_offered_the_listed_tools(
    services: Services,
    project_id: str,
    queue: str,
    ledger_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tool loop with an OpenAI-compatible model (the tests' scripted HTTP server): the
    request offers the MCP server's tools as functions named ``{server}_{tool}`` with the
    input JSON Schemas the server declares, beside the agent's own tools."""
    from tests.model_server import ModelServer, Reply, completion

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = ModelServer([Reply(body=completion("nothing to do"))])
    monkeypatch.setenv("OPENAI_BASE_URL", model.url)
    assert services.graph is not None
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, tools=["charge", "slow"])
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    spec = AgentSpec(mcp_servers=[server], model=ModelSpec(provider="openai", model="m"))
    with model.running():
        assert (await history.create_task("t", "charge acme", agent=spec)).recorded
        final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    (request,) = model.requests
    offered = {t["function"]["name"]: t["function"] for t in request["tools"]}
    assert set(offered) == {"bill_charge", "bill_slow"}
    charge = offered["bill_charge"]
    assert charge["description"] == "Charge an account, once per idempotency key."
    assert charge["parameters"]["required"] == ["account", "cents"]
    properties = charge["parameters"]["properties"]
    assert (properties["account"]["type"], properties["cents"]["type"]) == ("string", "integer")
    assert ledger(ledger_path) == []  # offered, not called


async def test_a_call_past_its_timeout_is_cancelled_on_the_server_and_retried_with_its_key(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """modelcontextprotocol/python-sdk#2507's kind (a client that gives up on a call leaves the
    server's work running): a read-only tool (idempotent by its hint) that outlasts its
    attempt's start-to-close timeout is cancelled on the server at each timeout, retried with
    the same key, and its step fails with the timeout once the attempts are spent."""
    assert services.graph is not None
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(
        name="bill", command=sys.executable, args=args, start_to_close_s=3, max_attempts=2
    )
    turns = [calls(("bill_slow", {"seconds": 120})), answer("gave up")]
    history = await _run(services, project_id, queue, server, turns, [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    (step,) = (await history.list_steps("t")).steps
    assert step.state is StepState.FAILED
    events = (await history.list_events("t", limit=100)).events
    (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert "timeout" in result.payload

    async def both_cancelled() -> bool:
        return [e["event"] for e in ledger(ledger_path)].count("cancelled") == 2

    await eventually(both_cancelled, within=10)
    key = f"{task_workflow_id(project_id, 't')}/{step.name}/1"
    seen = [(e["event"], e["key"]) for e in ledger(ledger_path)]
    assert seen == [("started", key), ("cancelled", key)] * 2


def _payload_texts(message: Any) -> Iterator[bytes]:
    """The data of every payload in a history's proto ``message``, decompressed
    (``codec.decompress``): what the history holds, readable."""
    from google.protobuf.message import Message
    from temporalio.api.common.v1 import Payload

    from agent_tasks.codec import decompress

    if isinstance(message, Payload):
        yield decompress(message).data
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            values = [value]
        else:  # a repeated field, or a map's values
            values = list(value.values()) if hasattr(value, "values") else list(value)
        for inner in values:
            if isinstance(inner, Message):
                yield from _payload_texts(inner)


async def test_a_worker_started_from_the_environment_sends_its_header_set(
    services: Services, project_id: str, http_server: str, ledger_path: Path, tmp_path: Path
) -> None:
    """``python -m agent_tasks.worker`` with ``AGENT_TASKS_MCP_HEADERS`` naming a JSON file of
    header sets: the listing and the call of an agent whose spec names the set ``billing`` carry
    its header to the HTTP server; the value is in neither the task's history nor the worker's
    output."""
    import os

    from tests.model_server import ModelServer, Reply, completion

    assert services.graph is not None
    secret = f"tenant-{uuid.uuid4().hex}"
    sets = tmp_path / "mcp-headers.json"
    sets.write_text(json.dumps({"billing": {"X-Billing-Tenant": secret}}))
    arguments = json.dumps({"account": "acme", "cents": 7})
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bill_charge", "arguments": arguments},
    }
    model = ModelServer([Reply(body=completion(tool_calls=[call])), Reply(body=completion("ok"))])
    queue = f"mcp-env-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "TEMPORAL_TASK_QUEUE": queue,
        "AGENT_TASKS_MCP_HEADERS": str(sets),
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": model.url,
    }
    output = tmp_path / "worker.out"
    with model.running(), output.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent_tasks.worker", cwd=ROOT, env=env, stdout=out, stderr=out
        )
        try:
            history = ConversationHistory(
                services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
            )
            server = McpServer(name="bill", url=http_server, headers="billing")
            spec = AgentSpec(mcp_servers=[server], model=ModelSpec(provider="openai", model="m"))
            assert (await history.create_task("t", "charge acme", agent=spec)).recorded
            final = await history.wait_task("t")
        finally:
            process.terminate()
            await process.wait()
    assert final is not None and final.status.value == "done"
    seen = ledger(ledger_path)
    assert [(e["event"], e["tenant"]) for e in seen] == [("request", secret), ("effect", secret)]
    handle = services.client.get_workflow_handle(task_workflow_id(project_id, "t"))
    events = (await handle.fetch_history()).events
    recorded = b"".join(text for event in events for text in _payload_texts(event))
    assert b"billing" in recorded  # the set's name is recorded; its value is not
    assert secret.encode() not in recorded
    assert secret.encode() not in output.read_bytes()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("missing-sets.json", "cannot be read"),
        ('{"billing": {"X-Billing-Tenant": "tenant-secret-1"', "not JSON"),
        ('{"billing": {"X-Billing-Tenant": ["tenant-secret-1"]}}', "set 'billing' is not"),
        ('{"billing": "tenant-secret-1"}', "set 'billing' is not"),
    ],
)
def test_bad_header_sets_are_refused_naming_no_value(
    value: str, error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENT_TASKS_MCP_HEADERS`` that cannot be read, is not JSON, or is not sets of string
    headers is refused when the worker reads it, with a message that names the variable and
    never a value; the settings' repr never shows it either."""
    from agent_tasks.config import Settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENT_TASKS_MCP_HEADERS", value)
    settings = Settings()
    assert "tenant-secret-1" not in repr(settings)
    with pytest.raises(ValueError, match=error) as refused:
        settings.mcp_header_sets()
    assert "AGENT_TASKS_MCP_HEADERS" in str(refused.value)
    assert "tenant-secret-1" not in str(refused.value)
    good = '{"billing": {"X-Billing-Tenant": "tenant-secret-1"}}'
    monkeypatch.setenv("AGENT_TASKS_MCP_HEADERS", good)
    assert Settings().mcp_header_sets() == {"billing": {"X-Billing-Tenant": "tenant-secret-1"}}


def _stdio(ledger_path: Path, **fields: Any) -> McpServer:
    """The test server over stdio as ``bill``, with ``fields`` of ``McpServer``."""
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    return McpServer(name="bill", command=sys.executable, args=args, **fields)


async def _no_arguments(_: object) -> str:
    raise AssertionError("a listing reads no call")


async def _list(server: McpServer) -> dict[str, Any]:
    """The listing activity's specs of ``server``, run by itself."""

    from agent_tasks.activities.mcp import McpActivities

    activities = McpActivities(_no_arguments)
    return dict((await _listing_env().run(activities.list_tools, server)).specs)


async def _call_once(server: McpServer, tool: str, arguments: dict[str, Any]) -> str:
    """The call activity's result text of ``tool`` with ``arguments``, run by itself."""
    from temporalio.testing import ActivityEnvironment

    from agent_tasks.activities.mcp import McpActivities
    from agent_tasks.contract import McpCall, ToolInput

    async def read(input: ToolInput) -> str:
        return input.arguments or "{}"

    input = ToolInput(
        workflow_id="wf", run_id="run", call_seq=1, step_name="s1", idempotency_key="wf/s1/1",
        arguments=json.dumps(arguments), mcp=McpCall(server=server, tool=tool),
    )  # fmt: skip
    return (await ActivityEnvironment().run(McpActivities(read).call_tool, input)).text


async def test_a_stdio_servers_env_reaches_it_over_a_safe_environment(
    ledger_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec's ``env`` reaches the stdio server; so do ``PATH`` and ``HOME`` (the SDK's safe
    defaults: a spec's env is merged over them, not in their place, typescript-sdk#216's
    kind), while the worker's own variables, its secrets among them, do not (openai/codex
    #3517's kind)."""
    monkeypatch.setenv("WORKER_SECRET_FOR_TEST", "not-for-servers")
    server = _stdio(ledger_path, env={"BILLING_REGION": "eu-west"})
    names = ["BILLING_REGION", "PATH", "HOME", "WORKER_SECRET_FOR_TEST"]
    seen = json.loads(await _call_once(server, "environment", {"names": names}))
    assert seen["BILLING_REGION"] == "eu-west"
    assert seen["PATH"] == os.environ["PATH"] and seen["HOME"] == os.environ["HOME"]
    assert seen["WORKER_SECRET_FOR_TEST"] is None


async def test_non_text_blocks_are_a_bounded_text_the_model_reads(ledger_path: Path) -> None:
    """An image, an embedded text resource, an embedded binary resource and a link become
    lines the model reads: the text resource's text, the others by type, URI, MIME type and
    size (never their bytes); a text resource past the payload bound is cut to it, with the
    full length kept."""
    from agent_tasks.contract.limits import MAX_PAYLOAD_CHARS
    from tests.mcp_server import IMAGE_BYTES

    server = _stdio(ledger_path)
    text = await _call_once(server, "blocks", {})
    image_chars = -(-IMAGE_BYTES // 3) * 4  # base64: 4 characters per 3 bytes, padded
    pdf_chars = -(-len(b"%PDF-1.7 receipt") // 3) * 4
    assert text.split("\n") == [
        "receipt follows",
        f"[image image/png, {image_chars} base64 characters]",
        "[resource file:///receipt.txt]",
        "paid 250 cents",
        f"[resource file:///receipt.pdf application/pdf, {pdf_chars} base64 characters]",
        "[resource https://billing.example/r/1]",
    ]
    from temporalio.testing import ActivityEnvironment

    from agent_tasks.activities.mcp import McpActivities
    from agent_tasks.contract import McpCall, ToolInput

    async def read(input: ToolInput) -> str:
        return input.arguments or "{}"

    chars = MAX_PAYLOAD_CHARS * 2
    input = ToolInput(
        workflow_id="wf", run_id="run", call_seq=1, step_name="s1", idempotency_key="wf/s1/1",
        arguments=json.dumps({"chars": chars}), mcp=McpCall(server=server, tool="long_resource"),
    )  # fmt: skip
    out = await ActivityEnvironment().run(McpActivities(read).call_tool, input)
    header = "[resource file:///long]\n"
    assert len(out.text) == MAX_PAYLOAD_CHARS and out.full_length == len(header) + chars
    assert out.text.startswith(header + "0123456789")


async def test_the_listing_leaves_out_bad_names_and_what_is_past_its_bound(
    ledger_path: Path,
) -> None:
    """A server listing 100 tools of 1000-character descriptions and two whose prefixed names
    are not tool names: the two are left out, and the tools kept are the first ones in the
    server's order whose specs fit in ``MAX_LISTED_CHARS`` (the next would not); naming tools
    (``tools=``) keeps exactly those."""
    from agent_tasks.activities.mcp import MAX_LISTED_CHARS
    from tests.mcp_server import WIDE_TOOLS

    wide = {"MCP_TEST_TOOLS": "wide"}
    specs = await _list(_stdio(ledger_path, env=wide))
    assert not any(name.startswith("bill_tt") or " " in name for name in specs)  # the two bad
    kept = [name for name in specs if name.startswith("bill_wide_")]
    assert 0 < len(kept) < WIDE_TOOLS
    assert kept == [f"bill_wide_{i:03d}" for i in range(len(kept))]
    sizes = [len(spec.model_dump_json()) for spec in specs.values()]
    one = sizes[-1]  # every wide tool's spec is this size (same-length names and text)
    assert sum(sizes) <= MAX_LISTED_CHARS < sum(sizes) + one
    named = await _list(_stdio(ledger_path, env=wide, tools=["wide_007", "balance", "nope"]))
    assert set(named) == {"bill_wide_007", "bill_balance"}


@pytest.mark.parametrize(
    "server",
    [
        McpServer(name="gone", command=sys.executable, args=["-c", "raise SystemExit(3)"]),
        McpServer(name="gone", command="/nonexistent/mcp-server"),
        McpServer(name="gone", url="http://127.0.0.1:9/mcp"),
    ],
    ids=["exits", "missing", "unreachable"],
)
async def test_a_listing_that_fails_ends_the_task_with_a_named_error(
    services: Services, project_id: str, queue: str, server: McpServer
) -> None:
    """A server that exits at once, a program that does not exist, an address nobody listens
    on: the listing fails ``McpServerUnavailable`` (naming the server and the cause), is
    retried by its policy (3 attempts), and then the task fails with that error; no model
    turn is taken."""
    from agent_tasks.activities.mcp import MCP_SERVER_UNAVAILABLE
    from agent_tasks.workflows.agents.registry import MCP_LIST_RETRY

    history = await _run(services, project_id, queue, server, [answer("never")], [])
    final = await history.wait_task("t")
    assert final is not None and final.status.value == "failed"
    handle = services.client.get_workflow_handle(task_workflow_id(project_id, "t"))
    events = (await handle.fetch_history()).events
    (failed,) = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    failure = failed.activity_task_failed_event_attributes.failure  # the last attempt's
    assert failure.application_failure_info.type == MCP_SERVER_UNAVAILABLE
    assert "MCP server 'gone' cannot list its tools" in failure.message
    scheduled = failed.activity_task_failed_event_attributes.scheduled_event_id
    (started,) = [
        e.activity_task_started_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled
    ]
    assert started.attempt == MCP_LIST_RETRY.maximum_attempts
    assert final.error is not None
    assert final.error.text.startswith("McpServerUnavailable: MCP server 'gone' cannot list")
    assert final.agent_run is not None and final.agent_run.rounds == 0
    task_events = (await history.list_events("t", limit=100)).events
    assert not [e for e in task_events if e.kind is EventKind.TOOL_RESULT]


Answer = tuple[int, dict[str, str], bytes]
"""What a gateway sends: a status, headers, a body."""


@contextmanager
def _gateway(
    upstream: str, status: int, headers: dict[str, str] | None = None, body: bytes = b"bad gateway"
) -> Iterator[str]:
    """A gateway in front of the MCP server at ``upstream``: it forwards every POST and
    DELETE, but answers a ``tools/call`` with ``status``, ``headers`` (default: a text body)
    and ``body`` after the server answered it (the server performed the call; the client sees
    only the gateway's answer). GET (the server's own stream) is 405, which the client
    accepts. Yields the gateway's URL."""
    answer = (status, headers or {"content-type": "text/plain"}, body)
    with forwarding_gateway(upstream, answer) as url:
        yield url


@contextmanager
def forwarding_gateway(
    upstream: str, call: Answer, get: Callable[[Mapping[str, str]], Answer | None] | None = None
) -> Iterator[str]:
    """A gateway in front of the MCP server at ``upstream``: it forwards every POST and
    DELETE, answering a ``tools/call``, once the server answered it, with ``call`` instead; a
    GET gets what ``get`` makes of its headers (None, or no ``get``: 405, which the client
    accepts). Yields the gateway's URL."""
    import http.client
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import urlsplit

    target = urlsplit(upstream)

    class Gateway(BaseHTTPRequestHandler):
        def _send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            sent = self.rfile.read(int(self.headers.get("content-length") or 0))
            conn = http.client.HTTPConnection(target.hostname or "", target.port, timeout=60)
            skip = {"host", "content-length", "connection"}
            forwarded = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            conn.request(self.command, target.path, body=sent, headers=forwarded)
            answer = conn.getresponse()
            data = answer.read()  # a POST's event stream ends with its answer
            conn.close()
            if b'"tools/call"' in sent:
                self._send(*call)
                return
            dropped = {"transfer-encoding", "content-length", "connection"}
            kept = {k: v for k, v in answer.getheaders() if k.lower() not in dropped}
            self._send(answer.status, kept, data)

        do_POST = do_DELETE = _forward

        def do_GET(self) -> None:
            made = None if get is None else get(dict(self.headers.items()))
            self._send(*(made or (405, {}, b"")))

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("status", [502, 500])
async def test_an_http_error_status_after_the_call_was_sent_leaves_it_unknown(
    services: Services,
    project_id: str,
    queue: str,
    http_server: str,
    ledger_path: Path,
    status: int,
) -> None:
    """A gateway answers the call with 502 (or 500) after the server performed it: the MCP
    SDK turns the status into a JSON-RPC error of its own making, which is not the server's
    answer, so the step (not idempotent) ends ``unknown`` (run again only by a person, under the
    same key), not failed with a server error the model would read as "not done" and call
    again under a new key (a second charge)."""
    with _gateway(http_server, status) as url:
        server = McpServer(name="bill", url=url, headers="billing")
        turns = [calls(("bill_charge", {"account": "acme", "cents": 9})), answer("ok")]
        history = await _run(services, project_id, queue, server, turns, [])
        final = await history.wait_task("t")
    assert final is not None and final.status.value == "done"
    steps = (await history.list_steps("t")).steps
    assert [s.state for s in steps] == [StepState.UNKNOWN]
    events = (await history.list_events("t", limit=100)).events
    results = [e.payload for e in events if e.kind is EventKind.TOOL_RESULT]
    assert len(results) == 1 and "its effect is unknown" in results[0]
    assert [e["event"] for e in ledger(ledger_path)] == ["request", "effect"]


async def test_a_listing_with_no_answer_ends_at_its_attempts_timeout() -> None:
    """SAP/cloud-sdk-python#313's kind (a listing of an unresponsive server that never ends): a
    server that takes the connection and never answers fails the attempt
    ``McpServerUnavailable`` at the attempt's start-to-close timeout, on the worker too (the
    HTTP client's own timeouts are longer, or restart with each keep-alive)."""
    import dataclasses
    from datetime import timedelta

    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from agent_tasks.activities.mcp import MCP_SERVER_UNAVAILABLE, McpActivities

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections wait in the backlog; nothing reads or answers them
        port = silent.getsockname()[1]
        server = McpServer(name="mute", url=f"http://127.0.0.1:{port}/mcp")
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, start_to_close_timeout=timedelta(seconds=2))
        with pytest.raises(ApplicationError) as failed:
            await env.run(McpActivities(_no_arguments).list_tools, server)
    assert failed.value.type == MCP_SERVER_UNAVAILABLE and not failed.value.non_retryable
    assert "'mute' cannot list its tools: no answer within 2 s" in str(failed.value)


async def test_a_stdio_listing_with_no_answer_ends_at_its_attempts_timeout_and_stops_it(
    ledger_path: Path,
) -> None:
    """langchain-ai/langchain#40472's kind (a stdio server that starts and never answers leaves
    the listing waiting for ever): the tests' server told to wait 600 s before it serves fails
    the attempt ``McpServerUnavailable`` at its start-to-close timeout, and its program is
    stopped, not left running."""
    import dataclasses
    from datetime import timedelta

    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from agent_tasks.activities.mcp import MCP_SERVER_UNAVAILABLE, McpActivities

    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    env = {"MCP_TEST_START_DELAY_S": "600"}
    server = McpServer(name="mute", command=sys.executable, args=args, env=env)
    activities = ActivityEnvironment()
    activities.info = dataclasses.replace(
        activities.info, start_to_close_timeout=timedelta(seconds=2)
    )
    with pytest.raises(ApplicationError) as failed:
        await activities.run(McpActivities(_no_arguments).list_tools, server)
    assert failed.value.type == MCP_SERVER_UNAVAILABLE and not failed.value.non_retryable
    assert "'mute' cannot list its tools: no answer within 2 s" in str(failed.value)

    async def stopped() -> bool:  # however far the program got, none runs with its ledger
        return not _running_with(str(ledger_path))

    await eventually(stopped, within=30)


def _running_with(marker: str) -> list[int]:
    """The process ids whose command line holds ``marker`` (from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:  # not a process, or it ended meanwhile
            continue
        if entry.name.isdigit() and marker.encode() in command:
            found.append(int(entry.name))
    return found


def test_a_worker_with_bad_header_sets_stops_before_it_connects(tmp_path: Path) -> None:
    """``agent-tasks worker`` with ``AGENT_TASKS_MCP_HEADERS`` naming a file that is not header
    sets exits 2 with one line naming the variable and the set, never a value, before it
    connects (its Temporal address here answers nobody)."""
    import os

    sets = tmp_path / "mcp-headers.json"
    sets.write_text(json.dumps({"billing": {"X-Billing-Tenant": ["tenant-secret-2"]}}))
    env = {
        **os.environ,
        "AGENT_TASKS_MCP_HEADERS": str(sets),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{_free_port()}",
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agent-tasks"), "worker"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, said
    assert "AGENT_TASKS_MCP_HEADERS file" in said and "set 'billing' is not" in said
    assert "tenant-secret-2" not in said and "unavailable" not in said


def test_a_spec_refuses_two_tools_of_one_name() -> None:
    """openai/openai-agents-python#1167's kind (two MCP servers' tools of one name): two servers
    of one name, or a worker's tool named with a server's prefix, are refused with the name in
    the error, before anything is sent; other servers and tools are accepted."""
    from pydantic import ValidationError

    bill = McpServer(name="bill", command="prog")
    with pytest.raises(ValidationError, match="MCP server 'bill' is named twice"):
        AgentSpec(mcp_servers=[bill, McpServer(name="bill", url="http://127.0.0.1:1/mcp")])
    with pytest.raises(ValidationError, match="tool 'bill_charge' starts with 'bill_'"):
        AgentSpec(tools=["echo", "bill_charge"], mcp_servers=[bill])
    spec = AgentSpec(
        tools=["billing", "bill-charge"], mcp_servers=[bill, McpServer(name="bil", command="p")]
    )
    assert [s.name for s in spec.mcp_servers] == ["bill", "bil"]


def _tallies(server: McpServer, steps: int, ask_after: int | None = None) -> AgentSpec:
    """The agent ``mcp_tallies`` (``tests.http_tools``): ``steps`` calls of ``bill_tally``."""
    args: dict[str, Any] = {"tool": "bill_tally", "steps": steps}
    if ask_after is not None:
        args["ask_after"] = ask_after
    return AgentSpec(name="mcp_tallies", mcp_servers=[server], input=args)


async def _tallied(history: ConversationHistory) -> list[list[str]]:
    """The ``[state, text]`` of each step of the finished task ``t``."""
    view = await asyncio.wait_for(history.wait_task("t"), 120)
    assert view is not None and view.status.value == "done", view
    assert view.result is not None
    result: list[list[str]] = json.loads(view.result.text)
    return result


@pytest.mark.parametrize("stateful", [True, False])
async def test_stateful_calls_of_a_run_share_one_session_and_stateless_ones_do_not(
    services: Services, project_id: str, queue: str, billing: McpServer, stateful: bool
) -> None:
    """Two calls of the server's per-session counter in one run: a stateful server's session
    is the run's, its listing and calls on the session's worker's queue (over stdio the server's
    process lives for the run: 1, then 2); a stateless server opens one per call (over stdio, 1
    and 1). Over HTTP the counter is the server process's (protocol 2026-07-28 sends no
    session id: the server cannot tell sessions apart), so only the queues are compared. The
    run's end closes the session (``mcp_close_session`` on its queue, completed)."""
    import tests.http_tools  # noqa: F401  (registers the agent mcp_tallies)

    assert services.graph is not None
    server = billing.model_copy(update={"stateful": stateful})
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    assert (await history.create_task("t", "tally", agent=_tallies(server, 2))).recorded
    counts = ["1", "2"] if stateful else ["1", "1"]
    tallied = await _tallied(history)
    handle = services.client.get_workflow_handle(task_workflow_id(project_id, "t"))
    events = (await handle.fetch_history()).events
    scheduled = [
        (e.activity_task_scheduled_event_attributes.activity_type.name, queue.name)
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        for queue in [e.activity_task_scheduled_event_attributes.task_queue]
    ]
    on_sessions = [name for name, q in scheduled if q.startswith("mcp-sessions@")]
    expected = ["mcp_list_tools", "mcp_call_tool", "mcp_call_tool", "mcp_close_session"]
    assert on_sessions == (expected if stateful else []), scheduled
    assert len({q for _, q in scheduled if q.startswith("mcp-sessions@")}) == int(stateful)
    completed = sum(e.HasField("activity_task_completed_event_attributes") for e in events)
    assert completed == len(scheduled)  # the close too
    assert [state for state, _ in tallied] == ["completed", "completed"]
    if server.command is not None:
        assert tallied == [["completed", n] for n in counts]


def _session_pids(events: Any) -> list[int]:
    """The process ids in the session queues the history's activities were scheduled on, in
    order (``McpActivities.session_queue``: ``mcp-sessions@host:pid:uuid``)."""
    names = [
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    return [int(n.split(":")[1]) for n in names if n.startswith("mcp-sessions@")]


async def test_a_stateful_session_whose_worker_is_killed_is_lost_then_opened_anew(
    services: Services, project_id: str, ledger_path: Path
) -> None:
    """Two workers (processes of their own); the one holding the run's session of a stateful
    server is killed with SIGKILL after two calls (1, 2): the next call is not taken by any
    worker within ``MCP_SESSION_START`` and fails ``McpSessionLost`` without running, and the
    call after it opens a new session on the surviving worker (1 again)."""

    import tests.http_tools  # noqa: F401  (registers the agent mcp_tallies)

    assert services.graph is not None
    queue = f"mcp-session-{uuid.uuid4().hex[:8]}"
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, stateful=True)
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    workers = [await worker_process(queue) for _ in range(2)]
    handle = services.client.get_workflow_handle(task_workflow_id(project_id, "t"))
    try:
        spec = _tallies(server, 4, ask_after=2)
        assert (await history.create_task("t", "tally", agent=spec)).recorded
        asked = await asyncio.wait_for(history.wait_task("t", until="awaiting_input"), 120)
        assert asked is not None and asked.status.value == "awaiting_input"
        (holder,) = set(_session_pids((await handle.fetch_history()).events))
        (killed,) = [w for w in workers if w.pid == holder]
        killed.kill()  # SIGKILL: no shutdown of any kind, the session's queue unpolled
        await killed.wait()
        assert (await history.submit_input("t", "go", input_id="go")).recorded
        steps = await _tallied(history)
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    assert steps[:2] == [["completed", "1"], ["completed", "2"]]
    assert steps[2][0] == "failed" and steps[2][1].startswith("McpSessionLost: "), steps[2]
    assert steps[3] == ["completed", "1"]
    (survivor,) = [w.pid for w in workers if w.pid != holder]
    pids = _session_pids((await handle.fetch_history()).events)
    assert pids[-1] == survivor and set(pids) == {holder, survivor}


async def test_a_stateful_session_is_closed_when_the_run_is_cancelled(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """A task cancelled while its agent waits for an answer, after one call of a stateful
    server: the run's end still closes the session (``mcp_close_session`` on its queue,
    completed) before the task ends ``cancelled``."""
    import tests.http_tools  # noqa: F401  (registers the agent mcp_tallies)

    assert services.graph is not None
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, stateful=True)
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    spec = _tallies(server, 2, ask_after=1)
    assert (await history.create_task("t", "tally", agent=spec)).recorded
    asked = await asyncio.wait_for(history.wait_task("t", until="awaiting_input"), 120)
    assert asked is not None and asked.status.value == "awaiting_input"
    assert (await history.cancel_task("t")).recorded
    view = await asyncio.wait_for(history.wait_task("t"), 120)
    assert view is not None and view.status.value == "cancelled"
    handle = services.client.get_workflow_handle(task_workflow_id(project_id, "t"))
    events = (await handle.fetch_history()).events
    closes = [
        e.event_id
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mcp_close_session"
    ]
    assert len(closes) == 1
    completed = [
        e.activity_task_completed_event_attributes.scheduled_event_id
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
    ]
    assert closes[0] in completed


async def _cancelled_while_waiting(
    services: Services,
    project_id: str,
    queue: str,
    ledger_path: Path,
    activity: str,
    *,
    stateful: bool,
) -> TaskView:
    """Start task ``t`` with a stdio server that waits 600 s before it serves
    (``MCP_TEST_START_DELAY_S``), cancel the task once the server's program is launched, and
    return the task's end, having checked that ``activity`` (the one that waits for the
    server) ran one attempt that heard the cancel and ended cancelled, neither timed out nor
    retried, and that the program it started is stopped."""
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    env = {"MCP_TEST_START_DELAY_S": "600"}
    server = McpServer(name="bill", command=sys.executable, args=args, env=env, stateful=stateful)
    history = await _run(services, project_id, queue, server, [answer("never")], [])

    async def launched() -> bool:
        return any(e["event"] == "launched" for e in ledger(ledger_path))

    await eventually(launched, within=60)
    assert (await history.cancel_task("t")).recorded
    final = await asyncio.wait_for(history.wait_task("t"), 120)  # its 3 x 60 s: more
    assert final is not None and final.status.value == "cancelled"
    handle = services.client.get_workflow_handle(task_workflow_id(project_id, "t"))
    events = (await handle.fetch_history()).events
    (waiting,) = [
        e.event_id
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]
    after = [  # the activity's events after its schedule: one attempt, cancelled
        EventType.Name(e.event_type)
        for e in events
        for field in [e.WhichOneof("attributes") or ""]
        if field.startswith("activity_task_")
        and getattr(getattr(e, field), "scheduled_event_id", None) == waiting
    ]
    assert after == [
        "EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED",
        "EVENT_TYPE_ACTIVITY_TASK_STARTED",
        "EVENT_TYPE_ACTIVITY_TASK_CANCELED",
    ]

    async def stopped() -> bool:
        return not _running_with(str(ledger_path))

    await eventually(stopped, within=30)
    return final


async def test_a_cancel_during_a_slow_listing_cancels_it_and_stops_the_server(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """The stdio server takes 600 s before it answers, so the run's listing waits; the task
    is cancelled meanwhile. The listing activity hears the cancel (it heartbeats) and ends
    cancelled, its one attempt neither timed out nor retried; the server's program is
    stopped; the task ends ``cancelled`` with no model turn."""
    final = await _cancelled_while_waiting(
        services, project_id, queue, ledger_path, "mcp_list_tools", stateful=False
    )
    assert final.agent_run is not None and final.agent_run.rounds == 0


async def test_a_stateful_stdio_server_that_exits_mid_run_is_a_lost_session_the_model_reads(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """A stateful server over stdio whose program exits during a call (``charge_crashing``
    ends its process before it answers): that call ends ``unknown`` (its effect is unknown),
    saying the program ended; the next call (a charge) fails ``McpSessionLost`` without
    reaching a server, saying what the model can do; the one after opens a new session (the
    counter starts again at 1). Before, every call after the exit ended ``unknown`` and no new
    session was ever opened."""
    import tests.http_tools  # noqa: F401  (registers the agent mcp_in_turn)

    assert services.graph is not None
    args = ["-m", "tests.mcp_server", str(ledger_path), "stdio"]
    server = McpServer(name="bill", command=sys.executable, args=args, stateful=True)
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    planned = [
        ["bill_tally", {}],
        ["bill_charge_crashing", {"account": "acme"}],
        ["bill_charge", {"account": "acme", "cents": 5}],
        ["bill_tally", {}],
    ]
    spec = AgentSpec(name="mcp_in_turn", mcp_servers=[server], input={"calls": planned})
    assert (await history.create_task("t", "in turn", agent=spec)).recorded
    steps = await _tallied(history)
    assert [state for state, _ in steps] == ["completed", "unknown", "failed", "completed"]
    assert steps[0][1] == steps[3][1] == "1"  # the last call's session is a new one
    assert "charge_crashing' of MCP server 'bill' got no answer of the server's own" in steps[1][1]
    assert "the server's program ended, and with it the session and its state" in steps[1][1]
    assert steps[2][1].startswith("McpSessionLost: the session of MCP server 'bill' was lost")
    assert "the call did not run" in steps[2][1]
    requests = [e["tool"] for e in ledger(ledger_path) if e["event"] == "request"]
    assert requests == ["charge_crashing"]  # the charge after it never reached a server


async def test_a_cancel_while_a_stateful_session_opens_cancels_the_open_and_stops_the_server(
    services: Services, project_id: str, queue: str, ledger_path: Path
) -> None:
    """A stateful server over stdio that waits 600 s before it serves: the run's
    ``mcp_open_session`` waits for it; the task is cancelled meanwhile. The open hears the
    cancel (it heartbeats) and ends cancelled, its one attempt neither timed out nor retried;
    the program it started is stopped; the task ends ``cancelled``."""
    await _cancelled_while_waiting(
        services, project_id, queue, ledger_path, "mcp_open_session", stateful=True
    )
