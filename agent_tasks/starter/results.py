"""What the client's calls return: typed results, never raw dicts.

Refusals are results (``WriteResult.error``), not exceptions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from agent_tasks.contract import Event, StepView, TaskView, WriteOutcome
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.taskgraph.models import DecisionRow


class WriteResult(BaseModel):
    """What every write returns. Refusals are results, not exceptions."""

    recorded: bool
    """True when the write is in the task's ledger (now, or from an earlier call with its request
    id)."""
    error: ErrorCode | None = None
    """Why the write was refused (``recorded`` is then False)."""
    message: str | None = None
    """Human-readable detail of the refusal."""
    duplicate: bool = False
    """True when an earlier call with the same request id did the write, or ``create_task`` found
    the task with the same goal."""
    created: bool = False
    """``create_task``: True when this request id created the task."""
    first_seq: int | None = None
    """First seq assigned to the events of this write (event writes only)."""
    last_seq: int | None = None
    """Last seq assigned to the events of this write (event writes only)."""
    time: datetime | None = None
    """Workflow time of a new event write (None for other writes and repeated ones)."""
    task: TaskView | None = None
    """``create_task``: the task as it is after the call (``status`` open for a new one)."""
    event: Event | None = None
    """``record_event`` and ``record_decision``: the recorded event, also for a repeated request
    id."""

    @property
    def seq(self) -> int | None:
        """The seq of a single recorded event (``record_event``)."""
        return self.first_seq

    @property
    def seqs(self) -> list[int]:
        """Every seq this write assigned, in order."""
        if self.first_seq is None or self.last_seq is None:
            return []
        return list(range(self.first_seq, self.last_seq + 1))


def refused(code: ErrorCode, message: str) -> WriteResult:
    """A refusal result: ``recorded`` False with the code and its message."""
    return WriteResult(recorded=False, error=code, message=message)


def from_outcome(outcome: WriteOutcome) -> WriteResult:
    """The result of an accepted (or duplicate) write from the workflow's ``WriteOutcome``."""
    return WriteResult(
        recorded=True,
        duplicate=outcome.duplicate,
        created=outcome.created,
        first_seq=outcome.first_seq or None,
        last_seq=outcome.last_seq or None,
        time=outcome.time,
    )


class GetTaskResult(BaseModel):
    """``get_task``: ``found`` is False when the name is not in this project."""

    found: bool
    """True when the task exists in this project."""
    view: TaskView | None = None
    """The task view (no event bodies)."""
    source: Literal["temporal", "neo4j"] | None = None
    """Where the view comes from: the task's workflow (a query, or a completed run's result), or the
    graph store (a run closed otherwise, or past retention)."""
    workflow_status: str | None = None
    """How the latest run closed (``COMPLETED``, ``CANCELED``, ``TERMINATED``, ``FAILED``,
    ``TIMED_OUT``); None while it runs or unknown. The last three ended without closing the task:
    the view is what the graph store had mirrored."""


class AnswerOutcome(BaseModel):
    """``answer_outcome``: what a task did with an answer sent by signal."""

    found: bool
    """True when the task exists in this project."""
    outcome: Literal["pending", "taken", "rejected", "late"] | None = None
    """``taken``; ``rejected`` (``error`` says why; the request stays open); ``late`` (closed or
    past its deadline); ``pending`` (nothing recorded yet)."""
    input_id: str | None = None
    """The request it answered or was meant for (None when it named none and was rejected)."""
    error: str | None = None
    """Why it was not taken (``rejected``, ``late``)."""
    event: Event | None = None
    """The ``input_response`` event the task recorded of it."""


class EventsResult(BaseModel):
    """``list_events``: a page of events and the cursor of the next page."""

    found: bool
    """True when the task exists in this project."""
    events: list[Event] = []
    """The page, in seq order."""
    next_after_seq: int | None = None
    """Pass as ``after_seq`` for the next page; None at the end."""


class StepsResult(BaseModel):
    """``list_steps``: a page of steps in name order and the cursor of the next page."""

    found: bool
    """True when the task exists in this project."""
    steps: list[StepView] = []
    """The steps."""
    next_after_name: str | None = None
    """Pass as ``after_name`` for the next page; None at the end."""


class DecisionsResult(BaseModel):
    """``list_decisions``: a page of a task's decisions and the cursor of the next page."""

    found: bool
    """True when the task exists in this project (or existed: detached decisions)."""
    decisions: list[DecisionRow] = []
    """The page, in seq order."""
    next_after_seq: int | None = None
    """Pass as ``after_seq`` for the next page; None at the end."""


class RedactResult(BaseModel):
    """``HistoryRetention.redact_event``. Refusals are results: ``event_not_found``,
    ``event_not_sealed``."""

    recorded: bool
    """True when the event's text is gone (now, or by an earlier redaction)."""
    error: ErrorCode | None = None
    """Why it was refused."""
    message: str | None = None
    """Human-readable detail of the refusal."""
    duplicate: bool = False
    """True when the event had been redacted before."""
    event_id: str
    """The event's id."""
    task: str | None = None
    """The event's task."""
    seq: int | None = None
    """The event's seq (it keeps its place in the log, its length and hash)."""
    affected_decision_ids: list[str] = []
    """Decisions that cite the event (and the event itself if a decision): they now need review."""


class DeleteResult(BaseModel):
    """``HistoryRetention.delete_task``: what was removed. Refusals are results
    (``task_not_found``)."""

    recorded: bool
    """True when the task is gone (now, or by an earlier deletion)."""
    error: ErrorCode | None = None
    """Why it was refused."""
    message: str | None = None
    """Human-readable detail of the refusal."""
    duplicate: bool = False
    """True when the task had been deleted before (nothing more was removed)."""
    task: str
    """The task's name (taken for ever: ``create_task`` refuses it with ``task_exists``)."""
    runs_deleted: list[str] = []
    """Run ids of the workflow executions deleted from Temporal (every run of the task)."""
    runs_pending: list[str] = []
    """Those of ``runs_deleted`` Temporal still had when the call stopped waiting (deleted in the
    background)."""
    events_deleted: int = 0
    """Event nodes deleted from the graph store (decisions included)."""
    steps_deleted: int = 0
    """Step nodes deleted from the graph store."""
    keys_destroyed: int = 0
    """Data keys destroyed (so the sealed text in any copy of the history stays sealed)."""
    decisions_kept: bool = False
    """True when the decisions were kept and detached (``include_decisions=False``)."""
    affected_decision_ids: list[str] = []
    """The task's decisions the graph store held: deleted, or kept and detached."""
    children_cancelled: list[str] = []
    """The task's running child tasks, each cancelled by the cascade before the deletion."""
