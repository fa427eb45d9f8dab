"""A real HTTP server for tests: an ASGI app on uvicorn at 127.0.0.1 on a free port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from starlette.types import ASGIApp

from tests.conftest import eventually


@asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` (port 0: the OS picks a free one; uvicorn's logs go to the root logger,
    access log on) until the block ends; yields the base URL."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=True)
    )
    running = asyncio.create_task(server.serve())

    async def started() -> bool:
        if running.done():
            running.result()  # it failed: raise why
        return server.started

    await eventually(started, within=30)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await running


async def answering(http: httpx.AsyncClient, within: float = 60) -> None:
    """Wait until the HTTP API at ``http``'s base URL answers ``/health`` (a server started in
    another process), at most ``within`` seconds."""

    async def up() -> bool:
        try:
            return (await http.get("/health")).status_code == 200
        except httpx.TransportError:
            return False

    await eventually(up, within=within)
