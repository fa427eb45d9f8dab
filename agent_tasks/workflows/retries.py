"""Retries a person or agent code asks for (``retry_step``): an ``unknown`` or ``failed`` step of an
agent task marked to run again when agent code reaches it, recorded as a decision citing it."""

from __future__ import annotations

from datetime import datetime

from agent_tasks.contract import (
    CitesInput,
    EventInput,
    EventKind,
    StepRecord,
    StepRetry,
    StepState,
    WriteOutcome,
    args_digest,
)
from agent_tasks.contract.errors import ErrorCode, refusal
from agent_tasks.workflows.book import Book
from agent_tasks.workflows.steps import step_key


def check_retry(book: Book, retry: StepRetry) -> StepRecord:
    """The state rules of ``retry_step``; returns the step's record.

    Raises:
        ApplicationError: as ``check_write``; ``step_not_found``; ``invalid_transition`` for a step
            that is not ``unknown`` or ``failed``.
    """
    book.check_write(retry.request_id, retry)
    record = book.step(retry.step_name)
    if record is None:
        raise refusal(ErrorCode.STEP_NOT_FOUND, f"the task has no step {retry.step_name!r}")
    if record.state not in (StepState.UNKNOWN, StepState.FAILED):
        raise refusal(
            ErrorCode.INVALID_TRANSITION,
            f"step {retry.step_name!r} is {record.state.value}: only an unknown or failed "
            "step is retried",
        )
    return record


def retry_step(book: Book, retry: StepRetry, now: datetime) -> WriteOutcome:
    """Mark a step to run again (``check_retry`` first): a ``decision`` by ``retry.agent_id`` citing
    the step, and its ``retry_by``."""
    record = check_retry(book, retry)
    decision = EventInput(
        kind=EventKind.DECISION,
        payload=f"retry step {retry.step_name!r} (asked by {retry.agent_id}): {retry.reason}",
        cites=CitesInput(steps=[retry.step_name]),
    )
    outcome = book.add_events([decision], retry.agent_id, retry.request_id, now)
    book.accept(retry.request_id, args_digest(retry), outcome.first_seq, outcome.last_seq, now)
    book.earlier_steps.pop(step_key(retry.step_name), None)
    book.state.steps[retry.step_name] = record.model_copy(
        update={"retry_by": retry.agent_id, "changed_write": book.state.writes}
    )
    return outcome
