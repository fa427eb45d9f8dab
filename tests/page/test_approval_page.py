"""The page's approval of a call bound to what it approves (``workflows.agents.approvals``):
it shows the call's digest, its expiry and the approvals so far, sends the digest it showed,
offers no edit when two approvers are needed, and shows the task's refusal of a second accept
by the same person. Chromium against ``agent-tasks serve`` and the local stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import expect

from agent_tasks.starter.client import ConversationHistory
from agent_tasks.workflows.agents.approvals import IGNORED
from tests.approval_tools import approval_spec, effects, goal
from tests.page.conftest import Person
from tests.page.test_page import error_of, item


async def test_the_page_shows_the_digest_the_expiry_and_the_approvals_so_far(
    ann: Person, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the tool's log by relative name
    inbox = await ann.sign_in()
    log = tmp_path / "wire.log"
    call = ("wire", {"log": log.name, "amount": 500})
    assert (await ann.history.create_task("wire", goal(call), agent=approval_spec())).recorded
    card = await item(inbox, "wire")
    view = (await ann.history.get_task("wire")).view
    assert view is not None
    (request,) = view.pending_inputs
    assert request.approval is not None and request.approval.digest is not None
    await expect(card.locator(".digest code")).to_have_text(request.approval.digest[:12])
    await expect(card.locator(".when")).to_contain_text("expires")
    await expect(card.locator(".approvals")).to_have_text(" · approvals 0 of 2")
    await expect(card.get_by_role("button", name="Edit…")).to_have_count(0)

    await card.get_by_role("button", name="Accept").click()
    second = inbox.locator(f'li.item[data-input="{request.input_id}-2"]')
    await expect(second.locator(".approvals")).to_contain_text(" · approvals 1 of 2 (key-")
    await second.get_by_role("button", name="Accept").click()  # the same person again
    await expect(second.get_by_role("status")).to_contain_text("approver_repeated")
    assert effects(log) == []

    other = ConversationHistory(
        ann.history.client,
        project_id=ann.project_id,
        agent_id="bob",
        task_queue=ann.history.task_queue,
        graph=ann.history.graph,
    )
    assert (await other.approve("wire", f"{request.input_id}-2", "accept")).recorded
    await expect(inbox.locator("li.item")).to_have_count(0)
    done = await ann.history.wait_task("wire")
    assert done is not None and done.result is not None
    assert done.result.text == "the tools said: wired 500"
    assert effects(log) == [f"{request.approval.idempotency_key} wire 500"]


async def test_an_ignore_with_a_blank_reason_is_refused_under_its_field_and_not_sent(
    ann: Person, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reason of white space only is refused as ``agent-tasks approve --ignore --reason``
    refuses it: an error under the field, nothing sent (the request stays open; the one
    decision the task records is the later one, whose reason the model reads)."""
    monkeypatch.chdir(tmp_path)  # the tool's log by relative name
    inbox = await ann.sign_in()
    log = tmp_path / "mail.log"
    call = ("send_mail", {"log": log.name, "to": "ops@example.com", "subject": "blank"})
    assert (await ann.history.create_task("blank", goal(call), agent=approval_spec())).recorded
    card = await item(inbox, "blank")
    await card.get_by_role("button", name="Ignore…").click()
    reason = card.get_by_label("Why not run it (optional, for the model)")
    await reason.fill("  \n\t ")
    await card.get_by_role("button", name="Ignore the call").click()
    await expect(error_of(reason)).to_have_text("an empty reason: leave the field empty or say why")
    await expect(reason).to_have_attribute("aria-invalid", "true")
    await expect(card.get_by_role("status")).to_have_text("")  # nothing was sent
    view = (await ann.history.get_task("blank")).view
    assert view is not None and len(view.pending_inputs) == 1

    await reason.fill("frozen today")
    await card.get_by_role("button", name="Ignore the call").click()
    done = await ann.history.wait_task("blank")
    assert done is not None and done.result is not None
    assert done.result.text == f"the tools said: {IGNORED}; their reason: frozen today"
    decisions = [
        e for e in (await ann.history.list_events("blank", limit=200)).events
        if e.kind.value == "decision"
    ]  # fmt: skip
    assert len(decisions) == 1 and "ignored the call" in decisions[0].payload
    assert effects(log) == []
