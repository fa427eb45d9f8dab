"""The input inbox of a task's ledger: input requests asked by its agent, and the answers
that come by signal (never refused, so every outcome is recorded) or by update (validated on
arrival). The ledger calls these (``Ledger.open_input`` and the rest) with itself.

The matching rule for an answer that comes before its request: it is kept, at most
``MAX_EARLY_ANSWERS`` and ``MAX_EARLY_ANSWER_BYTES`` together (carried across continue-as-new),
and taken when a request is asked that it names by ``input_id``, or, when it names none, by the
next request asked; each kept answer is taken once, oldest first. An answer that names no
request while requests are open answers the oldest open one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from pydantic import JsonValue
from temporalio.exceptions import ApplicationError

from workflows.book import Book
from workflows.errors import ErrorCode, refusal
from workflows.models import (
    MAX_EARLY_ANSWER_BYTES,
    MAX_EARLY_ANSWERS,
    MAX_INPUT_SCHEMA_BYTES,
    MAX_INPUTS_PER_TASK,
    MAX_PAYLOAD_CHARS,
    MAX_PENDING_INPUTS,
    EventInput,
    EventKind,
    InputAnswer,
    InputRequest,
    WriteOutcome,
    args_digest,
    json_within,
    model_size,
    request_key,
    valid_request_id,
)
from workflows.waits import answer_error, answer_text


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
) -> InputRequest:
    """Open an input request (an ``input_request`` event whose payload is the request as
    JSON), then take the first early answer kept for it, if any (``take_answer``).

    Raises:
        ApplicationError: more than ``MAX_PENDING_INPUTS`` open requests, or a schema over
            ``MAX_INPUT_SCHEMA_BYTES``.
    """
    if len(book.state.inputs) >= MAX_PENDING_INPUTS:
        raise ApplicationError(f"a task has at most {MAX_PENDING_INPUTS} open input requests")
    if len(book.state.answered) + len(book.state.inputs) >= MAX_INPUTS_PER_TASK:
        raise ApplicationError(f"a task asks at most {MAX_INPUTS_PER_TASK} questions")
    text = json.dumps({"input_id": input_id, "prompt": prompt, "schema": dict(schema)})
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
    )
    book.state.inputs.append(request)
    for early in [a for a in book.state.early_answers if a.input_id in (None, input_id)]:
        book.state.early_answers.remove(early)
        _decide(book, early, request, now)
        if input_id in book.state.answered:
            break
    return request


def close_input(book: Book, input_id: str, default_json: str | None, now: datetime) -> None:
    """Close an open request whose deadline passed: an ``error`` event named
    ``input_timeout``; with a default (``default_json``, the default as JSON text) also the
    request's ``input_response`` event holding it, so the request counts as answered (an
    ``ask`` repeated after a checkpoint returns the default without waiting again)."""
    book.state.inputs = [r for r in book.state.inputs if r.input_id != input_id]
    events = [EventInput(kind=EventKind.ERROR, name="input_timeout", payload=input_id)]
    if default_json is not None:
        events.append(
            EventInput(kind=EventKind.INPUT_RESPONSE, name=input_id, payload=default_json)
        )
    outcome = book.append(events, f"timeout/{input_id}/{book.state.writes}", now)
    if default_json is not None:
        book.state.answered[input_id] = outcome.last_seq


def take_answer(book: Book, answer: InputAnswer, now: datetime) -> None:
    """An answer by signal (fire and forget, so never refused): a repeat of its request id
    is ignored; with no open request it is kept (at most ``MAX_EARLY_ANSWERS`` and
    ``MAX_EARLY_ANSWER_BYTES``) for the request it names, or the next one asked; an answer
    that fails the schema or the rules of every answer (``answer_error``), or names a
    request answered already, is recorded as rejected (an ``input_response`` event named
    ``rejected``) and the request stays open; a valid one is the request's
    ``input_response``."""
    digest = args_digest(answer)
    try:
        if book.stored(answer.request_id, digest) is not None:
            return
    except ApplicationError as refused:  # request_id_reused, invalid_request_id
        _reject(book, answer, refused.message, now)
        return
    request = _request_for(book, answer)
    if request is not None:
        _decide(book, answer, request, now)
    elif answer.input_id in book.state.answered:
        _reject(book, answer, f"input {answer.input_id!r} was answered already", now)
    elif (error := answer_error({}, answer.answer)) is not None:
        _reject(book, answer, error, now)
    elif (
        len(book.state.early_answers) >= MAX_EARLY_ANSWERS
        or sum(model_size(a) for a in [*book.state.early_answers, answer]) > MAX_EARLY_ANSWER_BYTES
    ):
        _reject(
            book,
            answer,
            f"no input is requested, and the answers kept for later requests are at most "
            f"{MAX_EARLY_ANSWERS} and {MAX_EARLY_ANSWER_BYTES} bytes",
            now,
        )
    else:
        book.state.early_answers.append(answer)
        book.accept(answer.request_id, digest, 0, 0, now)


def check_respond(book: Book, answer: InputAnswer) -> InputRequest:
    """The state rules of the ``respond`` update; returns the request it answers.

    Raises:
        ApplicationError: as ``check_write``, or a refusal ``input_not_requested`` or
            ``input_invalid`` (with the validation message).
    """
    book.check_write(answer.request_id, args_digest(answer))
    request = _request_for(book, answer)
    if request is None:
        named = f" {answer.input_id!r}" if answer.input_id else ""
        raise refusal(ErrorCode.INPUT_NOT_REQUESTED, f"no input request{named} is open")
    error = answer_error(request.json_schema, answer.answer)
    if error is not None:
        raise refusal(ErrorCode.INPUT_INVALID, error)
    return request


def respond(book: Book, answer: InputAnswer, now: datetime) -> WriteOutcome:
    """An answer by update (validated on arrival): the request's ``input_response``."""
    request = check_respond(book, answer)
    return _answer(book, answer, request, now)


def _decide(book: Book, answer: InputAnswer, request: InputRequest, now: datetime) -> None:
    error = answer_error(request.json_schema, answer.answer)
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


def _reject(book: Book, answer: InputAnswer, error: str, now: datetime) -> None:
    """Record a rejected answer; its request id is remembered (a repeat is ignored) unless
    it is invalid or already names another write."""
    payload = json.dumps(
        {"input_id": answer.input_id, "error": error, "answer": answer.answer}, allow_nan=True
    )
    if len(payload) > MAX_PAYLOAD_CHARS:  # whole JSON or none: the cut text of the answer
        shown = json.dumps(answer.answer, allow_nan=True)
        payload = json_within({"input_id": answer.input_id, "error": error}, "answer_json", shown)
    event = EventInput(kind=EventKind.INPUT_RESPONSE, name="rejected", payload=payload)
    outcome = book.add_events([event], answer.agent_id, answer.request_id, now)
    fresh = valid_request_id(answer.request_id) and (
        request_key(answer.request_id) not in book.state.requests
    )
    if fresh:
        book.accept(answer.request_id, args_digest(answer), outcome.first_seq, 0, now)
    else:
        book.state.writes += 1
        book.state.updated_at = now
