"""The HTTP API: tasks over HTTP and their live streams (Server-Sent Events), for browsers,
``curl`` and other languages. ``docs/http.md`` is its guide; ``/openapi.json`` its schema.

``agent-tasks serve`` runs it with uvicorn on ``AGENT_TASKS_HTTP_HOST``:``AGENT_TASKS_HTTP_PORT``
(with ``--with-worker``, a worker in the same process); ``serve`` is the same from Python.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from agent_tasks.activities.tools import Tool
from agent_tasks.config import Settings
from agent_tasks.server.app import KEEPALIVE_S, ApiServer, create_app
from agent_tasks.worker import build_worker, open_services, with_file_tools

__all__ = ["GRACEFUL_TIMEOUT_S", "KEEPALIVE_S", "create_app", "serve"]

GRACEFUL_TIMEOUT_S = 10
"""How long ``serve`` waits at shutdown for the requests in flight (open streams end at once)
before it cancels them (seconds)."""


async def serve(
    settings: Settings | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    with_worker: bool = False,
    graceful_timeout_s: int = GRACEFUL_TIMEOUT_S,
    tools: Sequence[Tool] = (),
    command: str = "agent-tasks",
) -> None:
    """Serve the HTTP API until SIGINT or SIGTERM (uvicorn's own handling): then it stops
    taking connections, ends every open stream at once (``ApiServer``: their clients
    reconnect with ``Last-Event-ID``), waits up to ``graceful_timeout_s`` for the other
    requests in flight (then cancels them) and exits.

    Args:
        settings: the services' settings (the environment when None).
        host: where to listen (default ``AGENT_TASKS_HTTP_HOST``).
        port: the port (default ``AGENT_TASKS_HTTP_PORT``; 0: a free one, printed).
        with_worker: run a worker for ``TEMPORAL_TASK_QUEUE`` in the same process: the demo
            agent, and the agents registered in this process (``workflows.agents.agent``).
        tools: the worker's tools besides the demo's file tools over the current folder
            (``worker.with_file_tools``).
        command: how a person runs the CLI here (``create_app``: the page's commands).
        graceful_timeout_s: the bound of the wait for requests in flight at shutdown
            (seconds).

    Raises:
        TaskServiceUnavailable: Temporal cannot be reached.
        Neo4jPasswordMissing: no Neo4j password is set or generated.
    """
    settings = settings or Settings()
    async with open_services(settings, schema=True) as services:
        assert services.graph is not None
        config = uvicorn.Config(
            create_app(services, command=command),
            host=host or settings.http_host,
            port=settings.http_port if port is None else port,
            log_level="info",
            timeout_graceful_shutdown=graceful_timeout_s,
        )
        server = ApiServer(config)
        if not with_worker:
            await server.serve()
            return
        queue = settings.temporal_task_queue
        async with build_worker(
            services.client,
            services.graph,
            queue,
            tools=with_file_tools(Path.cwd(), tools),
            broker=services.broker,
        ):
            await server.serve()


def main() -> None:
    """``python -m agent_tasks.server``."""
    asyncio.run(serve())
