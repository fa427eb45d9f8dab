"""Step rules: the transition table, attempts, result validity and idempotency keys. Pure: the
ledger applies them, tests call them without a server.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from agent_tasks.contract import (
    MAX_OPEN_STEPS,
    MAX_STEP_ATTEMPTS,
    MAX_STEPS_PER_TASK,
    ResultValidity,
    StepKind,
    StepRecord,
    StepState,
    StepWrite,
)
from agent_tasks.contract.errors import ErrorCode, refusal

STEP_TRANSITIONS: dict[StepState, frozenset[StepState]] = {
    StepState.NOT_STARTED: frozenset(
        {StepState.IN_PROGRESS, StepState.COMPLETED, StepState.FAILED, StepState.UNKNOWN}
    ),
    StepState.IN_PROGRESS: frozenset({StepState.COMPLETED, StepState.FAILED, StepState.UNKNOWN}),
    StepState.UNKNOWN: frozenset({StepState.IN_PROGRESS, StepState.COMPLETED, StepState.FAILED}),
    StepState.FAILED: frozenset({StepState.IN_PROGRESS}),
    StepState.COMPLETED: frozenset(),
}
"""Allowed step transitions from the current state (a new step may start in any). ``completed`` is
final; ``failed`` and ``unknown`` may retry, and a person may settle ``unknown``. A move to the same
state is refused (``invalid_transition``): request ids make writes idempotent. Each move into
``in_progress`` starts an attempt."""


OPEN_STATES = frozenset({StepState.NOT_STARTED, StepState.IN_PROGRESS, StepState.UNKNOWN})
"""States of open steps: carried across continue-as-new in full (at most ``MAX_OPEN_STEPS``)."""

_KIND_CODES: tuple[StepKind, ...] = (
    StepKind.READ,
    StepKind.WRITE,
    StepKind.TOOL,
    StepKind.MODEL,
    StepKind.HUMAN,
    StepKind.CHILD,
)
"""Kind -> code in the closed-step table (append only: codes are carried in histories)."""
_ENTRY = struct.Struct(">8sBB")
"""A closed-step table entry: 8 bytes of SHA-256(name), kind code * 2 + (1 if failed), attempt."""


class ClosedStep(NamedTuple):
    """What a task keeps of a step closed in an earlier run: enough to refuse or start its next
    attempt; its name and result are in the history and the graph store."""

    state: StepState
    """``completed`` or ``failed``."""
    kind: StepKind
    """The step's kind."""
    attempt: int
    """Its attempts so far (at most ``MAX_STEP_ATTEMPTS``)."""


def step_key(name: str) -> bytes:
    """The closed-step table's key of a step name: the first 8 bytes (64 bits) of its SHA-256."""
    return hashlib.sha256(name.encode("utf-8")).digest()[:8]


def pack_closed(steps: Mapping[bytes, ClosedStep]) -> str:
    """The closed-step table as base64 (10 bytes an entry, in key order: the same steps give the
    same text)."""
    packed = b"".join(
        _ENTRY.pack(
            key, _KIND_CODES.index(step.kind) * 2 + (step.state is StepState.FAILED), step.attempt
        )
        for key, step in sorted(steps.items())
    )
    return base64.b64encode(packed).decode("ascii")


def unpack_closed(text: str) -> dict[bytes, ClosedStep]:
    """The closed-step table from ``pack_closed``'s text."""
    table: dict[bytes, ClosedStep] = {}
    for key, code, attempt in _ENTRY.iter_unpack(base64.b64decode(text)):
        state = StepState.FAILED if code % 2 else StepState.COMPLETED
        table[key] = ClosedStep(state, _KIND_CODES[code // 2], attempt)
    return table


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


def _retries_unknown(current: StepRecord | None) -> bool:
    """True when a move into ``in_progress`` retries an ``unknown`` attempt: it keeps its attempt
    number, so the tool sees the same idempotency key for an effect that may have happened."""
    return current is not None and current.state is StepState.UNKNOWN and current.attempt > 0


def next_attempt(current: StepRecord | None) -> int:
    """The attempt a move into ``in_progress`` gives a step whose record is ``current`` (None: new):
    the next, or the same for an ``unknown`` retry (``_retries_unknown``)."""
    return (0 if current is None else current.attempt) + (not _retries_unknown(current))


# Long: one all-or-nothing check of step writes: the per-write transition rules, then the task's
# step limits
def next_steps(
    lookup: Callable[[str], StepRecord | None],
    writes: Sequence[StepWrite],
    *,
    last_seq: int,
    write_number: int,
    now: datetime,
    step_count: int,
    open_steps: int,
) -> dict[str, StepRecord]:
    """The step records ``writes`` lead to, applied in order, all or nothing.

    Args:
        lookup: the task's record of a step by name, None for a new step.
        writes: the changes, in order (a step may appear more than once).
        last_seq: the task's newest seq (``result_event_seq`` must be at most this).
        write_number: the write counter this change will have (``StepRecord.changed_write``).
        now: workflow time of the change.
        step_count: the steps the task holds now.
        open_steps: how many of them are open (``OPEN_STATES``).

    Returns:
        The changed records only, by name. A new step's kind defaults to ``tool``; a move into
        ``in_progress`` starts an attempt (``next_attempt``) and clears the last result unless the
        write gives one.

    Raises:
        ApplicationError: ``event_not_found``, ``step_kind_changed``, ``invalid_transition`` or
            ``step_limit_reached`` (``MAX_STEPS_PER_TASK``, ``MAX_OPEN_STEPS``,
            ``MAX_STEP_ATTEMPTS``).
    """
    before: dict[str, StepRecord | None] = {}
    changed: dict[str, StepRecord] = {}
    for write in writes:
        if write.step_name not in before:
            before[write.step_name] = lookup(write.step_name)
        current = changed.get(write.step_name) or before[write.step_name]
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
        moving = write.state is StepState.IN_PROGRESS
        attempt = next_attempt(current) if moving else previous_attempts
        if attempt > MAX_STEP_ATTEMPTS:
            raise refusal(
                ErrorCode.STEP_LIMIT_REACHED,
                f"step {write.step_name!r}: a step has at most {MAX_STEP_ATTEMPTS} attempts",
            )
        changed[write.step_name] = StepRecord(
            state=write.state,
            kind=kind,
            result_event_seq=result_seq,
            attempt=attempt,
            updated_at=now,
            changed_write=write_number,
        )
    if step_count + sum(record is None for record in before.values()) > MAX_STEPS_PER_TASK:
        raise refusal(
            ErrorCode.STEP_LIMIT_REACHED, f"a task holds at most {MAX_STEPS_PER_TASK} steps"
        )
    opened = sum(
        (record.state in OPEN_STATES) - (was is not None and was.state in OPEN_STATES)
        for name, record in changed.items()
        for was in (before[name],)
    )
    if open_steps + opened > MAX_OPEN_STEPS:
        raise refusal(
            ErrorCode.STEP_LIMIT_REACHED,
            f"a task holds at most {MAX_OPEN_STEPS} open steps (not started, in progress or "
            "unknown)",
        )
    return changed
