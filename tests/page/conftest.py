"""Fixtures of the page's tests in a real browser: Debian's Chromium (never downloaded;
``./run test`` installs it when missing) headless, driven by Playwright, against the HTTP API
on uvicorn at a free port in this process, Temporal and Neo4j of the local stack, and a worker
with the approval tools and the streaming scripted models. Each test gets two projects with a
key each, and signs a browser context in with one of them.

Screenshots go to ``AGENT_TASKS_SCREENSHOTS`` when it names a folder (``docs/screenshots`` for
the README), else to the test's own temporary folder."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.approval_tools import APPROVAL_SCRIPTS, APPROVAL_TOOLS
from tests.servers import served
from tests.stream_agents import SCRIPTS as STREAM_SCRIPTS

CHROMIUM_INSTALL = "apt-get update && apt-get install -y --no-install-recommends chromium"
"""How Debian's Chromium is installed (``./run test`` runs it, as root or with sudo, when no
Chromium is found); ``CHROMIUM`` names another executable."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    # without these the browser's own connections (to its vendor's services) are refused by a
    # closed network, and it waits on them
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 30_000
"""What a page action or expectation waits at most (ms)."""


@pytest.fixture(scope="session")
async def page_queue(services: Services) -> AsyncIterator[str]:
    """A worker with the test tools, those that need approval, and the scripted models."""
    assert services.graph is not None and services.broker is not None
    queue = f"page-{uuid.uuid4().hex[:8]}"
    async with build_worker(
        services.client,
        services.graph,
        queue,
        tools=[*TOOLS, *APPROVAL_TOOLS],
        scripts={**SCRIPTS, **STREAM_SCRIPTS, **APPROVAL_SCRIPTS},
        broker=services.broker,
    ):
        yield queue


@pytest.fixture(scope="session")
async def site(services: Services, page_queue: str) -> AsyncIterator[str]:
    """The HTTP API and its page on uvicorn at a free port: its base URL."""
    settings = services.settings.model_copy(update={"temporal_task_queue": page_queue})
    page_services = Services(settings, services.client, services.graph, services.broker)
    async with served(create_app(page_services, keepalive_s=1.0)) as url:
        yield url


def chromium() -> str:
    """The browser's path: ``CHROMIUM``, else ``chromium`` on ``PATH``; fails the tests (never
    skips them) naming what is missing and how to install it: a browser is never downloaded."""
    named = os.environ.get("CHROMIUM")
    if named:
        if not os.access(named, os.X_OK):
            pytest.fail(f"CHROMIUM={named} is not an executable file")
        return named
    found = shutil.which("chromium")
    if found is None:
        pytest.fail(
            "no Chromium: CHROMIUM is not set and chromium is not on PATH; ./run test installs "
            f"Debian's package, or run: sudo sh -c '{CHROMIUM_INSTALL}'"
        )
    return found


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium from the machine's packages (a fresh profile each launch)."""
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium(), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        await launched.close()


@dataclass
class Person:
    """A project with an API key, its client, and a browser context for it."""

    project_id: str
    key: str
    history: ConversationHistory
    context: BrowserContext
    site: str

    async def page(self) -> Page:
        """A new tab of this person's context."""
        tab = await self.context.new_page()
        tab.set_default_timeout(TIMEOUT_MS)
        return tab

    async def sign_in(self) -> Page:
        """Sign in through the form; returns the tab on the inbox."""
        tab = await self.page()
        await tab.goto(f"{self.site}/ui/")
        await tab.get_by_label("API key").fill(self.key)
        await tab.get_by_role("button", name="Sign in").click()
        await tab.wait_for_url(f"{self.site}/ui/inbox")
        return tab


async def person(services: Services, queue: str, browser: Browser, site: str) -> Person:
    assert services.graph is not None
    project_id = f"p-{uuid.uuid4().hex[:12]}"
    _, key = await ApiKeyStore(services.graph).create(project_id, "page tests")
    history = ConversationHistory(
        services.client, project_id, "tests", task_queue=queue, graph=services.graph
    )
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    return Person(project_id, key, history, context, site)


@pytest.fixture
async def ann(
    services: Services, page_queue: str, browser: Browser, site: str
) -> AsyncIterator[Person]:
    """A person of one project."""
    found = await person(services, page_queue, browser, site)
    yield found
    await found.context.close()


@pytest.fixture
async def bob(
    services: Services, page_queue: str, browser: Browser, site: str
) -> AsyncIterator[Person]:
    """A person of another project, in a browser context of his own."""
    found = await person(services, page_queue, browser, site)
    yield found
    await found.context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go (``AGENT_TASKS_SCREENSHOTS``, else a temporary folder)."""
    chosen = os.environ.get("AGENT_TASKS_SCREENSHOTS")
    folder = Path(chosen).resolve() if chosen else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder
