"""The inputs of a recorded task's lifecycle, set by the app that runs it: its status, an input
request and a child task asked from outside (``workflows.lifecycle``).

A recorded task moves ``queued`` -> ``in_progress`` -> ``done`` | ``failed`` | ``cancelled``,
waiting ``awaiting_input`` or ``awaiting_children`` meanwhile (``starter.tasks``); agent tasks
refuse these writes (``run_by_agent``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, JsonValue, StrictStr, field_validator

from agent_tasks.contract.inputs import _Input
from agent_tasks.contract.kinds import TaskStatus
from agent_tasks.contract.limits import MAX_GOAL_CHARS
from agent_tasks.contract.text import Name, ShortText, StepName, check_name

SETTABLE_STATUSES = frozenset(
    {TaskStatus.QUEUED, TaskStatus.IN_PROGRESS, TaskStatus.AWAITING_CHILDREN}
)
"""The statuses ``update_status`` moves a recorded task to. ``awaiting_input`` comes with an input
request (``AskInput``); ``done``, ``failed`` and ``cancelled`` with ``finish_task``."""


class SetStatusInput(_Input):
    """The ``update_status`` update: a recorded task's status (recorded as a ``note`` named
    ``status``)."""

    agent_id: ShortText
    """The writer."""
    status: TaskStatus
    """One of ``SETTABLE_STATUSES``."""
    request_id: StrictStr
    """Request id (1 to 64 characters)."""

    @field_validator("status")
    @classmethod
    def _settable(cls, status: TaskStatus) -> TaskStatus:
        if status not in SETTABLE_STATUSES:
            allowed = ", ".join(sorted(s.value for s in SETTABLE_STATUSES))
            raise ValueError(
                f"status {status.value!r} is not set this way: one of {allowed} (awaiting_input "
                "comes with an input request, done, failed and cancelled with finish_task)"
            )
        return status


class AskInput(_Input):
    """The ``ask`` update: a recorded task asks a person for input (``awaiting_input`` until every
    open request is answered, then ``queued``)."""

    agent_id: ShortText
    """The writer."""
    input_id: StepName
    """The request's name, unique in the task."""
    prompt: Annotated[StrictStr, Field(max_length=4_000)]
    """What is asked."""
    json_schema: dict[str, JsonValue] = Field(default_factory=dict)
    """JSON Schema the answer must satisfy (empty: any JSON value;
    ``contract.waits.check_schema``)."""
    request_id: StrictStr
    """Request id (1 to 64 characters)."""


class SpawnInput(_Input):
    """The ``spawn`` update: a recorded task starts a child (a recorded task too) whose end comes
    back by signal. Its app sets ``awaiting_children``; the task is ``queued`` again once no child
    runs."""

    agent_id: ShortText
    """The writer."""
    spawn_key: StepName
    """The child's label in its parent, unique there."""
    name: Name
    """The child task's name in the project."""
    goal: Annotated[StrictStr, Field(max_length=MAX_GOAL_CHARS)]
    """The child's goal."""
    session_id: ShortText | None = None
    """The child's session; None: the parent's."""
    request_id: StrictStr
    """Request id (1 to 64 characters)."""

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return check_name(name, "name")
