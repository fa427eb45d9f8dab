"""Read a trajectory file: one trajectory, a JSON array of them, or JSON Lines.

A file is JSON (UTF-8, a BOM allowed) holding one trajectory object or an array of them, or
JSON Lines (``.jsonl`` / ``.ndjson``, or any file whose text is several JSON values, one per
line; blank lines skipped) with one trajectory per line. Each trajectory's format is detected
from its content (``detect_format``) unless given, and it is validated by that format's
pydantic models, so a wrong shape is an error naming the file, the trajectory in it and the
field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast, get_args

from pydantic import BaseModel, ValidationError

from agent_tasks.trajectories import atif, mini_swe_agent, swe_agent
from agent_tasks.trajectories.base import Format, ParsedTrajectory, TrajectoryFormatError
from agent_tasks.trajectories.export import is_export, read_export

FORMATS: tuple[str, ...] = get_args(Format)
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
"""Files read as JSON Lines whatever their content looks like."""
_SHAPES = (
    "atif (an object with schema_version, agent and a steps list), "
    "mini-swe-agent (an object with info and a messages list), "
    "swe-agent (an object with history and trajectory lists)"
)
_MODELS: dict[str, type[BaseModel]] = {
    "atif": atif.Trajectory,
    "mini-swe-agent": mini_swe_agent.Trajectory,
    "swe-agent": swe_agent.Trajectory,
}


def detect_format(data: object) -> str:
    """The format of a decoded trajectory, from its content (not its file name).

    Args:
        data: one trajectory's JSON value.

    Returns:
        ``"atif"`` (an object with ``schema_version``, an ``agent`` object and a ``steps``
        list; this includes ``export_atif`` output), ``"mini-swe-agent"`` (an ``info`` object
        and a ``messages`` list) or ``"swe-agent"`` (``history`` and ``trajectory`` lists).

    Raises:
        TrajectoryFormatError: the value has none of these shapes (the message lists them).
    """
    if isinstance(data, dict):
        if (
            "schema_version" in data
            and isinstance(data.get("agent"), dict)
            and isinstance(data.get("steps"), list)
        ):
            return "atif"
        if isinstance(data.get("info"), dict) and isinstance(data.get("messages"), list):
            return "mini-swe-agent"
        if isinstance(data.get("history"), list) and isinstance(data.get("trajectory"), list):
            return "swe-agent"
    raise TrajectoryFormatError(f"unknown trajectory shape; tried {_SHAPES}")


def _where(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: ``steps[3].tool_calls[0].function_name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(root)"


def read_trajectory(data: object, source: str, format: str | None = None) -> list[ParsedTrajectory]:
    """The runs of one decoded trajectory (an embedded ATIF subagent is a run of its own).

    Args:
        data: the trajectory's JSON value.
        source: where it is, for messages and ``ParsedTrajectory.source``.
        format: ``"atif"``, ``"mini-swe-agent"`` or ``"swe-agent"``; None: detect it.

    Raises:
        TrajectoryFormatError: unknown format or shape, or a field of the wrong shape (the
            message starts with ``source`` and names the field).
    """
    if format is not None and format not in FORMATS:
        raise TrajectoryFormatError(f"{source}: unknown format {format!r}; known: {FORMATS}")
    try:
        fmt = format or detect_format(data)
    except TrajectoryFormatError as err:
        raise TrajectoryFormatError(f"{source}: {err}") from None
    try:
        if fmt == "atif" and is_export(data):
            return read_export(cast(dict[str, Any], data), source)
        model = _MODELS[fmt].model_validate(data)
    except ValidationError as err:
        faults = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in err.errors()[:5])
        more = f" (and {err.error_count() - 5} more)" if err.error_count() > 5 else ""
        raise TrajectoryFormatError(
            f"{source}: not a valid {fmt} trajectory: {faults}{more}"
        ) from None
    except (KeyError, TypeError, ValueError, StopIteration) as err:
        raise TrajectoryFormatError(
            f"{source}: a damaged durable-agent-tasks export: {err!r}"
        ) from None
    if isinstance(model, atif.Trajectory):
        return atif.read(model, source)
    if isinstance(model, mini_swe_agent.Trajectory):
        return mini_swe_agent.read(model, source)
    return swe_agent.read(cast(swe_agent.Trajectory, model), source)


def _json_lines(text: str, name: str, strict: bool) -> list[tuple[int, object]] | None:
    """The values of JSON Lines text with their line numbers (blank lines skipped); for a line
    that is not JSON, None, or with ``strict`` a ``TrajectoryFormatError`` naming the line."""
    values = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                values.append((number, json.loads(line)))
            except json.JSONDecodeError as err:
                if strict:
                    raise TrajectoryFormatError(
                        f"{name}:{number}: invalid JSON: {err.msg} at column {err.colno}"
                    ) from None
                return None
    return values


def read_file(path: Path, format: str | None = None) -> list[ParsedTrajectory]:
    """Read every run of a trajectory file (``ParsedTrajectory.source`` says where each is).

    Args:
        path: the file.
        format: ``"atif"``, ``"mini-swe-agent"`` or ``"swe-agent"`` for every trajectory in
            it; None detects each one's format from its content.

    Returns:
        The runs in file order; an ATIF trajectory's embedded subagents follow it.

    Raises:
        TrajectoryFormatError: the file is not UTF-8, not JSON or JSON Lines (the message gives
            the JSON error's line, column and character position), holds no trajectory (an
            empty array, a blank file), or a trajectory in it is
            of an unknown shape or has a field of the wrong shape. Every message starts with
            the path.
        OSError: the file cannot be read.
    """
    try:
        runs = _read(path, format)
        if not runs:
            raise TrajectoryFormatError(f"{path.name}: holds no trajectory")
        return runs
    except TrajectoryFormatError as err:
        raise TrajectoryFormatError(f"{path.parent / str(err)}") from None


def _read(path: Path, format: str | None) -> list[ParsedTrajectory]:
    """``read_file``, with messages that start with the file name."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise TrajectoryFormatError(
            f"{path.name}: not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    jsonl = path.suffix in JSON_LINES_SUFFIXES
    lines = _json_lines(text, path.name, strict=True) if jsonl else None
    if lines is None:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            lines = _json_lines(text, path.name, strict=False) if err.msg == "Extra data" else None
            if lines is None:
                raise TrajectoryFormatError(
                    f"{path.name}: invalid JSON: {err.msg} at line {err.lineno} column {err.colno} "
                    f"(char {err.pos})"
                ) from None
        else:
            items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
            return [
                run
                for index, item in items
                for run in read_trajectory(
                    item, f"{path.name}[{index}]" if index is not None else path.name, format
                )
            ]
    return [
        run
        for number, item in lines
        for run in read_trajectory(item, f"{path.name}:{number}", format)
    ]
