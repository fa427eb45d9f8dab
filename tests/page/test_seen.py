"""What a person sees on the page, in Chromium at 1,280 and 390 px: a long goal is clipped
with the whole of it one click away, and the page never scrolls sideways; a task offers only
the actions its status and kind allow, and a cancel is confirmed first; a yes/no question is a
labelled pair, a required choice starts unchosen, and each error sits apart from its field,
tied to it for a screen reader; a card shows its request id and the command that answers it,
and that command, run, answers it; every page has a favicon. The walkthrough (sign in, a
yes/no question, an approval by its id, a long imported task) takes the docs' screenshots."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from playwright.async_api import Locator, Page, ViewportSize, expect

from agent_tasks.cli.importer import import_paths, mirror_caught_up
from agent_tasks.contract import AgentSpec, TaskStatus
from agent_tasks.server import create_app
from agent_tasks.worker import Services
from tests.approval_tools import approval_spec, goal
from tests.cli.test_cli_errors import EXAMPLE, cli
from tests.conftest import eventually
from tests.page.conftest import Person
from tests.servers import served
from tests.stream_agents import TALKER

PAST_THE_EDGE = (
    "[...document.querySelectorAll('body *')]"
    ".filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)"
    ".slice(0, 5).map(e => `${e.tagName}.${e.className}#${e.id}: ${e.textContent.slice(0, 40)}`)"
)
"""The first elements reaching past the page's right edge (what a failure names)."""
WIDE = ViewportSize(width=1280, height=900)
NARROW = ViewportSize(width=390, height=844)
"""The two widths the page is checked at (a laptop, a phone)."""
CHOICES = {
    "type": "object",
    "properties": {"ship": {"type": "boolean"}, "region": {"enum": ["eu", "us"]}},
    "required": ["ship", "region"],
}
"""A question with a required yes/no and a required choice."""


async def opened(person: Person, path: str) -> Page:
    tab = await person.page()
    await tab.goto(f"{person.site}{path}")
    await tab.wait_for_selector("body[data-ready=true]")
    return tab


async def sideways(tab: Page) -> int:
    """How far the page scrolls sideways (px; 0: it does not)."""
    scroll: int = await tab.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    return scroll


async def card(tab: Page, task: str) -> Locator:
    found = tab.locator(f'li.item[data-task="{task}"]')
    await found.wait_for()
    return found


async def box(tab: Page, selector: str) -> dict[str, float]:
    """The viewport box (px: x, y, width, height) of the first element ``selector`` matches,
    found and measured in one pass of the page's own script: a live re-render of the page
    between finding an element and measuring it (a locator's ``bounding_box`` does both in two
    round trips) would measure a detached element and answer None."""
    found: dict[str, float] | None = await tab.evaluate(
        """(selector) => {
          const e = document.querySelector(selector);
          if (!e) return null;
          const r = e.getBoundingClientRect();
          return { x: r.x, y: r.y, width: r.width, height: r.height };
        }""",
        selector,
    )
    assert found is not None, f"nothing matches {selector}"
    return found


async def below(error: Locator, field: Locator) -> float:
    """The gap between the bottom of ``field`` and the top of its ``error`` (px)."""
    above, under = await field.bounding_box(), await error.bounding_box()
    assert above is not None and under is not None
    return under["y"] - (above["y"] + above["height"])


async def test_a_long_goal_is_clipped_and_shown_whole_on_a_click(ann: Person) -> None:
    await ann.sign_in()
    words = "Reproduce the failure, find its cause and fix it. " * 60
    path = "/" + "very-long-folder-name/" * 20 + "file.py"  # no place to break a line
    long = f"{words}\n{path}\n{words}"[:3_900]
    assert (await ann.history.create_task("long", long)).recorded
    assert (await ann.history.create_task("short", "a short goal")).recorded

    async def listed() -> bool:
        return len(await ann.history.find_tasks(limit=10)) == 2

    await eventually(listed)
    tab = await opened(ann, "/ui/tasks")
    row = tab.locator('tr[data-task="long"]')
    for size in (WIDE, NARROW):
        await tab.set_viewport_size(size)
        assert await sideways(tab) == 0, await tab.evaluate(PAST_THE_EDGE)
    await tab.set_viewport_size(WIDE)
    assert (await box(tab, 'tr[data-task="long"]'))["height"] < 120  # two lines, not the whole goal
    await expect(row.get_by_text("show all 3,900 characters")).to_be_visible()
    whole = row.locator(".clip-whole")
    await expect(whole).to_be_hidden()
    await expect(tab.locator('tr[data-task="short"] td.goal')).to_have_text("a short goal")
    await row.get_by_text("show all 3,900 characters").click()
    await expect(whole).to_be_visible()
    assert await whole.text_content() == long  # all of it, as written
    assert await sideways(tab) == 0

    task = await opened(ann, "/ui/task?name=long")
    for size in (WIDE, NARROW):
        await task.set_viewport_size(size)
        status = await box(task, 'dd[data-field="status"]')
        assert status["y"] + status["height"] < size["height"], size
        assert await sideways(task) == 0, await task.evaluate(PAST_THE_EDGE)
    goal_field = task.locator('dd[data-field="goal"]')
    await goal_field.get_by_text("show all").click()
    await expect(goal_field.locator(".clip-whole")).to_have_text(long)


async def test_a_task_offers_only_the_actions_its_status_and_kind_allow(
    ann: Person, tmp_path: Path
) -> None:
    await ann.sign_in()
    buttons = ("Cancel the task…", "Resume", "Continue", "Branch")

    async def offered(tab: Page) -> list[str]:
        await tab.wait_for_selector("#actions-section:not([hidden])")
        return [b for b in buttons if await tab.get_by_role("button", name=b).is_visible()]

    unknown = await ann.page()  # no such task: nothing to do
    await unknown.goto(f"{ann.site}/ui/task?name=nope")
    await expect(unknown.locator("#title")).to_contain_text("task_not_found")
    for name in buttons:
        await expect(unknown.get_by_role("button", name=name)).to_have_count(0)

    assert (await ann.history.create_task("rec", "recorded by an app")).recorded
    assert (await ann.history.record_event("rec", "message", "hello", role="user")).recorded
    recorded = await opened(ann, "/ui/task?name=rec")
    assert await offered(recorded) == ["Cancel the task…", "Branch"]
    assert (await ann.history.finish_task("rec", "done", result="ok")).recorded
    await recorded.wait_for_selector("body[data-ended=done]")
    assert await offered(recorded) == ["Branch"]  # a done task is not cancelled, nor resumed
    await expect(recorded.locator("#actions-note")).to_contain_text("An app recorded it")

    await ann.history.create_task("talk", "What is Redis?", agent=TALKER)
    talk = await opened(ann, "/ui/task?name=talk")
    await expect(talk.locator("#inputs li.item")).to_have_count(1)  # it waits for "go"
    assert await offered(talk) == ["Cancel the task…", "Branch"]
    await talk.get_by_role("button", name="Cancel the task…").click()
    confirm = talk.get_by_role("group", name="Cancel this task?")
    await expect(confirm).to_be_visible()
    await confirm.get_by_role("button", name="No, keep it").click()  # nothing sent
    await expect(confirm).to_be_hidden()
    view = (await ann.history.get_task("talk")).view
    assert view is not None and view.status is TaskStatus.AWAITING_INPUT
    await talk.get_by_role("button", name="Cancel the task…").click()
    await confirm.get_by_role("button", name="Yes, cancel it").click()
    await talk.wait_for_selector("body[data-ended=cancelled]")
    assert await offered(talk) == ["Resume", "Branch"]  # cancelled before any tool ran

    log = tmp_path / "steps.log"
    spec = AgentSpec(name="three_steps", tools=["echo", "sync_data", "fail_first"],
        input={"log": str(log)})  # fmt: skip
    await ann.history.create_task("steps", "three steps", agent=spec)
    failed = await ann.history.wait_task("steps")
    assert failed is not None and failed.status is TaskStatus.FAILED
    steps = await opened(ann, "/ui/task?name=steps")
    assert await offered(steps) == ["Resume", "Branch"]
    await expect(steps.locator("#actions-note")).to_contain_text("Resume runs its last turn again")
    await steps.get_by_role("button", name="Resume").click()  # offered, so taken
    await steps.wait_for_selector("body[data-ended=done]")
    assert await offered(steps) == ["Branch"]


async def test_a_yes_no_question_and_a_required_choice_start_unchosen_and_errors_sit_apart(
    ann: Person,
) -> None:
    inbox = await ann.sign_in()
    await ann.history.create_task("ask", "choose", agent=AgentSpec(name="ask_schema",
        input={"schema": CHOICES}))  # fmt: skip
    question = await card(inbox, "ask")
    ship = question.get_by_role("group", name="ship *")
    yes, no = ship.get_by_label("yes", exact=True), ship.get_by_label("no", exact=True)
    await expect(yes).not_to_be_checked()
    await expect(no).not_to_be_checked()
    region = question.get_by_label("region *")
    await expect(region).to_have_value("")  # "choose one…", not the first option
    send = question.get_by_role("button", name="Send the answer")

    await send.click()
    error = ship.locator(".error")
    await expect(error).to_have_text("choose yes or no")
    await expect(yes).to_have_accessible_description("choose yes or no")
    assert await below(error, ship.locator(".radios")) >= 4  # apart from its field
    await no.check()
    await send.click()
    await expect(region).to_have_accessible_description("choose one")
    assert await below(question.locator(".field:has(select) .error"), region) >= 4
    view = (await ann.history.get_task("ask")).view
    assert view is not None and view.pending_inputs  # nothing was sent

    await region.select_option("us")
    await send.click()
    await expect(inbox.locator('li.item[data-task="ask"]')).to_have_count(0)
    done = await ann.history.wait_task("ask")
    assert done is not None and done.result is not None
    assert json.loads(done.result.text) == {"ship": False, "region": "us"}


async def test_every_page_has_a_favicon_and_loads_nothing_missing(ann: Person) -> None:
    tab = await ann.page()
    missing: list[str] = []
    tab.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    await tab.goto(f"{ann.site}/ui/signin")
    await ann.sign_in()
    for path in ("/ui/signin", "/ui/inbox", "/ui/tasks", "/ui/task?name=none"):
        await tab.goto(f"{ann.site}{path}")
        icon = await tab.locator("link[rel=icon]").get_attribute("href")
        assert icon == "/ui/static/favicon.svg", path
    shown = await tab.request.get(f"{ann.site}/ui/static/favicon.svg")
    assert shown.status == 200 and shown.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in await shown.text()
    assert [url for url in missing if "/tasks/none" not in url] == []


async def test_walkthrough_a_question_and_an_approval_by_its_id_and_a_long_imported_task(
    ann: Person, tmp_path: Path, shots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's walk: sign in; answer a yes/no question on the page; answer an approval
    with the command its card shows; open a long imported task. Screenshots at both widths."""
    monkeypatch.chdir(tmp_path)
    await ann.context.grant_permissions(["clipboard-read", "clipboard-write"])
    inbox = await ann.sign_in()
    await ann.history.create_task("ship", "ship it?", agent=AgentSpec(name="ask_schema",
        input={"schema": {"type": "boolean", "title": "Ship it?"}}))  # fmt: skip
    call = ("send_mail", {"log": "mail.log", "to": "ops@example.com", "subject": "release"})
    await ann.history.create_task("mail", goal(call), agent=approval_spec())
    question, approval = await card(inbox, "ship"), await card(inbox, "mail")
    request = (await ann.history.get_task("mail")).view
    assert request is not None and request.pending_inputs
    input_id, asked = request.pending_inputs[0].input_id, request.pending_inputs[0].approval
    assert asked is not None and asked.digest is not None
    await expect(approval.locator("code.request-id")).to_have_text(input_id)
    command = (
        f"agent-tasks approve mail {input_id} --accept --digest {asked.digest[:12]} "
        f"--project {ann.project_id}"
    )
    await expect(approval.locator("code.command")).to_have_text(command)
    await approval.get_by_role("button", name="Copy the request id").click()
    assert await inbox.evaluate("navigator.clipboard.readText()") == input_id
    await expect(question.locator("code.command")).to_have_text(
        f"agent-tasks input ship --input-id q --json VALUE --project {ann.project_id}"
    )
    for size, suffix in ((WIDE, ""), (NARROW, "-390")):
        await inbox.set_viewport_size(size)
        assert await sideways(inbox) == 0, await inbox.evaluate(PAST_THE_EDGE)
        await inbox.screenshot(path=str(shots / f"inbox{suffix}.png"), full_page=True)
    await inbox.set_viewport_size(WIDE)

    await question.get_by_role("group", name="Ship it? *").get_by_label("yes").check()
    await question.get_by_role("button", name="Send the answer").click()
    answered = await cli(*shlex.split(command)[1:])  # the card's command, as shown
    assert answered.returncode == 0, answered.stdout + answered.stderr
    await expect(inbox.locator("li.item")).to_have_count(0)
    shipped, mailed = await ann.history.wait_task("ship"), await ann.history.wait_task("mail")
    assert shipped is not None and shipped.result is not None and shipped.result.text == "true"
    assert mailed is not None and mailed.result is not None
    assert mailed.result.text == "the tools said: sent 'release' to ops@example.com"

    reports = await import_paths(ann.history, [EXAMPLE])
    (task,) = [r.task for r in reports if r.task]
    await mirror_caught_up(ann.history, [task])
    tasks = await opened(ann, "/ui/tasks")
    long = tasks.locator(f'tr[data-task="{task}"]')
    await expect(long.get_by_text("show all 4,000 characters")).to_be_visible()
    page = await opened(ann, f"/ui/task?name={task}")
    for size, suffix in ((WIDE, ""), (NARROW, "-390")):
        for tab, name in ((tasks, "tasks"), (page, "task")):
            await tab.set_viewport_size(size)
            assert await sideways(tab) == 0, await tab.evaluate(PAST_THE_EDGE)
            await tab.screenshot(path=str(shots / f"{name}{suffix}.png"))
        status = await box(page, 'dd[data-field="status"]')
        assert status["y"] + status["height"] < size["height"], size


LINES_OF = (
    "(e) => { const r = document.createRange(); r.selectNodeContents(e); "
    "return new Set([...r.getClientRects()].map((b) => Math.round(b.bottom))).size; }"
)
"""How many lines an element's content takes (its boxes' distinct bottoms: a wrapped text has
one box per line)."""


async def test_a_steps_state_stays_one_word_at_1280_px(ann: Person) -> None:
    """The steps table of a task's page wrapped a state as "compl / eted" at 1,280 px (a
    table cell breaks anywhere, and the side column is narrow): each state and each status of
    the tasks list stays whole, on one line."""
    await ann.sign_in()
    assert (await ann.history.create_task("many", "steps with long names")).recorded
    states = ["completed", "not_started", "in_progress", "unknown", "failed"]
    for n, state in enumerate(states):
        name = f"r{n:05d}.0:synchronise_the_customer_records_with_the_warehouse_{n}"
        set_to = await ann.history.set_step("many", name, state, kind="tool")
        assert set_to.recorded, set_to.message
    tab = await opened(ann, "/ui/task?name=many")
    await tab.set_viewport_size(WIDE)
    cells = tab.locator("#steps td.state")
    await expect(cells).to_have_count(len(states))
    for n in range(len(states)):
        assert await cells.nth(n).evaluate(LINES_OF) == 1, await cells.nth(n).text_content()
    listed = await opened(ann, "/ui/tasks")
    status = listed.locator('tr[data-task="many"] td').nth(1)
    await expect(status).to_have_text("open")
    assert await status.evaluate(LINES_OF) == 1


async def test_the_tasks_list_and_a_tasks_page_name_the_agent_id_alike(ann: Person) -> None:
    """The tasks list's Agent column showed the agent id (``cli``) while a task's page showed
    the agent's name: both name the agent id "Agent id", with the same value, and the task's
    page names the agent that runs it (none for a recorded task) apart."""
    await ann.sign_in()
    ann.history.agent_id = "bot-7"
    assert (await ann.history.create_task("rec", "recorded by an app")).recorded

    async def listed() -> bool:
        return len(await ann.history.find_tasks(limit=10)) == 1

    await eventually(listed)
    tab = await opened(ann, "/ui/tasks")
    headers = await tab.locator("table.grid thead th").all_text_contents()
    column = headers.index("Agent id")
    await expect(tab.locator('tr[data-task="rec"] td').nth(column)).to_have_text("bot-7")
    await expect(tab.get_by_label("Agent id")).to_be_visible()  # the filter says the same
    task = await opened(ann, "/ui/task?name=rec")
    await expect(task.locator('dd[data-field="agent id"]')).to_have_text("bot-7")
    await expect(task.locator('dd[data-field="agent"]')).to_have_text("none: an app records it")


async def test_a_cards_command_begins_as_the_server_was_started(
    ann: Person, services: Services, page_queue: str
) -> None:
    """The cards' commands said ``agent-tasks ...``, which a checkout's ``./run serve`` does not
    put on anyone's PATH: they begin with the command the server's CLI was invoked as
    (``create_app``'s ``command``, ``GET /me``)."""
    settings = services.settings.model_copy(update={"temporal_task_queue": page_queue})
    own = Services(settings, services.client, services.graph, services.broker)
    await ann.history.create_task("ship", "ship it?", agent=AgentSpec(name="ask_schema",
        input={"schema": {"type": "boolean", "title": "Ship it?"}}))  # fmt: skip
    async with served(create_app(own, keepalive_s=1.0, command="/src/repo/run")) as site:
        tab = await ann.page()
        await tab.goto(f"{site}/ui/signin")
        await tab.get_by_label("API key").fill(ann.key)
        await tab.get_by_role("button", name="Sign in").click()
        await tab.wait_for_url(f"{site}/ui/inbox")
        asked = await card(tab, "ship")
        try:
            await expect(asked.locator("code.command")).to_have_text(
                f"/src/repo/run input ship --input-id q --json VALUE --project {ann.project_id}"
            )
        finally:
            await tab.close()  # its inbox stream open would hold the server's shutdown
