"""The HTTP tool tests' parts, in a module of their own so that a worker in a subprocess
(``python -m tests.agent_worker``, whose tools include ``HTTP_TOOLS``) runs the same ones: tools
that call an API with ``activities.http_tool.http_call``, an agent that runs one such call as a
step, and the API itself (``EffectServer``): a real HTTP server that counts, by idempotency key,
the requests it got and the effects it performed."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Literal

from pydantic import BaseModel, JsonValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent_tasks.activities.http_tool import IDEMPOTENCY_HEADER, answer_json, http_call
from agent_tasks.activities.tools import Tool, ToolContext, tool
from agent_tasks.workflows.agents import AgentContext, agent

Mode = Literal[
    "plain",
    "hold",
    "busy_once",
    "reject",
    "cut",
    "garbled",
    "gateway",
    "not_json",
    "slow",
    "busy_for_a_day",
]
"""How the server answers a key's first request: at once; after performing the effect, only
when released (the worker is killed meanwhile); 503 with ``Retry-After: 1`` and no effect;
422 with a 5,000-character body. After performing the effect: a body cut short of its
``content-length`` (the connection closed), a gzip body that is not gzip, a 502 as a gateway
in front would send it, a 200 whose body is not JSON, the answer 5 s late. 429 with
``Retry-After: 86400`` and no effect."""


class Charge(BaseModel):
    """Arguments of the HTTP tools: the API's URL, the amount, how the server answers, how
    long the request waits, and how the tool reads the answer (its text, or ``answer_json``)."""

    url: str
    amount: int
    mode: Mode = "plain"
    timeout_s: float = 300
    read: Literal["text", "json"] = "text"


async def _charge(args: Charge, context: ToolContext) -> str:
    body: dict[str, JsonValue] = {"amount": args.amount, "mode": args.mode}
    response = await http_call(context, "POST", args.url, json=body, timeout_s=args.timeout_s)
    return json.dumps(answer_json(response)) if args.read == "json" else response.text


@tool("http_charge", arguments=Charge, idempotent=False, heartbeat_s=2, start_to_close_s=600)
async def http_charge(args: Charge, context: ToolContext) -> str:
    """Not idempotent: one attempt; a worker that dies during it leaves the step unknown."""
    return await _charge(args, context)


@tool("http_charge_retried", arguments=Charge, idempotent=True, max_attempts=3)
async def http_charge_retried(args: Charge, context: ToolContext) -> str:
    """Idempotent (the API deduplicates by key): retried by its retry policy."""
    return await _charge(args, context)


HTTP_TOOLS: list[Tool] = [http_charge, http_charge_retried]


@agent("http_once")
async def http_once(ctx: AgentContext) -> str:
    """One step ``charge`` of the tool ``input["tool"]`` with ``input["args"]``; fails unless
    it completed, else returns the API's answer."""
    tool_name, args = ctx.input["tool"], ctx.input["args"]
    assert isinstance(tool_name, str) and isinstance(args, dict)
    charged = await ctx.step("charge", tool_name, args)
    if not charged.ok:
        raise RuntimeError(f"the charge is {charged.state.value}: {charged.text}")
    return charged.text


@agent("mcp_tallies")
async def mcp_tallies(ctx: AgentContext) -> str:
    """Steps ``t1`` ... of the tool ``input["tool"]`` (no arguments), ``input["steps"]`` of
    them one after the other; with ``input["ask_after"]`` = k, the question ``go`` after the
    k-th (a test's moment to act). Returns ``[[state, text], ...]`` of the steps as JSON."""
    tool_name, steps, ask_after = ctx.input["tool"], ctx.input["steps"], ctx.input.get("ask_after")
    assert isinstance(tool_name, str) and isinstance(steps, int)
    results: list[list[str]] = []
    for n in range(1, steps + 1):
        if n - 1 == ask_after:
            await ctx.ask("go", "go on?")
        outcome = await ctx.step(f"t{n}", tool_name, {})
        results.append([outcome.state.value, outcome.text])
    return json.dumps(results)


@agent("mcp_at_once")
async def mcp_at_once(ctx: AgentContext) -> str:
    """Steps ``c1`` ... of the tool ``input["tool"]``, one per arguments in ``input["args"]``,
    all at once (``asyncio.gather``). Returns the steps' states as JSON."""
    tool_name, args = ctx.input["tool"], ctx.input["args"]
    assert isinstance(tool_name, str) and isinstance(args, list)
    outcomes = await asyncio.gather(
        *(ctx.step(f"c{n}", tool_name, a) for n, a in enumerate(args, 1) if isinstance(a, dict))
    )
    return json.dumps([o.state.value for o in outcomes])


@agent("mcp_in_turn")
async def mcp_in_turn(ctx: AgentContext) -> str:
    """Steps ``s1`` ... one after the other, one per ``[tool, arguments]`` of
    ``input["calls"]``. Returns ``[[state, text], ...]`` of the steps as JSON."""
    planned = ctx.input["calls"]
    assert isinstance(planned, list)
    results: list[list[str]] = []
    for n, planned_call in enumerate(planned, 1):
        assert isinstance(planned_call, list)
        tool_name, args = planned_call
        assert isinstance(tool_name, str) and isinstance(args, dict)
        outcome = await ctx.step(f"s{n}", tool_name, args)
        results.append([outcome.state.value, outcome.text])
    return json.dumps(results)


class EffectServer:
    """An API that performs a charge once per ``Idempotency-Key``: a repeated key gets the
    first answer back without a second effect. ``requests`` and ``effects`` count by key."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.effects: Counter[str] = Counter()
        self.answers: dict[str, dict[str, object]] = {}
        self.released = asyncio.Event()
        self.cut_always = False
        """Cut every answer (``unreadable``'s ``cut``), a repeated key's too."""
        self.app = Starlette(routes=[Route("/charge", self.charge, methods=["POST"])])

    async def charge(self, request: Request) -> Response:
        key = request.headers.get(IDEMPOTENCY_HEADER, "")
        self.requests[key] += 1
        if key in self.answers:
            cut = await self.unreadable("cut") if self.cut_always else None
            return cut or JSONResponse(self.answers[key])
        body = await request.json()
        mode = body["mode"]
        if mode == "busy_once" and self.requests[key] == 1:
            return Response("busy", status_code=503, headers={"Retry-After": "1"})
        if mode == "busy_for_a_day":
            return Response("come back tomorrow", status_code=429, headers={"Retry-After": "86400"})
        if mode == "reject":
            return Response("x" * 5_000, status_code=422)
        self.effects[key] += 1
        self.answers[key] = {"charged": body["amount"], "key": key}
        if mode == "hold":  # the effect happened; the answer waits (bounded)
            await asyncio.wait_for(self.released.wait(), 600)
        return await self.unreadable(mode) or JSONResponse(self.answers[key])

    async def unreadable(self, mode: str) -> Response | None:
        """The answer of a ``Mode`` the client cannot read (None for the others)."""
        if mode == "cut":  # 100 bytes declared, 12 sent: the server closes the connection
            return Response(b'{"charged": ', headers={"content-length": "100"})
        if mode == "garbled":
            return Response(b"not gzip at all", headers={"content-encoding": "gzip"})
        if mode == "gateway":
            return Response("<h1>502 Bad Gateway</h1>", status_code=502, media_type="text/html")
        if mode == "not_json":
            return Response(b'{"charged": 42', media_type="application/json")
        if mode == "slow":
            await asyncio.sleep(5)
        return None
