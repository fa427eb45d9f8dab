"""The HTTP API's application: FastAPI over one Temporal client, the Neo4j task graph and the
broker, served by uvicorn (``serve``, ``agent-tasks serve``).

Two ASGI layers wrap it, below FastAPI:

- ``NamesInPath`` keeps ``%2F`` and ``%25`` escaped in the path that routing sees, so a task
  name with ``/`` (a child an agent spawned: ``parent/key``) is one path segment when the
  client escapes it (``/tasks/parent%2Fkey/stream``); the routes unescape it once
  (``routes.name_of``).
- ``BodyLimit`` refuses a body over ``AGENT_TASKS_MAX_BODY_BYTES`` with 413 ``body_too_large``
  (by its ``Content-Length``, or as it arrives), before any of it is parsed or stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import unquote, urlsplit, urlunsplit

import uvicorn
from fastapi import Depends, FastAPI, Path
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_tasks.broker import Subscriber
from agent_tasks.config import Settings
from agent_tasks.contract.errors import GraphIncomplete, TaskServiceUnavailable
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.server.auth import StreamSlots
from agent_tasks.server.codec import root_router as codec_root_router
from agent_tasks.server.codec import router as codec_router
from agent_tasks.server.errors import (
    ApiError,
    api_error_handler,
    error_response,
    model_error_handler,
    validation_error_handler,
)
from agent_tasks.server.grants import GRANT_CHECK_S, GrantChecks
from agent_tasks.server.inbox_routes import router as inbox_router
from agent_tasks.server.page import router as page_router
from agent_tasks.server.page import static_files
from agent_tasks.server.pagesessions import PageSessionStore
from agent_tasks.server.routes import API_DESCRIPTION, router, service_error_handler
from agent_tasks.server.stream_routes import router as stream_router
from agent_tasks.server.streams import STREAM_POLL_S, FeedRegistry
from agent_tasks.worker import Services

KEEPALIVE_S = 15.0
"""Seconds between keep-alive comments on an idle stream (proxies often close idle
connections after 30 to 60 s)."""

log = logging.getLogger(__name__)


@dataclass
class ApiState:
    """What the routes share: the services, the key store, the feeds and the stream slots."""

    services: Services
    keys: ApiKeyStore
    sessions: PageSessionStore
    feeds: FeedRegistry
    slots: StreamSlots
    subscriber: Subscriber | None
    keepalive_s: float
    grants: GrantChecks
    grant_check_s: float
    """How often an idle stream checks its key (``grants.GRANT_CHECK_S``)."""
    closing: asyncio.Event
    """Set when the server starts to shut down: every open stream ends (``ApiServer``)."""
    command: str = "agent-tasks"
    """How a person runs the CLI where this server runs (``create_app``'s ``command``)."""

    @property
    def settings(self) -> Settings:
        """The settings the services came from."""
        return self.services.settings


class NamesInPath:
    """ASGI: the routing path with ``/`` and ``%`` inside a segment still escaped (``%2F``,
    ``%25``), everything else decoded as usual."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Rewrite ``scope["path"]`` from ``raw_path`` when it holds an escape."""
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw and b"%" in raw:
            segments = raw.split(b"?", 1)[0].decode("latin-1").split("/")
            path = "/".join(
                unquote(segment).replace("%", "%25").replace("/", "%2F") for segment in segments
            )
            scope = {**scope, "path": path}
        await self.app(scope, receive, send)


class RelativeRedirects:
    """ASGI: a redirect to this server's own address is answered with a relative ``Location``
    (its path and query). Starlette's trailing-slash redirect (``/tasks/`` -> ``/tasks``) names
    the scheme and host the server saw: behind a TLS proxy whose ``X-Forwarded-Proto`` uvicorn
    does not trust, that is ``http://``, and a browser following it leaves HTTPS."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; make its redirect's ``Location`` relative when it is ours."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")

        async def relative(message: Message) -> None:
            if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                message = {**message, "headers": [
                    (name, _own_path(value, host) if name == b"location" else value)
                    for name, value in message.get("headers", [])
                ]}  # fmt: skip
            await send(message)

        await self.app(scope, receive, relative)


def _own_path(location: bytes, host: str) -> bytes:
    """``location`` as a path and query when it names ``host`` (this server as the client
    called it), else as it is."""
    url = urlsplit(location.decode("latin-1"))
    if not url.scheme or url.netloc != host:
        return location
    return urlunsplit(("", "", url.path or "/", url.query, url.fragment)).encode("latin-1")


class BodyLimit:
    """ASGI: a request body over ``limit`` bytes is answered 413 ``body_too_large`` (the app
    then reads a disconnect, and whatever it answers is dropped)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, counting its body."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        seen = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    refused = True
                    if not started:
                        await self._refuse(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted, watched)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = ApiError(413, "body_too_large", f"the body is over {self.limit} bytes")
        await error_response(error)(scope, receive, send)


# Long: the app factory: lifespan, error handlers, routers, middleware; the lifespan closes over its
# arguments
def create_app(
    services: Services,
    *,
    keepalive_s: float = KEEPALIVE_S,
    poll_s: float = STREAM_POLL_S,
    grant_check_s: float = GRANT_CHECK_S,
    command: str = "agent-tasks",
) -> FastAPI:
    """The HTTP API over ``services`` (which need a graph: keys, lists, trees live in Neo4j).

    Args:
        services: from ``worker.open_services`` (the broker, when it has one, carries tokens
            and wake-ups; without one streams read tasks every ``poll_s``).
        keepalive_s: seconds between keep-alive comments on an idle stream.
        poll_s: how often a stream's feed reads its task without a word from the broker.
        grant_check_s: how often an idle stream checks its key or session (seconds).
        command: how a person runs the CLI where this server runs (``./run`` in a checkout):
            the page's commands to copy begin with it (``GET /me``).

    Returns:
        the FastAPI application, ``NamesInPath``, ``BodyLimit`` and ``RelativeRedirects``
        added as middleware (its
        ``state.api`` is the ``ApiState`` while it runs).
    """
    assert services.graph is not None, "the HTTP API needs the Neo4j task graph"
    graph = services.graph

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        subscriber = None if services.broker is None else Subscriber(services.broker)
        reading = None if subscriber is None else asyncio.create_task(subscriber.run())
        keys, sessions = ApiKeyStore(graph), PageSessionStore(graph)
        await keys.init_schema()
        await sessions.init_schema()
        app.state.api = ApiState(
            services=services,
            keys=keys,
            sessions=sessions,
            feeds=FeedRegistry(subscriber, poll_s),
            slots=StreamSlots(services.settings.streams_per_key),
            subscriber=subscriber,
            keepalive_s=keepalive_s,
            grants=GrantChecks(keys, sessions),
            grant_check_s=grant_check_s,
            closing=asyncio.Event(),
            command=command,
        )
        try:
            yield
        finally:
            app.state.api.closing.set()
            await app.state.api.feeds.close()
            if reading is not None:
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
            if subscriber is not None:
                await subscriber.close()

    app = FastAPI(
        title="durable-agent-tasks",
        version="1",
        description=API_DESCRIPTION,
        lifespan=lifespan,
    )
    app.add_exception_handler(ApiError, api_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(ValidationError, model_error_handler)
    app.add_exception_handler(TaskServiceUnavailable, service_error_handler)
    app.add_exception_handler(GraphIncomplete, service_error_handler)
    for routes in (router, stream_router, inbox_router):
        app.include_router(routes)
        app.include_router(
            routes, prefix="/projects/{project_id}", dependencies=[Depends(project_in_path)]
        )
    app.include_router(page_router)
    app.include_router(codec_router)
    app.include_router(codec_root_router)
    app.mount("/ui/static", static_files(), name="page")
    app.add_middleware(BodyLimit, limit=services.settings.max_body_bytes)
    app.add_middleware(RelativeRedirects)
    app.add_middleware(NamesInPath)  # added last: runs first
    return app


def project_in_path(
    project_id: Annotated[str, Path(description="The project; the API key must be for it.")],
) -> None:
    """Declares the path's project (the key's check reads it: ``auth.authenticate``)."""


class ApiServer(uvicorn.Server):
    """uvicorn's server that ends the app's open streams as it starts to shut down (uvicorn
    waits for open responses before the app's lifespan ends, and a stream is open until its
    client leaves): they end at once, and their clients reconnect, with ``Last-Event-ID``, to
    a server that runs."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Set the app's ``ApiState.closing``, then shut down as uvicorn does."""
        app = self.config.app
        state = getattr(getattr(app, "state", None), "api", None)
        if isinstance(state, ApiState):
            state.closing.set()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """uvicorn's, except that a SIGTERM it took is not raised again once it shut down
        (uvicorn raises it again, and its default action ends the process there): the
        shutdown it asked for has run, so the caller goes on to stop a worker of the process
        and close the services, and the process exits 0."""
        if threading.current_thread() is not threading.main_thread():
            with super().capture_signals():
                yield
            return
        before = signal.signal(signal.SIGTERM, lambda *_: None)  # what uvicorn restores
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(signal.SIGTERM, before)
