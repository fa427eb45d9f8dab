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
from temporalio.client import Client

from agent_tasks.cli.importer import export_task, import_paths, mirror_caught_up, verify_task
from agent_tasks.cli.planning import plan_import
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.trajectories import check_atif, read_file
from bench.corpus import build_corpus
from tests.starter.test_client import history_length
from tests.trajectories.test_trajectories import CASES, COUNTERS, FILES, one_run

ROOT = Path(__file__).resolve().parents[2]
X8251X = ROOT / "examples/trajectories/atif/openagents__orchestrator__x8251x.atif.json"
HUMANEVAL = ROOT / "examples/trajectories/swe-agent/sweagent__demo__humanevalfix-python-0.traj"


@pytest.fixture(scope="module")
def long_observation() -> str:
    """The result holding the 39,372-character test log of the x8251x orchestrator run, as the
    documented mapping writes an object payload: ``json.dumps(content, ensure_ascii=False)``."""
    data = json.loads(X8251X.read_text())
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
    reports = await import_paths(history, FILES)
    assert [(r.status, r.error) for r in reports] == [("created", None)] * len(FILES)
    await mirror_caught_up(history, [r.task for r in reports if r.task])
    tasks, _ = plan_import(FILES)
    for path, report, task in zip(FILES, reports, tasks, strict=True):
        data = json.loads(path.read_text(encoding="utf-8"))
        events, steps, failed = COUNTERS[path.parent.name](data)
        assert report.task == one_run(path).name
        view = (await history.get_task(report.task)).view
        assert view is not None, path.name
        assert view.last_seq == events == report.new_events, path.name
        assert sum(view.step_counts.values()) == steps, path.name
        assert view.step_counts["failed"] == failed, path.name  # type: ignore[index]
        assert view.status.value in ("done", "failed")
        assert view.session_id == one_run(path).source_id
        assert await verify_task(history, task) == []
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


async def test_reimport_of_a_corpus_is_a_no_op(
    history: ConversationHistory, client: Client, tmp_path: Path
) -> None:
    corpus = build_corpus(tmp_path / "corpus", 40)
    first = await import_paths(history, [tmp_path / "corpus"])
    assert [r.status for r in first] == ["created"] * 40
    assert len({r.task for r in first}) == 40  # altered ids: 40 runs, 40 tasks
    names = [r.task or "" for r in first]
    await mirror_caught_up(history, names)
    before = [(await history.get_task(name)).view for name in names]
    lengths = [await history_length(client, history, name) for name in names]
    again = await import_paths(history, corpus)
    assert {(r.status, r.new_events, r.error) for r in again} == {("already imported", 0, None)}
    assert [(await history.get_task(name)).view for name in names] == before
    assert [await history_length(client, history, name) for name in names] == lengths


async def test_a_refused_import_writes_nothing(
    history: ConversationHistory, client: Client, graph: TaskGraph
) -> None:
    run = one_run(HUMANEVAL)
    other = await history.create_task(run.name, "another goal", request_id="someone-else")
    assert other.created
    await history.record_event(run.name, "message", "the other task's own event")
    await mirror_caught_up(history, [run.name])
    before = (
        await history_length(client, history, run.name),
        (await history.get_task(run.name)).view,
        await graph.reads.counts(history.project_id),
    )
    (report,) = await import_paths(history, [HUMANEVAL])
    assert report.status == "refused"
    assert report.error is not None and report.error.startswith("task_exists")
    assert report.new_events == 0
    await asyncio.sleep(0.5)  # a write, had there been one, would reach the mirror by now
    after = (
        await history_length(client, history, run.name),
        (await history.get_task(run.name)).view,
        await graph.reads.counts(history.project_id),
    )
    assert after == before
    # The same name and goal, created by another writer: not this import's task either.
    second = ConversationHistory(
        client,
        project_id=history.project_id + "-2",
        agent_id="someone",
        task_queue=history.task_queue,
        graph=graph,
    )
    assert (await second.create_task(run.name, run.goal, request_id="not-the-import")).created
    await mirror_caught_up(second, [run.name])
    length = await history_length(client, second, run.name)
    (report,) = await import_paths(second, [HUMANEVAL])
    assert report.status == "refused" and "another writer" in (report.error or "")
    assert await history_length(client, second, run.name) == length
    view = (await second.get_task(run.name)).view
    assert view is not None and view.last_seq == 0 and view.status.value == "open"


async def test_export_is_valid_atif_and_imports_back_with_subagents(
    history: ConversationHistory, client: Client, graph: TaskGraph, tmp_path: Path
) -> None:
    reports = await import_paths(history, [X8251X, CASES / "atif-1.7-embedded-subagent.json"])
    await mirror_caught_up(history, [r.task or "" for r in reports])
    other = ConversationHistory(
        client,
        project_id=history.project_id + "-b",
        agent_id="b",
        task_queue=history.task_queue,
        graph=graph,
    )
    fields = ("seq", "kind", "role", "name", "call_id", "payload", "full_length", "full_sha256")
    for report in reports:
        if report.parent is not None:
            continue  # exported inside its parent
        assert report.task is not None
        exported = await export_task(history, report.task)
        assert exported["schema_version"] == "ATIF-v1.7"
        assert check_atif(exported) == []
        path = tmp_path / "export.json"
        path.write_text(json.dumps(exported, ensure_ascii=False), encoding="utf-8")
        names = [run.name for run in read_file(path)]
        again = await import_paths(other, [path])
        assert [r.task for r in again] == names and {r.status for r in again} == {"created"}
        for name in names:
            copied = (await other.list_events(name, limit=200)).events
            original = (await history.list_events(name, limit=200)).events
            assert [[getattr(e, f) for f in fields] for e in copied] == [
                [getattr(e, f) for f in fields] for e in original
            ]
            steps = [
                (s.step_name, s.state, s.result_event_seq)
                for s in (await other.list_steps(name)).steps
            ]
            assert steps == [
                (s.step_name, s.state, s.result_event_seq)
                for s in (await history.list_steps(name)).steps
            ]
            copy_view, view = (await other.get_task(name)).view, (await history.get_task(name)).view
            assert copy_view is not None and view is not None
            assert (copy_view.parent, copy_view.goal, copy_view.metadata) == (
                view.parent,
                view.goal,
                view.metadata,
            )
    assert sum(r.parent is not None for r in reports) == 1


async def test_bad_files_get_a_clear_error_and_the_rest_import(
    tmp_path: Path, task_queue: str, project_id: str
) -> None:
    truncated = tmp_path / "truncated.json"
    truncated.write_text(HUMANEVAL.read_text()[:500])
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"hello": "world"}))
    good = tmp_path / "good.traj"
    good.write_bytes(HUMANEVAL.read_bytes())
    # A subprocess, so that this session's worker (on this event loop) keeps running.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_tasks.cli",
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
    rows = {Path(f["file"]).name: f for f in out["files"]}
    assert rows["truncated.json"]["status"] == "refused"
    assert str(truncated) in rows["truncated.json"]["error"]
    assert "invalid JSON" in rows["truncated.json"]["error"]
    assert "unknown.json" in rows["unknown.json"]["error"]
    assert "mini-swe-agent" in rows["unknown.json"]["error"]
    assert (rows["good.traj"]["status"], rows["good.traj"]["error"]) == ("created", None)
    assert (
        out["totals"]["new_events"] == COUNTERS["swe-agent"](json.loads(HUMANEVAL.read_text()))[0]
    )


async def test_a_run_over_the_step_limit_is_refused_whole(
    history: ConversationHistory, tmp_path: Path
) -> None:
    """A SWE-agent run of 10,001 tool calls: more steps than a task holds, so the import is
    refused before anything is written (no task, no events)."""
    steps = [{"thought": "", "action": f"echo {i}", "observation": str(i)} for i in range(10_001)]
    path = tmp_path / "long.traj"
    path.write_text(json.dumps({"history": [], "trajectory": steps}), encoding="utf-8")
    (report,) = await import_paths(history, [path])
    assert report.status == "refused" and report.steps == 10_001
    assert report.error is not None and report.error.startswith("step_limit_reached")
    assert report.task is not None and not (await history.get_task(report.task)).found
