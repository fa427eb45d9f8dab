"""The page, measured in a real browser (Debian's headless Chromium driven by Playwright) on
the local stack (``agent-tasks dev up``, with its broker): the HTTP API on uvicorn and a worker
in this process.

- **A question to the open inbox**: an inbox page is open and signed in; ``--questions`` times
  an app asks (``request_input`` on a recorded task of its own, one at a time); the
  milliseconds from the call to the item's appearance in the page (a ``MutationObserver``
  stamps ``Date.now()``; one clock, this machine's), p50 and p95; beside it the call's own
  round trip (the update, until the workflow has the request).
- **A task of 10,000 events**: ``--events`` events recorded (200 an update), mirrored; the task
  page opened: the milliseconds from navigation to the page's ``data-ready`` (its newest page
  of events shown, the summary, steps, decisions, tree), the events shown and the page's DOM
  nodes; the same for a task of ``--small`` events, and the ratio.

    python -m bench.bench_page [--questions 30] [--events 10000] [--small 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from playwright.async_api import Page, async_playwright

from agent_tasks.contract import EventInput, EventKind
from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker, open_services

CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium; ``CHROMIUM`` names another, else ``chromium`` on ``PATH`` is used."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str:
    """The browser the benchmark drives (as the page's tests find it)."""
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or CHROMIUM


STAMP = """
window.arrived = {};
new MutationObserver(() => {
  for (const li of document.querySelectorAll('li.item')) {
    if (!(li.dataset.task in window.arrived)) window.arrived[li.dataset.task] = Date.now();
  }
}).observe(document.getElementById('items'), {childList: true});
"""


@contextlib.asynccontextmanager
async def served(services: Services) -> AsyncIterator[str]:
    """The HTTP API and the page on uvicorn at a free port."""
    server = uvicorn.Server(
        uvicorn.Config(create_app(services), host="127.0.0.1", port=0, log_level="warning")
    )
    running = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn has no event for it)
        await asyncio.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await running


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def sign_in(tab: Page, site: str, key: str) -> None:
    await tab.goto(f"{site}/ui/signin")
    await tab.get_by_label("API key").fill(key)
    await tab.get_by_role("button", name="Sign in").click()
    await tab.wait_for_url(f"{site}/ui/inbox")


async def questions(tab: Page, history: ConversationHistory, count: int) -> dict[str, Any]:
    await tab.wait_for_selector("body[data-ready=true]")
    await tab.evaluate(STAMP)
    shown, calls = [], []
    for i in range(count):
        task = f"q{i:03d}"
        await history.create_task(task, "a question")
        sent = time.time() * 1000
        asked = await history.request_input(task, "ask", f"Question {i}?", {"type": "string"})
        calls.append(time.time() * 1000 - sent)
        assert asked.recorded, asked
        await tab.wait_for_function(f"'{task}' in window.arrived", timeout=30_000)
        shown.append(await tab.evaluate(f"window.arrived['{task}']") - sent)
    return {
        "p50_ms": statistics.median(shown),
        "p95_ms": percentile(shown, 0.95),
        "call_p50_ms": statistics.median(calls),
        "call_p95_ms": percentile(calls, 0.95),
        "n": count,
    }


async def long_task(history: ConversationHistory, name: str, events: int) -> None:
    await history.create_task(name, f"{events} events")
    batch = [
        EventInput(kind=EventKind.MESSAGE, role="assistant" if i % 2 else "user", payload="x" * 80)
        for i in range(events)
    ]
    for first in range(0, events, 200):
        assert (await history.record_events(name, batch[first : first + 200])).recorded
    while (view := (await history.get_task(name)).view) and view.unmirrored_writes:  # noqa: ASYNC110
        await asyncio.sleep(0.2)


async def open_task(tab: Page, site: str, name: str) -> dict[str, float]:
    started = time.perf_counter()
    await tab.goto(f"{site}/ui/task?name={name}")
    await tab.wait_for_selector("body[data-ready=true]", timeout=60_000)
    elapsed = (time.perf_counter() - started) * 1000
    shown = await tab.evaluate("document.querySelectorAll('#events li').length")
    nodes = await tab.evaluate("document.getElementsByTagName('*').length")
    return {"ready_ms": elapsed, "events_shown": shown, "dom_nodes": nodes}


async def main(args: argparse.Namespace) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None
        queue = f"bench-page-{uuid.uuid4().hex[:8]}"
        settings = services.settings.model_copy(update={"temporal_task_queue": queue})
        here = Services(settings, services.client, services.graph, services.broker)
        project = f"bench-page-{uuid.uuid4().hex[:8]}"
        _, key = await ApiKeyStore(services.graph).create(project, "bench")
        history = ConversationHistory(
            services.client, project, "bench", task_queue=queue, graph=services.graph
        )
        async with (
            build_worker(services.client, services.graph, queue, broker=services.broker),
            served(here) as site,
            async_playwright() as playwright,
        ):
            browser = await playwright.chromium.launch(
                executable_path=chromium(), args=CHROMIUM_ARGS, headless=True
            )
            # bypass_csp: the page allows no eval, and wait_for_function evaluates its test
            tab = await (await browser.new_context(bypass_csp=True)).new_page()
            await sign_in(tab, site, key)
            asked = await questions(tab, history, args.questions)
            print(
                f"question -> open inbox: p50 {asked['p50_ms']:.0f} ms, p95 "
                f"{asked['p95_ms']:.0f} ms (n={asked['n']}); the ask call itself p50 "
                f"{asked['call_p50_ms']:.0f} ms, p95 {asked['call_p95_ms']:.0f} ms"
            )
            await long_task(history, "small", args.small)
            await long_task(history, "long", args.events)
            small = [await open_task(tab, site, "small") for _ in range(3)]
            large = [await open_task(tab, site, "long") for _ in range(3)]
            for runs, count in ((small, args.small), (large, args.events)):
                ready = statistics.median(r["ready_ms"] for r in runs)
                print(
                    f"task page of {count} events: ready in {ready:.0f} ms (median of 3), "
                    f"{runs[0]['events_shown']:.0f} events shown, {runs[0]['dom_nodes']:.0f} "
                    "DOM nodes"
                )
            ratio = statistics.median(r["ready_ms"] for r in large) / statistics.median(
                r["ready_ms"] for r in small
            )
            print(f"ratio {args.events} / {args.small} events: {ratio:.2f}x")
            await browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
