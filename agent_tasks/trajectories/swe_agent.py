"""SWE-agent trajectories (``*.traj``): ``history`` and ``trajectory`` lists.

Read across SWE-agent's format changes (``examples/trajectories/FORMATS.md``): 0.x files
(``is_demo`` demonstrations in ``history``, ``state`` as a JSON string) and 1.x files
(``message_type``, ``tool_calls`` in ``history``, ``execution_time``, a ``replay_config``
object or JSON string); fields not used below are ignored.

``history[]`` repeats what ``trajectory[]`` holds once the agent starts acting, so only the
history entries before its first ``assistant`` entry are read, leaving out ``is_demo``
demonstrations: each is a ``message`` with its role. Then for each ``trajectory[i]``: a
``message`` (role assistant) from ``thought`` (``response`` is not kept: it is the thought
followed by the action), a ``tool_call`` (name = first word of ``action``, or ``command`` if it
has none; payload = ``action``; no call_id) and a ``tool_result`` (payload = ``observation``).
The step is failed when the observation contains, ignoring case, any of ``FAILURE_SIGNALS``.
History entries after the first assistant entry that ``trajectory[]`` lacks (for example
requeries after malformed output) are not imported.

The source id is ``replay_config.problem_statement.id`` when present (SWE-agent 1.x); older
files carry none (SWE-agent names the file after the instance, but a file name is not the
run's content, so it is not part of the task name). Metadata: ``agent`` (``swe-agent``),
``agent_version`` (``info.swe_agent_version``), ``environment``, ``model``
(``replay_config.agent.model.name``), ``exit_status`` (``info.exit_status``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agent_tasks.contract import EventKind, Role
from agent_tasks.trajectories.base import EventLog, ParsedTrajectory, assemble, dig, payload_text

FAILURE_SIGNALS = (
    "traceback (most recent call last)",
    "syntax error",
    "no such file or directory",
    "command not found",
)
"""Lower-case texts whose presence in a SWE-agent observation marks its step failed."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HistoryEntry(_Model):
    """A chat message sent to the model."""

    role: Literal["system", "user", "assistant", "tool"]
    """Whose message."""
    content: str | list[dict[str, Any]] | None = None
    """Text (or content parts)."""
    is_demo: bool | None = None
    """An in-context demonstration (0.x)."""


class TrajectoryStep(_Model):
    """One step the agent took."""

    action: str
    """The command."""
    observation: str | None = None
    """Its output."""
    thought: str | None = None
    """The model's reasoning before the action."""
    response: str | None = None
    """The raw model text (not imported)."""


class Trajectory(_Model):
    """A SWE-agent trajectory."""

    environment: str | None = None
    """``swe_main``, ``main``..."""
    history: list[HistoryEntry]
    """The chat."""
    trajectory: list[TrajectoryStep]
    """The steps."""
    info: dict[str, Any] | None = None
    """Exit status, submission, statistics."""
    replay_config: dict[str, Any] | str | None = None
    """The run's configuration (1.x), an object or a JSON string."""


def _command_name(command: str) -> str:
    """First word of a command line, or ``command`` when it has none."""
    words = command.split()
    return words[0] if words else "command"


def read(data: Trajectory, source: str) -> list[ParsedTrajectory]:
    """The one run of a SWE-agent trajectory, mapped as the module docstring says."""
    log = EventLog()
    history = data.history
    acting = [index for index, entry in enumerate(history) if entry.role == "assistant"]
    for entry in history[: acting[0] if acting else len(history)]:
        if not entry.is_demo:
            log.text(EventKind.MESSAGE, payload_text(entry.content), Role(entry.role))
    for step in data.trajectory:
        log.text(EventKind.MESSAGE, step.thought, Role.ASSISTANT)
        key = log.add(EventKind.TOOL_CALL, step.action, name=_command_name(step.action))
        observation = payload_text(step.observation)
        failed = any(signal in observation.lower() for signal in FAILURE_SIGNALS)
        log.add(EventKind.TOOL_RESULT, observation, key=key, failed=failed)
    replay: object = data.replay_config
    if isinstance(replay, str):
        try:
            replay = json.loads(replay)
        except ValueError:
            replay = None
    problem_id = dig(replay, "problem_statement", "id")
    return [
        assemble(
            fmt="swe-agent",
            source=source,
            source_id=problem_id if isinstance(problem_id, str) and problem_id else None,
            log=log,
            values={
                "agent": "swe-agent",
                "agent_version": dig(data.info, "swe_agent_version"),
                "environment": data.environment,
                "model": dig(replay, "agent", "model", "name"),
                "exit_status": dig(data.info, "exit_status"),
            },
        )
    ]
