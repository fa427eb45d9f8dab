"""The import cases (``cases/SOURCES.md``) and the rules around them, read without a server:
task identity, multi-trajectory files, errors that name the field, multimodal content, the
older mini-swe-agent format, and ATIF v1.7 exports with embedded subagents."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent_tasks.contract import EventKind, Role
from agent_tasks.trajectories import TrajectoryFormatError, check_atif, read_file, task_name
from tests.trajectories.test_trajectories import CASES, ROOT, _export, _ledger, one_run


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CASES / name).read_text(encoding="utf-8"))
    return data


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_two_runs_with_one_session_id_are_two_tasks() -> None:
    a, b = one_run(CASES / "shared-sid-a.json"), one_run(CASES / "shared-sid-b.json")
    assert a.source_id == b.source_id == "SAME"
    assert a.name != b.name
    assert a.name.startswith("atif/SAME/") and b.name.startswith("atif/SAME/")
    assert [e.payload for e in a.events] == ["Create hello.txt", "run A"]
    assert [e.payload for e in b.events] == ["Create bye.txt", "run B"]


def test_the_same_run_in_another_file_is_the_same_task(tmp_path: Path) -> None:
    source = ROOT / "mini-swe-agent" / "mswea__deepseek-chat__django__django-14752.traj.json"
    data = json.loads(source.read_text(encoding="utf-8"))
    original = one_run(source)
    renamed = one_run(_write(tmp_path / "renamed.json", data))
    (tmp_path / "indented.json").write_text(json.dumps(data, indent=3), encoding="utf-8")
    indented = one_run(tmp_path / "indented.json")
    in_array = read_file(_write(tmp_path / "many.json", [_load("shared-sid-a.json"), data]))
    lines = "\n".join(json.dumps(item) for item in (_load("shared-sid-b.json"), data)) + "\n"
    (tmp_path / "many.jsonl").write_text(lines, encoding="utf-8")
    in_lines = read_file(tmp_path / "many.jsonl")
    names = {original.name, renamed.name, indented.name, in_array[1].name, in_lines[1].name}
    assert names == {original.name}
    assert [r.source for r in in_array] == ["many.json[0]", "many.json[1]"]
    assert [r.source for r in in_lines] == ["many.jsonl:1", "many.jsonl:2"]
    assert in_array[0].name == one_run(CASES / "shared-sid-a.json").name
    other_model = copy.deepcopy(data)
    answer = next(m for m in other_model["messages"] if m["role"] == "tool")
    answer["extra"]["raw_output"] += " (another model)"
    assert one_run(_write(tmp_path / "other.json", other_model)).name != original.name


def test_task_name_rule() -> None:
    digest = "0123456789abcdef" * 4
    assert task_name("atif", "run-1", digest) == "atif/run-1/0123456789abcdef"
    assert task_name("swe-agent", None, digest) == "swe-agent/0123456789abcdef"
    long = task_name("atif", "x" * 500 + "\x07", digest)
    assert len(long) == 200 and long.endswith("/0123456789abcdef")
    assert task_name("atif", "a\tb", digest) == "atif/a_b/0123456789abcdef"


def test_embedded_subagent_is_a_run_whose_parent_embeds_it(tmp_path: Path) -> None:
    parent, child = read_file(CASES / "atif-1.7-embedded-subagent.json")
    assert parent.embedded_in is None and child.embedded_in == parent.name
    assert [ref.trajectory_id for ref in parent.subagents] == ["search-1"]
    assert child.source == "atif-1.7-embedded-subagent.json.subagent_trajectories[0]"
    assert child.trajectory_id == "search-1" and child.name.startswith("atif/search-1/")
    assert [(e.kind, e.payload) for e in child.events] == [
        (EventKind.MESSAGE, "find the config"),
        (EventKind.TOOL_CALL, '{"q": "config"}'),
        (EventKind.TOOL_RESULT, "app/config.py"),
    ]
    alone = _load("atif-1.7-embedded-subagent.json")["subagent_trajectories"][0]
    assert one_run(_write(tmp_path / "search.json", alone)).name == child.name


def test_subagent_reference_by_session_id_only_makes_no_tool_step() -> None:
    parent = one_run(CASES / "parent.json")
    assert [(e.kind, e.role) for e in parent.events] == [
        (EventKind.MESSAGE, Role.USER),
        (EventKind.MESSAGE, Role.SYSTEM),
        (EventKind.CHILD_TASK, None),
    ]
    assert parent.steps == []
    assert json.loads(parent.events[2].payload) == {
        "session_id": "CHILD",
        "trajectory_path": "child.json",
    }


def test_older_mini_swe_agent_bash_in_text_is_a_failed_tool_step() -> None:
    run = one_run(CASES / "mini-swe-agent-1.traj.json")
    (step,) = run.steps
    assert step.failed and step.step_name == "0004:bash"
    assert run.events[step.call_index].payload == "false"
    assert run.events[step.result_index or 0].payload.startswith("<returncode>1</returncode>")
    assert run.name.startswith("mini-swe-agent/x/")


def test_real_mini_swe_agent_1_run() -> None:
    data = _load("mini-swe-agent-1__pydata__xarray-4629.traj.json")
    run = one_run(CASES / "mini-swe-agent-1__pydata__xarray-4629.traj.json")
    codes = [
        re.match(r"<returncode>(\d+)</returncode>", m["content"]) for m in data["messages"][3::2]
    ]
    assert len(run.steps) == 18 == len(codes)
    assert sum(step.failed for step in run.steps) == 2
    assert sum(c is not None and c.group(1) == "1" for c in codes) == 2
    assert {run.events[s.call_index].name for s in run.steps} == {"bash"}
    assert run.metadata["agent_version"] == "1.15.0"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["steps"][1].update(source="robot"), "steps[1].source"),
        (lambda d: d["steps"][0].update(step_id="one"), "steps[0].step_id"),
        (lambda d: d["agent"].pop("name"), "agent.name"),
        (
            lambda d: d["steps"][1]["observation"]["results"][0].update(content=7),
            "steps[1].observation.results[0].content",
        ),
    ],
)
def test_a_wrong_shape_names_the_file_and_the_field(
    change: Any, field: str, tmp_path: Path
) -> None:
    data = _load("atif-1.7-embedded-subagent.json")
    change(data)
    with pytest.raises(TrajectoryFormatError) as err:
        read_file(_write(tmp_path / "bad.json", data))
    assert str(err.value).startswith(str(tmp_path / "bad.json"))
    assert field in str(err.value) and "not a valid atif trajectory" in str(err.value)


def test_wrong_shapes_in_other_formats_and_lines(tmp_path: Path) -> None:
    mini = _load("mini-swe-agent-1.traj.json")
    mini["messages"][2]["tool_calls"] = "ls"
    lines = f"{json.dumps(_load('shared-sid-a.json'))}\n{json.dumps(mini)}\n"
    (tmp_path / "runs.jsonl").write_text(lines, encoding="utf-8")
    with pytest.raises(TrajectoryFormatError, match=r"runs\.jsonl:2: .*messages\[2\]\.tool_calls"):
        read_file(tmp_path / "runs.jsonl")
    (tmp_path / "cut.jsonl").write_text(lines + '{"schema_version": \n', encoding="utf-8")
    with pytest.raises(TrajectoryFormatError, match=r"cut\.jsonl:3: invalid JSON"):
        read_file(tmp_path / "cut.jsonl")
    swe = json.loads(
        (ROOT / "swe-agent" / "sweagent__demo__humanevalfix-python-0.traj").read_text()
    )
    swe["trajectory"][1]["action"] = None
    with pytest.raises(TrajectoryFormatError, match=r"swe\.traj: .*trajectory\[1\]\.action"):
        read_file(_write(tmp_path / "swe.traj", swe))


def test_an_empty_array_or_blank_lines_hold_no_trajectory(tmp_path: Path) -> None:
    (tmp_path / "blank.jsonl").write_text("\n\n", encoding="utf-8")
    for path in (_write(tmp_path / "empty.json", []), tmp_path / "blank.jsonl"):
        with pytest.raises(TrajectoryFormatError, match=f"{path.name}: holds no trajectory"):
            read_file(path)


def test_multimodal_content_parts(tmp_path: Path) -> None:
    data = _load("shared-sid-a.json")
    data["schema_version"] = "ATIF-v1.6"
    data["steps"][0]["message"] = [
        {"type": "text", "text": "What is in"},
        {"type": "text", "text": "this picture?"},
    ]
    image = {"type": "image", "source": {"media_type": "image/png", "path": "shot.png"}}
    data["steps"][1]["message"] = [{"type": "text", "text": "This one:"}, image]
    run = one_run(_write(tmp_path / "mm.json", data))
    assert run.events[0].payload == "What is in\nthis picture?" == run.goal
    assert json.loads(run.events[1].payload) == [{"type": "text", "text": "This one:"}, image]


def test_metrics_and_notes_are_kept_as_notes() -> None:
    path = ROOT / "atif" / "harbor-golden__terminus-2__hello-world-timeout.trajectory.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    run = one_run(path)
    notes = [json.loads(e.payload) for e in run.events if e.name == "metrics"]
    assert notes == [step["metrics"] for step in data["steps"] if "metrics" in step]
    assert run.events[-1].name == "final_metrics"
    assert json.loads(run.events[-1].payload) == data["final_metrics"]


def test_check_atif_finds_what_is_wrong() -> None:
    run = one_run(CASES / "parent.json")
    good = _export(run)
    assert check_atif(good) == []
    broken = copy.deepcopy(good)
    broken["steps"][0]["step_id"] = 5
    broken["steps"][1]["tool_calls"] = []
    del broken["agent"]["name"]
    problems = check_atif(broken)
    assert any(p.startswith("agent: 'name' is a required property") for p in problems)
    assert check_atif({**good, "agent": {"name": "a", "version": "1"}, "steps": []}) != []
    rules = copy.deepcopy(good)
    rules["steps"][0]["step_id"] = 5
    rules["steps"][1]["tool_calls"] = []
    assert check_atif(rules) == [
        "steps.0.step_id: 5, expected 1",
        "steps.1.tool_calls: only on agent steps",
    ]


def test_export_embeds_child_tasks_and_reads_them_back(tmp_path: Path) -> None:
    parent, child = read_file(CASES / "atif-1.7-embedded-subagent.json")
    exported = _export(parent, children=[_export(child)])
    assert check_atif(exported) == []
    (ref,) = [
        r
        for step in exported["steps"]
        for result in (step.get("observation") or {}).get("results", [])
        for r in result.get("subagent_trajectory_ref") or []
    ]
    assert ref == {"trajectory_id": child.name}
    assert exported["subagent_trajectories"][0]["trajectory_id"] == child.name
    back_parent, back_child = read_file(_write(tmp_path / "export.json", exported))
    assert back_child.embedded_in == back_parent.name == parent.name
    assert back_child.name == child.name
    fields = ("kind", "role", "name", "call_id", "payload", "full_length", "full_sha256")
    for before, after in ((parent, back_parent), (child, back_child)):
        assert [e.model_dump(include=set(fields)) for e in after.events] == [
            e.model_dump(include=set(fields)) for e in before.events
        ]
        assert after.steps == before.steps and after.digest == before.digest
    assert len(_ledger(parent)[0]) == len(parent.events)
