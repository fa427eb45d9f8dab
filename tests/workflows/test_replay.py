"""Replay: the histories in ``tests/histories`` against the code on disk, a non-deterministic
change caught (and the same change behind ``workflow.patched`` accepted), and the
``agent-tasks replay`` pre-deploy check against the live server and against saved files.

The histories are the compatibility contract with tasks already running: a failure here means
the workflow change would break them. Fix the change (``workflow.patched``), never the history.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

import tests.agent_tools  # noqa: F401  (registers the agent code of the saved agent histories)
from agent_tasks.cli.replay_check import replay_dir, replay_histories, replay_server
from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.contract import TaskWorkflowInput
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.workflows.agents.registry import agent_function
from agent_tasks.workflows.task import TaskWorkflow
from tests.conftest import eventually, mirrored

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ROOT / "tests" / "histories"
FILES = sorted(HISTORIES.glob("*.json"))
MIRROR_HISTORY = HISTORIES / "mirror.json"

ANCHOR = "        handle = workflow.start_activity(\n            MIRROR_ACTIVITY,\n"
"""The start of the mirror's activity call in ``MirrorCalls.call`` (workflows/mirror_calls.py)."""
EXTRA_TIMER = "        await workflow.sleep(timedelta(seconds=1))\n"
PATCHED_TIMER = (
    '        if workflow.patched("pause-before-mirror"):\n'
    "            await workflow.sleep(timedelta(seconds=1))\n"
)


def load(path: Path) -> WorkflowHistory:
    """A saved history, under the workflow id its start event records (else the file stem)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    started = data["events"][0]["workflowExecutionStartedEventAttributes"]
    return WorkflowHistory.from_json(started.get("workflowId") or path.stem, data)


def types(path: Path) -> list[str]:
    """Event type names of a saved history, read from the JSON itself."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [e["eventType"].removeprefix("EVENT_TYPE_") for e in data["events"]]


def replayer(workflow_class: type) -> Replayer:
    return Replayer(workflows=[workflow_class], data_converter=DATA_CONVERTER)


# ------------------------------------------------------------------- the saved histories


def test_every_scenario_has_a_documented_history() -> None:
    """Each scenario of the capture tool (asked in a process of its own: the tool drives the
    tests' agents, so the tests do not import it) has its files saved and described."""
    listed = subprocess.run(
        [sys.executable, "-m", "tools.capture_histories", "--list"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    expected = {file for files in json.loads(listed.stdout).values() for file in files}
    assert expected <= {path.stem for path in FILES}
    readme = (HISTORIES / "README.md").read_text(encoding="utf-8")
    for path in FILES:
        assert f"`{path.name}`" in readme, f"{path.name} is not described in README.md"


def test_histories_cover_their_scenarios() -> None:
    for path in FILES:
        assert types(path)[0] == "WORKFLOW_EXECUTION_STARTED", path.name
    mirror = types(HISTORIES / "mirror.json")
    assert mirror.index("TIMER_STARTED") < mirror.index("TIMER_FIRED")
    assert mirror.index("TIMER_FIRED") < mirror.index("ACTIVITY_TASK_SCHEDULED")
    assert types(HISTORIES / "finish.json")[-1] == "WORKFLOW_EXECUTION_COMPLETED"
    assert types(HISTORIES / "import.json")[-1] == "WORKFLOW_EXECUTION_COMPLETED"
    # The follower: five writes, two mirror calls; each write is the floor's five events.
    follows = types(HISTORIES / "mirror_follows.json")
    assert follows.count("ACTIVITY_TASK_SCHEDULED") == 2
    assert follows.count("WORKFLOW_EXECUTION_UPDATE_ACCEPTED") == 7  # create, 5 writes, finish
    assert "ACTIVITY_TASK_FAILED" in types(HISTORIES / "mirror_failure.json")
    run1 = load(HISTORIES / "continue_as_new_run1.json")
    run2 = load(HISTORIES / "continue_as_new_run2.json")
    assert run1.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    new_run = run1.events[-1].workflow_execution_continued_as_new_event_attributes
    started = run2.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id == run1.run_id
    assert new_run.new_execution_run_id == run2.run_id
    # A write in flight at the switch ran in the second run's first workflow task.
    assert types(HISTORIES / "continue_as_new_run2.json")[3:5] == [
        "WORKFLOW_TASK_COMPLETED",
        "WORKFLOW_EXECUTION_UPDATE_ACCEPTED",
    ]
    tool = [
        (e.activity_task_scheduled_event_attributes.activity_type.name or e.event_type)
        for e in load(HISTORIES / "cancel_rule_tool.json").events
    ]
    cancelled = tool.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
    assert "model_turn" in tool[:cancelled] and "model_turn" not in tool[cancelled:]
    assert "START_CHILD_WORKFLOW_EXECUTION_FAILED" in types(HISTORIES / "spawn_taken.json")
    reconciled = load(HISTORIES / "children_reconciled.json").events
    first = next(e for e in reconciled if e.HasField("activity_task_scheduled_event_attributes"))
    assert first.activity_task_scheduled_event_attributes.activity_type.name == "child_ends"
    sealed = load(HISTORIES / "sealed_decisions.json")
    inputs = [
        json.loads(
            e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args.payloads[
                0
            ].data
        )
        for e in sealed.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    events = [event for written in inputs for event in written.get("events", [])]
    assert [e["kind"] for e in events] == ["tool_call", "tool_result", "decision"]
    assert all(e["payload"] == "" and e["sealed"] and e["key_id"] for e in events)
    assert events[2]["cites"] == {"events": [1, 2], "steps": ["read-env"]}


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
async def test_history_replays_on_the_current_code(path: Path) -> None:
    history = load(path)
    result = await replayer(TaskWorkflow).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


# ------------------------------------------------------------ a non-deterministic change


def changed_workflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, insert: str) -> type:
    """``TaskWorkflow`` with ``insert`` placed just before the mirror's ``start_activity``:
    a copy of workflows/mirror_calls.py so changed, and a copy of workflows/task.py importing
    it, imported as new modules (the replay sandbox imports them again by name, so they live
    on ``sys.path``)."""
    calls = (ROOT / "agent_tasks" / "workflows" / "mirror_calls.py").read_text(encoding="utf-8")
    assert calls.count(ANCHOR) == 1, "the mirror's start_activity moved: update ANCHOR"
    assert "\nfrom datetime import timedelta\n" in calls
    task = (ROOT / "agent_tasks" / "workflows" / "task.py").read_text(encoding="utf-8")
    imported = "    from agent_tasks.workflows.mirror_calls import "
    assert task.count(imported) == 1
    suffix = uuid.uuid4().hex[:12]
    (tmp_path / f"mirror_calls_changed_{suffix}.py").write_text(
        calls.replace(ANCHOR, insert + ANCHOR), encoding="utf-8"
    )
    (tmp_path / f"task_changed_{suffix}.py").write_text(
        task.replace(imported, f"    from mirror_calls_changed_{suffix} import "),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    workflow_class: type = importlib.import_module(f"task_changed_{suffix}").TaskWorkflow
    assert workflow_class is not TaskWorkflow
    return workflow_class


async def test_unchanged_copy_replays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = changed_workflow(tmp_path, monkeypatch, "")
    result = await replayer(copy).replay_workflow(load(MIRROR_HISTORY))
    assert result.replay_failure is None


async def test_an_extra_timer_before_the_mirror_is_nondeterministic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = changed_workflow(tmp_path, monkeypatch, EXTRA_TIMER)
    with pytest.raises(NondeterminismError):
        await replayer(changed).replay_workflow(load(MIRROR_HISTORY))
    result = await replayer(changed).replay_workflow(
        load(MIRROR_HISTORY), raise_on_replay_failure=False
    )
    assert isinstance(result.replay_failure, NondeterminismError)


async def test_the_same_change_behind_patched_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patched = changed_workflow(tmp_path, monkeypatch, PATCHED_TIMER)
    for path in FILES:
        result = await replayer(patched).replay_workflow(load(path), raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


async def test_replay_check_classifies_each_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = changed_workflow(tmp_path, monkeypatch, EXTRA_TIMER)
    results = await replay_dir(HISTORIES, workflows=[changed])
    assert [Path(r.source).name for r in results] == [path.name for path in FILES]
    for path, result in zip(FILES, results, strict=True):
        calls_the_mirror = "ACTIVITY_TASK_SCHEDULED" in types(path)
        assert result.result == ("nondeterministic" if calls_the_mirror else "ok"), path.name
        assert result.events == len(types(path))
        if calls_the_mirror:
            assert result.message is not None and "\n" not in result.message
            assert result.message.startswith("NondeterminismError: "), result.message
    ok = await replay_histories([("mirror", load(MIRROR_HISTORY))])
    assert [r.result for r in ok] == ["ok"]


# --------------------------------------------------------------- the pre-deploy replay check


async def test_saved_histories_pass_the_check() -> None:
    results = await replay_dir(HISTORIES)
    assert [(Path(r.source).name, r.result) for r in results] == [(p.name, "ok") for p in FILES]
    for path, result in zip(FILES, results, strict=True):
        data = json.loads(path.read_text(encoding="utf-8"))
        started = data["events"][0]["workflowExecutionStartedEventAttributes"]
        assert result.workflow_id == started["workflowId"]
        assert result.run_id == started["originalExecutionRunId"]
        assert result.events == len(data["events"])


async def test_live_tasks_of_a_project_pass_the_check(
    client: Client, history: ConversationHistory
) -> None:
    await history.create_task("open-task", "stays open")
    await history.record_event("open-task", "message", "hello")
    await history.create_task("done-task", "finishes")
    await history.finish_task("done-task", "done", result="ok")
    await client.get_workflow_handle(history.workflow_id("done-task")).result()
    await mirrored(history, "open-task")
    ids = {history.workflow_id("open-task"), history.workflow_id("done-task")}

    async def both_listed() -> bool:
        query = f"ProjectId = '{history.project_id}'"
        return {e.id async for e in client.list_workflows(query)} == ids

    await eventually(both_listed)
    results = await replay_server(
        client, project=history.project_id, since=datetime.now(UTC) - timedelta(hours=1)
    )
    assert {r.workflow_id for r in results} == ids
    for result in results:
        assert (result.result, result.message) == ("ok", None)
        handle = client.get_workflow_handle(result.workflow_id, run_id=result.run_id)
        assert result.events == len((await handle.fetch_history()).events)
    done = await replay_server(client, project=history.project_id, status="done")
    assert [r.workflow_id for r in done] == [history.workflow_id("done-task")]
    # A window starting in the future keeps only the running task.
    running = await replay_server(
        client, project=history.project_id, since=datetime.now(UTC) + timedelta(hours=1)
    )
    assert [r.workflow_id for r in running] == [history.workflow_id("open-task")]


async def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m agent_tasks.cli replay ARGS`` in a subprocess (the entry point's code)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "agent_tasks.cli", "replay", *args]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


async def test_cli_passes_on_the_saved_histories() -> None:
    done = await cli("--dir", str(HISTORIES), "--import", "tests.agent_tools", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert (report["ok"], report["nondeterministic"], report["error"]) == (len(FILES), 0, 0)


async def test_cli_exits_1_on_an_invalid_history_file(tmp_path: Path) -> None:
    shutil.copy(MIRROR_HISTORY, tmp_path / "mirror.json")
    (tmp_path / "broken.json").write_text('{"events": [', encoding="utf-8")
    (tmp_path / "no-start.json").write_text(
        json.dumps({"events": [{"eventId": "1", "eventType": "EVENT_TYPE_TIMER_FIRED"}]}),
        encoding="utf-8",
    )
    done = await cli("--dir", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "3 histories from" in done.stdout
    assert "1 ok, 0 nondeterministic, 2 error" in done.stdout
    as_json = await cli("--dir", str(tmp_path), "--json")
    assert as_json.returncode == 1
    by_file = {Path(r["source"]).name: r for r in json.loads(as_json.stdout)["results"]}
    assert by_file["mirror.json"]["result"] == "ok"
    broken, no_start = by_file["broken.json"], by_file["no-start.json"]
    assert broken["result"] == no_start["result"] == "error"
    assert f"{tmp_path / 'broken.json'}: not a Temporal history JSON file" in broken["message"]
    assert "does not begin with WorkflowExecutionStarted" in no_start["message"]


# --------------------------------------------------------------- the CLI as a user runs it

AGENT_TASKS = Path(sys.executable).with_name("agent-tasks")
"""The installed console script: unlike ``python -m`` it puts no folder on sys.path."""


async def script(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``agent-tasks ARGS`` as a person runs it, from ``cwd``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return await asyncio.to_thread(
        subprocess.run, [str(AGENT_TASKS), *args], capture_output=True, text=True, cwd=cwd,
        env=env, timeout=300,
    )  # fmt: skip


async def started_agent(path: Path) -> str | None:
    """The agent a saved history's run starts with, read from its start event's input."""
    (start,) = await DATA_CONVERTER.decode(
        load(path).events[0].workflow_execution_started_event_attributes.input.payloads,
        [TaskWorkflowInput],
    )
    task = start.start or start.carried.start
    return None if task.agent is None else task.agent.name


async def test_replay_names_an_agent_that_is_not_registered_and_imports_from_here() -> None:
    """The README's `agent-tasks replay --dir tests/histories`: without --import the histories
    of the tests' agents are errors that say what to pass, not nondeterminism; with
    `--import tests.agent_tools`, found from the current folder, every history passes."""
    agents = {path.name: await started_agent(path) for path in FILES}
    custom = {name: agent for name, agent in agents.items() if agent not in (None, "tool_loop")}
    assert len(custom) >= 6 and all(agent_function(agent) for agent in custom.values())
    bare = await script("replay", "--dir", "tests/histories", "--json")
    assert bare.returncode == 1
    report = json.loads(bare.stdout)  # the JSON only: the SDK's logs are on stderr
    assert (report["nondeterministic"], report["error"]) == (0, len(custom))
    for result in report["results"]:
        name = Path(result["source"]).name
        if name in custom:
            assert result["message"] == (
                f"agent {custom[name]!r} is not registered: pass --import MODULE "
                "(the module that registers it)"
            )
        else:
            assert result["result"] == "ok", result
    plain = await script("replay", "--dir", "tests/histories")
    names = ", ".join(repr(agent) for agent in sorted(set(custom.values())))
    said = " ".join(plain.stdout.split())  # piped: rich wraps at 160 columns
    assert f"not registered here: agent {names}: pass --import MODULE" in said

    imported = await script("replay", "--dir", "tests/histories", "--import", "tests.agent_tools")
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert f"{len(FILES)} ok, 0 nondeterministic, 0 error" in imported.stdout
    missing = await script("replay", "--dir", "tests/histories", "--import", "no_such_module")
    assert missing.returncode == 2
    assert "--import" in missing.stderr and "'no_such_module'" in missing.stderr


async def test_replay_json_is_json_only_when_a_replay_fails(tmp_path: Path) -> None:
    """A nondeterministic history makes the SDK's core log a warning: on stderr, so that
    --json's standard output is one JSON document."""
    data = json.loads(MIRROR_HISTORY.read_text(encoding="utf-8"))
    scheduled = next(e for e in data["events"] if "activityTaskScheduledEventAttributes" in e)
    scheduled["activityTaskScheduledEventAttributes"]["activityType"]["name"] = "another_activity"
    (tmp_path / "changed.json").write_text(json.dumps(data), encoding="utf-8")
    done = await script("replay", "--dir", str(tmp_path), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert (report["nondeterministic"], report["selected"], report["truncated"]) == (1, 1, False)
    assert "Nondeterminism" in done.stderr


async def test_replay_says_when_the_limit_cut_the_selection(
    client: Client, history: ConversationHistory
) -> None:
    for name in ("a", "b", "c"):
        await history.create_task(name, "g")

    async def listed() -> bool:
        query = f"ProjectId = '{history.project_id}'"
        return (await client.count_workflows(query)).count == 3

    await eventually(listed)
    args = ("replay", "--project", history.project_id, "--limit", "2")
    cut = await script(*args, "--json")
    assert cut.returncode == 0, cut.stdout + cut.stderr
    report = json.loads(cut.stdout)
    assert (len(report["results"]), report["selected"], report["truncated"]) == (2, 3, True)
    plain = await script(*args)
    assert "truncated: 3 runs match, the newest 2 were replayed (--limit 2)" in " ".join(
        plain.stdout.split()
    )
    whole = json.loads((await script("replay", "--project", history.project_id, "--json")).stdout)
    assert (len(whole["results"]), whole["selected"], whole["truncated"]) == (3, 3, False)
