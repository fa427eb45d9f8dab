"""What every format reader produces, and the rules shared by all of them.

A reader turns one source run into a ``ParsedTrajectory``: the task it becomes (name, goal,
metadata), its events in source order, the tool steps that index into them, and what links it
to other runs (subagent references, a continuation file). The mapping of each format is in its
module's docstring; the rules here apply to all of them.

Rules for every format
----------------------
- Events are in the order their records appear in the source (not sorted by timestamp).
- ``message`` and ``reasoning`` events are made only from text that is not blank (empty or
  whitespace only); every other event is always made, even with an empty payload.
- ``role`` is set on ``message`` events only: ``system``, ``user``, ``assistant`` or ``tool``.
- A payload is text: a string as it is; a JSON object or list as
  ``json.dumps(value, ensure_ascii=False)`` (keys in source order); null as ``""``. Payloads are
  cleaned and cut to ``MAX_PAYLOAD_CHARS`` characters by ``EventInput``, which keeps the full
  text's length and SHA-256.
- ``name`` and ``call_id`` longer than 128 characters become their first 111 characters, ``~``
  and the first 16 hex digits of the full text's SHA-256 (128 in all).
- Each ``tool_call`` event starts one ``ParsedStep`` (kind tool) named by ``step_name``:
  ``f"{seq:04d}:{tool name}"`` with ``/`` replaced by ``_``, cut to 100 characters, where
  ``seq`` is the call's seq in the task (its 1-based position in ``events`` when the run is
  the task's first segment). Its result is the first ``tool_result`` not yet taken that answers
  the call (same source call id; calls without ids are paired with the result made with them);
  it may come before the call. A result without a name takes its call's name. ``failed`` is
  the result's failure signal (per format); a step without a result is not failed.
- ``goal`` is the payload of the first ``message`` event with role ``user``, cut to 4,000
  characters (``""`` if there is none).
- ``metadata`` holds ``format`` and the format's keys that are present, as text cut to 500
  characters; it is made from the run's content only, so the same run read from any file gives
  the same metadata.

Task identity (``task_name``)
-----------------------------
A run's task name is ``f"{format}/{source id}/{digest}"``, or ``f"{format}/{digest}"`` when
the source carries no id, where ``digest`` is the first 16 hex digits (64 bits) of
``run_digest``: the SHA-256 of the run's format, source id, goal and events (kind, role, name,
call id, full length, full SHA-256 of each, in order). So two different runs that share an id
(one ATIF ``session_id`` for several runs, one SWE-bench instance run by several models) get
two tasks, and the same run read again, from the same file or from another (renamed, part of a
JSON array or JSON Lines file, embedded in a parent), gets the same task, which makes a
re-import a no-op. The source id (cleaned, control characters replaced by ``_``) is cut so the
name fits 200 characters; ``metadata["source_id"]`` keeps it (up to 500 characters) and the
importer makes it the task's session id (``short_text``: searchable in Temporal visibility as
``SessionId`` and in Neo4j as ``:Session``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Hashable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_tasks.contract import (
    MAX_GOAL_CHARS,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_VALUE_CHARS,
    EventInput,
    EventKind,
    Name,
    Role,
    StepName,
    clean_text,
    sha256_hex,
)
from agent_tasks.contract.errors import AgentTasksError

Format = Literal["atif", "mini-swe-agent", "swe-agent"]
"""The formats read (an ``export_atif`` export is ATIF)."""

DIGEST_HEX = 16
"""Hex digits of ``run_digest`` in a task name (64 bits: a collision between two runs of one
project is about as likely as 1 in 10^19 per pair)."""
_SHORT = 128
_STEP = 100
_NAME_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class TrajectoryFormatError(AgentTasksError, ValueError):
    """A file is not a trajectory this package reads; the message names the file, the run in
    it (when it holds several) and the field at fault."""


class SubagentRef(BaseModel):
    """A reference from a run to a subagent run (ATIF ``subagent_trajectory_ref``)."""

    model_config = ConfigDict(frozen=True)

    trajectory_id: str | None = None
    """The subagent's ``trajectory_id`` (ATIF v1.7: the resolution key of embedded runs)."""
    session_id: str | None = None
    """The subagent's ``session_id`` (before v1.7 the usual key; informational in v1.7)."""
    trajectory_path: str | None = None
    """The subagent's file, relative to the referencing file's folder (or a URL)."""


class ParsedStep(BaseModel):
    """A tool step of a parsed trajectory (its kind is always ``tool``)."""

    model_config = ConfigDict(frozen=True)

    step_name: StepName
    """``step_name(call seq, tool)`` with the call's seq when the run is a task's first part."""
    call_index: int
    """Index in ``ParsedTrajectory.events`` of the step's ``tool_call`` event."""
    result_index: int | None
    """Index of its ``tool_result`` event, or None when the source has no result for it."""
    failed: bool
    """True when the source marks the call failed (see each format's docstring)."""


class ParsedTrajectory(BaseModel):
    """One run read from a file: what to create, the events to record, the steps to set."""

    format: Format
    """The source format."""
    source: str
    """Where the run is: the file name, plus its place in the file when the file holds more
    than one (``[2]`` in a JSON array, ``:4`` for line 4 of JSON Lines,
    ``.subagent_trajectories[0]`` for an embedded run)."""
    name: Name
    """The task name (module docstring, "Task identity")."""
    source_id: str | None
    """The source's own id of the run (ATIF ``session_id``, else ``trajectory_id``;
    mini-swe-agent ``instance_id``, SWE-agent problem statement id), None when it has none."""
    digest: str
    """``run_digest`` (64 hex digits)."""
    goal: Annotated[str, Field(max_length=MAX_GOAL_CHARS)]
    """The first user message, cut to 4,000 characters ("" if there is none)."""
    metadata: dict[str, str] = Field(max_length=MAX_METADATA_ENTRIES)
    """Format, source id, model, agent, versions, exit status...: only those present."""
    events: list[EventInput]
    """The events in source order."""
    steps: list[ParsedStep]
    """The tool steps, in the order of their calls."""
    trajectory_id: str | None = None
    """ATIF ``trajectory_id`` (what a v1.7 reference names)."""
    session_id: str | None = None
    """ATIF ``session_id`` (what an older reference names)."""
    subagents: list[SubagentRef] = []
    """The subagent runs this run references, in order, without repeats."""
    embedded_in: str | None = None
    """For a run embedded in another (ATIF ``subagent_trajectories``): the embedding run's
    task name; it is this run's parent."""
    continued_in: str | None = None
    """ATIF ``continued_trajectory_ref``: the file that continues this run."""
    parent: Name | None = None
    """The parent task's name when it is known from the file itself (an export)."""

    def numbered_steps(self, first_seq: int) -> list[tuple[ParsedStep, str, int | None]]:
        """Each step with its name and its result's seq once the events are recorded with
        seqs from ``first_seq``: ``step_name`` as read for a task's first segment (``first_seq``
        1), else renamed by its call's seq."""
        return [
            (
                step,
                step.step_name
                if first_seq == 1
                else step_name(first_seq + step.call_index, self.events[step.call_index].name),
                None if step.result_index is None else first_seq + step.result_index,
            )
            for step in self.steps
        ]


def payload_text(value: object) -> str:
    """A source value as payload text: strings as they are, null as "", others as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def short_text(value: object) -> str | None:
    """A name or call id of at most 128 characters (longer: cut plus a hash), None if empty."""
    text = clean_text(payload_text(value))
    if not text:
        return None
    if len(text) <= _SHORT:
        return text
    return f"{text[: _SHORT - 17]}~{sha256_hex(text)[:16]}"


def step_name(seq: int, tool: str | None) -> str:
    """The name of the tool step whose call has ``seq``: ``f"{seq:04d}:{tool}"``, ``/`` as
    ``_``, cut to 100 characters (step names hold no ``/``)."""
    return f"{seq:04d}:{tool}".replace("/", "_")[:_STEP]


def run_digest(fmt: str, source_id: str | None, goal: str, events: list[EventInput]) -> str:
    """SHA-256 hex of a run's identity: format, source id, goal, and each event's kind, role,
    name, call id, full length and full SHA-256, in order (canonical JSON lines)."""
    digest = hashlib.sha256(json.dumps([fmt, source_id, goal]).encode())
    for e in events:
        row = [e.kind.value, e.role and e.role.value, e.name, e.call_id, e.full_length]
        digest.update(f"\n{json.dumps(row)}{e.full_sha256}".encode())
    return digest.hexdigest()


def task_name(fmt: str, source_id: str | None, digest: str) -> str:
    """``f"{fmt}/{source id}/{digest[:16]}"`` (``f"{fmt}/{digest[:16]}"`` without an id),
    the id cleaned, control characters as ``_``, cut so the name fits 200 characters."""
    short = digest[:DIGEST_HEX]
    if not source_id:
        return f"{fmt}/{short}"
    room = _NAME_CHARS - len(fmt) - len(short) - 2
    ident = _CONTROL.sub("_", clean_text(source_id))[:room]
    return f"{fmt}/{ident}/{short}"


def metadata(values: dict[str, object]) -> dict[str, str]:
    """Metadata from the values present (not None or ""), as text cut to 500 characters."""
    out: dict[str, str] = {}
    for key, value in values.items():
        text = clean_text(payload_text(value))
        if text and len(out) < MAX_METADATA_ENTRIES:
            out[key] = text[:MAX_METADATA_VALUE_CHARS]
    return out


class EventLog:
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
                kind=kind,
                role=role,
                name=short_text(name),
                call_id=short_text(call_id),
                payload=payload,
            )
        )
        self._keys.append(key)
        self._failed.append(failed)
        return key

    def text(self, kind: EventKind, value: object, role: Role | None = None) -> None:
        """Append a ``message`` or ``reasoning`` event unless the text is blank."""
        text = payload_text(value)
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
                    step_name=step_name(index + 1, event.name),
                    call_index=index,
                    result_index=result,
                    failed=result is not None and self._failed[result],
                )
            )
        return steps


def assemble(
    *,
    fmt: Format,
    source: str,
    source_id: str | None,
    log: EventLog,
    values: dict[str, object],
    **links: Any,
) -> ParsedTrajectory:
    """A ParsedTrajectory from a reader's event log: goal, metadata, digest and name.

    Args:
        fmt: the format.
        source: where the run is (``ParsedTrajectory.source``).
        source_id: the source's id of the run, None when it has none.
        log: the events read.
        values: the format's metadata values (``metadata`` keeps those present).
        links: ``trajectory_id``, ``session_id``, ``subagents``, ``continued_in``,
            ``embedded_in`` (ATIF).
    """
    steps = log.steps()
    goal = next(
        (e.payload for e in log.events if e.kind is EventKind.MESSAGE and e.role is Role.USER),
        "",
    )[:MAX_GOAL_CHARS]
    digest = run_digest(fmt, source_id, goal, log.events)
    return ParsedTrajectory(
        format=fmt,
        source=source,
        name=task_name(fmt, source_id, digest),
        source_id=source_id,
        digest=digest,
        goal=goal,
        metadata=metadata({"format": fmt, "source_id": source_id, **values}),
        events=log.events,
        steps=steps,
        **links,
    )


def dig(data: object, *keys: str) -> object:
    """``data[k1][k2]...`` through JSON objects, or None where a level is missing."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
