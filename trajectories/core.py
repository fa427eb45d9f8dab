"""Read published agent trajectories as tasks, and write a task back as an ATIF trajectory.

Pure code: no Temporal, no Neo4j, no I/O beyond reading the one input file. ``parse_file``
turns a file into a ``ParsedTrajectory`` (task name, goal, metadata, the events in source order
and the tool steps that index into them); ``export_atif`` writes a task's events and steps as
ATIF-v1.5, and ``parse_file`` reads such an export back to the same events and steps.

The formats are described in ``examples/trajectories/FORMATS.md``. This docstring is the
contract: what each source record becomes.

Rules for every format
----------------------
- Events are in the order their records appear in the file (not sorted by timestamp).
- ``message`` and ``reasoning`` events are made only from text that is not blank (empty or
  whitespace only); every other event is always made, even with an empty payload.
- ``role`` is set on ``message`` events only: ``system``, ``user``, ``assistant`` or ``tool``.
- Reasoning (``reasoning_content``) is its own ``reasoning`` event, put before the message of
  the same turn (the model reasons before it answers).
- A payload is text: a string as it is; a JSON object or list as
  ``json.dumps(value, ensure_ascii=False)`` (keys in source order); null as ``""``. Payloads are
  cleaned and cut to 32,000 characters by ``EventInput``, which keeps the full text's length
  and SHA-256.
- ``name`` and ``call_id`` longer than 128 characters become their first 111 characters, ``~``
  and the first 16 hex digits of the full text's SHA-256 (128 in all).
- Each ``tool_call`` event starts one ``ParsedStep`` (kind tool), named ``f"{n:04d}:{tool
  name}"`` with ``/`` replaced by ``_``, cut to 100 characters, where ``n`` is the 1-based
  position of the call in ``events`` (its seq once the trajectory is recorded into a new task).
  The step's result is the first ``tool_result`` not yet taken that answers the call (same
  source call id; SWE-agent and synthesized calls are paired with the result made with them). It
  may come before the call (the claude-code variant logs results first). A result without a name
  takes its call's name (the tool name). ``failed`` is the result's failure signal (below); a
  step without a result is not failed.
- ``children`` are the payloads of the ``child_task`` events, in order, without repeats.
- ``goal`` is the payload of the first ``message`` event with role ``user``, cut to 4,000
  characters (``""`` if there is none). ``name`` is ``f"{format}/{id}"`` (control characters
  replaced by ``_``, cut to 200 characters) with ``id`` as below, or the file name without its
  last suffix when the source has no id.
- ``metadata`` holds ``format`` and ``source_file`` and, where present, the keys listed below;
  values are text cut to 500 characters (``MAX_METADATA_VALUE_CHARS``).

ATIF (``atif``): ``schema_version``, ``agent`` and a ``steps`` list; id ``session_id``
----------------------------------------------------------------------------------------
For each step, in this order:

==========================================  ======================================================
source                                      events
==========================================  ======================================================
``reasoning_content``                       ``reasoning``
``message`` of a ``system`` step whose      ``note`` (name = the event type, payload = the
``extra.event_type`` is set (orchestrator)  message)
``message`` of a step whose observation     nothing: it only names the call id (``Tool result
has ``type: "tool_result"`` (claude-code)   for <id>``), which the result takes
any other ``message``                       ``message``, role ``user`` / ``assistant`` (agent) /
                                            ``system``
``tool_calls[]``                            ``tool_call``: name ``function_name`` (or ``name``),
                                            call_id ``tool_call_id`` (or ``id``), payload the
                                            ``arguments`` as text (objects: ``json.dumps``)
``observation.results[]``                   ``tool_result`` (payload ``content`` as text; objects
                                            such as the orchestrator's ``{command, passed,
                                            output}`` as JSON text), call_id ``source_call_id``
claude-code ``observation`` object          ``tool_result`` (payload ``content``), call_id from
                                            the message, failed when ``result.success`` is false
``subagent_trajectory_ref[]`` of a result   ``child_task`` after the result, payload
                                            ``f"atif/{session_id}"`` (the child's task name)
==========================================  ======================================================

A result with a null ``source_call_id`` answers the first call of its step that no result has
answered yet (terminus-2 writes results without ids) and takes its id. A result with a null id
and no such call (the orchestrator logs command runs as results only) gets a synthesized
``tool_call`` just before it: name = first word of ``content.command`` (or ``command``),
payload = ``content.command`` (or ``""``), no call_id. A result is failed when its content is
an object with ``passed: false``. A step whose ``source`` is not ``user``, ``agent`` or
``system`` is a format error. Metadata: ``schema_version``, ``session_id``, ``agent``
(``agent.name``), ``agent_version``, ``model`` (``agent.model_name`` or ``agent.model``).

mini-swe-agent (``mini-swe-agent``): ``info`` and a ``messages`` list; id ``instance_id``
----------------------------------------------------------------------------------------
==========================  ===============================================================
``messages[]`` role          events
==========================  ===============================================================
``system``, ``user``         ``message`` with that role
``assistant``                ``reasoning`` (``reasoning_content``), ``message`` (``content``),
                             then a ``tool_call`` per ``tool_calls[]`` entry: name
                             ``function.name``, call_id ``id``, payload the
                             ``function.arguments`` string exactly as it is
``tool``                     ``tool_result``, call_id ``tool_call_id``, payload
                             ``extra.raw_output`` (the full, untruncated output) when it is a
                             non-empty string, else ``content`` (which then holds the
                             exception or the empty-output envelope); failed when
                             ``extra.returncode`` is present and not 0
``exit``                     ``note`` named ``exit`` when ``extra.exit_status`` is
                             ``Submitted``, else ``error`` named ``exit``; payload ``content``
any other role               ``note`` named by the role, payload ``content``
==========================  ===============================================================

Metadata: ``schema_version`` (``trajectory_format``), ``instance_id``, ``agent``
(``mini-swe-agent``), ``agent_version`` (``info.mini_version``), ``model``
(``info.config.model.model_name``), ``exit_status`` (``info.exit_status``).

SWE-agent (``swe-agent``): ``history`` and ``trajectory`` lists; id = the file name
----------------------------------------------------------------------------------
``history[]`` repeats what ``trajectory[]`` holds once the agent starts acting, so only the
history entries before its first ``assistant`` entry are read, leaving out ``is_demo``
demonstrations: each is a ``message`` with its role. Then for each ``trajectory[i]``: a
``message`` (role assistant) from ``thought`` (``response`` is not kept: it is the thought
followed by the action), a ``tool_call`` (name = first word of ``action``, or ``command`` if it
has none; payload = ``action``; no call_id) and a ``tool_result`` (payload = ``observation``).
The step is failed when the observation contains, ignoring case, any of
``FAILURE_SIGNALS``: ``Traceback (most recent call last)``, ``syntax error``, ``No such file
or directory``, ``command not found``. History entries after the first assistant entry that
``trajectory[]`` lacks (for example requeries after malformed output) are not imported.
Metadata: ``agent`` (``swe-agent``), ``environment``, ``model``
(``replay_config.agent.model.name``), ``exit_status`` (``info.exit_status``).

Exports (``export_atif``)
-------------------------
An export is ATIF-v1.5 with ``agent.extra.exported_by == "durable-agent-tasks"``. Agent-side
events go into ``agent`` steps in ATIF's order (reasoning -> ``reasoning_content``, an
assistant message -> ``message``, tool calls -> ``tool_calls``, then the results that answer
them -> ``observation.results`` with ``source_call_id``); a new step starts when an event does
not fit that order. Every other event is a step of its own: ``user`` for user messages and
input responses, else ``system``, with the payload as ``message`` (a tool result that answers
no call of the open step goes into a ``system`` step's ``observation``). Tool arguments are
the payload parsed as JSON when it is an object that ``json.dumps(..., ensure_ascii=False)``
writes back to the same text, else ``{"text": payload}``; a call without call_id is written
with ``tool_call_id`` ``f"call-{seq}"``, and a result without call_id answers the first
unanswered call of its step. Each step's ``extra.events`` lists
its events in order with our exact fields (seq, kind, role, name, call_id, full_length,
full_sha256); root ``extra`` holds the task (name, goal, agent_id, metadata) and every step
(name, state, kind, result_event_seq, call_event_seq). ``parse_file`` restores all of this
exactly: same events (cut payloads keep the original full length and hash), same name, goal,
metadata and steps. A step's call is the tool_call event whose seq is the number before the
first ``:`` of the step name (the naming rule above); a step without one (not made from a tool
call) is kept in the export's root ``extra`` but is not a ``ParsedStep`` when read back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field

from workflows.models import (
    MAX_GOAL_CHARS,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_VALUE_CHARS,
    Event,
    EventInput,
    EventKind,
    Name,
    Role,
    StepName,
    StepState,
    StepView,
    clean_text,
    sha256_hex,
)

Format = Literal["atif", "mini-swe-agent", "swe-agent"]
FORMATS: tuple[str, ...] = get_args(Format)
EXPORTED_BY = "durable-agent-tasks"
"""``agent.extra.exported_by`` of an ``export_atif`` trajectory."""
ATIF_VERSION = "ATIF-v1.5"
FAILURE_SIGNALS = (
    "traceback (most recent call last)",
    "syntax error",
    "no such file or directory",
    "command not found",
)
"""Lower-case texts whose presence in a SWE-agent observation marks its step failed."""

_SHORT = 128
_STEP = 100
_NAME_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SHAPES = (
    "atif (an object with schema_version, agent and a steps list), "
    "mini-swe-agent (an object with info and a messages list), "
    "swe-agent (an object with history and trajectory lists)"
)
_ATIF_ROLES = {"user": Role.USER, "agent": Role.ASSISTANT, "system": Role.SYSTEM}


class TrajectoryFormatError(ValueError):
    """A file is not a trajectory this module reads; the message names the file and the fault."""


class ParsedStep(BaseModel):
    """A tool step of a parsed trajectory (its kind is always ``tool``)."""

    model_config = ConfigDict(frozen=True)

    step_name: StepName
    """Unique in the task: ``f"{n:04d}:{tool name}"``, ``n`` the call's 1-based position."""
    call_index: int
    """Index in ``ParsedTrajectory.events`` of the step's ``tool_call`` event."""
    result_index: int | None
    """Index of its ``tool_result`` event, or None when the source has no result for it."""
    failed: bool
    """True when the source marks the call failed (see the module docstring per format)."""


class ParsedTrajectory(BaseModel):
    """One trajectory file as a task: what to create, the events to record, the steps to set."""

    format: Format
    """The source format."""
    source: str
    """The file name (no directories)."""
    name: Name
    """Task name: ``f"{format}/{id}"``, stable for the same file (1 to 200 characters)."""
    goal: Annotated[str, Field(max_length=MAX_GOAL_CHARS)]
    """The first user message, cut to 4,000 characters ("" if there is none)."""
    metadata: dict[str, str] = Field(max_length=MAX_METADATA_ENTRIES)
    """Model, agent, versions, exit status, source file...: only those present."""
    events: list[EventInput]
    """The events in source order."""
    steps: list[ParsedStep]
    """The tool steps, in the order of their calls."""
    children: list[str]
    """Names of child tasks (ATIF ``subagent_trajectory_ref[].session_id``)."""
    source_sha256: str
    """SHA-256 hex of the file's bytes."""


# --------------------------------------------------------------------------------------------
# Small helpers shared by every format.
# --------------------------------------------------------------------------------------------


def _obj(value: object, what: str) -> dict[str, Any]:
    """``value`` as a JSON object, else TrajectoryFormatError naming ``what``."""
    if not isinstance(value, dict):
        raise TrajectoryFormatError(f"{what} must be a JSON object")
    return cast(dict[str, Any], value)


def _items(value: object, what: str) -> list[Any]:
    """``value`` as a JSON list, else TrajectoryFormatError naming ``what``."""
    if not isinstance(value, list):
        raise TrajectoryFormatError(f"{what} must be a JSON list")
    return value


def _fields(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (for optional objects)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _text(value: object) -> str:
    """A source value as payload text: strings as they are, null as "", others as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _short(value: object) -> str | None:
    """A name or call id of at most 128 characters (longer: cut plus a hash), None if empty."""
    text = clean_text(_text(value))
    if not text:
        return None
    if len(text) <= _SHORT:
        return text
    return f"{text[: _SHORT - 17]}~{sha256_hex(text)[:16]}"


def _command_name(command: str) -> str:
    """First word of a command line, or ``command`` when it has none."""
    words = command.split()
    return words[0] if words else "command"


def _task_name(fmt: str, ident: str) -> str:
    """The task name ``f"{fmt}/{ident}"``: control characters replaced, cut to 200."""
    return _CONTROL.sub("_", clean_text(f"{fmt}/{ident}"))[:_NAME_CHARS]


def _metadata(values: dict[str, object]) -> dict[str, str]:
    """Metadata from the values present (not None or ""), as text cut to 500 characters."""
    out: dict[str, str] = {}
    for key, value in values.items():
        text = clean_text(_text(value))
        if text and len(out) < MAX_METADATA_ENTRIES:
            out[key] = text[:MAX_METADATA_VALUE_CHARS]
    return out


def _dig(data: object, *keys: str) -> object:
    """``data[k1][k2]...`` through JSON objects, or None where a level is missing."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


class _Log:
    """Events in source order, with what pairs each tool call to its result."""

    def __init__(self) -> None:
        self.events: list[EventInput] = []
        self._keys: list[Hashable | None] = []
        self._failed: list[bool] = []

    def add(
        self,
        kind: EventKind,
        payload: str,
        *,
        role: Role | None = None,
        name: object = None,
        call_id: object = None,
        key: Hashable | None = None,
        failed: bool = False,
    ) -> Hashable | None:
        """Append an event; return its pairing key (a new unique one for a keyless call)."""
        if kind is EventKind.TOOL_CALL and key is None:
            key = ("call", len(self.events))
        self.events.append(
            EventInput(
                kind=kind, role=role, name=_short(name), call_id=_short(call_id), payload=payload
            )
        )
        self._keys.append(key)
        self._failed.append(failed)
        return key

    def text(self, kind: EventKind, value: object, role: Role | None = None) -> None:
        """Append a ``message`` or ``reasoning`` event unless the text is blank."""
        text = _text(value)
        if text.strip():
            self.add(kind, text, role=role)

    def steps(self) -> list[ParsedStep]:
        """One step per tool call, with the first untaken result of the same key; a result
        without a name takes its call's (the tool name)."""
        results: dict[Hashable, list[int]] = {}
        for index, event in enumerate(self.events):
            key = self._keys[index]
            if event.kind is EventKind.TOOL_RESULT and key is not None:
                results.setdefault(key, []).append(index)
        steps = []
        for index, event in enumerate(self.events):
            if event.kind is not EventKind.TOOL_CALL:
                continue
            waiting = results.get(self._keys[index])
            result = waiting.pop(0) if waiting else None
            if result is not None and self.events[result].name is None:
                self.events[result] = self.events[result].model_copy(update={"name": event.name})
            steps.append(
                ParsedStep(
                    step_name=f"{index + 1:04d}:{event.name}".replace("/", "_")[:_STEP],
                    call_index=index,
                    result_index=result,
                    failed=result is not None and self._failed[result],
                )
            )
        return steps


# --------------------------------------------------------------------------------------------
# The three formats.
# --------------------------------------------------------------------------------------------


def _read_atif(data: dict[str, Any], log: _Log) -> tuple[str, dict[str, object]]:
    """Append an ATIF trajectory's events to ``log``; return its id and metadata values."""
    for number, raw in enumerate(_items(data.get("steps"), "steps"), start=1):
        step = _obj(raw, f"steps[{number - 1}]")
        extra = _fields(step.get("extra"))
        observation = step.get("observation")
        message = step.get("message")
        claude_result = isinstance(observation, dict) and observation.get("type") == "tool_result"
        log.text(EventKind.REASONING, step.get("reasoning_content"))
        if claude_result:
            pass  # the message only names the call id, read with the result below
        elif step.get("source") == "system" and isinstance(extra.get("event_type"), str):
            log.add(EventKind.NOTE, _text(message), name=extra["event_type"])
        elif step.get("source") in _ATIF_ROLES:
            log.text(EventKind.MESSAGE, message, _ATIF_ROLES[step["source"]])
        else:
            raise TrajectoryFormatError(f"step {number}: unknown source {step.get('source')!r}")
        unanswered: list[tuple[object, Hashable | None]] = []
        for call in _items(step.get("tool_calls") or [], f"step {number} tool_calls"):
            call = _obj(call, f"step {number} tool call")
            call_id = call.get("tool_call_id", call.get("id"))
            name = call.get("function_name", call.get("name")) or "tool"
            key = log.add(
                EventKind.TOOL_CALL,
                _text(call.get("arguments")),
                name=name,
                call_id=call_id,
                key=_short(call_id),
            )
            unanswered.append((call_id, key))
        if claude_result:
            found = re.match(r"Tool result for (\S+)", _text(message))
            call_id = found.group(1) if found else None
            success = _dig(observation, "result", "success")
            log.add(
                EventKind.TOOL_RESULT,
                _text(_dig(observation, "content")),
                call_id=call_id,
                key=_short(call_id),
                failed=success is False,
            )
            continue
        results = _dig(observation, "results") or []
        for result in _items(results, f"step {number} observation.results"):
            result = _obj(result, f"step {number} observation result")
            content = result.get("content")
            call_id = result.get("source_call_id")
            if call_id is None and unanswered:
                call_id, key = unanswered.pop(0)
            elif call_id is None:
                command = _text(_dig(content, "command"))
                key = log.add(EventKind.TOOL_CALL, command, name=_command_name(command))
            else:
                key = _short(call_id)
                unanswered = [pair for pair in unanswered if pair[1] != key]
            log.add(
                EventKind.TOOL_RESULT,
                _text(content),
                call_id=call_id,
                key=key,
                failed=_dig(content, "passed") is False,
            )
            for ref in _items(result.get("subagent_trajectory_ref") or [], "subagent refs"):
                child = _text(_obj(ref, "subagent_trajectory_ref entry")["session_id"])
                log.add(EventKind.CHILD_TASK, _task_name("atif", child))
    agent = _obj(data.get("agent"), "agent")
    values: dict[str, object] = {
        "schema_version": data.get("schema_version"),
        "session_id": data.get("session_id"),
        "agent": agent.get("name"),
        "agent_version": agent.get("version"),
        "model": agent.get("model_name") or agent.get("model"),
    }
    return _text(data.get("session_id")), values


def _read_mini(data: dict[str, Any], log: _Log) -> tuple[str, dict[str, object]]:
    """Append a mini-swe-agent trajectory's events to ``log``; return its id and metadata."""
    for number, raw in enumerate(_items(data.get("messages"), "messages")):
        message = _obj(raw, f"messages[{number}]")
        role = message.get("role")
        content = message.get("content")
        extra = _fields(message.get("extra"))
        if role in ("system", "user"):
            log.text(EventKind.MESSAGE, content, Role(role))
        elif role == "assistant":
            log.text(EventKind.REASONING, message.get("reasoning_content"))
            log.text(EventKind.MESSAGE, content, Role.ASSISTANT)
            for call in _items(message.get("tool_calls") or [], f"messages[{number}].tool_calls"):
                call = _obj(call, f"messages[{number}] tool call")
                function = _obj(call.get("function"), f"messages[{number}] tool call function")
                log.add(
                    EventKind.TOOL_CALL,
                    _text(function.get("arguments")),
                    name=function.get("name") or "tool",
                    call_id=call.get("id"),
                    key=_short(call.get("id")),
                )
        elif role == "tool":
            raw_output = extra.get("raw_output")
            payload = raw_output if isinstance(raw_output, str) and raw_output else _text(content)
            call_id = message.get("tool_call_id")
            log.add(
                EventKind.TOOL_RESULT,
                payload,
                call_id=call_id,
                key=_short(call_id),
                failed=extra.get("returncode") not in (None, 0),
            )
        elif role == "exit":
            submitted = extra.get("exit_status") == "Submitted"
            log.add(EventKind.NOTE if submitted else EventKind.ERROR, _text(content), name="exit")
        else:
            log.add(EventKind.NOTE, _text(content), name=role)
    info = data.get("info")
    values: dict[str, object] = {
        "schema_version": data.get("trajectory_format"),
        "instance_id": data.get("instance_id"),
        "agent": "mini-swe-agent",
        "agent_version": _dig(info, "mini_version"),
        "model": _dig(info, "config", "model", "model_name"),
        "exit_status": _dig(info, "exit_status"),
    }
    return _text(data.get("instance_id")), values


def _read_swe(data: dict[str, Any], log: _Log) -> tuple[str, dict[str, object]]:
    """Append a SWE-agent trajectory's events to ``log``; return its id ("") and metadata."""
    history = [_obj(entry, "history entry") for entry in _items(data.get("history"), "history")]
    acting = [index for index, entry in enumerate(history) if entry.get("role") == "assistant"]
    for entry in history[: acting[0] if acting else len(history)]:
        if not entry.get("is_demo"):
            log.text(EventKind.MESSAGE, entry.get("content"), Role(_text(entry.get("role"))))
    for number, raw in enumerate(_items(data.get("trajectory"), "trajectory")):
        step = _obj(raw, f"trajectory[{number}]")
        log.text(EventKind.MESSAGE, step.get("thought"), Role.ASSISTANT)
        action = _text(step.get("action"))
        key = log.add(EventKind.TOOL_CALL, action, name=_command_name(action))
        observation = _text(step.get("observation"))
        failed = any(signal in observation.lower() for signal in FAILURE_SIGNALS)
        log.add(EventKind.TOOL_RESULT, observation, key=key, failed=failed)
    replay = data.get("replay_config")
    if isinstance(replay, str):
        try:
            replay = json.loads(replay)
        except ValueError:
            replay = None
    values: dict[str, object] = {
        "agent": "swe-agent",
        "environment": data.get("environment"),
        "model": _dig(replay, "agent", "model", "name"),
        "exit_status": _dig(data.get("info"), "exit_status"),
    }
    return "", values


_READERS = {"atif": _read_atif, "mini-swe-agent": _read_mini, "swe-agent": _read_swe}


def detect_format(data: object) -> str:
    """The format of a decoded trajectory file, from its content (not its file name).

    Args:
        data: the file's JSON value.

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


def parse_file(path: Path, format: str | None = None) -> ParsedTrajectory:
    """Read one trajectory file (or an ``export_atif`` export) as a task.

    Args:
        path: the file (JSON, UTF-8).
        format: ``"atif"``, ``"mini-swe-agent"`` or ``"swe-agent"``; None detects it from the
            content (``detect_format``).

    Returns:
        The ``ParsedTrajectory``, mapped as the module docstring says.

    Raises:
        TrajectoryFormatError: the file is not UTF-8, not JSON (the message gives the JSON
            error's line, column and character position), of an unknown shape (it lists the
            formats tried), or not a valid trajectory of its format. Every message starts
            with the path.
        OSError: the file cannot be read.
    """
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise TrajectoryFormatError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    except json.JSONDecodeError as err:
        raise TrajectoryFormatError(
            f"{path}: invalid JSON: {err.msg} at line {err.lineno} column {err.colno} "
            f"(char {err.pos})"
        ) from None
    if format is not None and format not in FORMATS:
        raise TrajectoryFormatError(f"{path}: unknown format {format!r}; known: {FORMATS}")
    try:
        fmt = cast(Format, format or detect_format(data))
    except TrajectoryFormatError as err:
        raise TrajectoryFormatError(f"{path}: {err}") from None
    try:
        if fmt == "atif" and _dig(data, "agent", "extra", "exported_by") == EXPORTED_BY:
            return _restore(_obj(data, "trajectory"), path.name, digest)
        log = _Log()
        ident, values = _READERS[fmt](_obj(data, "trajectory"), log)
        goal = next(
            (e.payload for e in log.events if e.kind is EventKind.MESSAGE and e.role is Role.USER),
            "",
        )
        return _trajectory(
            fmt=fmt,
            source=path.name,
            name=_task_name(fmt, ident or path.stem),
            goal=goal,
            metadata={"format": fmt, "source_file": path.name, **values},
            events=log.events,
            steps=log.steps(),
            digest=digest,
        )
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise TrajectoryFormatError(f"{path}: not a valid {fmt} trajectory: {err}") from err


def _trajectory(
    *,
    fmt: Format,
    source: str,
    name: str,
    goal: str,
    metadata: dict[str, object],
    events: list[EventInput],
    steps: list[ParsedStep],
    digest: str,
) -> ParsedTrajectory:
    """Assemble a ParsedTrajectory; the children are the child_task payloads."""
    children = [e.payload for e in events if e.kind is EventKind.CHILD_TASK]
    return ParsedTrajectory(
        format=fmt,
        source=source,
        name=name,
        goal=goal[:MAX_GOAL_CHARS],
        metadata=_metadata(metadata),
        events=events,
        steps=steps,
        children=list(dict.fromkeys(children)),
        source_sha256=digest,
    )


# --------------------------------------------------------------------------------------------
# Export to ATIF, and reading an export back.
# --------------------------------------------------------------------------------------------

_AGENT_ORDER = {EventKind.REASONING: 0, EventKind.MESSAGE: 1, EventKind.TOOL_CALL: 2}
"""Where an agent-side event goes in an ATIF agent step (results come last, at 3)."""


def _arguments(payload: str) -> tuple[dict[str, Any], bool]:
    """Tool-call arguments for ATIF, and whether they wrap the text (``{"text": payload}``)."""
    try:
        value = json.loads(payload)
    except ValueError:
        value = None
    if isinstance(value, dict) and json.dumps(value, ensure_ascii=False) == payload:
        return value, False
    return {"text": payload}, True


def export_atif(
    *,
    name: str,
    goal: str,
    agent_id: str,
    metadata: dict[str, str],
    events: Sequence[Event],
    steps: Sequence[StepView],
) -> dict[str, Any]:
    """Write a task as an ATIF-v1.5 trajectory that ``parse_file`` reads back exactly.

    Args:
        name: the task name (also the ATIF ``session_id``).
        goal: the task goal.
        agent_id: the agent that created the task (``agent.name`` unless ``metadata`` has
            ``agent``; ``agent.version`` is ``metadata["agent_version"]`` or ``"unknown"``).
        metadata: the task metadata (``model`` becomes ``agent.model_name``).
        events: the task's events in seq order (``Event``; a contiguous range of them is fine).
        steps: the task's steps (``StepView``).

    Returns:
        The trajectory as a JSON-ready dict (write it with ``json.dumps(...,
        ensure_ascii=False)`` or any JSON writer). The layout is in the module docstring.
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
    return {
        "schema_version": ATIF_VERSION,
        "session_id": name,
        "agent": agent,
        "steps": out_steps,
        "extra": {
            "task": {"name": name, "goal": goal, "agent_id": agent_id, "metadata": metadata},
            "steps": records,
        },
    }


def _restore(data: dict[str, Any], source: str, digest: str) -> ParsedTrajectory:
    """Read an ``export_atif`` trajectory back to the exact events and steps it was made of."""
    events: list[EventInput] = []
    index_of: dict[int, int] = {}
    for number, raw in enumerate(_items(data["steps"], "steps"), start=1):
        step = _obj(raw, f"steps[{number - 1}]")
        calls = iter(_items(step.get("tool_calls") or [], f"step {number} tool_calls"))
        results = iter(_items(_dig(step, "observation", "results") or [], "results"))
        for raw_entry in _items(_dig(step, "extra", "events"), f"step {number} extra.events"):
            entry = _obj(raw_entry, f"step {number} event entry")
            kind = EventKind(entry["kind"])
            if kind is EventKind.REASONING:
                payload = step["reasoning_content"]
            elif kind is EventKind.TOOL_CALL:
                arguments = _obj(next(calls, None), f"step {number} tool call")["arguments"]
                text = entry.get("arguments_text")
                payload = arguments["text"] if text else json.dumps(arguments, ensure_ascii=False)
            elif kind is EventKind.TOOL_RESULT:
                payload = _obj(next(results, None), f"step {number} result")["content"]
            else:
                payload = step["message"]
            index_of[entry["seq"]] = len(events)
            events.append(
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
    extra = _obj(data.get("extra"), "extra")
    task = _obj(extra.get("task"), "extra.task")
    parsed_steps = [
        ParsedStep(
            step_name=record["step_name"],
            call_index=index_of[record["call_event_seq"]],
            result_index=index_of.get(record["result_event_seq"]),
            failed=record["state"] == StepState.FAILED.value,
        )
        for record in (_obj(raw, "step record") for raw in _items(extra["steps"], "extra.steps"))
        if record.get("call_event_seq") in index_of
    ]
    return _trajectory(
        fmt="atif",
        source=source,
        name=task["name"],
        goal=task["goal"],
        metadata=_obj(task.get("metadata"), "extra.task.metadata"),
        events=events,
        steps=parsed_steps,
        digest=digest,
    )
