"""The lifecycle of a recorded task, set by the app that runs its agent (``starter.tasks``): its
status, input requests and child tasks from outside, and the rule that requeues it.

A task ``awaiting_input`` with every request answered, or ``awaiting_children`` with no child
running, is ``queued`` again (``waiting_for_nothing``) so the app's worker picks it up. Pure, over
the ``Ledger``: each ``check_*`` is a validator's rule, each apply function checks again.
"""

from __future__ import annotations

import json
from datetime import datetime

from agent_tasks.contract import (
    CLOSED_STATUSES,
    MAX_CHILDREN,
    MAX_DEPTH,
    MAX_INPUT_SCHEMA_BYTES,
    MAX_INPUTS_PER_TASK,
    MAX_PENDING_INPUTS,
    ChildRecord,
    EventInput,
    EventKind,
    TaskStart,
    TaskStatus,
    WriteOutcome,
    args_digest,
    model_size,
)
from agent_tasks.contract.errors import ErrorCode, refusal
from agent_tasks.contract.lifecycle import AskInput, SetStatusInput, SpawnInput
from agent_tasks.contract.waits import check_schema
from agent_tasks.workflows import children, inbox
from agent_tasks.workflows.ledger import Ledger


def _remember(
    ledger: Ledger, request_id: str, digest: str, outcome: WriteOutcome, now: datetime
) -> None:
    """Keep the write's own request id and digest, so a repeat is a duplicate."""
    ledger.accept(request_id, digest, outcome.first_seq, outcome.last_seq, now)


def check_status(ledger: Ledger, input: SetStatusInput) -> None:
    """The state rules of ``update_status`` (the model checks the status is settable).

    Raises:
        ApplicationError: as ``Ledger.check_write``.
    """
    ledger.check_write(input.request_id, input)


def set_status(ledger: Ledger, input: SetStatusInput, now: datetime) -> WriteOutcome:
    """Record a ``note`` named ``status`` and move the task to ``input.status``; returns its seq."""
    check_status(ledger, input)
    status = EventInput(kind=EventKind.NOTE, name="status", payload=input.status.value)
    outcome = ledger.add_events([status], input.agent_id, input.request_id, now)
    _remember(ledger, input.request_id, args_digest(input), outcome, now)
    ledger.state.status = input.status
    return outcome


def check_ask(ledger: Ledger, input: AskInput) -> None:
    """The rules of ``ask``: a new request id, an open task, an unused input id, a valid schema, and
    room for one more request.

    Raises:
        ApplicationError: as ``Ledger.check_write``, or ``input_exists``, ``schema_invalid`` or
            ``input_limit_reached``.
    """
    ledger.check_write(input.request_id, input)
    state = ledger.state
    if input.input_id in state.answered or any(r.input_id == input.input_id for r in state.inputs):
        raise refusal(ErrorCode.INPUT_EXISTS, f"input {input.input_id!r} was asked already")
    try:
        check_schema(input.json_schema)
    except ValueError as err:
        raise refusal(ErrorCode.SCHEMA_INVALID, str(err)) from None
    text = json.dumps(
        {"input_id": input.input_id, "prompt": input.prompt, "schema": input.json_schema}
    )
    held = sum(model_size(r) for r in state.inputs) + len(text.encode("utf-8"))  # as open_input
    if len(state.inputs) >= MAX_PENDING_INPUTS:
        limit = f"a task has at most {MAX_PENDING_INPUTS} open input requests"
    elif len(state.answered) + len(state.inputs) >= MAX_INPUTS_PER_TASK:
        limit = f"a task asks at most {MAX_INPUTS_PER_TASK} questions"
    elif held > MAX_INPUT_SCHEMA_BYTES:
        limit = f"a task's open input requests are at most {MAX_INPUT_SCHEMA_BYTES} bytes together"
    else:
        return
    raise refusal(ErrorCode.INPUT_LIMIT_REACHED, limit)


def ask(ledger: Ledger, input: AskInput, now: datetime) -> WriteOutcome:
    """Open the input request (``inbox.open_input``); returns its event's seq. The caller sets
    ``awaiting_input`` unless it was answered already."""
    check_ask(ledger, input)
    request = inbox.open_input(ledger, input.input_id, input.prompt, input.json_schema, None, now)
    outcome = WriteOutcome(first_seq=request.asked_seq, last_seq=request.asked_seq, time=now)
    _remember(ledger, input.request_id, args_digest(input), outcome, now)
    return outcome


def check_spawn(ledger: Ledger, input: SpawnInput) -> None:
    """The rules of ``spawn``: a new request id, an open task, an unused spawn key and child name,
    within ``MAX_CHILDREN`` and ``MAX_DEPTH``.

    Raises:
        ApplicationError: as ``Ledger.check_write``, or ``task_exists`` or ``child_limit_reached``.
    """
    ledger.check_write(input.request_id, input)
    state = ledger.state
    if input.spawn_key in state.children:
        raise refusal(ErrorCode.TASK_EXISTS, f"spawn key {input.spawn_key!r} was used already")
    if any(child.name == input.name for child in state.children.values()):
        raise refusal(ErrorCode.TASK_EXISTS, f"task {input.name!r} is a child already")
    if len(state.children) >= MAX_CHILDREN:
        raise refusal(
            ErrorCode.CHILD_LIMIT_REACHED, f"a task spawns at most {MAX_CHILDREN} child tasks"
        )
    if state.start.depth + 1 > MAX_DEPTH:
        raise refusal(
            ErrorCode.CHILD_LIMIT_REACHED, f"child tasks go at most {MAX_DEPTH} levels deep"
        )


def spawn(ledger: Ledger, input: SpawnInput, now: datetime) -> tuple[WriteOutcome, TaskStart]:
    """Record the child (``children.add_child``); returns the outcome and the child's start (a
    recorded task one level down whose end is signalled back)."""
    check_spawn(ledger, input)
    start = ledger.state.start
    child = TaskStart(
        project_id=start.project_id,
        name=input.name,
        goal=input.goal,
        agent_id=input.agent_id,
        session_id=start.session_id if input.session_id is None else input.session_id,
        parent=start.name,
        request_id=input.request_id,
        depth=start.depth + 1,
    )
    children.add_child(
        ledger, input.spawn_key, ChildRecord(name=input.name, status=TaskStatus.OPEN), now
    )
    seq = ledger.state.last_seq
    outcome = WriteOutcome(first_seq=seq, last_seq=seq, time=now)
    _remember(ledger, input.request_id, args_digest(input), outcome, now)
    return outcome, child


def waiting_for_nothing(ledger: Ledger) -> bool:
    """True when a recorded task waits for nothing any more (``awaiting_input`` with no open
    request, ``awaiting_children`` with no child running)."""
    state = ledger.state
    if state.start.agent is not None:
        return False
    if state.status is TaskStatus.AWAITING_INPUT:
        return not state.inputs
    if state.status is TaskStatus.AWAITING_CHILDREN:
        return all(child.status in CLOSED_STATUSES for child in state.children.values())
    return False
