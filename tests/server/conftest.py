"""Fixtures of the HTTP API's tests: a worker with the agent tests' tools and scripts and the
broker, the API served by a real uvicorn on a free port in this process, an API key of a
fresh project per test, and an SSE reader (the wire format parsed as a browser does)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.approval_tools import APPROVAL_SCRIPTS, APPROVAL_TOOLS
from tests.servers import served
from tests.stream_agents import SCRIPTS as STREAM_SCRIPTS

STREAMS_PER_KEY = 4
"""The test server's bound on open streams per key."""
KEEPALIVE_S = 0.5
"""The test server's keep-alive interval (seconds): short, so a test sees comments."""


@pytest.fixture(scope="session")
async def http_queue(services: Services) -> AsyncIterator[str]:
    """A worker with the agent tools (and those that need approval), the scripted models and
    the broker."""
    assert services.graph is not None and services.broker is not None
    queue = f"http-{uuid.uuid4().hex[:8]}"
    async with build_worker(
        services.client,
        services.graph,
        queue,
        tools=[*TOOLS, *APPROVAL_TOOLS],
        scripts={**SCRIPTS, **STREAM_SCRIPTS, **APPROVAL_SCRIPTS},
        broker=services.broker,
    ):
        yield queue


@dataclass
class Api:
    """The served API: its base URL and what it runs on."""

    url: str
    services: Services
    queue: str
    access_log: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
async def api(services: Services, http_queue: str) -> AsyncIterator[Api]:
    """The HTTP API on uvicorn at 127.0.0.1 on a free port (``port=0``)."""
    settings = services.settings.model_copy(
        update={"temporal_task_queue": http_queue, "streams_per_key": STREAMS_PER_KEY}
    )
    api_services = Services(settings, services.client, services.graph, services.broker)
    async with served(create_app(api_services, keepalive_s=KEEPALIVE_S)) as url:
        yield Api(url, api_services, http_queue)


@dataclass
class Project:
    """A fresh project with an API key, and its client."""

    project_id: str
    key_id: str
    key: str
    history: ConversationHistory

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture
async def project(api: Api, project_id: str) -> Project:
    assert api.services.graph is not None
    record, key = await ApiKeyStore(api.services.graph).create(project_id, "tests")
    history = ConversationHistory(
        api.services.client,
        project_id,
        "tests",
        task_queue=api.queue,
        graph=api.services.graph,
    )
    return Project(project_id, record.key_id, key, history)


@pytest.fixture
async def http(api: Api, project: Project) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of the API with the project's key."""
    async with httpx.AsyncClient(base_url=api.url, headers=project.headers, timeout=30) as client:
        yield client


@dataclass
class Sse:
    """One Server-Sent Event as a browser's ``EventSource`` sees it."""

    event: str
    data: str
    id: str | None


class SseReader:
    """Reads an SSE response: events, and the comment lines seen (``comments``)."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()
        self.comments: list[str] = []

    async def next(self, within: float = 30.0, *, comments: bool = False) -> Sse:
        """The next event; with ``comments``, a comment line too (as event ``":"``)."""
        async with asyncio.timeout(within):
            event, event_id = "message", None
            data: list[str] = []
            async for line in self.lines:
                if line == "":
                    if data or event != "message":
                        return Sse(event, "\n".join(data), event_id)
                    continue
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    if comments:
                        return Sse(":", line[1:].strip(), None)
                    continue
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "event":
                    event = value
                elif name == "data":
                    data.append(value)
                elif name == "id":
                    event_id = value
            raise EOFError("the stream ended")

    async def connected(self) -> None:
        """Wait for the stream's first line, the ``connected`` comment (its subscriptions
        hold from then on)."""
        first = await self.next(comments=True)
        assert (first.event, first.data) == (":", "connected")

    async def until(self, *events: str, within: float = 60.0) -> list[Sse]:
        """Every event up to and with the first of ``events``."""
        seen: list[Sse] = []
        async with asyncio.timeout(within):
            while True:
                item = await self.next(within)
                seen.append(item)
                if item.event in events:
                    return seen
