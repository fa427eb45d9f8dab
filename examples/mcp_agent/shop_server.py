"""The example's own MCP server, a small shop (the ``mcp`` SDK's ``MCPServer``): two tools,
``find_product`` (read-only) and ``place_order`` (an effect, once per idempotency key), and
beside them, over HTTP, a plain endpoint ``POST /notify`` for the agent's HTTP tool (once per
``Idempotency-Key`` header).

    python shop_server.py --stdio            # the worker starts it like this for each call
    python shop_server.py --port 8765        # streamable HTTP at /mcp, and POST /notify

What it did is appended to ``shop.jsonl`` in the current folder, a JSON line each: orders
(``{"order": ..., "key": ...}``) and notifications (``{"notify": ..., "key": ...}``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

LOG = Path("shop.jsonl")
"""What the shop did, a JSON line each (in the folder it runs in)."""
PRICES = {"espresso": 250, "croissant": 180, "tea": 200}
"""Cents, by product."""

shop = MCPServer("shop")


def done() -> list[dict[str, Any]]:
    """The lines of ``LOG``."""
    if not LOG.exists():
        return []
    return [json.loads(line) for line in LOG.read_text().splitlines() if line]


def once(kind: str, key: str | None, what: dict[str, Any]) -> dict[str, Any]:
    """Record ``what`` as a ``kind`` under ``key`` unless one is recorded: the one record."""
    for line in done():
        if kind in line and line["key"] == key:
            return dict(line[kind])
    with LOG.open("a") as out:
        out.write(json.dumps({kind: what, "key": key}) + "\n")
    return what


@shop.tool(
    description="The price of a product, in cents.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def find_product(name: str) -> str:
    """``{name}: {cents} cents``, or that the shop has none."""
    cents = PRICES.get(name.lower())
    return f"{name}: {cents} cents" if cents is not None else f"no product {name!r}"


@shop.tool(description="Order a product. Charges the customer.")
async def place_order(product: str, quantity: int, ctx: Context) -> str:
    """Place the order once per idempotency key (the call's ``_meta``): a repeated call with
    the same key answers with the order already placed."""
    meta: Any = ctx.request_context.meta or {}
    order = once("order", meta.get("idempotency_key"), {"product": product, "quantity": quantity})
    return f"ordered {order['quantity']} x {order['product']}"


async def notify(request: Request) -> JSONResponse:
    """``POST /notify``: record the message once per ``Idempotency-Key``."""
    body = await request.json()
    once("notify", request.headers.get("idempotency-key"), {"message": body["message"]})
    return JSONResponse({"sent": True})


def main() -> None:
    """Serve over stdio or streamable HTTP, as the command line says."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdio", action="store_true", help="serve over stdin and stdout")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port")
    args = parser.parse_args()
    if args.stdio:
        shop.run("stdio")
        return
    import uvicorn

    app = shop.streamable_http_app()
    app.router.routes.append(Route("/notify", notify, methods=["POST"]))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
