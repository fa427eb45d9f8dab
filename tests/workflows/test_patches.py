"""The patch ids of the task workflow live in one module (``workflows.patches``): every
``workflow.patched`` call names one of its constants, and each record's ``pinned_by`` is exactly
the saved histories that carry the patch's marker (decoded from the histories themselves)."""

from __future__ import annotations

import ast
import base64
import json
from datetime import date
from pathlib import Path

from agent_tasks.workflows import patches
from agent_tasks.workflows.patches import PATCHES, RETENTION, Patch

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ROOT / "tests" / "histories"


def markers(path: Path) -> set[str]:
    """The patch ids whose marker (``core_patch``) a saved history records."""
    found: set[str] = set()
    for event in json.loads(path.read_text(encoding="utf-8"))["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if not marker or marker.get("markerName") != "core_patch":
            continue
        for detail in marker.get("details", {}).values():
            for payload in detail.get("payloads", []):
                found.add(json.loads(base64.b64decode(payload["data"]))["id"])
    return found


def patched_arguments(source: str) -> list[ast.expr]:
    """The first argument of every ``workflow.patched(...)`` / ``deprecate_patch(...)`` call."""
    return [
        node.args[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"patched", "deprecate_patch"}
    ]


def test_every_patched_call_names_a_constant_of_the_patches_module() -> None:
    constants = {
        name: value
        for name, value in vars(patches).items()
        if isinstance(value, str) and value in PATCHES
    }
    used: set[str] = set()
    for path in sorted((ROOT / "agent_tasks" / "workflows").rglob("*.py")):
        for argument in patched_arguments(path.read_text(encoding="utf-8")):
            assert isinstance(argument, ast.Name), f"{path}: a patch id written in place"
            assert argument.id in constants, f"{path}: {argument.id} is not in workflows.patches"
            used.add(constants[argument.id])
    assert used == set(PATCHES)  # and every recorded patch is still in use


def test_pinned_by_is_exactly_the_saved_histories_with_each_marker() -> None:
    carried: dict[str, set[str]] = {}
    for path in sorted(HISTORIES.glob("*.json")):
        for patch_id in markers(path):
            carried.setdefault(patch_id, set()).add(path.name)
    assert set(carried) <= set(PATCHES)
    for patch_id, record in PATCHES.items():
        assert set(record.pinned_by) == carried.get(patch_id, set()), patch_id


def test_the_markers_of_a_history_are_read_from_its_events() -> None:
    assert markers(HISTORIES / "cancel_after_end.json") >= {patches.CANCEL_AFTER_END}
    assert markers(HISTORIES / "create.json") == set()


def test_each_record_has_its_day_and_its_earliest_deprecation() -> None:
    assert len(set(PATCHES)) == len(PATCHES)
    for record in PATCHES.values():
        assert date(2026, 1, 1) <= record.since <= date(2026, 12, 31)
    made = Patch(since=date(2026, 12, 4), pinned_by=())
    assert made.deprecation_after() == date(2027, 1, 3) == date(2026, 12, 4) + RETENTION
