"""Step rules: the transition table, attempts, result validity and idempotency keys.

Pure and deterministic: the ledger applies them inside the workflow, and tests call them
without a server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from workflows.errors import ErrorCode, refusal
from workflows.models import (
    MAX_STEPS_PER_TASK,
    ResultValidity,
    StepKind,
    StepRecord,
    StepState,
    StepWrite,
)

STEP_TRANSITIONS: dict[StepState, frozenset[StepState]] = {
    StepState.NOT_STARTED: frozenset(
        {StepState.IN_PROGRESS, StepState.COMPLETED, StepState.FAILED, StepState.UNKNOWN}
    ),
    StepState.IN_PROGRESS: frozenset({StepState.COMPLETED, StepState.FAILED, StepState.UNKNOWN}),
    StepState.UNKNOWN: frozenset({StepState.IN_PROGRESS, StepState.COMPLETED, StepState.FAILED}),
    StepState.FAILED: frozenset({StepState.IN_PROGRESS}),
    StepState.COMPLETED: frozenset(),
}
"""Allowed step transitions, from the current state to the next. A new step may start in any
state. ``completed`` is final; ``failed`` and ``unknown`` may be retried (back to
``in_progress``), and a person may settle an ``unknown`` step as ``completed`` or ``failed``.
Setting a step to the state it is in is refused (``invalid_transition``): a retried write is
made idempotent by its request id, not by repeating the state. Each move into ``in_progress``
starts a new attempt (``StepView.attempt``)."""


def result_validity(state: StepState, result_event_seq: int | None) -> ResultValidity:
    """Map a step's state and result seq to its ``ResultValidity`` (the table in its docstring)."""
    if state is StepState.COMPLETED:
        return ResultValidity.VALID if result_event_seq is not None else ResultValidity.NO_RESULT
    if state is StepState.FAILED:
        return ResultValidity.FAILED
    if state is StepState.UNKNOWN:
        return ResultValidity.UNCERTAIN
    return ResultValidity.PENDING


def idempotency_key(workflow_id: str, step_name: str, attempt: int) -> str:
    """``{workflow_id}/{step_name}/{attempt}``: the key a step's tool gets to deduplicate an
    external effect. Step names have no ``/``, so the key reads back one way."""
    return f"{workflow_id}/{step_name}/{attempt}"


def next_steps(
    steps: Mapping[str, StepRecord],
    writes: Sequence[StepWrite],
    *,
    last_seq: int,
    write_number: int,
    now: datetime,
) -> dict[str, StepRecord]:
    """The step records ``writes`` lead to, applied in order, all or nothing.

    Args:
        steps: the task's steps now (name -> record).
        writes: the changes, in order (a step may appear more than once).
        last_seq: the task's newest seq (``result_event_seq`` must be at most this).
        write_number: the write counter this change will have (``StepRecord.changed_write``).
        now: workflow time of the change.

    Returns:
        The changed records only (name -> new record). A new step's kind defaults to ``tool``;
        a move into ``in_progress`` starts a new attempt and clears the last attempt's result
        unless the write gives one.

    Raises:
        ApplicationError: a refusal, ``event_not_found``, ``step_kind_changed``,
            ``invalid_transition`` or ``step_limit_reached`` (``MAX_STEPS_PER_TASK``).
    """
    changed: dict[str, StepRecord] = {}
    for write in writes:
        current = changed.get(write.step_name) or steps.get(write.step_name)
        if write.result_event_seq is not None and write.result_event_seq > last_seq:
            raise refusal(
                ErrorCode.EVENT_NOT_FOUND,
                f"step {write.step_name!r}: no event {write.result_event_seq} in this task",
            )
        if current is None:
            kind = write.kind or StepKind.TOOL
            previous_attempts = 0
            result_seq = write.result_event_seq
        else:
            if write.kind is not None and write.kind is not current.kind:
                raise refusal(
                    ErrorCode.STEP_KIND_CHANGED,
                    f"step {write.step_name!r} is {current.kind.value}, not {write.kind.value}",
                )
            if write.state not in STEP_TRANSITIONS[current.state]:
                raise refusal(
                    ErrorCode.INVALID_TRANSITION,
                    f"step {write.step_name!r} cannot go from {current.state.value} "
                    f"to {write.state.value}",
                )
            kind = current.kind
            previous_attempts = current.attempt
            # A new attempt starts without the last attempt's result.
            result_seq = write.result_event_seq
            if result_seq is None and write.state is not StepState.IN_PROGRESS:
                result_seq = current.result_event_seq
        changed[write.step_name] = StepRecord(
            state=write.state,
            kind=kind,
            result_event_seq=result_seq,
            attempt=previous_attempts + (write.state is StepState.IN_PROGRESS),
            updated_at=now,
            changed_write=write_number,
        )
    if len(steps.keys() | changed.keys()) > MAX_STEPS_PER_TASK:
        raise refusal(
            ErrorCode.STEP_LIMIT_REACHED, f"a task holds at most {MAX_STEPS_PER_TASK} steps"
        )
    return changed
