"""The main job end to end: import every shipped trajectory into the real Temporal and Neo4j,
verify, re-import, export and re-import, and the CLI's handling of bad files."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from starter.client import ConversationHistory
from starter.importer import export_task, import_file, mirror_caught_up, verify_file
from tests.trajectories.test_trajectories import COUNTERS, FILES
from trajectories import parse_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def long_observation() -> str:
    """The result holding the 39,372-character test log of the x8251x orchestrator run, as the
    documented mapping writes an object payload: ``json.dumps(content, ensure_ascii=False)``."""
    data = json.loads(
        (ROOT / "examples/trajectories/atif/openagents__orchestrator__x8251x.atif.json").read_text()
    )
    (content,) = [
        r["content"]
        for step in data["steps"]
        for r in (step.get("observation") or {}).get("results", [])
        if isinstance(r.get("content"), dict) and len(r["content"].get("output", "")) > 32_000
    ]
    assert len(content["output"]) == 39_372
    return json.dumps(content, ensure_ascii=False)


async def test_every_shipped_file_imports_with_the_source_counts(
    history: ConversationHistory, long_observation: str
) -> None:
    reports = [await import_file(history, path, None) for path in FILES]
    assert [r.error for r in reports] == [None] * len(FILES)
    await mirror_caught_up(history, [r.task for r in reports if r.task])
    for path, report in zip(FILES, reports, strict=True):
        data = json.loads(path.read_text(encoding="utf-8"))
        events, steps, failed = COUNTERS[path.parent.name](data)
        assert report.task is not None
        view = (await history.get_task(report.task)).view
        assert view is not None, path.name
        assert view.last_seq == events, path.name
        assert sum(view.step_counts.values()) == steps, path.name
        assert view.step_counts["failed"] == failed, path.name  # type: ignore[index]
        assert view.status.value in ("done", "failed")
        assert await verify_file(history, path, None) == []
    # The long observation: cut to 32,000 characters, with the hash and length of its text.
    x8251x = next(r for r in reports if "x8251x" in r.file)
    assert x8251x.cut_payloads == 1
    assert x8251x.task is not None
    cut = [e for e in (await history.list_events(x8251x.task, limit=200)).events if e.truncated]
    assert len(cut) == 1
    assert cut[0].payload == long_observation[:32_000]
    assert cut[0].full_length == len(long_observation)
    assert cut[0].full_sha256 == hashlib.sha256(long_observation.encode()).hexdigest()
    failures = await history.failed_tool_calls()
    assert sum(row.failed for row in failures) == sum(
        COUNTERS[p.parent.name](json.loads(p.read_text(encoding="utf-8")))[2] for p in FILES
    )


async def test_reimport_is_a_no_op(history: ConversationHistory) -> None:
    path = next(p for p in FILES if "humanevalfix" in p.name)
    first = await import_file(history, path, None)
    assert first.new_events == first.events > 0
    await mirror_caught_up(history, [first.task or ""])
    before = (await history.get_task(first.task or "")).view
    again = await import_file(history, path, None)
    assert again.error is None and again.new_events == 0
    assert (await history.get_task(first.task or "")).view == before


async def test_export_then_import_round_trips(
    history: ConversationHistory, client, graph, task_queue, tmp_path: Path
) -> None:
    path = next(p for p in FILES if "x8251x" in p.name)
    report = await import_file(history, path, None)
    assert report.task is not None
    original = (await history.list_events(report.task, limit=200)).events
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps(await export_task(history, report.task), ensure_ascii=False))
    assert json.loads(exported.read_text())["schema_version"] == "ATIF-v1.5"
    other = ConversationHistory(
        client,
        project_id=history.project_id + "-b",
        agent_id="b",
        task_queue=task_queue,
        graph=graph,
    )
    again = await import_file(other, exported, None)
    assert again.error is None and again.task == report.task
    copied = (await other.list_events(report.task, limit=200)).events
    fields = ("seq", "kind", "role", "name", "call_id", "payload", "full_length", "full_sha256")
    assert [[getattr(e, f) for f in fields] for e in copied] == [
        [getattr(e, f) for f in fields] for e in original
    ]
    steps = [
        (s.step_name, s.state, s.result_event_seq)
        for s in (await other.list_steps(report.task)).steps
    ]
    assert steps == [
        (s.step_name, s.state, s.result_event_seq)
        for s in (await history.list_steps(report.task)).steps
    ]
    assert parse_file(exported).name == report.task


async def test_bad_files_get_a_clear_error_and_the_rest_import(
    tmp_path: Path, task_queue: str, project_id: str
) -> None:
    truncated = tmp_path / "truncated.json"
    source = ROOT / "examples/trajectories/swe-agent/sweagent__demo__humanevalfix-python-0.traj"
    truncated.write_text(source.read_text()[:500])
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"hello": "world"}))
    good = tmp_path / "good.traj"
    good.write_bytes(source.read_bytes())
    # A subprocess, so that this session's worker (on this event loop) keeps running.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "starter",
        "import",
        str(truncated),
        str(unknown),
        str(good),
        "--project",
        project_id,
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TEMPORAL_TASK_QUEUE": task_queue},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode == 1, stderr.decode()
    out = json.loads(stdout)
    errors = {Path(f["file"]).name: f["error"] for f in out["files"]}
    assert (
        "truncated.json" in errors["truncated.json"] and "invalid JSON" in errors["truncated.json"]
    )
    assert "unknown.json" in errors["unknown.json"] and "mini-swe-agent" in errors["unknown.json"]
    assert errors["good.traj"] is None
    assert out["totals"]["new_events"] == COUNTERS["swe-agent"](json.loads(source.read_text()))[0]
