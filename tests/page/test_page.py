"""The page in a real browser (headless Chromium driven by Playwright) against the real stack:
sign in; a question appears in the open inbox without a reload; approvals accepted, edited,
answered and ignored from the page, each with its effect; a bad answer refused next to its
field (by the browser, and by the task); a good one unblocks the agent, whose answer the task
page shows as it streams; cancel from the page; another project's context sees none of it; the
tasks list and the tree; the sign-in form's screenshot (the others: test_seen's walkthrough)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.async_api import Locator, Page, expect

from agent_tasks.contract import AgentSpec, TaskStatus
from agent_tasks.contract.search import TASK_STATUS
from agent_tasks.taskgraph.models import TaskRow
from agent_tasks.workflows.agents.approvals import IGNORED
from tests.approval_tools import approval_spec, effects, goal
from tests.conftest import eventually
from tests.page.conftest import Person
from tests.stream_agents import TALKER

REPLICAS = {
    "type": "object",
    "properties": {
        "replicas": {"type": "integer", "minimum": 1, "maximum": 9, "multipleOf": 2},
        "region": {"enum": ["eu", "us"]},
        "canary": {"type": "boolean"},
    },
    "required": ["replicas", "region"],
}
"""A question's schema: the browser checks the bounds; only the task checks ``multipleOf``."""


async def item(tab: Page, task: str) -> Locator:
    """The inbox item of ``task``, once shown."""
    found = tab.locator(f'li.item[data-task="{task}"]')
    await found.wait_for()
    return found


def error_of(field: Locator) -> Locator:
    """The error shown next to a form's field."""
    return field.locator("xpath=..").locator(".error")


async def row(person: Person, task: str) -> TaskRow:
    rows = await person.history.find_tasks(name_contains=task, limit=50)
    return next(r for r in rows if r.name == task)


async def test_sign_in_refuses_a_bad_key_and_keeps_no_key(ann: Person, shots: Path) -> None:
    tab = await ann.page()
    await tab.goto(f"{ann.site}/ui/inbox")  # no session: the form
    await tab.wait_for_url(f"{ann.site}/ui/signin")
    await tab.screenshot(path=str(shots / "signin.png"))
    await tab.get_by_label("API key").fill("atk_0000000000000000_" + "x" * 43)
    await tab.get_by_role("button", name="Sign in").click()
    await expect(tab.get_by_role("alert")).to_have_text(
        "that API key is not valid (unknown or revoked)"
    )
    await tab.get_by_label("API key").fill(ann.key)
    await tab.get_by_role("button", name="Sign in").click()
    await tab.wait_for_url(f"{ann.site}/ui/inbox")
    cookies = await ann.context.cookies()
    assert ann.key not in json.dumps(cookies)  # the session, never the key
    session = next(c for c in cookies if c["name"] == "atk_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    # a change without the CSRF token is refused, with it taken
    refused = await tab.evaluate(
        "fetch('/tasks', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: JSON.stringify({name: 'x', goal: 'g'})}).then(r => r.status)"
    )
    assert refused == 403
    assert (await ann.history.get_task("x")).found is False
    await tab.get_by_role("button", name="Sign out").click()
    await tab.wait_for_url(f"{ann.site}/ui/signin")
    assert await tab.evaluate("fetch('/tasks').then(r => r.status)") == 401


async def test_a_question_appears_live_is_answered_and_the_task_page_streams_the_answer(
    ann: Person, bob: Person
) -> None:
    inbox = await ann.sign_in()
    await expect(inbox.locator("#state")).to_have_text("Nothing is waiting for you.")
    await inbox.evaluate("window.notReloaded = true")
    await ann.history.create_task("talk", "What is Redis?", agent=TALKER)
    question = await item(inbox, "talk")
    await expect(question).to_contain_text("Start?")
    assert await inbox.evaluate("window.notReloaded") is True

    task = await ann.page()
    await task.goto(f"{ann.site}/ui/task?name=talk")
    await task.wait_for_selector("body[data-ready=true]")
    await task.evaluate(
        "window.tokensSeen = '';"
        "new MutationObserver(() => { window.tokensSeen += "
        "document.getElementById('tokens').textContent + '|' })"
        ".observe(document.getElementById('tokens'), {childList: true, subtree: true,"
        " characterData: true})"
    )
    other = await bob.sign_in()  # another project: none of it
    await expect(other.locator("#state")).to_have_text("Nothing is waiting for you.")
    assert await other.evaluate("fetch('/tasks/talk').then(r => r.status)") == 404
    await other.goto(f"{bob.site}/ui/tasks")
    await other.wait_for_selector("body[data-ready=true]")
    await expect(other.locator("#rows tr")).to_have_count(0)

    await question.get_by_label("Answer * (JSON)").fill('"go"')
    await question.get_by_role("button", name="Send the answer").click()
    await expect(inbox.locator('li.item[data-task="talk"]')).to_have_count(0)  # it left
    await task.wait_for_selector("body[data-ended=done]")
    final = "Redis is an in-memory data store used as a cache and a broker"
    await expect(task.locator("#events li.message.assistant").last).to_contain_text(final)
    assert "Redis is an in-memory" in await task.evaluate("window.tokensSeen")  # streamed
    await expect(task.locator('dd[data-field="status"]')).to_have_text("done")
    step = task.locator("#steps tr")
    await expect(step).to_have_count(1)  # the steps as the ended task holds them
    await expect(step.locator("td.state")).to_have_text("completed")
    await expect(step.locator("td.key")).to_contain_text(ann.history.workflow_id("talk"))
    view = await ann.history.wait_task("talk")
    assert view is not None and view.result is not None and view.result.text == final


async def test_a_bad_answer_is_refused_next_to_its_field(ann: Person) -> None:
    inbox = await ann.sign_in()
    agent = AgentSpec(name="ask_schema", input={"schema": REPLICAS})
    await ann.history.create_task("deploy", "deploy it", agent=agent)
    question = await item(inbox, "deploy")
    replicas = question.get_by_label("replicas *")
    await replicas.fill("0")
    await question.get_by_label("region *").select_option("eu")
    await question.get_by_role("button", name="Send the answer").click()
    await expect(error_of(replicas)).to_have_text("at least 1")  # the browser's check
    await expect(replicas).to_have_attribute("aria-invalid", "true")
    view = (await ann.history.get_task("deploy")).view
    assert view is not None and view.pending_inputs  # nothing was sent

    await replicas.fill("3")  # within the bounds: only the task knows multipleOf
    await question.get_by_role("button", name="Send the answer").click()
    await expect(error_of(replicas)).to_have_text("the task refused it: 3 is not a multiple of 2")
    events = (await ann.history.list_events("deploy", limit=200)).events
    assert not [e for e in events if e.kind.value == "input_response"]  # refused, nothing kept

    await replicas.fill("4")
    await question.get_by_role("group", name="canary").get_by_label("yes").check()
    await question.get_by_role("button", name="Send the answer").click()
    await expect(inbox.locator('li.item[data-task="deploy"]')).to_have_count(0)
    view = await ann.history.wait_task("deploy")
    assert view is not None and view.result is not None
    assert json.loads(view.result.text) == {"replicas": 4, "region": "eu", "canary": True}


async def test_approvals_accepted_edited_answered_and_ignored_from_the_page(
    ann: Person, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the tools' logs by relative name
    inbox = await ann.sign_in()
    logs = {way: tmp_path / f"{way}.log" for way in ("accept", "edit", "answer", "ignore")}
    for way, log in logs.items():
        call = ("send_mail", {"log": log.name, "to": "ops@example.com", "subject": way})
        await ann.history.create_task(way, goal(call), agent=approval_spec())
    cards = {way: await item(inbox, way) for way in logs}
    await expect(cards["accept"]).to_contain_text("Sends accept to ops@example.com")

    await cards["accept"].get_by_role("button", name="Accept").click()

    await cards["edit"].get_by_role("button", name="Edit…").click()
    to = cards["edit"].get_by_label("to *")
    await to.fill("not an address")
    await cards["edit"].get_by_role("button", name="Run with these arguments").click()
    await expect(error_of(to)).to_contain_text("must match")
    await to.fill("team@example.com")
    await cards["edit"].get_by_role("button", name="Run with these arguments").click()

    await cards["answer"].get_by_role("button", name="Answer instead…").click()
    await cards["answer"].get_by_label("The tool's result, for the model *").fill("done by hand")
    await cards["answer"].get_by_role("button", name="Send instead of running").click()

    await cards["ignore"].get_by_role("button", name="Ignore…").click()
    reason = cards["ignore"].get_by_label("Why not run it (optional, for the model)")
    await reason.fill("  the list is frozen today ")
    await cards["ignore"].get_by_role("button", name="Ignore the call").click()

    await expect(inbox.locator("li.item")).to_have_count(0)
    results = {}
    for way in logs:
        view = await ann.history.wait_task(way)
        assert view is not None and view.result is not None
        results[way] = view.result.text
    assert results == {
        "accept": "the tools said: sent 'accept' to ops@example.com",
        "edit": "the tools said: sent 'edit' to team@example.com",
        "answer": "the tools said: done by hand",
        "ignore": f"the tools said: {IGNORED}; their reason: the list is frozen today",
    }
    accept_key = effects(logs["accept"])[0].split()[0]
    assert effects(logs["accept"]) == [f"{accept_key} mail ops@example.com accept x1"]
    assert [line.split(" ", 1)[1] for line in effects(logs["edit"])] == [
        "mail team@example.com edit x1"
    ]
    assert effects(logs["answer"]) == effects(logs["ignore"]) == []
    (step,) = (await ann.history.list_steps("accept")).steps
    assert step.idempotency_key == accept_key  # the key the approved call ran with
    for way in logs:
        decisions = [
            e for e in (await ann.history.list_events(way, limit=200)).events
            if e.kind.value == "decision"
        ]  # fmt: skip
        assert len(decisions) == 1 and decisions[0].author.startswith("key-")


async def test_cancel_from_the_page_ends_the_task_cancelled_everywhere(ann: Person) -> None:
    await ann.sign_in()
    await ann.history.create_task("stop", "What is Redis?", agent=TALKER)
    tab = await ann.page()
    await tab.goto(f"{ann.site}/ui/task?name=stop")
    await tab.wait_for_selector("body[data-ready=true]")
    await expect(tab.locator("#inputs li.item")).to_have_count(1)  # it waits for "go"
    await tab.get_by_role("button", name="Cancel the task…").click()
    await tab.get_by_role("button", name="Yes, cancel it").click()  # confirmed first
    await tab.wait_for_selector("body[data-ended=cancelled]")
    await expect(tab.locator('dd[data-field="status"]')).to_have_text("cancelled")
    view = await ann.history.wait_task("stop")
    assert view is not None and view.status is TaskStatus.CANCELLED
    handle = ann.history.client.get_workflow_handle(ann.history.workflow_id("stop"))
    described = await handle.describe()
    assert described.status is not None and described.status.name == "CANCELED"
    assert described.typed_search_attributes.get(TASK_STATUS) == "cancelled"

    async def mirrored() -> bool:
        return (await row(ann, "stop")).status is TaskStatus.CANCELLED

    await eventually(mirrored)


async def test_the_tasks_list_filters_and_the_tree_is_live(ann: Person) -> None:
    await ann.sign_in()
    await ann.history.create_task("fan", "three children", agent=AgentSpec(name="fanout",
        input={"children": 2}))  # fmt: skip
    await ann.history.create_task("lone", "nothing", session_id="s-1")

    async def mirrored() -> bool:  # the list reads Neo4j: the parent, its two children, lone
        return len(await ann.history.find_tasks(limit=10)) == 4

    await eventually(mirrored)
    tab = await ann.page()
    await tab.goto(f"{ann.site}/ui/tasks")
    await tab.wait_for_selector("body[data-ready=true]")
    for landmark in ("banner", "navigation", "main", "search"):  # a screen reader's landmarks
        await expect(tab.get_by_role(landmark)).to_have_count(1)
    await tab.keyboard.press("Tab")  # the keyboard's first stop: past the header, to the list
    await expect(tab.get_by_role("link", name="Skip to the tasks")).to_be_focused()
    await expect(tab.locator("#rows tr")).to_have_count(4)
    await tab.get_by_label("Name contains").fill("FAN/")
    await tab.get_by_role("button", name="Filter").click()
    await expect(tab.locator("#rows tr")).to_have_count(2)
    await tab.get_by_label("Name contains").fill("")
    await tab.get_by_label("Session").fill("s-1")
    await tab.get_by_role("button", name="Filter").click()
    await expect(tab.locator("#rows tr")).to_have_count(1)
    await expect(tab.locator("#rows")).to_contain_text("lone")
    await tab.get_by_label("Session").fill("")
    await tab.get_by_role("button", name="Filter").click()
    await expect(tab.locator("#rows tr")).to_have_count(4)

    await tab.get_by_role("link", name="fan", exact=True).click()
    await tab.wait_for_selector("body[data-ready=true]")
    tree = tab.locator("#tree")
    await expect(tree.locator("li")).to_have_count(2)
    await expect(tree.locator("li", has_text="fan/c0")).to_contain_text("open")
    assert (await ann.history.finish_task("fan/c0", "done")).recorded
    await expect(tree.locator("li", has_text="fan/c0")).to_contain_text("done")  # live
    assert (await ann.history.finish_task("fan/c1", "failed", error="no")).recorded
    await tab.wait_for_selector("body[data-ended=done]")
    await expect(tree.locator("li", has_text="fan/c1")).to_contain_text("failed")


PLAN = {
    "type": "object",
    "properties": {
        "owners": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
        "limits": {
            "type": "object",
            "properties": {"cpu": {"type": "number", "maximum": 8}, "note": {"type": "string"}},
            "required": ["cpu"],
        },
        "extra": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["owners", "limits", "extra"],
}
"""A question's schema with an array, a nested object, and a choice the form generator does
not render (a JSON editor, checked in the browser too)."""


async def test_arrays_nested_objects_and_the_json_editor_and_every_viewer_sees_it_leave(
    ann: Person,
) -> None:
    inbox = await ann.sign_in()
    other = await ann.page()  # a second viewer of the same inbox
    await other.goto(f"{ann.site}/ui/inbox")
    await expect(other.locator("#state")).to_have_text("Nothing is waiting for you.")
    await ann.history.create_task("plan", "plan it", agent=AgentSpec(name="ask_schema",
        input={"schema": PLAN}))  # fmt: skip
    question = await item(inbox, "plan")
    await item(other, "plan")
    send = question.get_by_role("button", name="Send the answer")

    await send.click()  # nothing filled: the browser's checks
    owners = question.locator("fieldset:has(> legend:text-is('owners *')) > .error")
    await expect(owners).to_have_text("at least 1 items")
    cpu = question.get_by_label("cpu *")
    await expect(error_of(cpu)).to_have_text("cpu is required")

    await question.get_by_role("button", name="Add an item").click()
    await question.get_by_label("item 1 *").fill("ann")
    await cpu.fill("4")
    extra = question.get_by_label("extra * (JSON)")
    await extra.fill("{not json")
    await send.click()
    await expect(error_of(extra)).to_contain_text("not JSON")
    await extra.fill("1.5")  # JSON, but neither a string nor an integer
    await send.click()
    await expect(error_of(extra)).to_have_text("must match exactly one of the choices")
    await expect(extra).to_have_attribute("aria-invalid", "true")
    view = (await ann.history.get_task("plan")).view
    assert view is not None and view.pending_inputs  # nothing was sent

    await extra.fill("12")
    await send.click()
    for viewer in (inbox, other):  # gone for every viewer
        await expect(viewer.locator('li.item[data-task="plan"]')).to_have_count(0)
    done = await ann.history.wait_task("plan")
    assert done is not None and done.result is not None
    assert json.loads(done.result.text) == {"owners": ["ann"], "limits": {"cpu": 4}, "extra": 12}


async def test_branch_from_the_page_and_the_link_to_the_temporal_web_ui(ann: Person) -> None:
    await ann.sign_in()
    assert (await ann.history.create_task("src", "a recorded task")).recorded
    for line in ("one", "two", "three"):
        assert (await ann.history.record_event("src", "message", line, role="user")).recorded
    tab = await ann.page()
    await tab.goto(f"{ann.site}/ui/task?name=src")
    await tab.wait_for_selector("body[data-ready=true]")
    await expect(tab.locator("#events li.event")).to_have_count(3)
    link = tab.get_by_role("link", name="the workflow in the Temporal Web UI")
    href = await link.get_attribute("href")
    assert href is not None
    workflow = quote(ann.history.workflow_id("src"), safe="")
    assert href.endswith(f"/namespaces/default/workflows/{workflow}")

    await tab.get_by_label("Branch from seq").fill("2")
    await tab.get_by_label("as the new task").fill("src-b")
    await tab.get_by_role("button", name="Branch").click()
    await tab.get_by_role("link", name="open the branch").click()
    await tab.wait_for_url(f"{ann.site}/ui/task?name=src-b")
    await tab.wait_for_selector("body[data-ready=true]")
    await expect(tab.locator("#events li.event")).to_have_count(2)
    copied = (await ann.history.list_events("src-b")).events
    assert [e.payload for e in copied] == ["one", "two"]


async def test_the_edit_form_of_an_approval_is_filled_with_the_models_arguments(
    ann: Person, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """page.md, the page's inbox: Edit opens the call's form filled with the model's own
    arguments; sent as it is, the call runs with them."""
    monkeypatch.chdir(tmp_path)
    inbox = await ann.sign_in()
    log = tmp_path / "prefill.log"
    call = ("send_mail", {"log": log.name, "to": "ops@example.com", "subject": "prefill"})
    await ann.history.create_task("prefill", goal(call), agent=approval_spec())
    card = await item(inbox, "prefill")
    await card.get_by_role("button", name="Edit…").click()
    await expect(card.get_by_label("to *")).to_have_value("ops@example.com")
    await expect(card.get_by_label("subject *")).to_have_value("prefill")
    await expect(card.get_by_label("log *")).to_have_value(log.name)
    await card.get_by_role("button", name="Run with these arguments").click()
    view = await ann.history.wait_task("prefill")
    assert view is not None and view.result is not None
    assert view.result.text == "the tools said: sent 'prefill' to ops@example.com"
    assert [line.split(" ", 1)[1] for line in effects(log)] == ["mail ops@example.com prefill x1"]
