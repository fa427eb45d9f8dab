"""The Temporal Web UI shows our payloads: in Chromium, the Web UI that the local stack's
Temporal dev server serves, its codec server set in the UI's own settings dialog ("Codec
Server": the browser's endpoint, cross-origin credentials included) to our codec server
(``server.codec``, ``/codec`` of the HTTP API), signed in to our page: a task's workflow shows
its input as JSON (compressed before) and an event's sealed text opened; signed in as another
project, the same event's text stays sealed, its compressed JSON still shown.

Kinds of public reports tried here: temporalio/ui#1113 (an ``Access-Control-Allow-Origin: *``
answer to a request with credentials is refused by the browser: ours names the UI's origin),
dsx-ai-factory/nv-config-manager#154 (a preflight from the Web UI's origin, which is not the
API's, refused: ours allows exactly that origin), temporalio/ui#3490 (the browser's endpoint is
used only with "Use my browser setting" chosen: the test chooses it, as a person must). The
walk takes the docs' screenshots of the dialog and of the opened event."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from playwright.async_api import Page, expect

from tests.page.conftest import TIMEOUT_MS, Person

GOAL = "plan the trip, " * 100
"""A goal long enough to travel compressed (``codec.COMPRESS_MIN_BYTES``)."""
LOADED_MS = 90_000
"""How long the Web UI may take to show a workflow on a busy machine (ms)."""


async def codec_set(tab: Page, ui: str, endpoint: str, shots: Path | None = None) -> None:
    """Set the Web UI's codec server in its settings dialog, as a person does: the browser's
    endpoint over the cluster's, with cross-origin credentials (the page's session cookie)."""
    await tab.goto(f"{ui}/namespaces/default/workflows")
    await tab.get_by_role("button", name="Configure Codec Server").click(timeout=LOADED_MS)
    dialog = tab.get_by_role("dialog")
    await dialog.get_by_text("Use my browser setting and ignore Cluster-level setting.").click()
    await dialog.get_by_placeholder("Paste your endpoint here").fill(endpoint)
    await dialog.get_by_text("Include cross-origin credentials").click()  # the switch's label
    credentials = dialog.get_by_role("switch", name="Include cross-origin credentials")
    await expect(credentials).to_be_checked()
    if shots is not None:
        await tab.screenshot(path=str(shots / "web-ui-codec-settings.png"))
    await dialog.get_by_role("button", name="Apply").click()
    await expect(dialog).to_be_hidden()
    stored = await tab.evaluate("[localStorage.endpoint, localStorage.includeCredentials]")
    assert stored == [f'"{endpoint}"', "true"], stored


async def update_opened(tab: Page, ui: str, workflow_id: str, update: str) -> str:
    """Open the workflow in the Web UI, open its ``update`` event (Update Accepted) and return
    the page's text once its input is shown (decoded when the codec server decodes it)."""
    await tab.goto(f"{ui}/namespaces/default/workflows/{quote(workflow_id, safe='')}")
    await tab.get_by_role("tab", name="Event History").click(timeout=LOADED_MS)
    event = tab.locator("tr").filter(has_text="Workflow Execution Update Accepted")
    row = event.filter(has_text=update)
    await row.first.click(timeout=LOADED_MS)
    await tab.get_by_text("Accepted Request").first.wait_for()
    await tab.get_by_text('"kind": "message"').first.wait_for()
    return await tab.inner_text("body")


async def test_the_web_ui_shows_our_payloads_and_sealed_text_to_its_project_only(
    ann: Person, bob: Person, shots: Path
) -> None:
    secret = "the passport number is P-4417-2209"
    assert (await ann.history.create_task("trip", GOAL)).recorded
    assert (await ann.history.record_event("trip", "message", secret, role="user")).recorded
    workflow_id = ann.history.workflow_id("trip")
    me = await (await ann.sign_in()).evaluate("fetch('/me').then((r) => r.json())")
    ui, endpoint = me["temporal_ui"], f"{ann.site}/codec"

    tab = await ann.page()
    await codec_set(tab, ui, endpoint, shots)
    shown = await update_opened(tab, ui, workflow_id, "record_events")
    assert secret in shown and '"sealed": null' in shown  # opened: the text, no ciphertext
    assert "plan the trip, plan the trip" in shown  # the workflow's input, compressed before
    # the opened text in the middle of the view, the event's row above it; the Web UI's table
    # is wider than 1,280 px
    await tab.set_viewport_size({"width": 1600, "height": 1000})
    await tab.get_by_text(secret).first.evaluate(
        "(e) => e.scrollIntoView({ block: 'center', inline: 'nearest' })"
    )
    await tab.screenshot(path=str(shots / "web-ui-codec.png"))

    await bob.sign_in()  # another project's session, in a browser of his own
    theirs = await bob.page()
    theirs.set_default_timeout(TIMEOUT_MS)
    await codec_set(theirs, ui, endpoint)
    seen = await update_opened(theirs, ui, workflow_id, "record_events")
    assert secret not in seen and '"sealed": null' not in seen  # still ciphertext
    assert '"sealed": "' in seen and '"payload": ""' in seen and '"key_id": "' in seen
    assert "plan the trip, plan the trip" in seen  # compression is no secret
