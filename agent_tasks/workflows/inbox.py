"""The input inbox of a task's ledger: input requests asked by its agent, and the answers that come
by signal (never refused, so every outcome is recorded) or by update (validated on arrival).

An answer is bound to one request (``take_answer``): the one it names, or the oldest open one. An
answer to a request not asked yet is kept for it (``MAX_EARLY_ANSWERS``,
``MAX_EARLY_ANSWER_BYTES``); one naming none while none is open is rejected; one to a closed request
is recorded late. A deadline is judged by workflow time, since Temporal hands a workflow its signals
before the timers that fired in the same workflow task. Approvers are compared by ``person_key``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime

from pydantic import JsonValue
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agent_tasks.contract import (
    LEGACY_EARLY_ANSWERS,
    MAX_EARLY_ANSWER_BYTES,
    MAX_EARLY_ANSWERS,
    MAX_INPUT_SCHEMA_BYTES,
    MAX_INPUTS_PER_TASK,
    MAX_PAYLOAD_CHARS,
    MAX_PENDING_INPUTS,
    ApprovalAsk,
    EventInput,
    EventKind,
    InputAnswer,
    InputRequest,
    WriteOutcome,
    args_digest,
    json_within,
    model_size,
    person_key,
    request_key,
    valid_request_id,
)
from agent_tasks.contract.errors import ErrorCode, refusal
from agent_tasks.contract.waits import answer_error, answer_text
from agent_tasks.workflows.book import Book
from agent_tasks.workflows.patches import ANSWERS_BY_DEADLINE, ONE_PERSON_ONE_APPROVER

TIMED_OUT = "timed out"
"""Why a request closed when its deadline passed unanswered (its entry in ``closed_inputs``)."""
EXPIRED = "expired"
"""Why an approval request closed when its expiry passed without the decisions it needed."""


def past_deadline(request: InputRequest, now: datetime) -> str | None:
    """Why ``request`` takes no answer at ``now`` although open: its deadline passed (``EXPIRED``
    for an approval, ``TIMED_OUT`` for a question); None before it or without one."""
    if request.deadline is None or now < request.deadline:
        return None
    return EXPIRED if request.approval is not None else TIMED_OUT


def _request_for(book: Book, answer: InputAnswer) -> InputRequest | None:
    """The open request ``answer`` answers: the one it names, or the oldest."""
    return next((r for r in book.state.inputs if answer.input_id in (None, r.input_id)), None)


def open_input(
    book: Book,
    input_id: str,
    prompt: str,
    schema: Mapping[str, JsonValue],
    deadline: datetime | None,
    now: datetime,
    *,
    approval: ApprovalAsk | None = None,
) -> InputRequest:
    """Open an input request (an ``input_request`` event: ``input_id``, ``prompt``, ``schema``, and
    ``approval`` for a tool call), then take an early answer kept for it (``take_answer``).

    Raises:
        ApplicationError: more than ``MAX_PENDING_INPUTS`` open requests, or a schema over
            ``MAX_INPUT_SCHEMA_BYTES``.
    """
    if len(book.state.inputs) >= MAX_PENDING_INPUTS:
        raise ApplicationError(f"a task has at most {MAX_PENDING_INPUTS} open input requests")
    asked = set(book.state.answered) | set(book.state.closed_inputs)
    if len(asked) + len(book.state.inputs) >= MAX_INPUTS_PER_TASK:
        raise ApplicationError(f"a task asks at most {MAX_INPUTS_PER_TASK} questions")
    shown: dict[str, JsonValue] = {"input_id": input_id, "prompt": prompt, "schema": dict(schema)}
    if approval is not None:
        shown["approval"] = approval.model_dump(mode="json")
    text = json.dumps(shown)
    held = sum(model_size(r) for r in book.state.inputs)
    if held + len(text.encode("utf-8")) > MAX_INPUT_SCHEMA_BYTES:
        raise ApplicationError(
            f"a task's open input requests are at most {MAX_INPUT_SCHEMA_BYTES} bytes together"
        )
    event = EventInput(kind=EventKind.INPUT_REQUEST, name=input_id, payload=text)
    seq = book.append([event], f"ask/{input_id}/{book.state.writes}", now).first_seq
    request = InputRequest(
        input_id=input_id,
        prompt=prompt,
        json_schema=dict(schema),
        deadline=deadline,
        asked_seq=seq,
        approval=approval,
    )
    book.state.inputs.append(request)
    for early in [a for a in book.state.early_answers if a.input_id in (None, input_id)]:
        book.state.early_answers.remove(early)
        _decide(book, early, request, now)
        if input_id in book.state.answered:
            break
    return request


def close_input(
    book: Book, input_id: str, default_json: str | None, now: datetime, reason: str = TIMED_OUT
) -> None:
    """Close an open request whose deadline passed: an ``error`` event named ``input_timeout`` and,
    with ``default_json``, its ``input_response`` holding the default (so a repeated ``ask`` returns
    it). A later answer is late, refused with ``reason``."""
    book.state.inputs = [r for r in book.state.inputs if r.input_id != input_id]
    book.state.closed_inputs[input_id] = reason
    events = [EventInput(kind=EventKind.ERROR, name="input_timeout", payload=input_id)]
    if default_json is not None:
        events.append(
            EventInput(kind=EventKind.INPUT_RESPONSE, name=input_id, payload=default_json)
        )
    outcome = book.append(events, f"timeout/{input_id}/{book.state.writes}", now)
    if default_json is not None:
        book.state.answered[input_id] = outcome.last_seq


def take_answer(book: Book, answer: InputAnswer, now: datetime, *, bound: bool = True) -> None:
    """Take an answer by signal (never refused): a repeated request id is ignored; a valid answer to
    its request (named, or the oldest open) is its ``input_response``; one to a closed request or
    past its deadline is recorded ``late``; one to a request not asked yet is kept for it; anything
    else (no request open, an invalid answer, an answered request) is recorded ``rejected``.

    ``bound`` False keeps the rules before the ``answers-bound-to-requests`` patch (an unbound
    answer kept for the next request, at most ``LEGACY_EARLY_ANSWERS``)."""
    try:
        if book.stored(answer.request_id, answer) is not None:
            return
    except ApplicationError as refused:  # request_id_reused, invalid_request_id
        _reject(book, answer, refused.message, now)
        return
    closed = book.state.closed_inputs.get(answer.input_id or "")
    if bound and closed is not None:
        _reject(book, answer, f"input {answer.input_id!r} {closed}", now, name="late")
        return
    request = _request_for(book, answer)
    room = MAX_EARLY_ANSWERS if bound else LEGACY_EARLY_ANSWERS
    if request is not None and (late := _late(request, now)) is not None:
        _reject(book, answer, late, now, name="late")
    elif request is not None:
        _decide(book, answer, request, now)
    elif answer.input_id in book.state.answered:
        _reject(book, answer, f"input {answer.input_id!r} was answered already", now)
    elif (error := answer_error({}, answer.answer)) is not None:
        _reject(book, answer, error, now)
    elif bound and answer.input_id is None:
        _reject(
            book,
            answer,
            "no input request is open: an answer without an input id is taken only by a "
            "request open when it arrives",
            now,
        )
    elif bound and any(a.input_id == answer.input_id for a in book.state.early_answers):
        _reject(book, answer, f"an answer to {answer.input_id!r} is kept already", now)
    elif (
        len(book.state.early_answers) >= room
        or sum(model_size(a) for a in [*book.state.early_answers, answer]) > MAX_EARLY_ANSWER_BYTES
    ):
        _reject(
            book,
            answer,
            f"no input is requested, and the answers kept for later requests are at most "
            f"{room} and {MAX_EARLY_ANSWER_BYTES} bytes",
            now,
        )
    else:
        book.state.early_answers.append(answer)
        book.accept(answer.request_id, args_digest(answer), 0, 0, now)


def _late(request: InputRequest, now: datetime) -> str | None:
    """Why an answer by signal to the open ``request`` is late at ``now`` (``past_deadline``), under
    the ``answers-by-deadline`` patch."""
    reason = past_deadline(request, now)
    if reason is None or not workflow.patched(ANSWERS_BY_DEADLINE):
        return None
    return f"input {request.input_id!r} {reason}"


def close_inputs(book: Book, reason: str, now: datetime) -> None:
    """Close every open input request because the task ends (``reason``: ``task cancelled``...): an
    ``input_closed`` note each (``{"input_id", "reason"}``); later answers are late or refused."""
    if not book.state.inputs:
        return
    events = [
        EventInput(
            kind=EventKind.NOTE,
            name="input_closed",
            payload=json.dumps({"input_id": r.input_id, "reason": reason}),
        )
        for r in book.state.inputs
    ]
    book.append(events, f"close-inputs/{book.state.writes}", now)
    for request in book.state.inputs:
        book.state.closed_inputs[request.input_id] = reason
    book.state.inputs = []


def check_respond(
    book: Book, answer: InputAnswer, admitted_at: datetime | None = None
) -> InputRequest:
    """The state rules of the ``respond`` update; returns the request it answers.

    Args:
        admitted_at: the validator's workflow time, to check the rules added since updates were
            first accepted (deadline, approver spellings); None in the handler, which replays
            updates accepted before them.

    Raises:
        ApplicationError: as ``check_write``, or ``input_not_requested``, ``input_invalid``,
            ``input_closed``, ``approval_stale`` or ``approver_repeated``.
    """
    book.check_write(answer.request_id, answer)
    closed = book.state.closed_inputs.get(answer.input_id or "")
    if closed is not None:
        raise refusal(ErrorCode.INPUT_CLOSED, f"input {answer.input_id!r} {closed}")
    request = _request_for(book, answer)
    if request is None:
        named = f" {answer.input_id!r}" if answer.input_id else ""
        raise refusal(ErrorCode.INPUT_NOT_REQUESTED, f"no input request{named} is open")
    late = None if admitted_at is None else past_deadline(request, admitted_at)
    if late is not None:
        raise refusal(ErrorCode.INPUT_CLOSED, f"input {request.input_id!r} {late}")
    error = answer_error(request.json_schema, answer.answer)
    if error is not None:
        raise refusal(ErrorCode.INPUT_INVALID, error)
    bound = approval_error(request, answer, one_person=lambda: admitted_at is not None)
    if bound is not None:
        raise refusal(*bound)
    return request


def admit_respond(book: Book, answer: InputAnswer, now: datetime) -> InputRequest:
    """The ``respond`` update's validator: ``check_respond`` with the validator-only rules, and
    first an answer naming no request while several are open is refused ``input_not_requested``
    (which one a person meant is not for the task to guess; by signal it goes to the oldest).

    Raises:
        ApplicationError: as ``check_respond``.
    """
    if answer.input_id is None and len(book.state.inputs) > 1:
        named = ", ".join(repr(r.input_id) for r in book.state.inputs)
        raise refusal(
            ErrorCode.INPUT_NOT_REQUESTED,
            f"{len(book.state.inputs)} input requests are open ({named}): name the one this "
            "answers (input_id)",
        )
    return check_respond(book, answer, admitted_at=now)


def respond(book: Book, answer: InputAnswer, now: datetime) -> WriteOutcome:
    """An answer by update (validated on arrival): the request's ``input_response``."""
    request = check_respond(book, answer)
    return _answer(book, answer, request, now)


def approval_error(
    request: InputRequest, answer: InputAnswer, *, one_person: Callable[[], bool]
) -> tuple[ErrorCode, str] | None:
    """Why an answer that satisfies its schema cannot decide an approval request, or None: another
    call's digest (``approval_stale``), or an author who accepted already, by name or, when
    ``one_person()``, by ``person_key`` (``approver_repeated``). Requests without a digest take
    any."""
    ask = request.approval
    if ask is None or ask.digest is None or not isinstance(answer.answer, dict):
        return None
    digest = answer.answer.get("digest")
    if digest != ask.digest:
        return (
            ErrorCode.APPROVAL_STALE,
            f"the answer approves the call {str(digest)[:12]}, but {request.input_id!r} asks "
            f"about the call {ask.digest[:12]} ({ask.tool}): the call changed since it was "
            "shown; read the request again",
        )
    if answer.answer.get("type") != "accept":
        return None
    so_far = f"it needs {ask.approvers} distinct approvers (so far: {', '.join(ask.approved_by)})"
    if answer.agent_id in ask.approved_by:  # the text runs recorded before keep on replay
        return (
            ErrorCode.APPROVER_REPEATED,
            f"{answer.agent_id!r} accepted this call already; {so_far}",
        )
    who = person_key(answer.agent_id)
    same = next((a for a in ask.approved_by if person_key(a) == who), None)
    if same is None or not one_person():
        return None
    return (
        ErrorCode.APPROVER_REPEATED,
        f"{answer.agent_id!r} accepted this call already (as {same!r}: names are compared "
        f"without case, surrounding white space or Unicode forms); {so_far}",
    )


def _decide(book: Book, answer: InputAnswer, request: InputRequest, now: datetime) -> None:
    """Take ``answer`` for ``request`` (a signal's, or one kept for it), or record it rejected."""
    error = answer_error(request.json_schema, answer.answer)

    def one_person() -> bool:  # asked only where the rule changes the outcome: a marker there
        return workflow.patched(ONE_PERSON_ONE_APPROVER)

    if error is None and (bound := approval_error(request, answer, one_person=one_person)):
        error = f"{bound[0].value}: {bound[1]}"
    if error is None:
        _answer(book, answer, request, now)
    else:
        _reject(book, answer, error, now)


def _answer(book: Book, answer: InputAnswer, request: InputRequest, now: datetime) -> WriteOutcome:
    event = EventInput(
        kind=EventKind.INPUT_RESPONSE, name=request.input_id, payload=answer_text(answer.answer)
    )
    outcome = book.add_events([event], answer.agent_id, answer.request_id, now)
    book.accept(answer.request_id, args_digest(answer), outcome.first_seq, outcome.last_seq, now)
    book.state.inputs.remove(request)
    book.state.answered[request.input_id] = outcome.first_seq
    return outcome


def _reject(
    book: Book, answer: InputAnswer, error: str, now: datetime, *, name: str = "rejected"
) -> None:
    """Record an answer not taken (an ``input_response`` named ``rejected`` or ``late``, with the
    error and the answer); its request id is remembered unless invalid or taken by another write."""
    payload = json.dumps(
        {"input_id": answer.input_id, "error": error, "answer": answer.answer}, allow_nan=True
    )
    if len(payload) > MAX_PAYLOAD_CHARS:  # whole JSON or none: the cut text of the answer
        shown = json.dumps(answer.answer, allow_nan=True)
        payload = json_within({"input_id": answer.input_id, "error": error}, "answer_json", shown)
    event = EventInput(kind=EventKind.INPUT_RESPONSE, name=name, payload=payload)
    outcome = book.add_events([event], answer.agent_id, answer.request_id, now)
    fresh = valid_request_id(answer.request_id) and (
        request_key(answer.request_id) not in book.state.requests
    )
    if fresh:
        book.accept(answer.request_id, args_digest(answer), outcome.first_seq, 0, now)
    else:
        book.state.writes += 1
        book.state.updated_at = now
