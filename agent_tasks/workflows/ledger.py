"""The ledger: one task's events, steps and request ids over its carried ``TaskState``.

The one write path of a task, for update handlers and code inside the workflow alike; pure, so it
runs in tests without a server (the caller passes ``now``).

Each write has a ``check_*`` method (the state rules), which validators raise from, and an apply
method, which handlers call and which checks again, since validators do not run on replay while
handlers do. Admission rules of the moment (the drain, the history length) live in the workflow's
validators only. The task's other jobs are rooms called with the ledger as a
``workflows.book.Book``: ``inbox``, ``children``, ``retries``, ``mirroring`` and ``pages``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel

from agent_tasks.contract import (
    CLOSED_STATUSES,
    REQUEST_WINDOW,
    AgentRun,
    Event,
    EventInput,
    EventKind,
    FinishTaskInput,
    RecordEventsInput,
    RequestLookup,
    RunRange,
    SetStepsInput,
    StepKind,
    StepRecord,
    StepState,
    StepWrite,
    StoredRequest,
    TaskStart,
    TaskState,
    TaskStatus,
    WriteOutcome,
    args_digest,
    internal_request_id,
    request_key,
    valid_request_id,
)
from agent_tasks.contract.errors import ErrorCode, duplicate, refusal
from agent_tasks.workflows.decisions import cite
from agent_tasks.workflows.steps import (
    OPEN_STATES,
    ClosedStep,
    next_steps,
    pack_closed,
    step_key,
    unpack_closed,
)


class Ledger:
    """One task's ledger over ``state`` (new, or carried across continue-as-new) and this run's
    events.
    """

    def __init__(self, state: TaskState) -> None:
        self.state = state
        self.run_events: list[Event] = []
        """This run's events: seqs ``run_first_seq`` to ``state.last_seq``."""
        self.run_first_seq = state.last_seq + 1
        """The first seq this run holds (older ones are in the graph store or
        ``mirror_backlog``)."""
        self.run_first_write = state.writes
        """The write counter when this run started."""
        self.earlier_steps: dict[bytes, ClosedStep] = unpack_closed(state.closed_steps)
        """Steps closed in earlier runs, by ``step_key``; a step written again moves to
        ``state.steps``."""

    @classmethod
    def new(cls, start: TaskStart, workflow_id: str, now: datetime) -> Ledger:
        """The ledger of a new task, not yet created: ``open`` for a recorded task, ``queued`` for
        an agent task."""
        status = TaskStatus.OPEN if start.agent is None else TaskStatus.QUEUED
        return cls(
            TaskState(
                start=start, workflow_id=workflow_id, status=status, created_at=now, updated_at=now
            )
        )

    def reopen(self, now: datetime) -> None:
        """Open a failed or cancelled agent task again (``resume``, ``continue_task``): ``queued``,
        no result or error, budgets counted afresh; the agent's ``state``, run count, rounds and
        steps (``unknown`` ones and ``AgentRun.unknown_calls`` too) are kept."""
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
                unknown_calls=run.unknown_calls,
            )

    # ---------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        """True once the task is finished (``CLOSED_STATUSES``)."""
        return self.state.status in CLOSED_STATUSES

    @property
    def unmirrored(self) -> bool:
        """True while some accepted write is not in the graph store yet."""
        return self.state.mirrored_write < self.state.writes

    @property
    def unmirrored_events(self) -> int:
        """Events not in the graph store yet."""
        return self.state.last_seq - self.state.mirrored_seq

    # ---------------------------------------------------------------- checks

    def stored(self, request_id: str, input: BaseModel) -> WriteOutcome | None:
        """The stored outcome of ``request_id`` if ``input``'s digest matches, None if the id is new
        (the digest is computed only for an id the window holds).

        Raises:
            ApplicationError: refusal ``invalid_request_id`` or ``request_id_reused``.
        """
        if not valid_request_id(request_id):
            raise refusal(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
        key = request_key(request_id)
        stored = self.state.requests.get(key)
        if stored is None:
            return None
        if stored.digest != args_digest(input):
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

    def check_write(self, request_id: str, input: BaseModel) -> None:
        """The state rules of every write but ``create``.

        Raises:
            ApplicationError: ``DUPLICATE`` with the stored outcome, or a refusal
                (``invalid_request_id``, ``request_id_reused``, ``task_closed``).
        """
        stored = self.stored(request_id, input)
        if stored is not None:
            raise duplicate(stored)
        if self.closed:
            raise refusal(ErrorCode.TASK_CLOSED, f"task is {self.state.status.value}")

    def check_create(self, start: TaskStart) -> None:
        """What ``create_task`` may do: only the creating request, the first time.

        Raises:
            ApplicationError: ``DUPLICATE`` (the creating request again: ``created`` True; the same
                goal under another id: False), or ``task_exists``, ``invalid_request_id``,
                ``request_id_reused``.
        """
        stored = self.stored(start.request_id, start)
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
        """The record of step ``name``, None when the task has none; a step closed in an earlier run
        comes back without its result and times (in the graph store)."""
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
        self.check_write(input.request_id, input)
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

    def accept(
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
        self.accept(start.request_id, args_digest(start), 0, 0, now)
        return WriteOutcome(created=True)

    def record_events(self, input: RecordEventsInput, now: datetime) -> WriteOutcome:
        """Append ``input.events`` with consecutive seqs; returns the first and last seq."""
        self.check_write(input.request_id, input)
        outcome = self.add_events(input.events, input.agent_id, input.request_id, now)
        self.accept(input.request_id, args_digest(input), outcome.first_seq, outcome.last_seq, now)
        outcome.writes = self.state.writes
        return outcome

    def add_events(
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

    def set_steps(self, input: SetStepsInput, now: datetime) -> WriteOutcome:
        """Apply step changes in order, all or nothing (``STEP_TRANSITIONS``)."""
        changed = self.check_steps(input, now)
        self.accept(input.request_id, args_digest(input), 0, 0, now)
        for name in changed:
            self.earlier_steps.pop(step_key(name), None)
        self.state.steps.update(changed)
        return WriteOutcome()

    def finish(self, input: FinishTaskInput, now: datetime) -> WriteOutcome:
        """Close the task with a final status; later writes get ``task_closed``."""
        self.check_write(input.request_id, input)
        self.state.status = input.status
        self.state.result = input.result
        self.state.error = input.error
        self.accept(input.request_id, args_digest(input), 0, 0, now)
        return WriteOutcome()

    # ---------------------------------------------------------------- writes of the workflow itself

    def append(self, events: Sequence[EventInput], key: str, now: datetime) -> WriteOutcome:
        """Record ``events`` written by the task's own workflow code under the request id
        ``internal_request_id(key)``; ``key`` is unique in the task, so a replay computes the same
        id."""
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
        """Change the status of an open task, recorded as a ``note`` named ``status``; returns its
        seq."""
        outcome = self.append(
            [EventInput(kind=EventKind.NOTE, name="status", payload=status.value)],
            f"status/{self.state.writes}/{status.value}",
            now,
        )
        self.state.status = status
        return outcome.first_seq

    # ---------------------------------------------------------------- reads

    def carry_over(self, run_id: str) -> TaskState:
        """The state the next run starts from (this run's own is left as is: a closed run still
        answers queries): closed steps packed (``closed_steps``), and writes the graph store lacks
        added to ``mirror_backlog``."""
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

    def request_outcome(self, lookup: RequestLookup) -> WriteOutcome | None:
        """The stored outcome of a request id whose digest matches, else None."""
        stored = self.state.requests.get(request_key(lookup.request_id))
        if stored is None or stored.digest != lookup.digest:
            return None
        return WriteOutcome(first_seq=stored.first_seq, last_seq=stored.last_seq, duplicate=True)
