"""The agent's HTTP tool: ``notify`` posts a message to the shop's ``/notify`` endpoint with
``http_call``, which sends the step's idempotency key as the ``Idempotency-Key`` header on every
retry (``agent_tasks.activities.http_tool``), so the shop notifies once."""

from __future__ import annotations

import os

from pydantic import BaseModel

from agent_tasks.activities.http_tool import http_call
from agent_tasks.starter import ToolContext, tool

NOTIFY_URL = "MCP_AGENT_NOTIFY_URL"
"""The environment variable of the worker naming the endpoint (default: the shop's, on its
default port)."""


class Message(BaseModel):
    """The arguments of ``notify``."""

    message: str
    """What the customer is told."""


@tool("notify", arguments=Message, idempotent=True, description="Tell the customer something.")
async def notify(args: Message, context: ToolContext) -> str:
    """POST the message; "sent" when the shop took it."""
    url = os.environ.get(NOTIFY_URL, "http://127.0.0.1:8765/notify")
    await http_call(context, "POST", url, json={"message": args.message})
    return "sent"
