"""Unit tests of ``trajectories`` (pure: no Temporal, no Neo4j).

The expected counts are computed here from the source JSON with small counters written from
``examples/trajectories/FORMATS.md`` and the mapping in each format module's docstring; they do
not call the parser's helpers.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent_tasks.contract import (
    MAX_PAYLOAD_CHARS,
    Event,
    EventKind,
    StepKind,
    StepState,
    StepView,
)
from agent_tasks.trajectories import (
    ParsedTrajectory,
    TrajectoryFormatError,
    check_atif,
    detect_format,
    export_atif,
    read_file,
)
from agent_tasks.workflows.steps import result_validity

ROOT = Path(__file__).resolve().parents[2] / "examples" / "trajectories"
CASES = Path(__file__).resolve().parent / "cases"
FOLDERS = ("atif", "mini-swe-agent", "swe-agent")
FILES = sorted(path for folder in FOLDERS for path in (ROOT / folder).iterdir())
MINI_V1 = sorted(CASES.glob("mini-swe-agent-1*.json"))
BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
RETURN_CODE = re.compile(r"<returncode>(\d+)</returncode>")
X8251X = ROOT / "atif" / "openagents__orchestrator__x8251x.atif.json"
SWE_FAILURE = re.compile(
    r"Traceback \(most recent call last\)|syntax error|No such file or directory"
    r"|command not found",
    re.IGNORECASE,
)


def _has_text(value: object) -> int:
    return int(isinstance(value, str) and bool(value.strip()))


def _count_atif(data: dict[str, Any]) -> tuple[int, int, int]:
    events = steps = failed = 0
    for step in data["steps"]:
        observation = step.get("observation") or {}
        calls = step.get("tool_calls") or []
        events += _has_text(step.get("reasoning_content")) + len(calls)
        events += "metrics" in step  # a note with the step's metrics
        steps += len(calls)
        if observation.get("type") == "tool_result":  # claude-code: the result step
            events += 1
            failed += observation["result"].get("success") is False
            continue
        if step["source"] == "system" and "event_type" in (step.get("extra") or {}):
            events += 1  # note
        else:
            events += _has_text(step["message"])
        results = observation.get("results", [])
        call_ids = {call.get("tool_call_id", call.get("id")) for call in calls}
        answered = sum(r.get("source_call_id") in call_ids for r in results)
        without_id = [r for r in results if r.get("source_call_id") is None]
        open_calls = len(calls) - answered
        synthesized = sum(r.get("content") is not None for r in without_id[open_calls:])
        refs_only = sum(r.get("content") is None for r in without_id[open_calls:])
        events += len(results) - refs_only + synthesized
        steps += synthesized
        for result in results:
            events += len(result.get("subagent_trajectory_ref") or [])
            content = result.get("content")
            failed += isinstance(content, dict) and content.get("passed") is False
    events += bool(data.get("notes")) + ("final_metrics" in data)
    return events, steps, failed


def _count_mini(data: dict[str, Any]) -> tuple[int, int, int]:
    events = steps = failed = 0
    text_actions = data["trajectory_format"] == "mini-swe-agent-1"
    acted = False
    for message in data["messages"]:
        role = message["role"]
        if text_actions and role == "user" and acted:  # the output of the last action
            events += 1
            code = RETURN_CODE.match(message["content"])
            failed += code is not None and code.group(1) != "0"
            acted = False
        elif role in ("system", "user"):
            events += _has_text(message["content"])
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            events += _has_text(message.get("reasoning_content")) + _has_text(message["content"])
            acted = text_actions and len(BASH_BLOCK.findall(message["content"])) == 1
            events += len(calls) + acted
            steps += len(calls) + acted
        else:  # tool, exit
            events += 1
            failed += role == "tool" and message["extra"].get("returncode") != 0
    return events, steps, failed


def _count_swe(data: dict[str, Any]) -> tuple[int, int, int]:
    history = data["history"]
    roles = [entry["role"] for entry in history]
    first_action = roles.index("assistant") if "assistant" in roles else len(history)
    events = sum(
        _has_text(entry["content"]) for entry in history[:first_action] if not entry.get("is_demo")
    )
    failed = 0
    for step in data["trajectory"]:
        events += _has_text(step["thought"]) + 2
        failed += bool(SWE_FAILURE.search(step["observation"]))
    return events, len(data["trajectory"]), failed


COUNTERS = {"atif": _count_atif, "mini-swe-agent": _count_mini, "swe-agent": _count_swe}


def _ledger(parsed: ParsedTrajectory) -> tuple[list[Event], list[StepView]]:
    """What the ledger holds after recording ``parsed`` into a new task (seqs from 1)."""
    now = datetime(2025, 1, 1, tzinfo=UTC)
    events = [
        Event(
            id=f"e{i}", seq=i + 1, author="importer", time=now, request_id=f"r{i}", **e.model_dump()
        )
        for i, e in enumerate(parsed.events)
    ]
    steps = []
    for step in parsed.steps:
        state = StepState.FAILED if step.failed else StepState.COMPLETED
        result_seq = None if step.result_index is None else step.result_index + 1
        steps.append(
            StepView(
                step_name=step.step_name,
                state=state,
                kind=StepKind.TOOL,
                result_event_seq=result_seq,
                attempt=1,
                updated_at=now,
                result_validity=result_validity(state, result_seq),
                idempotency_key=f"agent-task/p/{parsed.name}/{step.step_name}/1",
            )
        )
    return events, steps


def _export(parsed: ParsedTrajectory, children: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    events, steps = _ledger(parsed)
    return export_atif(
        name=parsed.name,
        goal=parsed.goal,
        agent_id="importer",
        session_id=parsed.source_id,
        parent=None,
        metadata=parsed.metadata,
        events=events,
        steps=steps,
        children=children,
    )


def _export_and_read(parsed: ParsedTrajectory, tmp_path: Path) -> tuple[dict[str, Any], Any]:
    exported = _export(parsed)
    out = tmp_path / "export.atif.json"
    out.write_text(json.dumps(exported, ensure_ascii=False, indent=1), encoding="utf-8")
    (back,) = read_file(out)
    return exported, back


def one_run(path: Path) -> ParsedTrajectory:
    (run,) = read_file(path)
    return run


def test_sixteen_files() -> None:
    assert [len([f for f in FILES if f.parent.name == folder]) for folder in FOLDERS] == [5, 6, 5]


def _format(path: Path) -> str:
    return "mini-swe-agent" if path.name.startswith("mini-swe-agent-1") else path.parent.name


@pytest.mark.parametrize("path", FILES + MINI_V1, ids=lambda p: p.name)
def test_counts_match_the_source(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    parsed = one_run(path)
    events, steps, failed = COUNTERS[_format(path)](data)
    assert len(parsed.events) == events
    assert len(parsed.steps) == steps
    assert sum(step.failed for step in parsed.steps) == failed
    assert parsed.format == _format(path)
    assert parsed.source == path.name
    assert parsed.metadata["format"] == parsed.format
    digest = parsed.name.rsplit("/", 1)[1]
    assert re.fullmatch(r"[0-9a-f]{16}", digest) and parsed.digest.startswith(digest)
    assert parsed.name.startswith(f"{parsed.format}/")
    names = [step.step_name for step in parsed.steps]
    assert len(set(names)) == len(names) and all(1 <= len(n) <= 128 for n in names)
    for step in parsed.steps:
        assert parsed.events[step.call_index].kind is EventKind.TOOL_CALL
        if step.result_index is not None:
            assert parsed.events[step.result_index].kind is EventKind.TOOL_RESULT
    assert one_run(path) == parsed  # deterministic


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_detect_format_from_content(path: Path) -> None:
    assert detect_format(json.loads(path.read_text(encoding="utf-8"))) == path.parent.name


def test_long_observation_is_cut_with_full_length_and_hash() -> None:
    data = json.loads(X8251X.read_text(encoding="utf-8"))
    content = data["steps"][6]["observation"]["results"][0]["content"]
    assert len(content["output"]) == 39_372
    source_text = json.dumps(content, ensure_ascii=False)  # the mapping: objects as JSON text
    parsed = one_run(X8251X)
    cut = [e for e in parsed.events if e.full_length != len(e.payload)]
    assert len(cut) == 1
    (event,) = cut
    assert event.kind is EventKind.TOOL_RESULT
    assert event.payload == source_text[:MAX_PAYLOAD_CHARS]
    assert len(event.payload) == 32_000
    assert event.full_length == len(source_text)
    assert event.full_sha256 == hashlib.sha256(source_text.encode("utf-8")).hexdigest()
    assert "→" in event.payload  # raw UTF-8 in the file


def test_truncated_json_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.traj.json"
    broken.write_bytes(X8251X.read_bytes()[:5_000])
    with pytest.raises(TrajectoryFormatError) as err:
        read_file(broken)
    assert "broken.traj.json" in str(err.value)
    assert re.search(r"line \d+ column \d+", str(err.value))


def test_unknown_shape_names_the_file_and_the_formats_tried(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"events": [], "version": 2}), encoding="utf-8")
    with pytest.raises(TrajectoryFormatError) as err:
        read_file(odd)
    message = str(err.value)
    assert "odd.json" in message
    assert all(name in message for name in FOLDERS)
    with pytest.raises(TrajectoryFormatError):
        detect_format([1, 2])


@pytest.mark.parametrize("path", FILES + MINI_V1, ids=lambda p: p.name)
def test_export_is_valid_atif_1_7_and_round_trips(path: Path, tmp_path: Path) -> None:
    parsed = one_run(path)
    exported, back = _export_and_read(parsed, tmp_path)
    assert exported["schema_version"] == "ATIF-v1.7"
    assert check_atif(exported) == []
    assert [s["step_id"] for s in exported["steps"]] == list(range(1, len(exported["steps"]) + 1))
    for step in exported["steps"]:
        assert step["source"] in ("system", "user", "agent")
        call_ids = {call["tool_call_id"] for call in step.get("tool_calls", [])}
        assert not call_ids or step["source"] == "agent"
        for result in step.get("observation", {}).get("results", []):
            assert result.get("source_call_id") in call_ids | {None}
    fields = ("kind", "role", "name", "call_id", "payload", "full_length", "full_sha256")
    assert [e.model_dump(include=set(fields)) for e in back.events] == [
        e.model_dump(include=set(fields)) for e in parsed.events
    ]
    assert back.steps == parsed.steps
    assert (back.name, back.goal, back.metadata, back.format, back.digest) == (
        parsed.name,
        parsed.goal,
        parsed.metadata,
        parsed.format,
        parsed.digest,
    )
    assert detect_format(exported) == "atif"


def _write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_non_ascii_survives_parse_and_export(tmp_path: Path) -> None:
    task = "修复 bug 🐛 in the 日本語 parser → ok"
    arguments = json.dumps({"command": "echo '你好 🎉'"}, ensure_ascii=False)
    output = "你好 🎉\n"
    data = {
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": "unicode-1",
        "info": {"exit_status": "Submitted"},
        "messages": [
            {"role": "user", "content": task},
            {
                "role": "assistant",
                "content": "运行 🚀",
                "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": arguments}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "x", "extra": {"raw_output": output}},
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
        ],
    }
    parsed = one_run(_write(tmp_path, "unicode.traj.json", data))
    assert [e.payload for e in parsed.events] == [task, "运行 🚀", arguments, output, ""]
    assert parsed.goal == task
    assert parsed.events[2].full_sha256 == hashlib.sha256(arguments.encode("utf-8")).hexdigest()
    _, back = _export_and_read(parsed, tmp_path)
    assert [e.payload for e in back.events] == [e.payload for e in parsed.events]
    ctf = one_run(ROOT / "swe-agent" / "sweagent__demo__ctf-crypto-BabyEncryption.traj")
    assert any("\u192c" in e.payload for e in ctf.events)


def test_atif_ids_results_and_subagents(tmp_path: Path) -> None:
    long_id = "call-" + "x" * 300
    data = {
        "schema_version": "ATIF-v1.5",
        "session_id": "parent",
        "agent": {"name": "a", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "do it"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {"tool_call_id": long_id, "function_name": "spawn", "arguments": {"b": 1}},
                    {"tool_call_id": "c2", "function_name": "ls", "arguments": {}},
                ],
                "observation": {
                    "results": [
                        {"source_call_id": "c2", "content": "files"},
                        {
                            "source_call_id": None,
                            "content": "spawned",
                            "subagent_trajectory_ref": [{"session_id": "child-1"}],
                        },
                    ]
                },
            },
        ],
    }
    parsed = one_run(_write(tmp_path, "sub.json", data))
    kinds = [e.kind.value for e in parsed.events]
    assert kinds == [
        "message",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "child_task",
    ]
    call_id = parsed.events[1].call_id
    assert call_id is not None and len(call_id) == 128 and call_id.startswith("call-xxx")
    assert parsed.events[4].call_id == call_id  # the id-less result answers the open call
    assert [(s.call_index, s.result_index) for s in parsed.steps] == [(1, 4), (2, 3)]
    assert parsed.events[1].payload == '{"b": 1}'
    assert [ref.session_id for ref in parsed.subagents] == ["child-1"]
    assert json.loads(parsed.events[5].payload) == {"session_id": "child-1"}
    assert parsed.name.startswith("atif/parent/") and parsed.goal == "do it"
    _, back = _export_and_read(parsed, tmp_path)
    assert back.events == parsed.events and back.steps == parsed.steps
