"""mini-swe-agent trajectories (``*.traj.json``): ``info`` and a ``messages`` list.

Two generations of the format (``examples/trajectories/FORMATS.md``):

- **v1** (``trajectory_format`` ``mini-swe-agent-1``, mini-swe-agent 1.x): the model writes its
  one bash command inside its text, in a fenced block (mini-swe-agent's own rule: an action
  is a message with exactly one `````bash`` block), and the next ``user`` message holds the
  output, starting with ``<returncode>N</returncode>``.
- **v2** (``mini-swe-agent-1.1``, mini-swe-agent 2.x): OpenAI tool calling: ``tool_calls`` on
  assistant messages, ``role: "tool"`` results with ``extra.returncode`` and
  ``extra.raw_output``, and a final ``role: "exit"`` message.

A trajectory is read as v1 when it has no ``tool_calls`` and no ``tool`` message.

==========================  ===============================================================
``messages[]`` role          events
==========================  ===============================================================
``system``, ``user``         ``message`` with that role; in v1, the ``user`` message right
                             after an action is its ``tool_result`` instead, failed when it
                             starts with a ``<returncode>`` other than 0
``assistant``                ``reasoning`` (``reasoning_content``), ``message`` (``content``),
                             then a ``tool_call`` per ``tool_calls[]`` entry (name
                             ``function.name``, call_id ``id``, payload the arguments string
                             exactly as it is) or, in v1, one ``tool_call`` named ``bash``
                             whose payload is the command of the message's one bash block
``tool``                     ``tool_result``, call_id ``tool_call_id``, payload
                             ``extra.raw_output`` (the full, untruncated output) when it is a
                             non-empty string, else ``content``; failed when
                             ``extra.returncode`` is present and not 0
``exit``                     ``note`` named ``exit`` when ``extra.exit_status`` is
                             ``Submitted``, else ``error`` named ``exit``; payload ``content``
any other role               ``note`` named by the role, payload ``content``
==========================  ===============================================================

A ``content`` that is a list of OpenAI content parts is the text of its text parts joined by a
newline. The source id is ``instance_id``. Metadata: ``schema_version``
(``trajectory_format``), ``instance_id``, ``agent`` (``mini-swe-agent``), ``agent_version``
(``info.mini_version``), ``model`` (``info.config.model.model_name``), ``exit_status``
(``info.exit_status``).
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_tasks.contract import EventKind, Role
from agent_tasks.trajectories.base import (
    EventLog,
    ParsedTrajectory,
    assemble,
    dig,
    payload_text,
    short_text,
)

_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
"""mini-swe-agent 1.x's action regex (``DefaultAgent.parse_action``)."""
_RETURN_CODE = re.compile(r"\s*<returncode>\s*(-?\d+)\s*</returncode>")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Function(_Model):
    """``function`` of an OpenAI tool call."""

    name: str | None = None
    """The tool."""
    arguments: str | dict[str, Any] | None = None
    """Arguments as a JSON string (OpenAI) or an object."""


class ToolCall(_Model):
    """An OpenAI tool call of an assistant message."""

    id: str | None = None
    """The call id."""
    function: Function
    """The tool and its arguments."""


class Message(_Model):
    """One chat message."""

    role: str
    """``system``, ``user``, ``assistant``, ``tool`` or ``exit``."""
    content: str | list[dict[str, Any]] | None = None
    """Text, or OpenAI content parts."""
    tool_calls: list[ToolCall] | None = None
    """Tool calls (v2)."""
    tool_call_id: str | None = None
    """The call a ``tool`` message answers."""
    reasoning_content: str | None = None
    """The model's reasoning (deepseek-reasoner)."""
    extra: dict[str, Any] | None = None
    """``raw_output``, ``returncode``, ``exit_status``... (v2)."""


class Info(_Model):
    """``info``: exit status, submission, statistics, configuration."""

    exit_status: str | None = None
    """``Submitted``, ``LimitsExceeded``..."""
    mini_version: str | None = None
    """mini-swe-agent's version."""
    config: dict[str, Any] | None = None
    """Agent, model and environment configuration."""


class Trajectory(_Model):
    """A mini-swe-agent trajectory."""

    trajectory_format: str | None = None
    """``mini-swe-agent-1`` or ``mini-swe-agent-1.1``."""
    instance_id: str | None = None
    """The task instance (a SWE-bench instance id)."""
    info: Info
    """Exit status and statistics."""
    messages: list[Message]
    """The chat, in order."""


def _text(content: str | list[dict[str, Any]] | None) -> str:
    """Message content as text: OpenAI content parts as the text of their text parts."""
    if isinstance(content, list):
        return "\n".join(payload_text(part.get("text")) for part in content)
    return payload_text(content)


def read(data: Trajectory, source: str) -> list[ParsedTrajectory]:
    """The one run of a mini-swe-agent trajectory, mapped as the module docstring says."""
    log = EventLog()
    text_actions = not any(m.tool_calls or m.role == "tool" for m in data.messages)
    action: Hashable | None = None
    for message in data.messages:
        role, content, extra = message.role, _text(message.content), message.extra or {}
        if text_actions and role == "user" and action is not None:
            code = _RETURN_CODE.match(content)
            failed = code is not None and int(code.group(1)) != 0
            log.add(EventKind.TOOL_RESULT, content, key=action, failed=failed)
            action = None
            continue
        action = None
        if role in ("system", "user"):
            log.text(EventKind.MESSAGE, content, Role(role))
        elif role == "assistant":
            log.text(EventKind.REASONING, message.reasoning_content)
            log.text(EventKind.MESSAGE, content, Role.ASSISTANT)
            for call in message.tool_calls or []:
                log.add(
                    EventKind.TOOL_CALL,
                    payload_text(call.function.arguments),
                    name=call.function.name or "tool",
                    call_id=call.id,
                    key=short_text(call.id),
                )
            blocks = _BASH_BLOCK.findall(content) if text_actions else []
            if len(blocks) == 1:
                action = log.add(EventKind.TOOL_CALL, blocks[0].strip(), name="bash")
        elif role == "tool":
            raw_output = extra.get("raw_output")
            log.add(
                EventKind.TOOL_RESULT,
                raw_output if isinstance(raw_output, str) and raw_output else content,
                call_id=message.tool_call_id,
                key=short_text(message.tool_call_id),
                failed=extra.get("returncode") not in (None, 0),
            )
        elif role == "exit":
            submitted = extra.get("exit_status") == "Submitted"
            log.add(EventKind.NOTE if submitted else EventKind.ERROR, content, name="exit")
        else:
            log.add(EventKind.NOTE, content, name=role)
    info = data.info
    return [
        assemble(
            fmt="mini-swe-agent",
            source=source,
            source_id=data.instance_id,
            log=log,
            values={
                "schema_version": data.trajectory_format,
                "instance_id": data.instance_id,
                "agent": "mini-swe-agent",
                "agent_version": info.mini_version,
                "model": dig(info.config, "model", "model_name"),
                "exit_status": info.exit_status,
            },
        )
    ]
