"""Write a task as an ATIF v1.7 trajectory, check it against the published schema, read it back.

Layout of an export (``export_atif``)
-------------------------------------
ATIF v1.7 with ``agent.extra.exported_by == "durable-agent-tasks"``, ``trajectory_id`` the task
name and ``session_id`` the task's session id (else its name). Agent-side events go into
``agent`` steps in ATIF's order (reasoning -> ``reasoning_content``, an assistant message ->
``message``, tool calls -> ``tool_calls``, then the results that answer them ->
``observation.results`` with ``source_call_id``); a new step starts when an event does not fit
that order. A ``child_task`` event whose payload is a subagent reference is a ``system`` step
whose one observation result carries it (``subagent_trajectory_ref``; its ``trajectory_id``
becomes the child task's name when an embedded child task has the reference's ids; a reference
that resolves to nothing is written as a message instead, since v1.7 refs must resolve). Every
other event is a step of its own: ``user`` for user messages and input responses, else
``system``, with the payload as ``message`` (a tool result that answers no call of the open step
goes into a ``system`` step's ``observation``). Tool arguments are the payload parsed as JSON
when it is an object that ``json.dumps(..., ensure_ascii=False)`` writes back to the same text,
else ``{"text": payload}``; a call without call_id is written with ``tool_call_id``
``f"call-{seq}"``, and a result without call_id answers the first unanswered call of its step. A
task without events is one empty ``system`` step (ATIF requires one step).

Each step's ``extra.events`` lists its events in order with our exact fields (seq, kind, role,
name, call_id, full_length, full_sha256); root ``extra`` holds the task (name, goal, agent_id,
session_id, parent, metadata) and every step (name, state, kind, result_event_seq,
call_event_seq). Child tasks are embedded as ``subagent_trajectories`` (exports of their own,
each valid alone). ``read_export`` restores all of this exactly: same events (cut payloads keep
the original full length and hash), same name, goal, metadata and tool steps, and each embedded
child as a run whose parent is the embedding task. A step's call is the tool_call event whose
seq is the number before the first ``:`` of the step name (``step_name``); a step without one
is kept in the export's root ``extra`` but is not a ``ParsedStep`` when read back.

Every export is checked by ``check_atif``: the JSON Schema of ATIF v1.7
(``schemas/atif-v1.7.schema.json``, with the ``jsonschema`` library) and the cross-field rules
of Harbor's models that a JSON Schema cannot state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, cast, get_args

from jsonschema import Draft202012Validator

from agent_tasks.contract import Event, EventInput, EventKind, Role, StepState, StepView
from agent_tasks.trajectories.base import (
    EventLog,
    Format,
    ParsedStep,
    ParsedTrajectory,
    dig,
    run_digest,
)

EXPORTED_BY = "durable-agent-tasks"
"""``agent.extra.exported_by`` of an ``export_atif`` trajectory."""
ATIF_VERSION = "ATIF-v1.7"
"""The ATIF version exports are written in."""
SCHEMA_FILE = Path(__file__).parent / "schemas" / "atif-v1.7.schema.json"
"""The published JSON Schema of ATIF v1.7 (its origin is in ``schemas/SOURCES.md``)."""

_AGENT_ORDER = {EventKind.REASONING: 0, EventKind.MESSAGE: 1, EventKind.TOOL_CALL: 2}
"""Where an agent-side event goes in an ATIF agent step (results come last, at 3)."""
_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def check_atif(data: object) -> list[str]:
    """What is wrong with an ATIF v1.7 trajectory, as messages naming the place (empty: valid).

    Checks the JSON Schema (``SCHEMA_FILE``) and, recursively for embedded subagents, the rules
    of Harbor's models beyond it: ``step_id`` 1, 2, 3 ...; each ``source_call_id`` names a
    ``tool_call_id`` of its step; ``model_name``, ``reasoning_effort``, ``reasoning_content``,
    ``tool_calls`` and ``metrics`` only on ``agent`` steps; every embedded subagent has a
    ``trajectory_id``, unique among its siblings.
    """
    problems = [
        f"{'.'.join(map(str, error.absolute_path)) or '(root)'}: {error.message}"
        for error in _validator().iter_errors(data)
    ]
    if problems or not isinstance(data, dict):
        return problems
    return _check_rules(data, "")


def _check_rules(data: dict[str, Any], where: str) -> list[str]:
    problems = []
    for index, step in enumerate(data["steps"]):
        at = f"{where}steps.{index}"
        if step["step_id"] != index + 1:
            problems.append(f"{at}.step_id: {step['step_id']}, expected {index + 1}")
        if step["source"] != "agent":
            problems += [f"{at}.{f}: only on agent steps" for f in _AGENT_ONLY if f in step]
        calls = {call["tool_call_id"] for call in step.get("tool_calls") or []}
        for number, result in enumerate((step.get("observation") or {}).get("results") or []):
            if result.get("source_call_id") not in calls | {None}:
                problems.append(f"{at}.observation.results.{number}: no such tool_call_id")
            for ref in result.get("subagent_trajectory_ref") or []:
                if ref.get("trajectory_id") is None and ref.get("trajectory_path") is None:
                    problems.append(f"{at}.observation.results.{number}: unresolvable ref")
    ids = [sub.get("trajectory_id") for sub in data.get("subagent_trajectories") or []]
    if None in ids or len(set(ids)) != len(ids):
        problems.append(f"{where}subagent_trajectories: trajectory_id missing or repeated")
    for index, sub in enumerate(data.get("subagent_trajectories") or []):
        problems += _check_rules(sub, f"{where}subagent_trajectories.{index}.")
    return problems


def _arguments(payload: str) -> tuple[dict[str, Any], bool]:
    """Tool-call arguments for ATIF, and whether they wrap the text (``{"text": payload}``)."""
    try:
        value = json.loads(payload)
    except ValueError:
        value = None
    if isinstance(value, dict) and json.dumps(value, ensure_ascii=False) == payload:
        return value, False
    return {"text": payload}, True


def _subagent_ref(payload: str, children: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``subagent_trajectory_ref`` entry of a ``child_task`` event whose payload is a
    reference: ``trajectory_id`` becomes the name of the child export whose task has the
    reference's ids; None when the reference resolves to nothing (no such child, no path)."""
    try:
        found = json.loads(payload)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return None
    ref = {k: found[k] for k in ("trajectory_id", "session_id", "trajectory_path") if k in found}
    for child in children:
        ids = child["extra"]["task"]["metadata"]
        if ref.get("trajectory_id", ids.get("trajectory_id")) == ids.get(
            "trajectory_id"
        ) and ref.get("session_id", ids.get("session_id")) == ids.get("session_id"):
            return {**ref, "trajectory_id": child["trajectory_id"]}
    return ref if isinstance(ref.get("trajectory_path"), str) else None


# Long: three parts (events into ATIF steps, step records, header); to split the step grouping when
# ATIF changes
def export_atif(
    *,
    name: str,
    goal: str,
    agent_id: str,
    session_id: str | None,
    parent: str | None,
    metadata: dict[str, str],
    events: Sequence[Event],
    steps: Sequence[StepView],
    children: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Write a task as an ATIF v1.7 trajectory that ``read_export`` reads back exactly.

    Args:
        name: the task name (the ATIF ``trajectory_id``).
        goal: the task goal.
        agent_id: the agent that created the task (``agent.name`` unless ``metadata`` has
            ``agent``; ``agent.version`` is ``metadata["agent_version"]`` or ``"unknown"``).
        session_id: the task's session id (the ATIF ``session_id``; None: the name).
        parent: the parent task's name, if any (kept in the root ``extra``).
        metadata: the task metadata (``model`` becomes ``agent.model_name``).
        events: the task's events in seq order (``Event``).
        steps: the task's steps (``StepView``).
        children: the exports of its child tasks, embedded as ``subagent_trajectories``.

    Returns:
        The trajectory as a JSON-ready dict; the layout is in the module docstring.
    """
    out_steps: list[dict[str, Any]] = []
    agent_step: dict[str, Any] = {}
    unanswered: list[str] = []
    stage = -1
    for event in events:
        entry: dict[str, Any] = {
            "seq": event.seq,
            "kind": event.kind.value,
            "role": event.role.value if event.role else None,
            "name": event.name,
            "call_id": event.call_id,
            "full_length": event.full_length,
            "full_sha256": event.full_sha256,
        }
        order = _AGENT_ORDER.get(event.kind)
        if event.kind is EventKind.MESSAGE and event.role is not Role.ASSISTANT:
            order = None
        elif event.kind is EventKind.TOOL_RESULT and (
            event.call_id in unanswered or (event.call_id is None and unanswered)
        ):
            order = 3
        if order is None:
            user = event.role is Role.USER or event.kind is EventKind.INPUT_RESPONSE
            step: dict[str, Any] = {
                "step_id": len(out_steps) + 1,
                "timestamp": event.time.isoformat(),
                "source": "user" if user else "system",
                "message": "",
                "extra": {"events": [entry]},
            }
            if event.kind is EventKind.TOOL_RESULT:
                step["observation"] = {"results": [{"content": event.payload}]}
            elif (
                event.kind is EventKind.CHILD_TASK
                and (ref := _subagent_ref(event.payload, children)) is not None
            ):
                step["observation"] = {"results": [{"subagent_trajectory_ref": [ref]}]}
                entry["payload"] = event.payload
            else:
                step["message"] = event.payload
            out_steps.append(step)
            agent_step, unanswered, stage = {}, [], -1
            continue
        if not agent_step or order < stage or order == stage < 2:
            agent_step = {
                "step_id": len(out_steps) + 1,
                "timestamp": event.time.isoformat(),
                "source": "agent",
                "message": "",
                "extra": {"events": []},
            }
            out_steps.append(agent_step)
            unanswered = []
        stage = order
        agent_step["extra"]["events"].append(entry)
        if event.kind is EventKind.REASONING:
            agent_step["reasoning_content"] = event.payload
        elif event.kind is EventKind.MESSAGE:
            agent_step["message"] = event.payload
        elif event.kind is EventKind.TOOL_CALL:
            call_id = event.call_id or f"call-{event.seq}"
            arguments, entry["arguments_text"] = _arguments(event.payload)
            agent_step.setdefault("tool_calls", []).append(
                {
                    "tool_call_id": call_id,
                    "function_name": event.name or "tool",
                    "arguments": arguments,
                }
            )
            unanswered.append(call_id)
        else:
            answered = event.call_id if event.call_id in unanswered else unanswered[0]
            unanswered.remove(answered)
            result = {"source_call_id": answered, "content": event.payload}
            agent_step.setdefault("observation", {"results": []})["results"].append(result)
    if not out_steps:
        out_steps.append({"step_id": 1, "source": "system", "message": "", "extra": {"events": []}})
    calls = {event.seq for event in events if event.kind is EventKind.TOOL_CALL}
    records = []
    for view in steps:
        found = re.match(r"(\d+):", view.step_name)
        call_seq = int(found.group(1)) if found else None
        records.append(
            {
                "step_name": view.step_name,
                "state": view.state.value,
                "kind": view.kind.value,
                "result_event_seq": view.result_event_seq,
                "call_event_seq": call_seq if call_seq in calls else None,
            }
        )
    agent: dict[str, Any] = {
        "name": metadata.get("agent", agent_id),
        "version": metadata.get("agent_version", "unknown"),
    }
    if "model" in metadata:
        agent["model_name"] = metadata["model"]
    agent["extra"] = {"exported_by": EXPORTED_BY}
    task = {
        "name": name,
        "goal": goal,
        "agent_id": agent_id,
        "session_id": session_id,
        "parent": parent,
        "metadata": metadata,
    }
    out: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": session_id or name,
        "trajectory_id": name,
        "agent": agent,
        "steps": out_steps,
        "extra": {"task": task, "steps": records},
    }
    if children:
        out["subagent_trajectories"] = list(children)
    return out


def is_export(data: object) -> bool:
    """True for a trajectory written by ``export_atif``."""
    return dig(data, "agent", "extra", "exported_by") == EXPORTED_BY


# Long: the inverse of export_atif in one pass: events from steps, step records, the run, then its
# children
def read_export(
    data: dict[str, Any], source: str, embedded_in: str | None = None
) -> list[ParsedTrajectory]:
    """Read an ``export_atif`` trajectory back to the exact runs it was made of: the task, then
    each embedded child task (whose parent is the task).

    Raises:
        KeyError, TypeError, ValueError: the export is damaged (the caller names the file).
    """
    log = EventLog()
    index_of: dict[int, int] = {}
    for number, step in enumerate(data["steps"], start=1):
        calls = iter(step.get("tool_calls") or [])
        results = iter((step.get("observation") or {}).get("results") or [])
        for entry in step["extra"]["events"]:
            kind = EventKind(entry["kind"])
            if "payload" in entry:
                payload = entry["payload"]
            elif kind is EventKind.REASONING:
                payload = step["reasoning_content"]
            elif kind is EventKind.TOOL_CALL:
                arguments = next(calls)["arguments"]
                text = entry.get("arguments_text")
                payload = arguments["text"] if text else json.dumps(arguments, ensure_ascii=False)
            elif kind is EventKind.TOOL_RESULT:
                payload = next(results)["content"]
            else:
                payload = step["message"]
            if not isinstance(payload, str):
                raise TypeError(f"step {number}: the payload of seq {entry['seq']} is not text")
            index_of[entry["seq"]] = len(log.events)
            log.events.append(
                EventInput(
                    kind=kind,
                    role=entry.get("role"),
                    name=entry.get("name"),
                    call_id=entry.get("call_id"),
                    payload=payload,
                    full_length=entry["full_length"],
                    full_sha256=entry["full_sha256"],
                )
            )
    task = data["extra"]["task"]
    meta: dict[str, str] = task["metadata"]
    fmt = meta.get("format", "atif")
    fmt = cast(Format, fmt if fmt in get_args(Format) else "atif")
    steps = [
        ParsedStep(
            step_name=record["step_name"],
            call_index=index_of[record["call_event_seq"]],
            result_index=index_of.get(record["result_event_seq"]),
            failed=record["state"] == StepState.FAILED.value,
        )
        for record in data["extra"]["steps"]
        if record.get("call_event_seq") in index_of
    ]
    source_id = meta.get("source_id")
    run = ParsedTrajectory(
        format=fmt,
        source=source,
        name=task["name"],
        source_id=source_id,
        digest=run_digest(fmt, source_id, task["goal"], log.events),
        goal=task["goal"],
        metadata=meta,
        events=log.events,
        steps=steps,
        trajectory_id=meta.get("trajectory_id"),
        session_id=meta.get("session_id"),
        embedded_in=embedded_in,
        parent=None if embedded_in else task.get("parent"),
    )
    runs = [run]
    for index, child in enumerate(data.get("subagent_trajectories") or []):
        runs += read_export(child, f"{source}.subagent_trajectories[{index}]", run.name)
    return runs
