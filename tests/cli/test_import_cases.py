"""Each import case (``tests/trajectories/cases/SOURCES.md``) imported into the real Temporal and
Neo4j, with the result SOURCES.md gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from temporalio.client import Client

from agent_tasks.cli.importer import import_paths, mirror_caught_up
from agent_tasks.contract import StepState, TaskStatus
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.trajectories import read_file
from tests.cli.test_plan import _atif, _write
from tests.trajectories.test_trajectories import CASES, one_run


def _fresh(history: ConversationHistory, suffix: str) -> ConversationHistory:
    return ConversationHistory(
        history.client,
        project_id=f"{history.project_id}-{suffix}",
        agent_id=history.agent_id,
        task_queue=history.task_queue,
        graph=history.graph,
    )


async def _payloads(history: ConversationHistory, task: str) -> list[str]:
    return [e.payload for e in (await history.list_events(task, limit=200)).events]


async def test_two_runs_with_one_session_id_are_two_finished_tasks(
    history: ConversationHistory, client: Client
) -> None:
    files = [CASES / "shared-sid-a.json", CASES / "shared-sid-b.json"]
    reports = await import_paths(history, files)
    assert [r.status for r in reports] == ["created", "created"]
    a, b = (r.task or "" for r in reports)
    assert a != b
    await mirror_caught_up(history, [a, b])
    assert await _payloads(history, a) == ["Create hello.txt", "run A"]
    assert await _payloads(history, b) == ["Create bye.txt", "run B"]
    views = [(await history.get_task(name)).view for name in (a, b)]
    assert [v.status if v else None for v in views] == [TaskStatus.DONE, TaskStatus.DONE]
    assert {row.name for row in await history.find_tasks(session_id="SAME")} == {a, b}
    for path in files:
        (again,) = await import_paths(history, [path])
        assert (again.status, again.new_events) == ("already imported", 0)
    assert [(await history.get_task(name)).view for name in (a, b)] == views


async def test_two_models_on_one_instance_are_two_tasks(
    history: ConversationHistory, tmp_path: Path
) -> None:
    source = CASES / "mini-swe-agent-1__pydata__xarray-4629.traj.json"
    other = json.loads(source.read_text(encoding="utf-8"))
    other["info"]["config"]["model"]["model_name"] = "another/model"
    other["messages"][2]["content"] = "THOUGHT: look first\n\n```bash\nls xarray\n```"
    second = _write(tmp_path / "other-model.traj.json", other)
    reports = await import_paths(history, [source, second])
    assert [r.status for r in reports] == ["created", "created"]
    names = [r.task or "" for r in reports]
    assert len(set(names)) == 2
    assert all(name.startswith("mini-swe-agent/pydata__xarray-4629/") for name in names)
    await mirror_caught_up(history, names)
    models = [(await history.get_task(name)).view for name in names]
    assert [v.metadata.get("model") if v else None for v in models] == [
        one_run(source).metadata.get("model"),
        "another/model",
    ]
    assert {row.name for row in await history.find_tasks(session_id="pydata__xarray-4629")} == set(
        names
    )


async def test_subagent_file_and_parent_link_whichever_is_imported_first(
    history: ConversationHistory, tmp_path: Path
) -> None:
    parent_file = Path(shutil.copy(CASES / "parent.json", tmp_path))
    child_file = Path(shutil.copy(CASES / "parent.child.json", tmp_path))
    parent, child = one_run(parent_file).name, one_run(child_file).name
    for suffix, order in (
        ("child-first", [child_file, parent_file]),
        ("parent-first", [parent_file, child_file]),
    ):
        project = _fresh(history, suffix)
        for path in order:  # one import command per file
            (report,) = await import_paths(project, [path])
            assert report.status == "created", report
        await mirror_caught_up(project, [parent, child])
        child_view = (await project.get_task(child)).view
        assert child_view is not None and child_view.parent == parent
        assert child_view.status is TaskStatus.DONE
        assert child_view.goal == "Summarize the work so far"
        assert await _payloads(project, child) == ["Summarize the work so far", "summary"]
        parent_view = (await project.get_task(parent)).view
        assert parent_view is not None and parent_view.status is TaskStatus.DONE
        tree = await project.task_tree(parent)
        assert [(row.depth, row.name, row.parent) for row in tree] == [
            (0, parent, None),
            (1, child, parent),
        ]
        assert [row.name for row in await project.find_tasks(parent=parent)] == [child]


async def test_embedded_subagent_becomes_a_child_task(history: ConversationHistory) -> None:
    path = CASES / "atif-1.7-embedded-subagent.json"
    parent, child = read_file(path)
    reports = await import_paths(history, [path])
    assert [(r.task, r.parent, r.status) for r in reports] == [
        (parent.name, None, "created"),
        (child.name, parent.name, "created"),
    ]
    await mirror_caught_up(history, [parent.name, child.name])
    assert await _payloads(history, child.name) == [
        "find the config",
        '{"q": "config"}',
        "app/config.py",
    ]
    tree = await history.task_tree(parent.name)
    assert [(row.name, row.parent) for row in tree] == [
        (parent.name, None),
        (child.name, parent.name),
    ]


async def test_older_mini_swe_agent_failed_commands_reach_the_failed_tool_calls(
    history: ConversationHistory, graph: TaskGraph
) -> None:
    files = [
        CASES / "mini-swe-agent-1.traj.json",
        CASES / "mini-swe-agent-1__pydata__xarray-4629.traj.json",
    ]
    small, xarray = await import_paths(history, files)
    await mirror_caught_up(history, [small.task or "", xarray.task or ""])
    (step,) = (await history.list_steps(small.task or "")).steps
    assert (step.step_name, step.state) == ("0004:bash", StepState.FAILED)
    steps = (await history.list_steps(xarray.task or "")).steps
    assert len(steps) == 18
    assert sum(s.state is StepState.FAILED for s in steps) == 2
    assert [(row.tool, row.failed, row.tasks) for row in await history.failed_tool_calls()] == [
        ("bash", 3, 2)
    ]
    failed = await history.find_events(kind="tool_result", failed_only=True)
    assert sorted(e.task_name for e in failed) == sorted(
        [small.task or "", *[xarray.task or ""] * 2]
    )


async def test_a_continued_trajectory_continues_its_task(
    history: ConversationHistory, tmp_path: Path
) -> None:
    head = _write(
        tmp_path / "run.json", _atif("R", "first part", continued_trajectory_ref="run.cont-1.json")
    )
    (first,) = await import_paths(history, [head])
    assert (first.status, first.open, first.segments) == ("created", True, 1)
    name = first.task or ""
    view = (await history.get_task(name)).view
    assert view is not None and view.status is TaskStatus.OPEN and view.last_seq == 1
    cont = _write(tmp_path / "run.cont-1.json", _atif("R-cont-1", "second part"))
    (second,) = await import_paths(history, [cont])
    assert (second.task, second.status, second.open, second.segments) == (name, "created", False, 2)
    assert second.new_events == 1
    await mirror_caught_up(history, [name])
    assert await _payloads(history, name) == ["first part", "second part"]
    view = (await history.get_task(name)).view
    assert view is not None and view.status is TaskStatus.DONE
    assert json.loads(head.read_text())["continued_trajectory_ref"] == "run.cont-1.json"
