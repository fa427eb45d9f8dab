"""The task model's enums: the lower-case values are what histories, graph stores and JSON hold."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """What an event records."""

    MESSAGE = "message"
    """A chat message (``role`` says whose)."""
    TOOL_CALL = "tool_call"
    """A call of a tool (``name`` is the tool, the payload its arguments as text)."""
    TOOL_RESULT = "tool_result"
    """What a tool returned (``call_id`` links it to its call)."""
    REASONING = "reasoning"
    """Model reasoning kept apart from the message text."""
    INPUT_REQUEST = "input_request"
    """The agent asks a person for input."""
    INPUT_RESPONSE = "input_response"
    """A person's answer to an input request."""
    CHILD_TASK = "child_task"
    """A child task was spawned (the payload names it)."""
    CHILD_RESULT = "child_result"
    """A child task finished (the payload is its result)."""
    ERROR = "error"
    """An error outside any tool call (a crash, a model API failure)."""
    NOTE = "note"
    """Anything else worth keeping in the log (annotations, imported metadata)."""
    DECISION = "decision"
    """A decision: an agent's statement (the payload) citing events and steps of its task
    (``Event.cites``)."""


ROLLED_BACK = "rolled_back"
"""Name of the ``note`` that marks a failed run's events rolled back: payload ``{"from_seq": a,
"to_seq": b}``; the model never sees those events again, the log stays append-only."""


class Role(StrEnum):
    """Author role of a message, as in chat transcripts."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class StepState(StrEnum):
    """State of a step. Transitions follow ``workflows.steps.STEP_TRANSITIONS``."""

    NOT_STARTED = "not_started"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    """The step may or may not have had its effect (for example the worker died mid-call)."""


class StepKind(StrEnum):
    """What a step does. ``human`` and ``child`` are this project's additions."""

    READ = "read"
    WRITE = "write"
    TOOL = "tool"
    MODEL = "model"
    HUMAN = "human"
    """Waits for a person's input."""
    CHILD = "child"
    """Runs a child task."""


class TaskStatus(StrEnum):
    """Status of a task. A recorded task is ``open`` until ``finish_task``, unless its app moves it
    through an agent task's statuses (``workflows.lifecycle``): ``queued`` -> ``in_progress`` (or
    ``awaiting_input``, ``awaiting_children``) -> ``done``, ``failed`` or ``cancelled``."""

    OPEN = "open"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    QUEUED = "queued"
    """An agent task whose agent has not started yet."""
    IN_PROGRESS = "in_progress"
    """An agent task whose agent runs."""
    AWAITING_INPUT = "awaiting_input"
    """An agent task waiting for a person's input."""
    AWAITING_CHILDREN = "awaiting_children"
    """An agent task waiting for its child tasks."""


CLOSED_STATUSES = frozenset({TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED})
"""The statuses of a finished task: it takes no more writes."""


class ResultValidity(StrEnum):
    """How far a reader can trust a step's result, as returned by ``list_steps``."""

    VALID = "valid"
    """Completed, and ``result_event_seq`` names the event holding the result."""
    NO_RESULT = "no_result"
    """Completed without a result event: the effect happened, its output was not recorded."""
    PENDING = "pending"
    """Not started or in progress: there is no result yet."""
    FAILED = "failed"
    """Failed: the result event, if any, holds the error, not a result."""
    UNCERTAIN = "uncertain"
    """State ``unknown``: the effect may or may not have happened; check before retrying."""
