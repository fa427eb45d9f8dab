"""The importer's plan (``plan_import``), pure: which tasks, linked how, from which files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from agent_tasks.cli.planning import plan_import
from agent_tasks.trajectories import read_file
from tests.trajectories.test_trajectories import CASES


def _copy(tmp_path: Path, *names: str) -> list[Path]:
    return [Path(shutil.copy(CASES / name, tmp_path / name)) for name in names]


def _atif(session: str, message: str, **more: Any) -> dict[str, Any]:
    return {
        "schema_version": "ATIF-v1.5",
        "session_id": session,
        "agent": {"name": "a", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": message}],
        **more,
    }


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_subagent_file_links_to_its_parent_whichever_is_given(tmp_path: Path) -> None:
    parent_file, child_file = _copy(tmp_path, "parent.json", "parent.child.json")
    (parent,) = read_file(parent_file)
    (child,) = read_file(child_file)
    only_child, refused = plan_import([child_file])
    assert refused == []
    assert [(t.head.name, t.parent) for t in only_child] == [(child.name, parent.name)]
    only_parent, _ = plan_import([parent_file])
    assert [(t.head.name, t.parent) for t in only_parent] == [(parent.name, None)]
    both, _ = plan_import([tmp_path])
    assert {t.head.name: t.parent for t in both} == {parent.name: None, child.name: parent.name}


def test_references_resolve_by_path_then_session_and_never_ambiguously(tmp_path: Path) -> None:
    ref = {"session_id": "S", "trajectory_path": "sub/helper.json"}
    (tmp_path / "sub").mkdir()
    helper = _write(tmp_path / "sub" / "helper.json", _atif("other-id", "help"))
    parent = _write(
        tmp_path / "p.json",
        _atif(
            "P",
            "go",
            steps=[
                {"step_id": 1, "source": "user", "message": "go"},
                {
                    "step_id": 2,
                    "source": "system",
                    "message": "",
                    "observation": {"results": [{"subagent_trajectory_ref": [ref]}]},
                },
            ],
        ),
    )
    tasks, _ = plan_import([parent, helper])
    assert {t.file.name: t.parent for t in tasks} == {
        "p.json": None,
        "helper.json": read_file(parent)[0].name,
    }
    twins = [_write(tmp_path / f"twin{n}.json", _atif("TWIN", f"twin {n}")) for n in (1, 2)]
    ref_twin = {"session_id": "TWIN"}
    parent2 = _write(
        tmp_path / "p2.json",
        _atif(
            "P2",
            "go",
            steps=[
                {"step_id": 1, "source": "user", "message": "go"},
                {
                    "step_id": 2,
                    "source": "system",
                    "message": "",
                    "observation": {"results": [{"subagent_trajectory_ref": [ref_twin]}]},
                },
            ],
        ),
    )
    tasks, _ = plan_import([parent2, *twins])
    assert all(t.parent is None for t in tasks)  # two runs with session TWIN: no guess


def test_embedded_subagent_is_a_child_task(tmp_path: Path) -> None:
    (path,) = _copy(tmp_path, "atif-1.7-embedded-subagent.json")
    parent, child = read_file(path)
    tasks, _ = plan_import([path])
    assert [(t.head.name, t.parent) for t in tasks] == [
        (parent.name, None),
        (child.name, parent.name),
    ]


def test_a_continued_run_is_one_task_whichever_segment_is_given(tmp_path: Path) -> None:
    head = _write(
        tmp_path / "run.json", _atif("R", "first part", continued_trajectory_ref="run.cont-1.json")
    )
    cont = _write(tmp_path / "run.cont-1.json", _atif("R-cont-1", "second part"))
    for given in ([head], [cont], [tmp_path]):
        (task,) = plan_import(given)[0]
        assert [s.source for s in task.segments] == ["run.json", "run.cont-1.json"]
        assert task.complete and task.head.name == read_file(head)[0].name
        assert task.report().events == 2 and task.report().segments == 2
    cont.unlink()
    (task,) = plan_import([head])[0]
    assert len(task.segments) == 1 and not task.complete and task.report().open


def test_a_continuation_renumbers_its_steps(tmp_path: Path) -> None:
    step = {
        "step_id": 2,
        "source": "agent",
        "message": "",
        "tool_calls": [{"tool_call_id": "c", "function_name": "ls", "arguments": {}}],
        "observation": {"results": [{"source_call_id": "c", "content": "x"}]},
    }
    head = _atif("R", "first", continued_trajectory_ref="next.json")
    head["steps"].append(step)
    _write(tmp_path / "head.json", head)
    tail = _atif("R", "second")
    tail["steps"].append(step)
    _write(tmp_path / "next.json", tail)
    (task,) = plan_import([tmp_path])[0]
    first, second = task.segments
    assert [(name, seq) for _, name, seq in first.numbered_steps(1)] == [("0002:ls", 3)]
    assert [(name, seq) for _, name, seq in second.numbered_steps(4)] == [("0005:ls", 6)]


def test_unreadable_files_are_reported_and_the_rest_planned(tmp_path: Path) -> None:
    (good,) = _copy(tmp_path, "shared-sid-a.json")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    tasks, refused = plan_import([tmp_path])
    assert [t.file for t in tasks] == [good]
    assert [(Path(r.file).name, r.status) for r in refused] == [("broken.json", "refused")]
    assert refused[0].error is not None and "invalid JSON" in refused[0].error
