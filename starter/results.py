"""What the client's calls return: typed results, never raw dicts.

Refusals are results (``WriteResult.error``), not exceptions.
"""

from __future__ import annotations

from pydantic import BaseModel

from workflows.errors import ErrorCode
from workflows.models import Event, StepView, TaskView, WriteOutcome


class WriteResult(BaseModel):
    """What every write returns. Refusals are results, not exceptions."""

    recorded: bool
    """True when the write is in the task's ledger (now, or from an earlier call with the
    same request id)."""
    error: ErrorCode | None = None
    """Why the write was refused (``recorded`` is then False)."""
    message: str | None = None
    """Human-readable detail of the refusal."""
    duplicate: bool = False
    """True when an earlier call with the same request id (same arguments) did the write, or
    ``create_task`` found the task with the same goal."""
    created: bool = False
    """``create_task``: True when this request id created the task."""
    first_seq: int | None = None
    """First seq assigned to the events of this write (event writes only)."""
    last_seq: int | None = None
    """Last seq assigned to the events of this write (event writes only)."""

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
    )


class GetTaskResult(BaseModel):
    """``get_task``: ``found`` is False when the name is not in this project."""

    found: bool
    """True when the task exists in this project."""
    view: TaskView | None = None
    """The task view (no event bodies)."""


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
