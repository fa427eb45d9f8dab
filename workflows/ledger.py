"""The ledger: one task's events, steps and request ids over its carried ``TaskState``.

The one write path of a task. The workflow's update handlers call it today, and code running
inside the workflow (steps, input, children) calls it the same way. Pure and deterministic: the
caller passes the workflow time (``now``), so the ledger runs in tests without a server.

Each write has a ``check_*`` method (the state rules: request id, closed task, transitions),
which update validators call and raise from, and an apply method, which handlers call. Apply
methods check again before they change anything, since validators do not run on replay while
handlers do. Admission rules that depend on the moment (the drain before continue-as-new, the
history length) are not here: they live in the workflow's validators only.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, JsonValue
from temporalio.exceptions import ApplicationError

from workflows.decisions import cite
from workflows.errors import ErrorCode, duplicate, refusal
from workflows.models import (
    CHILD_RESULT_PREVIEW_CHARS,
    CLOSED_STATUSES,
    LEGACY_EARLY_ANSWERS,
    MAX_EARLY_ANSWER_BYTES,
    MAX_EARLY_ANSWERS,
    MAX_INPUT_SCHEMA_BYTES,
    MAX_INPUTS_PER_TASK,
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_CHARS,
    MAX_PENDING_INPUTS,
    MIRROR_ERROR_CHARS,
    REQUEST_WINDOW,
    STEPS_PAGE_MAX,
    AgentRun,
    BoundedText,
    ChildEnd,
    ChildRecord,
    CitesInput,
    Event,
    EventInput,
    EventKind,
    EventsPage,
    EventsQuery,
    FinishTaskInput,
    InputAnswer,
    InputRequest,
    MirrorInput,
    MirrorPage,
    MirrorQuery,
    RecordEventsInput,
    RequestLookup,
    RunRange,
    SetStepsInput,
    StepKind,
    StepRecord,
    StepRetry,
    StepsPage,
    StepsQuery,
    StepState,
    StepView,
    StepWrite,
    StoredRequest,
    TaskStart,
    TaskState,
    TaskStatus,
    TaskView,
    WriteOutcome,
    args_digest,
    model_size,
    request_key,
    valid_request_id,
)
from workflows.steps import (
    OPEN_STATES,
    ClosedStep,
    idempotency_key,
    next_steps,
    pack_closed,
    result_validity,
    step_key,
    unpack_closed,
)
from workflows.waits import answer_error, answer_text

_Item = TypeVar("_Item", bound=BaseModel)


def _fill(
    items: Iterable[_Item], max_bytes: int, used: int = 0, required: bool = True
) -> list[_Item]:
    """``items`` in order while the page's JSON (``used`` bytes so far) stays within
    ``max_bytes``; the first one whatever its size when ``required`` (a page never comes back
    empty while items are left, so paging always advances)."""
    page: list[_Item] = []
    for item in items:
        used += model_size(item)
        if used > max_bytes and (page or not required):
            break
        page.append(item)
    return page


def json_within(head: Mapping[str, JsonValue], field: str, text: str) -> str:
    """``head`` with ``field: text`` as JSON of at most ``MAX_PAYLOAD_CHARS`` characters (an
    event payload's cut), ``text`` cut to its longest start that fits (a binary search: an
    escaped character takes up to 6), so the payload is always whole JSON that reads back (a
    JSON text cut by the payload rule would not parse)."""

    def payload(n: int) -> str:
        return json.dumps({**head, field: text[:n]}, ensure_ascii=False)

    if len(whole := payload(len(text))) <= MAX_PAYLOAD_CHARS:
        return whole
    low, high = 0, min(len(text), MAX_PAYLOAD_CHARS)  # payload(low) fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if len(payload(middle)) <= MAX_PAYLOAD_CHARS else (low, middle)
    return payload(low)


def internal_request_id(key: str) -> str:
    """The request id of a write the task's workflow code makes itself: ``wf-`` and 40 hex of
    SHA-256(``key``) (44 characters, within the 64 of a request id)."""
    return "wf-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


def child_end(
    name: str,
    workflow_id: str,
    status: TaskStatus,
    result: BoundedText | None = None,
    error: BoundedText | None = None,
) -> ChildEnd:
    """The end of the child task ``name`` (workflow id ``workflow_id``) as its parent records
    it, under the request id the child's own ``child_ended`` signal carries
    (``child-end/{workflow id}``), so the same end from several paths (the child's signal, a
    resumed parent's look, a deletion) counts once."""
    return ChildEnd(
        child=name,
        status=status,
        result=result,
        error=error,
        request_id=internal_request_id(f"child-end/{workflow_id}"),
    )


class MirrorTarget(NamedTuple):
    """One mirror call: its activity input and what a success records."""

    input: MirrorInput
    """The activity's input (references only)."""
    up_to_write: int | None
    """The write counter reached when the call covers its run's last event, else None."""
    from_backlog: bool
    """True when it copies an earlier run (``TaskState.mirror_backlog``)."""


class Ledger:
    """One task's ledger: the carried ``state`` and this run's events (``run_events``).

    Args:
        state: the task's state, new or carried across continue-as-new.
    """

    def __init__(self, state: TaskState) -> None:
        self.state = state
        self.run_events: list[Event] = []
        """This run's events: seqs ``run_first_seq`` to ``state.last_seq``."""
        self.run_first_seq = state.last_seq + 1
        """The first seq this run holds (older ones are in Neo4j or in ``mirror_backlog``)."""
        self.run_first_write = state.writes
        """The write counter when this run started."""
        self.earlier_steps: dict[bytes, ClosedStep] = unpack_closed(state.closed_steps)
        """Steps closed in earlier runs, by ``step_key``; never also in ``state.steps`` (a
        step written again moves to ``state.steps``)."""

    @classmethod
    def new(cls, start: TaskStart, workflow_id: str, now: datetime) -> Ledger:
        """The ledger of a new task, not yet created (``create`` records the creation): ``open``
        for a recorded task, ``queued`` for an agent task."""
        status = TaskStatus.OPEN if start.agent is None else TaskStatus.QUEUED
        return cls(
            TaskState(
                start=start, workflow_id=workflow_id, status=status, created_at=now, updated_at=now
            )
        )

    def reopen(self, now: datetime) -> None:
        """Open a failed or cancelled agent task again (``resume``, ``continue_task``): status
        ``queued``, no result or error, the budgets counted afresh (the agent's own ``state``,
        its run count and the rounds of its earlier runs are kept), the steps as they were
        (completed ones keep their results, ``unknown`` ones stay unknown)."""
        self.state.status = TaskStatus.QUEUED
        self.state.result = self.state.error = None
        run = self.state.agent_run
        if run is not None:
            self.state.agent_run = AgentRun(
                started_at=now,
                state=run.state,
                run=run.run,
                run_seq=run.run_seq,
                run_open=run.run_open,
                turn_committed=run.turn_committed,
                committed_before_run=run.committed_before_run,
                round_base=run.round_base + run.rounds,
            )

    # ---------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        """True once the task is finished (``CLOSED_STATUSES``)."""
        return self.state.status in CLOSED_STATUSES

    @property
    def unmirrored(self) -> bool:
        """True while some accepted write is not in Neo4j yet."""
        return self.state.mirrored_write < self.state.writes

    @property
    def unmirrored_events(self) -> int:
        """Events not in Neo4j yet."""
        return self.state.last_seq - self.state.mirrored_seq

    # ---------------------------------------------------------------- checks

    def stored(self, request_id: str, digest: str) -> WriteOutcome | None:
        """The stored outcome of ``request_id`` if its digest matches, None if the id is new.

        Raises:
            ApplicationError: refusal ``invalid_request_id`` or ``request_id_reused``.
        """
        if not valid_request_id(request_id):
            raise refusal(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
        key = request_key(request_id)
        stored = self.state.requests.get(key)
        if stored is None:
            return None
        if stored.digest != digest:
            raise refusal(
                ErrorCode.REQUEST_ID_REUSED,
                f"request_id {request_id!r} was used before with other arguments",
            )
        return WriteOutcome(
            first_seq=stored.first_seq,
            last_seq=stored.last_seq,
            duplicate=True,
            created=key == request_key(self.state.start.request_id),
        )

    def check_write(self, request_id: str, digest: str) -> None:
        """The state rules of every write but ``create``.

        Raises:
            ApplicationError: ``DUPLICATE`` with the stored outcome, or a refusal
                (``invalid_request_id``, ``request_id_reused``, ``task_closed``).
        """
        stored = self.stored(request_id, digest)
        if stored is not None:
            raise duplicate(stored)
        if self.closed:
            raise refusal(ErrorCode.TASK_CLOSED, f"task is {self.state.status.value}")

    def check_create(self, start: TaskStart) -> None:
        """What ``create_task`` may do: only the creating request, the first time.

        Raises:
            ApplicationError: ``DUPLICATE`` (the creating request again: ``created`` True; the
                same goal under another request id: ``created`` False), or a refusal
                (``task_exists`` for another goal, ``invalid_request_id``,
                ``request_id_reused``).
        """
        stored = self.stored(start.request_id, args_digest(start))
        if stored is None and start.goal != self.state.start.goal:
            raise refusal(
                ErrorCode.TASK_EXISTS,
                f"task {start.name!r} exists in project {start.project_id!r} with another goal",
            )
        if stored is None and start.request_id != self.state.start.request_id:
            stored = WriteOutcome(duplicate=True)
        if stored is not None:
            raise duplicate(stored)

    def step(self, name: str) -> StepRecord | None:
        """The record of step ``name``, None when the task has no such step. A step closed in an
        earlier run comes back without its result and times (those are in Neo4j)."""
        record = self.state.steps.get(name)
        closed = None if record is not None else self.earlier_steps.get(step_key(name))
        if closed is not None:
            record = StepRecord(
                state=closed.state,
                kind=closed.kind,
                attempt=closed.attempt,
                updated_at=self.state.created_at,
            )
        return record

    def check_steps(self, input: SetStepsInput, now: datetime) -> dict[str, StepRecord]:
        """The state rules of ``set_steps``; returns the step records it leads to.

        Raises:
            ApplicationError: as ``check_write``, or a step refusal (``next_steps``).
        """
        self.check_write(input.request_id, args_digest(input))
        return next_steps(
            self.step,
            input.steps,
            last_seq=self.state.last_seq,
            write_number=self.state.writes + 1,
            now=now,
            step_count=len(self.state.steps) + len(self.earlier_steps),
            open_steps=sum(r.state in OPEN_STATES for r in self.state.steps.values()),
        )

    # ---------------------------------------------------------------- writes

    def _accept(
        self, request_id: str, digest: str, first_seq: int, last_seq: int, now: datetime
    ) -> None:
        """Count an accepted write and remember its request id (oldest forgotten first)."""
        self.state.writes += 1
        self.state.updated_at = now
        self.state.requests[request_key(request_id)] = StoredRequest(digest, first_seq, last_seq)
        while len(self.state.requests) > REQUEST_WINDOW:
            del self.state.requests[next(iter(self.state.requests))]

    def create(self, start: TaskStart, now: datetime) -> WriteOutcome:
        """Record the creation of the task (``check_create`` first)."""
        self.check_create(start)
        self._accept(start.request_id, args_digest(start), 0, 0, now)
        return WriteOutcome(created=True)

    def record_events(self, input: RecordEventsInput, now: datetime) -> WriteOutcome:
        """Append ``input.events`` with consecutive seqs; returns the first and last seq."""
        digest = args_digest(input)
        self.check_write(input.request_id, digest)
        outcome = self._add_events(input.events, input.agent_id, input.request_id, now)
        self._accept(input.request_id, digest, outcome.first_seq, outcome.last_seq, now)
        return outcome

    def _add_events(
        self, events: Sequence[EventInput], author: str, request_id: str, now: datetime
    ) -> WriteOutcome:
        """Append events with consecutive seqs (no checks, no request window)."""
        first = self.state.last_seq + 1
        for offset, item in enumerate(events):
            seq = first + offset
            self.run_events.append(
                Event.recorded(
                    item,
                    workflow_id=self.state.workflow_id,
                    seq=seq,
                    author=author,
                    time=now,
                    request_id=request_id,
                    cites=None if item.cites is None else cite(self.step, item.cites, seq),
                )
            )
        self.state.last_seq = first + len(events) - 1
        return WriteOutcome(first_seq=first, last_seq=self.state.last_seq, time=now)

    # ---------------------------------------------------------------- input and children

    def _request_for(self, answer: InputAnswer) -> InputRequest | None:
        """The open request ``answer`` answers: the one it names, or the oldest."""
        return next((r for r in self.state.inputs if answer.input_id in (None, r.input_id)), None)

    def open_input(
        self,
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
        if len(self.state.inputs) >= MAX_PENDING_INPUTS:
            raise ApplicationError(f"a task has at most {MAX_PENDING_INPUTS} open input requests")
        asked = set(self.state.answered) | set(self.state.closed_inputs)
        if len(asked) + len(self.state.inputs) >= MAX_INPUTS_PER_TASK:
            raise ApplicationError(f"a task asks at most {MAX_INPUTS_PER_TASK} questions")
        text = json.dumps({"input_id": input_id, "prompt": prompt, "schema": dict(schema)})
        held = sum(model_size(r) for r in self.state.inputs)
        if held + len(text.encode("utf-8")) > MAX_INPUT_SCHEMA_BYTES:
            raise ApplicationError(
                f"a task's open input requests are at most {MAX_INPUT_SCHEMA_BYTES} bytes together"
            )
        event = EventInput(kind=EventKind.INPUT_REQUEST, name=input_id, payload=text)
        seq = self.append([event], f"ask/{input_id}/{self.state.writes}", now).first_seq
        request = InputRequest(
            input_id=input_id,
            prompt=prompt,
            json_schema=dict(schema),
            deadline=deadline,
            asked_seq=seq,
        )
        self.state.inputs.append(request)
        for early in [a for a in self.state.early_answers if a.input_id in (None, input_id)]:
            self.state.early_answers.remove(early)
            self._decide(early, request, now)
            if input_id in self.state.answered:
                break
        return request

    def close_input(self, input_id: str, default_json: str | None, now: datetime) -> None:
        """Close an open request whose deadline passed: an ``error`` event named
        ``input_timeout``; with a default (``default_json``, the default as JSON text) also the
        request's ``input_response`` event holding it, so the request counts as answered (an
        ``ask`` repeated after a checkpoint returns the default without waiting again). An
        answer to it that comes later is late (``take_answer``, ``check_respond``)."""
        self.state.inputs = [r for r in self.state.inputs if r.input_id != input_id]
        self.state.closed_inputs[input_id] = "timed out"
        events = [EventInput(kind=EventKind.ERROR, name="input_timeout", payload=input_id)]
        if default_json is not None:
            events.append(
                EventInput(kind=EventKind.INPUT_RESPONSE, name=input_id, payload=default_json)
            )
        outcome = self.append(events, f"timeout/{input_id}/{self.state.writes}", now)
        if default_json is not None:
            self.state.answered[input_id] = outcome.last_seq

    def take_answer(self, answer: InputAnswer, now: datetime, *, bound: bool = True) -> None:
        """An answer by signal (fire and forget, so never refused): a repeat of its request id
        is ignored; an answer to the open request it names (or, naming none, to the oldest open
        one) is that request's ``input_response`` if valid; an answer naming a request closed
        without it (timed out, ``close_inputs``) is recorded as late (an ``input_response``
        event named ``late``) and changes nothing; one naming a request not asked yet is kept
        for it (one per request id, at most ``MAX_EARLY_ANSWERS`` and
        ``MAX_EARLY_ANSWER_BYTES``); anything else (an answer naming none while none is open,
        one that fails the schema or the rules of every answer, ``answer_error``, one naming a
        request answered already) is recorded as rejected (an ``input_response`` event named
        ``rejected``), and an open request stays open.

        ``bound`` False keeps the rules of tasks recorded before answers were bound to one
        request (the ``answers-bound-to-requests`` patch): an answer naming none, with none
        open, was kept for the next request asked; answers to closed requests were kept too;
        at most ``LEGACY_EARLY_ANSWERS``."""
        digest = args_digest(answer)
        try:
            if self.stored(answer.request_id, digest) is not None:
                return
        except ApplicationError as refused:  # request_id_reused, invalid_request_id
            self._reject(answer, refused.message, now)
            return
        closed = self.state.closed_inputs.get(answer.input_id or "")
        if bound and closed is not None:
            self._reject(answer, f"input {answer.input_id!r} {closed}", now, name="late")
            return
        request = self._request_for(answer)
        room = MAX_EARLY_ANSWERS if bound else LEGACY_EARLY_ANSWERS
        if request is not None:
            self._decide(answer, request, now)
        elif answer.input_id in self.state.answered:
            self._reject(answer, f"input {answer.input_id!r} was answered already", now)
        elif (error := answer_error({}, answer.answer)) is not None:
            self._reject(answer, error, now)
        elif bound and answer.input_id is None:
            self._reject(
                answer,
                "no input request is open: an answer without an input id is taken only by a "
                "request open when it arrives",
                now,
            )
        elif bound and any(a.input_id == answer.input_id for a in self.state.early_answers):
            self._reject(answer, f"an answer to {answer.input_id!r} is kept already", now)
        elif (
            len(self.state.early_answers) >= room
            or sum(model_size(a) for a in [*self.state.early_answers, answer])
            > MAX_EARLY_ANSWER_BYTES
        ):
            self._reject(
                answer,
                f"no input is requested, and the answers kept for later requests are at most "
                f"{room} and {MAX_EARLY_ANSWER_BYTES} bytes",
                now,
            )
        else:
            self.state.early_answers.append(answer)
            self._accept(answer.request_id, digest, 0, 0, now)

    def close_inputs(self, reason: str, now: datetime) -> None:
        """Close every open input request because the task ends (``reason``: ``task
        cancelled``, ``task failed``, ``task done``): an ``input_closed`` note each, whose
        payload is ``{"input_id": ..., "reason": ...}``; later answers to them are late or
        refused ``input_closed`` / ``task_closed``."""
        if not self.state.inputs:
            return
        events = [
            EventInput(
                kind=EventKind.NOTE,
                name="input_closed",
                payload=json.dumps({"input_id": r.input_id, "reason": reason}),
            )
            for r in self.state.inputs
        ]
        self.append(events, f"close-inputs/{self.state.writes}", now)
        for request in self.state.inputs:
            self.state.closed_inputs[request.input_id] = reason
        self.state.inputs = []

    def check_respond(self, answer: InputAnswer) -> InputRequest:
        """The state rules of the ``respond`` update; returns the request it answers.

        Raises:
            ApplicationError: as ``check_write``, or a refusal ``input_not_requested`` or
                ``input_invalid`` (with the validation message).
        """
        self.check_write(answer.request_id, args_digest(answer))
        closed = self.state.closed_inputs.get(answer.input_id or "")
        if closed is not None:
            raise refusal(ErrorCode.INPUT_CLOSED, f"input {answer.input_id!r} {closed}")
        request = self._request_for(answer)
        if request is None:
            named = f" {answer.input_id!r}" if answer.input_id else ""
            raise refusal(ErrorCode.INPUT_NOT_REQUESTED, f"no input request{named} is open")
        error = answer_error(request.json_schema, answer.answer)
        if error is not None:
            raise refusal(ErrorCode.INPUT_INVALID, error)
        return request

    def respond(self, answer: InputAnswer, now: datetime) -> WriteOutcome:
        """An answer by update (validated on arrival): the request's ``input_response``."""
        request = self.check_respond(answer)
        return self._answer(answer, request, now)

    def _decide(self, answer: InputAnswer, request: InputRequest, now: datetime) -> None:
        error = answer_error(request.json_schema, answer.answer)
        if error is None:
            self._answer(answer, request, now)
        else:
            self._reject(answer, error, now)

    def _answer(self, answer: InputAnswer, request: InputRequest, now: datetime) -> WriteOutcome:
        event = EventInput(
            kind=EventKind.INPUT_RESPONSE, name=request.input_id, payload=answer_text(answer.answer)
        )
        outcome = self._add_events([event], answer.agent_id, answer.request_id, now)
        self._accept(
            answer.request_id, args_digest(answer), outcome.first_seq, outcome.last_seq, now
        )
        self.state.inputs.remove(request)
        self.state.answered[request.input_id] = outcome.first_seq
        return outcome

    def _reject(
        self, answer: InputAnswer, error: str, now: datetime, *, name: str = "rejected"
    ) -> None:
        """Record an answer not taken (an ``input_response`` event named ``name``: ``rejected``
        or ``late``, with the error and the answer); its request id is remembered (a repeat is
        ignored) unless it is invalid or already names another write."""
        payload = json.dumps(
            {"input_id": answer.input_id, "error": error, "answer": answer.answer}, allow_nan=True
        )
        if len(payload) > MAX_PAYLOAD_CHARS:  # whole JSON or none: the cut text of the answer
            shown = json.dumps(answer.answer, allow_nan=True)
            payload = json_within(
                {"input_id": answer.input_id, "error": error}, "answer_json", shown
            )
        event = EventInput(kind=EventKind.INPUT_RESPONSE, name=name, payload=payload)
        outcome = self._add_events([event], answer.agent_id, answer.request_id, now)
        fresh = valid_request_id(answer.request_id) and (
            request_key(answer.request_id) not in self.state.requests
        )
        if fresh:
            self._accept(answer.request_id, args_digest(answer), outcome.first_seq, 0, now)
        else:
            self.state.writes += 1
            self.state.updated_at = now

    def add_child(self, key: str, record: ChildRecord, now: datetime) -> None:
        """Record a spawned child task (a ``child_task`` event naming it)."""
        event = EventInput(kind=EventKind.CHILD_TASK, name=key[:128], payload=record.name)
        record.result_seq = None
        self.append([event], f"spawn/{key}", now)
        self.state.children[key] = record

    def child_ended(self, end: ChildEnd, now: datetime) -> None:
        """A spawned child's end (the ``child_ended`` signal): a ``child_result`` event and the
        child's record updated. A repeat, or the end of a task that is not a spawned child of
        this one, is ignored."""
        key = next((k for k, c in self.state.children.items() if c.name == end.child), None)
        digest = args_digest(end)
        try:
            if key is None or self.stored(end.request_id, digest) is not None:
                return
        except ApplicationError:
            return
        text = end.result or end.error or BoundedText(text="", full_length=0, full_sha256="")
        head = {"child": end.child, "status": end.status.value}
        event = EventInput(
            kind=EventKind.CHILD_RESULT, name=key, payload=json_within(head, "text", text.text)
        )
        outcome = self._add_events([event], self.state.start.agent_id, end.request_id, now)
        self._accept(end.request_id, digest, outcome.first_seq, outcome.last_seq, now)
        record = self.state.children[key]
        record.status, record.result_seq = end.status, outcome.first_seq
        record.result = text.text[:CHILD_RESULT_PREVIEW_CHARS]

    def check_retry(self, retry: StepRetry) -> StepRecord:
        """The state rules of ``retry_step``; returns the step's record.

        Raises:
            ApplicationError: as ``check_write``; ``step_not_found``; ``invalid_transition``
                for a step that is not ``unknown`` or ``failed``.
        """
        self.check_write(retry.request_id, args_digest(retry))
        record = self.step(retry.step_name)
        if record is None:
            raise refusal(ErrorCode.STEP_NOT_FOUND, f"the task has no step {retry.step_name!r}")
        if record.state not in (StepState.UNKNOWN, StepState.FAILED):
            raise refusal(
                ErrorCode.INVALID_TRANSITION,
                f"step {retry.step_name!r} is {record.state.value}: only an unknown or failed "
                "step is retried",
            )
        return record

    def retry_step(self, retry: StepRetry, now: datetime) -> WriteOutcome:
        """Ask that an ``unknown`` or ``failed`` step run again when agent code reaches it: a
        ``decision`` event by ``retry.agent_id`` citing the step (``retry step 'x' (asked by
        ...): reason``), and the step's ``retry_by`` (``check_retry`` first)."""
        record = self.check_retry(retry)
        decision = EventInput(
            kind=EventKind.DECISION,
            payload=f"retry step {retry.step_name!r} (asked by {retry.agent_id}): {retry.reason}",
            cites=CitesInput(steps=[retry.step_name]),
        )
        outcome = self._add_events([decision], retry.agent_id, retry.request_id, now)
        self._accept(retry.request_id, args_digest(retry), outcome.first_seq, outcome.last_seq, now)
        self.earlier_steps.pop(step_key(retry.step_name), None)
        self.state.steps[retry.step_name] = record.model_copy(
            update={"retry_by": retry.agent_id, "changed_write": self.state.writes}
        )
        return outcome

    def set_steps(self, input: SetStepsInput, now: datetime) -> WriteOutcome:
        """Apply step changes in order, all or nothing (``STEP_TRANSITIONS``)."""
        changed = self.check_steps(input, now)
        self._accept(input.request_id, args_digest(input), 0, 0, now)
        for name in changed:
            self.earlier_steps.pop(step_key(name), None)
        self.state.steps.update(changed)
        return WriteOutcome()

    def finish(self, input: FinishTaskInput, now: datetime) -> WriteOutcome:
        """Close the task with a final status; later writes get ``task_closed``."""
        digest = args_digest(input)
        self.check_write(input.request_id, digest)
        self.state.status = input.status
        self.state.result = input.result
        self.state.error = input.error
        self._accept(input.request_id, digest, 0, 0, now)
        return WriteOutcome()

    # ---------------------------------------------------------------- writes of the workflow itself

    def append(self, events: Sequence[EventInput], key: str, now: datetime) -> WriteOutcome:
        """Record ``events`` written by the task's own workflow code (its agent, its status),
        under the request id ``internal_request_id(key)``; ``key`` names the write uniquely in
        the task, so a replay recomputes the same id."""
        return self.record_events(
            RecordEventsInput(
                agent_id=self.state.start.agent_id,
                events=list(events),
                request_id=internal_request_id(key),
            ),
            now,
        )

    def move_step(
        self,
        name: str,
        state: StepState,
        key: str,
        now: datetime,
        *,
        kind: StepKind | None = None,
        result_event_seq: int | None = None,
    ) -> StepRecord:
        """Move step ``name`` for the task's own workflow code (``append``'s ``key`` rule);
        returns its new record.

        Raises:
            ApplicationError: a step refusal (``next_steps``).
        """
        self.set_steps(
            SetStepsInput(
                agent_id=self.state.start.agent_id,
                steps=[
                    StepWrite(
                        step_name=name, state=state, kind=kind, result_event_seq=result_event_seq
                    )
                ],
                request_id=internal_request_id(key),
            ),
            now,
        )
        return self.state.steps[name]

    def set_status(self, status: TaskStatus, now: datetime) -> int:
        """Change the status of a task that is not closed (an agent task's ``queued``,
        ``in_progress`` ...), recorded as a ``note`` event named ``status``; returns its seq."""
        outcome = self.append(
            [EventInput(kind=EventKind.NOTE, name="status", payload=status.value)],
            f"status/{self.state.writes}/{status.value}",
            now,
        )
        self.state.status = status
        return outcome.first_seq

    def mirror_target(self, run_id: str, max_events: int) -> MirrorTarget:
        """What the next mirror call copies: the oldest backlog run first, else this run
        (``run_id``); at most ``max_events`` events."""
        state = self.state
        if state.mirror_backlog:
            oldest = state.mirror_backlog[0]
            after = max(state.mirrored_seq, oldest.after_seq)
            up_to = min(oldest.up_to_seq, after + max_events)
            return MirrorTarget(
                MirrorInput(
                    workflow_id=state.workflow_id,
                    run_id=oldest.run_id,
                    after_seq=after,
                    up_to_seq=up_to,
                    after_write=max(state.mirrored_write, oldest.after_write),
                ),
                up_to_write=oldest.up_to_write if up_to == oldest.up_to_seq else None,
                from_backlog=True,
            )
        up_to = min(state.last_seq, state.mirrored_seq + max_events)
        return MirrorTarget(
            MirrorInput(
                workflow_id=state.workflow_id,
                run_id=run_id,
                after_seq=state.mirrored_seq,
                up_to_seq=up_to,
                after_write=state.mirrored_write,
            ),
            up_to_write=state.writes if up_to == state.last_seq else None,
            from_backlog=False,
        )

    def mirrored(self, target: MirrorTarget) -> None:
        """Record a successful mirror call of ``target``: its events, and its writes when it
        reached the end of its run, are in Neo4j; a backlog run copied to its end is dropped."""
        self.state.mirror_error = None
        self.state.mirror_failures = 0
        self.state.mirrored_seq = target.input.up_to_seq
        if target.up_to_write is not None:
            self.state.mirrored_write = target.up_to_write
            if target.from_backlog:
                self.state.mirror_backlog.pop(0)

    def mirror_failed(self, error: str) -> None:
        """Record a failed mirror call (its retries spent) and why (cut to
        ``MIRROR_ERROR_CHARS``)."""
        self.state.mirror_error = error[:MIRROR_ERROR_CHARS]
        self.state.mirror_failures += 1

    def carry_over(self, run_id: str) -> TaskState:
        """The state the next run starts from (``run_id`` is this run's), leaving this run's
        own state as it is (a closed run still answers queries, the mirror's among them):
        closed steps move to the packed table (``closed_steps``), and this run's writes that
        Neo4j lacks join ``mirror_backlog``, so the next run mirrors them from this run."""
        state = self.state
        steps = {n: r for n, r in state.steps.items() if r.state in OPEN_STATES}
        closed = dict(self.earlier_steps)
        closed.update(
            (step_key(n), ClosedStep(r.state, r.kind, r.attempt))
            for n, r in state.steps.items()
            if n not in steps
        )
        backlog = list(state.mirror_backlog)
        after_seq = max(state.mirrored_seq, self.run_first_seq - 1)
        after_write = max(state.mirrored_write, self.run_first_write)
        if state.last_seq > after_seq or state.writes > after_write:
            backlog.append(
                RunRange(
                    run_id=run_id,
                    after_seq=after_seq,
                    up_to_seq=state.last_seq,
                    after_write=after_write,
                    up_to_write=state.writes,
                )
            )
        return state.model_copy(
            update={
                "steps": steps,
                "closed_steps": pack_closed(closed),
                "mirror_backlog": backlog,
                "runs": state.runs + 1,
            }
        )

    # ---------------------------------------------------------------- reads

    def view(self) -> TaskView:
        """The task view, without event bodies."""
        start = self.state.start
        counts = dict.fromkeys(StepState, 0)
        for state in (
            *(r.state for r in self.state.steps.values()),
            *(c.state for c in self.earlier_steps.values()),
        ):
            counts[state] += 1
        return TaskView(
            project_id=start.project_id,
            name=start.name,
            workflow_id=self.state.workflow_id,
            goal=start.goal,
            agent_id=start.agent_id,
            session_id=start.session_id,
            parent=start.parent,
            metadata=start.metadata,
            status=self.state.status,
            result=self.state.result,
            error=self.state.error,
            step_counts=counts,
            last_seq=self.state.last_seq,
            mirrored_seq=self.state.mirrored_seq,
            unmirrored_writes=self.state.writes - self.state.mirrored_write,
            mirror_error=self.state.mirror_error,
            mirror_failures=self.state.mirror_failures,
            run_first_seq=self.run_first_seq,
            runs=self.state.runs,
            mirror_backlog=self.state.mirror_backlog,
            branched_from=start.branched_from,
            closed_inputs=self.state.closed_inputs,
            writes=self.state.writes,
            agent=start.agent,
            agent_run=self.state.agent_run,
            pending_inputs=self.state.inputs,
            children=self.state.children,
            created_at=self.state.created_at,
            updated_at=self.state.updated_at,
        )

    def events_page(self, query: EventsQuery) -> EventsPage:
        """This run's events with seq > ``after_seq``, at most ``limit`` of them and at most
        ``max_bytes`` of JSON (never fewer than one event when one is left), so the query's
        result stays within ``MAX_PAYLOAD_BYTES`` whatever the events hold."""
        page = _fill(self._events(query.after_seq, query.up_to_seq, query.limit), query.max_bytes)
        return EventsPage(
            events=page,
            run_first_seq=self.run_first_seq,
            last_seq=self.state.last_seq,
            mirrored_seq=self.state.mirrored_seq,
            mirror_backlog=self.state.mirror_backlog,
        )

    def steps(self, query: StepsQuery) -> StepsPage:
        """A page of the steps this run holds (open ones, and those changed in this run), in
        name order: filtered by state, by change since a write counter and by the name cursor,
        at most ``limit`` of them and ``MAX_PAYLOAD_BYTES`` of JSON (one at least)."""
        selected = self._steps(
            query.changed_after_write, query.after_name, query.state, query.step_name
        )
        page = _fill((self.step_view(*item) for item in selected[: query.limit]), MAX_PAYLOAD_BYTES)
        return StepsPage(
            steps=page,
            next_after_name=page[-1].step_name if page and len(page) < len(selected) else None,
            earlier=bool(self.earlier_steps),
            run_first_write=self.run_first_write,
            mirror_backlog=self.state.mirror_backlog,
        )

    def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """The next page of what the mirror copies, within ``query.max_bytes`` of JSON: the
        view (when asked), then the steps changed after ``query.after_write`` in name order
        after ``query.after_name`` (at most ``STEPS_PAGE_MAX``), then, once no changed step is
        left, the events after ``query.after_seq`` (``events_page``'s range). A page without
        the view holds one step or event at least while any is left, so paging ends."""
        view = self.view() if query.with_view else None
        used = 0 if view is None else model_size(view)
        selected = self._steps(query.after_write, query.after_name)
        views = (self.step_view(*item) for item in selected[:STEPS_PAGE_MAX])
        steps = _fill(views, query.max_bytes, used, required=view is None)
        used += sum(model_size(step) for step in steps)
        page = MirrorPage(view=view, steps=steps, steps_done=len(steps) == len(selected))
        if page.steps_done:
            events = self._events(query.after_seq, query.up_to_seq, query.events)
            page.events = _fill(events, query.max_bytes, used, required=view is None and not steps)
        return page

    def _events(self, after_seq: int, up_to_seq: int | None, limit: int) -> Iterator[Event]:
        """This run's events with ``after_seq < seq <= up_to_seq`` (None: the newest), at
        most ``limit``, in seq order."""
        start = max(after_seq + 1 - self.run_first_seq, 0)
        last = self.state.last_seq if up_to_seq is None else up_to_seq
        return itertools.takewhile(
            lambda event: event.seq <= last, self.run_events[start : start + limit]
        )

    def _steps(
        self,
        changed_after_write: int,
        after_name: str | None,
        state: StepState | None = None,
        step_name: str | None = None,
    ) -> list[tuple[str, StepRecord]]:
        """The steps this run holds, changed after ``changed_after_write``, named after
        ``after_name`` (None: from the first), in ``state`` (None: any), named ``step_name``
        (None: any), in name order."""
        return sorted(
            (name, step)
            for name, step in self.state.steps.items()
            if (state is None or step.state is state)
            and step.changed_write > changed_after_write
            and (after_name is None or name > after_name)
            and (step_name is None or name == step_name)
        )

    def step_view(self, name: str, step: StepRecord) -> StepView:
        """A step record as readers see it, with its validity and idempotency key."""
        return StepView(
            step_name=name,
            state=step.state,
            kind=step.kind,
            result_event_seq=step.result_event_seq,
            attempt=step.attempt,
            updated_at=step.updated_at,
            result_validity=result_validity(step.state, step.result_event_seq),
            idempotency_key=idempotency_key(self.state.workflow_id, name, step.attempt),
            changed_write=step.changed_write,
        )

    def request_outcome(self, lookup: RequestLookup) -> WriteOutcome | None:
        """The stored outcome of a request id whose digest matches, else None."""
        stored = self.state.requests.get(request_key(lookup.request_id))
        if stored is None or stored.digest != lookup.digest:
            return None
        return WriteOutcome(first_seq=stored.first_seq, last_seq=stored.last_seq, duplicate=True)
