"""ATIF, the Agent Trajectory Interchange Format (Harbor's RFC 0001), versions 1.0 to 1.7.

The models below follow the published specification (Harbor's ``harbor.models.trajectories``,
whose JSON schema is ``schemas/atif-v1.7.schema.json``) field by field, and also accept the
variants seen in real files (``examples/trajectories/FORMATS.md``): ``schema_version`` without
the ``ATIF-v`` prefix, ``agent.model``, tool calls as ``{id, name, arguments}`` with string
arguments, the claude-code tool-result step (``observation: {type: "tool_result", content,
result: {success, error}}``) and result ``content`` that is a JSON object (the orchestrator's
``{command, passed, output}``). Unknown fields are ignored; a known field of the wrong shape is
a ``TrajectoryFormatError`` naming it (``steps[3].tool_calls[0].function_name``).

What each record becomes, per step, in this order:

==========================================  ======================================================
source                                      events
==========================================  ======================================================
``reasoning_content``                       ``reasoning``
``message`` of a ``system`` step whose      ``note`` (name = the event type, payload = the
``extra.event_type`` is set (orchestrator)  message)
``message`` of a claude-code tool-result    nothing: it only names the call id (``Tool result
step                                        for <id>``), which the result takes
any other ``message``                       ``message``, role ``user`` / ``assistant`` (agent) /
                                            ``system``; a list of content parts (v1.6) is the
                                            text of its parts joined by a newline when all are
                                            text, else the list as JSON (image references kept)
``tool_calls[]``                            ``tool_call``: name ``function_name``, call_id
                                            ``tool_call_id``, payload the ``arguments`` as text
``observation.results[]``                   ``tool_result``: payload ``content`` (as text, like
                                            a message), call_id ``source_call_id``
claude-code ``observation``                 ``tool_result`` (payload ``content``), call_id from
                                            the message, failed when ``result.success`` is false
``subagent_trajectory_ref[]`` of a result   ``child_task`` named ``subagent`` after the result,
                                            payload the reference as JSON
``metrics``                                 ``note`` named ``metrics``, payload the metrics as
                                            JSON (token counts, cost, token ids, logprobs)
==========================================  ======================================================

Then root ``notes`` (a ``note`` named ``notes``) and ``final_metrics`` (a ``note`` named
``final_metrics``, as JSON). A result with a null ``source_call_id`` answers the first call of
its step that no result has answered yet (terminus-2 writes results without ids) and takes its
id; a result with a null id and no such call (the orchestrator logs command runs as results
only) gets a synthesized ``tool_call`` just before it: name = first word of
``content.command`` (or ``command``), payload = ``content.command`` (or ``""``), no call_id;
such a result without content (one that only carries subagent references) makes no event. A
result is failed when its content is an object with ``passed: false``.

Ids and links: the source id is ``session_id``, else ``trajectory_id``. Metadata:
``schema_version``, ``session_id``, ``trajectory_id``, ``agent`` (``agent.name``),
``agent_version``, ``model`` (``agent.model_name`` or ``agent.model``) and
``continued_trajectory_ref``. Each ``subagent_trajectories[]`` entry (v1.7) is a run of its own
whose parent is the run that embeds it; ``subagent_trajectory_ref`` entries and
``continued_trajectory_ref`` are kept on the run for the importer to resolve. Not imported:
timestamps (an event's time is when it is recorded), ``extra`` objects other than
``event_type``, ``agent.tool_definitions``, and the per-step ``model_name``,
``reasoning_effort``, ``is_copied_context`` and ``llm_call_count``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from agent_tasks.contract import EventKind, Role
from agent_tasks.trajectories.base import (
    EventLog,
    ParsedTrajectory,
    SubagentRef,
    assemble,
    payload_text,
    short_text,
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ImageSource(_Model):
    """Where an image of a content part is (v1.6)."""

    media_type: str
    """MIME type (``image/png``...)."""
    path: str
    """File path (relative to the trajectory) or URL."""


class ContentPart(_Model):
    """One part of a multimodal message or result (v1.6): text or an image."""

    type: Literal["text", "image"]
    """The part's kind."""
    text: str | None = None
    """The text of a ``text`` part."""
    source: ImageSource | None = None
    """The image of an ``image`` part."""


Content = str | list[ContentPart] | dict[str, Any] | None
"""A message or result content: text, content parts, or (variant) a JSON object."""


class Agent(_Model):
    """The agent that ran the trajectory."""

    name: str
    """Agent system name."""
    version: str | None = None
    """Its version (required by the RFC; absent in some files)."""
    model_name: str | None = None
    """Default model."""
    model: str | None = None
    """Default model (claude-code variant)."""
    tool_definitions: list[dict[str, Any]] | None = None
    """OpenAI function schemas of its tools (v1.5)."""
    extra: dict[str, Any] | None = None
    """Custom data."""


class ToolCall(_Model):
    """One tool call of an agent step."""

    tool_call_id: str | None = Field(
        default=None, validation_alias=AliasChoices("tool_call_id", "id")
    )
    """The call's id (``id`` in the claude-code variant)."""
    function_name: str | None = Field(
        default=None, validation_alias=AliasChoices("function_name", "name")
    )
    """The tool (``name`` in the claude-code variant)."""
    arguments: dict[str, Any] | str | None = None
    """Arguments: an object (RFC) or a JSON string (variant)."""
    extra: dict[str, Any] | None = None
    """Custom data (v1.7)."""


class TrajectoryRef(_Model):
    """``subagent_trajectory_ref`` entry."""

    session_id: str | None = None
    """The subagent run's session id."""
    trajectory_id: str | None = None
    """The subagent trajectory's id (v1.7)."""
    trajectory_path: str | None = None
    """Its file (relative path or URL)."""
    extra: dict[str, Any] | None = None
    """Custom data."""


class ObservationResult(_Model):
    """One result of an observation."""

    source_call_id: str | None = None
    """The call it answers; null for results not from a tool call."""
    content: Content = None
    """The output."""
    subagent_trajectory_ref: list[TrajectoryRef] | None = None
    """Subagent runs delegated to."""
    extra: dict[str, Any] | None = None
    """Custom data (v1.7)."""


class ToolResultOutcome(_Model):
    """``result`` of a claude-code tool-result observation."""

    success: bool | None = None
    """False when the call failed."""
    error: Any = None
    """The error, if any."""


class Observation(_Model):
    """A step's observation: ``results`` (RFC), or the claude-code tool-result variant."""

    results: list[ObservationResult] | None = None
    """The results (RFC)."""
    type: str | None = None
    """``tool_result`` in the claude-code variant."""
    content: Content = None
    """The claude-code variant's output."""
    result: ToolResultOutcome | None = None
    """The claude-code variant's outcome."""


class Metrics(_Model):
    """Per-step LLM metrics (v1.3 and v1.4 added the token ids)."""

    prompt_tokens: int | None = None
    """Input tokens, cached ones included."""
    completion_tokens: int | None = None
    """Output tokens."""
    cached_tokens: int | None = None
    """Cached input tokens."""
    cost_usd: float | None = None
    """Cost in USD."""
    prompt_token_ids: list[int] | None = None
    """Prompt token ids (v1.4)."""
    completion_token_ids: list[int] | None = None
    """Completion token ids (v1.3)."""
    logprobs: list[float] | None = None
    """Log probability of each generated token."""
    extra: dict[str, Any] | None = None
    """Other metrics."""


class Step(_Model):
    """One step of a trajectory."""

    step_id: int
    """1, 2, 3 ... (the RFC requires that order)."""
    timestamp: str | None = None
    """ISO 8601 time."""
    source: Literal["system", "user", "agent"]
    """Who the step is from."""
    message: str | list[ContentPart] | None = ""
    """The message (content parts since v1.6)."""
    model_name: str | None = None
    """Model of this step (agent steps)."""
    reasoning_effort: str | float | None = None
    """Reasoning effort (agent steps)."""
    reasoning_content: str | None = None
    """The model's reasoning (agent steps)."""
    tool_calls: list[ToolCall] | None = None
    """Tool calls (agent steps)."""
    observation: Observation | None = None
    """Results of the calls, or of a system operation."""
    metrics: Metrics | None = None
    """LLM metrics (agent steps)."""
    is_copied_context: bool | None = None
    """Copied from an earlier trajectory for context (v1.5)."""
    llm_call_count: int | None = None
    """LLM calls this step stands for (v1.7)."""
    extra: dict[str, Any] | None = None
    """Custom data (``event_type`` names the orchestrator's system events)."""


class FinalMetrics(_Model):
    """Totals of the whole trajectory."""

    total_prompt_tokens: int | None = None
    """Prompt tokens."""
    total_completion_tokens: int | None = None
    """Completion tokens."""
    total_cached_tokens: int | None = None
    """Cached tokens."""
    total_cost_usd: float | None = None
    """Cost in USD, subagents included."""
    total_steps: int | None = None
    """Steps."""
    extra: dict[str, Any] | None = None
    """Other totals."""


class Trajectory(_Model):
    """An ATIF trajectory (v1.0 to v1.7, and the variants in the module docstring)."""

    schema_version: str
    """``ATIF-v1.0`` ... ``ATIF-v1.7`` (or ``1.4``)."""
    session_id: str | None = None
    """The run (optional since v1.7)."""
    trajectory_id: str | None = None
    """This document (v1.7; required on embedded subagents)."""
    agent: Agent
    """The agent."""
    steps: list[Step]
    """The interaction, in order."""
    notes: str | None = None
    """Free text."""
    final_metrics: FinalMetrics | None = None
    """Totals."""
    continued_trajectory_ref: str | None = None
    """The file that continues this run (v1.5)."""
    extra: dict[str, Any] | None = None
    """Custom data."""
    subagent_trajectories: list[Trajectory] | None = None
    """Embedded subagent runs (v1.7)."""


_ROLES = {"user": Role.USER, "agent": Role.ASSISTANT, "system": Role.SYSTEM}


def content_text(content: Content | str) -> str:
    """A message or result content as payload text (module docstring)."""
    if isinstance(content, list):
        if all(part.type == "text" for part in content):
            return "\n".join(part.text or "" for part in content)
        return json.dumps(
            [part.model_dump(mode="json", exclude_none=True) for part in content],
            ensure_ascii=False,
        )
    return payload_text(content)


def _command_name(command: str) -> str:
    """First word of a command line, or ``command`` when it has none."""
    words = command.split()
    return words[0] if words else "command"


def _dump(model: BaseModel) -> str:
    """A model as JSON text, with the fields the source had, in field order."""
    return json.dumps(model.model_dump(mode="json", exclude_unset=True), ensure_ascii=False)


def _read_step(step: Step, log: EventLog, refs: list[SubagentRef]) -> None:
    """Append one step's events to ``log`` and its subagent references to ``refs``."""
    observation = step.observation
    claude = observation is not None and observation.type == "tool_result"
    event_type = (step.extra or {}).get("event_type")
    log.text(EventKind.REASONING, step.reasoning_content)
    if claude:
        pass  # the message only names the call id, read with the result below
    elif step.source == "system" and isinstance(event_type, str):
        log.add(EventKind.NOTE, content_text(step.message), name=event_type)
    else:
        log.text(EventKind.MESSAGE, content_text(step.message), _ROLES[step.source])
    unanswered: list[tuple[object, Hashable | None]] = []
    for call in step.tool_calls or []:
        pairing = log.add(
            EventKind.TOOL_CALL,
            payload_text(call.arguments),
            name=call.function_name or "tool",
            call_id=call.tool_call_id,
            key=short_text(call.tool_call_id),
        )
        unanswered.append((call.tool_call_id, pairing))
    if observation is not None and claude:
        found = re.match(r"Tool result for (\S+)", content_text(step.message))
        answers = found.group(1) if found else None
        log.add(
            EventKind.TOOL_RESULT,
            content_text(observation.content),
            call_id=answers,
            key=short_text(answers),
            failed=observation.result is not None and observation.result.success is False,
        )
    for result in (observation.results if observation else None) or []:
        content = result.content
        call_id: object = result.source_call_id
        key: Hashable | None = None
        if call_id is None and unanswered:
            call_id, key = unanswered.pop(0)
        elif call_id is None and content is not None:
            command = payload_text(content.get("command") if isinstance(content, dict) else None)
            key = log.add(EventKind.TOOL_CALL, command, name=_command_name(command))
        elif call_id is not None:
            key = short_text(call_id)
            unanswered = [pair for pair in unanswered if pair[1] != key]
        if call_id is not None or content is not None:
            log.add(
                EventKind.TOOL_RESULT,
                content_text(content),
                call_id=call_id,
                key=key,
                failed=isinstance(content, dict) and content.get("passed") is False,
            )
        for ref in result.subagent_trajectory_ref or []:
            log.add(EventKind.CHILD_TASK, _dump(ref), name="subagent")
            refs.append(SubagentRef.model_validate(ref.model_dump(exclude={"extra"})))
    if step.metrics is not None:
        log.add(EventKind.NOTE, _dump(step.metrics), name="metrics")


def read(data: Trajectory, source: str, embedded_in: str | None = None) -> list[ParsedTrajectory]:
    """The runs of one ATIF trajectory: the trajectory itself first, then each embedded
    subagent run (``subagent_trajectories``, depth first).

    Args:
        data: the validated trajectory.
        source: where it is (``ParsedTrajectory.source``).
        embedded_in: the embedding run's task name, for an embedded trajectory.
    """
    log = EventLog()
    refs: list[SubagentRef] = []
    for step in data.steps:
        _read_step(step, log, refs)
    if data.notes:
        log.add(EventKind.NOTE, data.notes, name="notes")
    if data.final_metrics is not None:
        log.add(EventKind.NOTE, _dump(data.final_metrics), name="final_metrics")
    run = assemble(
        fmt="atif",
        source=source,
        source_id=data.session_id or data.trajectory_id,
        log=log,
        values={
            "schema_version": data.schema_version,
            "session_id": data.session_id,
            "trajectory_id": data.trajectory_id,
            "agent": data.agent.name,
            "agent_version": data.agent.version,
            "model": data.agent.model_name or data.agent.model,
            "continued_trajectory_ref": data.continued_trajectory_ref,
        },
        trajectory_id=data.trajectory_id,
        session_id=data.session_id,
        subagents=list(dict.fromkeys(refs)),
        continued_in=data.continued_trajectory_ref,
        embedded_in=embedded_in,
    )
    runs = [run]
    for index, sub in enumerate(data.subagent_trajectories or []):
        runs += read(sub, f"{source}.subagent_trajectories[{index}]", run.name)
    return runs
