"""The agent: workflow code (``@agent``) that uses two tools of an MCP server and one HTTP tool.

The MCP server is the example's own shop (``shop_server.py``), named in the agent's spec
(``spec``): over stdio, the worker starts ``python shop_server.py --stdio`` for each call; over
streamable HTTP, it calls the URL. Its tools reach the agent as ``shop_find_product`` and
``shop_place_order``; each call is a step (an activity) that carries the step's idempotency key
in its ``_meta`` (and, over HTTP, as the ``Idempotency-Key`` header).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_tasks.starter import AgentContext, AgentSpec, McpServer, agent

TASK_QUEUE = "mcp-agent"
"""The task queue of this project's worker."""

AGENT = "mcp_agent"
"""The agent's registered name."""


def shop(transport: str, url: str = "http://127.0.0.1:8765/mcp") -> McpServer:
    """The shop as an agent's spec names it: ``stdio`` (this folder's ``shop_server.py``, run
    by the worker's Python) or ``http`` (``url``)."""
    if transport == "stdio":
        server = str(Path(__file__).resolve().parent / "shop_server.py")
        return McpServer(name="shop", command=sys.executable, args=[server, "--stdio"])
    return McpServer(name="shop", url=url)


def spec(product: str, transport: str, url: str = "http://127.0.0.1:8765/mcp") -> AgentSpec:
    """What runs a task of this agent: the shop's tools, the HTTP tool, the product."""
    return AgentSpec(
        name=AGENT,
        tools=["notify"],
        mcp_servers=[shop(transport, url)],
        input={"product": product},
    )


@agent(AGENT)
async def mcp_agent(ctx: AgentContext) -> str:
    """Find ``input["product"]``'s price, order one, and tell the customer."""
    product = str(ctx.input["product"])
    found = await ctx.step("find", "shop_find_product", {"name": product})
    if found.text.startswith("no product"):
        return found.text
    ordered = await ctx.step("order", "shop_place_order", {"product": product, "quantity": 1})
    await ctx.step("notify", "notify", {"message": f"{ordered.text} ({found.text})"})
    return f"{ordered.text}; {found.text}"
