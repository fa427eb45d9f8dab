"""TaskWorkflow: one task's ledger. Its history is the task's durable event log.

Writes arrive as updates. Every refusal is raised by an update *validator*, so a refused write
leaves nothing in the history or the state; accepted writes run in synchronous handlers, which
Temporal runs one at a time, so seqs have no gaps and a request id is written once. A repeated
request id with the same arguments is also answered by the validator (ApplicationError of type
``DUPLICATE`` carrying the stored ``WriteOutcome``), so a retry adds nothing to the history.

The run loop mirrors the ledger into Neo4j through the ``mirror_task`` activity: at most one
call in flight, started as soon as a write waits; the writes that arrive while a call runs form
the next call's batch (at most ``MIRROR_MAX_EVENTS`` events). Runs recorded before the
``MIRROR_WITHOUT_DEBOUNCE`` patch first waited for a debounce timer (``MIRROR_BATCH_EVENTS``
events or ``MIRROR_DEBOUNCE_MS``); they still replay that way. The loop continues-as-new when
Temporal suggests it, once every handler has finished and the mirror has caught up, and returns
the final ``TaskView`` once the task is finished and mirrored.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributePair
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.models import (
        CONTINUING_AS_NEW,
        DUPLICATE,
        HISTORY_BACKPRESSURE_EVENTS,
        MAX_STEPS_PER_TASK,
        MIRROR_ACTIVITY,
        MIRROR_BATCH_EVENTS,
        MIRROR_DEBOUNCE_MS,
        MIRROR_MAX_EVENTS,
        REQUEST_WINDOW,
        STEP_TRANSITIONS,
        ErrorCode,
        Event,
        EventsPage,
        EventsQuery,
        FinishTaskInput,
        MirrorInput,
        MirrorOutcome,
        RecordEventsInput,
        RequestLookup,
        SetStepsInput,
        StepKind,
        StepRecord,
        StepsQuery,
        StepState,
        StepView,
        TaskStart,
        TaskState,
        TaskStatus,
        TaskView,
        TaskWorkflowInput,
        WriteOutcome,
        args_digest,
        request_key,
        result_validity,
        valid_request_id,
    )

PROJECT_ID = SearchAttributeKey.for_keyword("ProjectId")
AGENT_ID = SearchAttributeKey.for_keyword("AgentId")
SESSION_ID = SearchAttributeKey.for_keyword("SessionId")
TASK_STATUS = SearchAttributeKey.for_keyword("TaskStatus")
PARENT_TASK = SearchAttributeKey.for_keyword("ParentTask")
SEARCH_ATTRIBUTE_KEYS = (PROJECT_ID, AGENT_ID, SESSION_ID, TASK_STATUS, PARENT_TASK)
"""The custom search attributes a Temporal server must have registered for TaskWorkflow."""

MIRROR_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_attempts=3,
    non_retryable_error_types=["MirrorDataError"],
)
"""One mirror call: three attempts, 1 s then 2 s apart; a data error fails at once."""
MIRROR_WITHOUT_DEBOUNCE = "mirror-without-debounce-timer"
"""Patch id: the mirror starts as soon as a write waits, without the 200 ms debounce timer
(whose firing the dev server rounds to about a second, which made the mirror lag ~1 s)."""
MIRROR_PAUSE = timedelta(seconds=1)
MIRROR_PAUSE_MAX = timedelta(seconds=30)
"""After a failed mirror call the workflow records ``mirror_error``, keeps accepting writes,
and calls again after a pause of 2 s doubling to 30 s, without end: Neo4j may be down for
minutes, and a data error may be fixed by deploying a new worker."""


def search_attributes(start: TaskStart, status: TaskStatus) -> list[SearchAttributePair[str]]:
    """The custom search attributes of a task, so Temporal visibility can list tasks by
    project, agent, session, parent and status without Neo4j."""
    pairs = [
        SearchAttributePair(PROJECT_ID, start.project_id),
        SearchAttributePair(AGENT_ID, start.agent_id),
        SearchAttributePair(TASK_STATUS, status.value),
    ]
    if start.session_id is not None:
        pairs.append(SearchAttributePair(SESSION_ID, start.session_id))
    if start.parent is not None:
        pairs.append(SearchAttributePair(PARENT_TASK, start.parent))
    return pairs


def refusal(code: ErrorCode, message: str) -> ApplicationError:
    """The error a validator raises to refuse a write: its ``type`` is the ``ErrorCode``."""
    return ApplicationError(message, type=code.value, non_retryable=True)


@workflow.defn
class TaskWorkflow:
    """One task: the ledger of its events and steps, and its agent loop's durable state."""

    @workflow.init
    def __init__(self, input: TaskWorkflowInput) -> None:
        if input.carried is not None:
            self.state = input.carried
        else:
            assert input.start is not None, "TaskWorkflowInput needs start or carried"
            now = workflow.now()
            self.state = TaskState(
                start=input.start,
                workflow_id=workflow.info().workflow_id,
                created_at=now,
                updated_at=now,
            )
        self.run_events: list[Event] = []
        """This run's events: seqs ``run_first_seq`` to ``state.last_seq``."""
        self.run_first_seq = self.state.last_seq + 1
        self.draining = False
        """True once continue-as-new is due: writes are turned away until the new run."""
        self.mirror_failures = 0
        """Mirror calls failed in a row (their retries spent); 0 after a success."""

    @workflow.run
    async def run(self, input: TaskWorkflowInput) -> TaskView:
        """Mirror, continue-as-new and finish; returns the final view once finished."""
        while True:
            await workflow.wait_condition(
                lambda: self._unmirrored() or self._closed() or self._should_continue()
            )
            if self._unmirrored():
                urgent = self._closed() or self._should_continue()
                if not urgent and not workflow.patched(MIRROR_WITHOUT_DEBOUNCE):
                    # Runs recorded before the patch waited for a debounce timer here.
                    try:
                        await workflow.wait_condition(
                            lambda: (
                                self._unmirrored_events() >= MIRROR_BATCH_EVENTS
                                or self._closed()
                                or self._should_continue()
                            ),
                            timeout=timedelta(milliseconds=MIRROR_DEBOUNCE_MS),
                        )
                    except TimeoutError:
                        pass
                self._drain_if_due()
                await self._mirror()
                continue
            self._drain_if_due()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self._unmirrored():
                continue
            if self._closed():
                return self._view()
            self.state.runs += 1
            workflow.continue_as_new(
                TaskWorkflowInput(carried=self.state),
                search_attributes=workflow.info().typed_search_attributes,
            )

    # ---------------------------------------------------------------- run loop helpers

    def _closed(self) -> bool:
        return self.state.status is not TaskStatus.open

    def _should_continue(self) -> bool:
        return workflow.info().is_continue_as_new_suggested()

    def _drain_if_due(self) -> None:
        """Once continue-as-new is due, turn writes away (the client sends them again) until
        the mirror has caught up and the new run takes them; never while the mirror fails,
        so that writes are not held up by a Neo4j outage. Validators read the flag, so it
        adds no command and changes no replay."""
        if self._should_continue() and not self.mirror_failures:
            self.draining = True

    def _unmirrored(self) -> bool:
        return self.state.mirrored_write < self.state.writes

    def _unmirrored_events(self) -> int:
        return self.state.last_seq - self.state.mirrored_seq

    async def _mirror(self) -> None:
        """Mirror the waiting events (at most ``MIRROR_MAX_EVENTS``) and changed steps."""
        up_to_seq = min(self.state.last_seq, self.state.mirrored_seq + MIRROR_MAX_EVENTS)
        up_to_write = self.state.writes if up_to_seq == self.state.last_seq else None
        try:
            await workflow.execute_activity(
                MIRROR_ACTIVITY,
                MirrorInput(
                    workflow_id=self.state.workflow_id,
                    run_id=workflow.info().run_id,
                    after_seq=self.state.mirrored_seq,
                    up_to_seq=up_to_seq,
                    after_write=self.state.mirrored_write,
                ),
                result_type=MirrorOutcome,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=MIRROR_RETRY,
            )
        except ActivityError as err:
            # Neo4j down past the activity's retries, or a data error: keep the ledger open
            # and writable, show the error in the view, and try again after a pause.
            self.state.mirror_error = str(err.cause or err)
            self.mirror_failures += 1
            self.draining = False
            await workflow.sleep(min(MIRROR_PAUSE * 2**self.mirror_failures, MIRROR_PAUSE_MAX))
            return
        self.state.mirror_error = None
        self.mirror_failures = 0
        self.state.mirrored_seq = up_to_seq
        if up_to_write is not None:
            self.state.mirrored_write = up_to_write

    # ---------------------------------------------------------------- write checks

    def _stored(self, request_id: str, digest: str) -> WriteOutcome | None:
        """The stored outcome of ``request_id`` if its digest matches, None if the id is new.

        Raises:
            ApplicationError: ``invalid_request_id`` or ``request_id_reused``.
        """
        if not valid_request_id(request_id):
            raise refusal(ErrorCode.invalid_request_id, "request_id must be 1 to 64 characters")
        key = request_key(request_id)
        stored = self.state.requests.get(key)
        if stored is None:
            return None
        if stored[0] != digest:
            raise refusal(
                ErrorCode.request_id_reused,
                f"request_id {request_id!r} was used before with other arguments",
            )
        return WriteOutcome(
            first_seq=stored[1],
            last_seq=stored[2],
            duplicate=True,
            created=key == request_key(self.state.start.request_id),
        )

    def _check_write(self, request_id: str, digest: str) -> None:
        """The state rules of every write but ``create_task``: raises ``DUPLICATE`` or a
        refusal. Handlers run it again (validators do not run on replay)."""
        stored = self._stored(request_id, digest)
        if stored is not None:
            raise ApplicationError("duplicate request", stored, type=DUPLICATE, non_retryable=True)
        if self._closed():
            raise refusal(ErrorCode.task_closed, f"task is {self.state.status.value}")

    def _admit_write(self, request_id: str, digest: str) -> None:
        """What a write's validator checks: the state rules, then admission (the drain before
        continue-as-new, ``CONTINUING_AS_NEW``; the history length, ``task_busy``). Admission
        lives in validators only, so that replaying an accepted write never depends on it."""
        self._check_write(request_id, digest)
        if self.draining:
            raise ApplicationError(
                "continuing as new: retry", type=CONTINUING_AS_NEW, non_retryable=True
            )
        if workflow.info().get_current_history_length() > HISTORY_BACKPRESSURE_EVENTS:
            raise refusal(ErrorCode.task_busy, "history is long while the mirror catches up")

    def _accept(self, request_id: str, digest: str, first_seq: int, last_seq: int) -> None:
        """Count an accepted write and remember its request id (oldest forgotten first)."""
        self.state.writes += 1
        self.state.updated_at = workflow.now()
        self.state.requests[request_key(request_id)] = (digest, first_seq, last_seq)
        while len(self.state.requests) > REQUEST_WINDOW:
            del self.state.requests[next(iter(self.state.requests))]

    # ---------------------------------------------------------------- updates

    @workflow.update
    def create_task(self, input: TaskStart) -> WriteOutcome:
        """Create the task (sent with the start by update-with-start). Returns ``created``
        True for the creating request id; an existing task with the same goal is answered by
        the validator (``DUPLICATE``, ``created`` False); another goal is ``task_exists``."""
        self._check_create(input)
        self._accept(input.request_id, args_digest(input), 0, 0)
        return WriteOutcome(created=True)

    @create_task.validator
    def _check_create(self, input: TaskStart) -> None:
        stored = self._stored(input.request_id, args_digest(input))
        if stored is None and input.goal != self.state.start.goal:
            raise refusal(
                ErrorCode.task_exists,
                f"task {input.name!r} exists in project {input.project_id!r} with another goal",
            )
        if stored is None and input.request_id != self.state.start.request_id:
            stored = WriteOutcome(duplicate=True)
        if stored is not None:
            raise ApplicationError("task exists", stored, type=DUPLICATE, non_retryable=True)

    @workflow.update
    def record_events(self, input: RecordEventsInput) -> WriteOutcome:
        """Append events with consecutive seqs; returns the first and last seq."""
        digest = args_digest(input)
        self._check_write(input.request_id, digest)
        now = workflow.now()
        first = self.state.last_seq + 1
        for offset, item in enumerate(input.events):
            assert item.full_length is not None and item.full_sha256 is not None
            self.run_events.append(
                Event(
                    seq=first + offset,
                    kind=item.kind,
                    role=item.role,
                    name=item.name,
                    call_id=item.call_id,
                    payload=item.payload,
                    full_length=item.full_length,
                    full_sha256=item.full_sha256,
                    author=input.agent_id,
                    time=now,
                    request_id=input.request_id,
                )
            )
        self.state.last_seq = first + len(input.events) - 1
        self._accept(input.request_id, digest, first, self.state.last_seq)
        return WriteOutcome(first_seq=first, last_seq=self.state.last_seq)

    @record_events.validator
    def _check_record_events(self, input: RecordEventsInput) -> None:
        self._admit_write(input.request_id, args_digest(input))

    @workflow.update
    def set_steps(self, input: SetStepsInput) -> WriteOutcome:
        """Apply step changes in order, all or nothing (``STEP_TRANSITIONS``)."""
        digest = args_digest(input)
        self._check_write(input.request_id, digest)
        changed = self._next_steps(input)
        self._accept(input.request_id, digest, 0, 0)
        self.state.steps.update(changed)
        return WriteOutcome()

    @set_steps.validator
    def _check_set_steps(self, input: SetStepsInput) -> None:
        self._admit_write(input.request_id, args_digest(input))
        self._next_steps(input)

    def _next_steps(self, input: SetStepsInput) -> dict[str, StepRecord]:
        """The step records ``input`` leads to, or a refusal (``invalid_transition``,
        ``step_kind_changed``, ``event_not_found``, ``step_limit_reached``). A new step's
        kind defaults to ``tool``."""
        changed: dict[str, StepRecord] = {}
        now = workflow.now()
        for write in input.steps:
            current = changed.get(write.step_name) or self.state.steps.get(write.step_name)
            if write.result_event_seq is not None and write.result_event_seq > self.state.last_seq:
                raise refusal(
                    ErrorCode.event_not_found,
                    f"step {write.step_name!r}: no event {write.result_event_seq} in this task",
                )
            if current is None:
                kind = write.kind or StepKind.tool
                previous_attempts = 0
                result_seq = write.result_event_seq
            else:
                if write.kind is not None and write.kind is not current.kind:
                    raise refusal(
                        ErrorCode.step_kind_changed,
                        f"step {write.step_name!r} is {current.kind.value}, not {write.kind.value}",
                    )
                if write.state not in STEP_TRANSITIONS[current.state]:
                    raise refusal(
                        ErrorCode.invalid_transition,
                        f"step {write.step_name!r} cannot go from {current.state.value} "
                        f"to {write.state.value}",
                    )
                kind = current.kind
                previous_attempts = current.attempt
                # A new attempt starts without the last attempt's result.
                result_seq = write.result_event_seq
                if result_seq is None and write.state is not StepState.in_progress:
                    result_seq = current.result_event_seq
            changed[write.step_name] = StepRecord(
                state=write.state,
                kind=kind,
                result_event_seq=result_seq,
                attempt=previous_attempts + (write.state is StepState.in_progress),
                updated_at=now,
                changed_write=self.state.writes + 1,
            )
        if len(self.state.steps.keys() | changed.keys()) > MAX_STEPS_PER_TASK:
            raise refusal(
                ErrorCode.step_limit_reached, f"a task holds at most {MAX_STEPS_PER_TASK} steps"
            )
        return changed

    @workflow.update
    def finish_task(self, input: FinishTaskInput) -> WriteOutcome:
        """Close the task with a final status; later writes get ``task_closed``."""
        digest = args_digest(input)
        self._check_write(input.request_id, digest)
        self.state.status = input.status
        self.state.result = input.result
        self.state.error = input.error
        self._accept(input.request_id, digest, 0, 0)
        workflow.upsert_search_attributes([TASK_STATUS.value_set(input.status.value)])
        return WriteOutcome()

    @finish_task.validator
    def _check_finish(self, input: FinishTaskInput) -> None:
        self._admit_write(input.request_id, args_digest(input))

    # ---------------------------------------------------------------- queries

    @workflow.query
    def view(self) -> TaskView:
        """The task view, without event bodies."""
        return self._view()

    def _view(self) -> TaskView:
        start = self.state.start
        counts = dict.fromkeys(StepState, 0)
        for step in self.state.steps.values():
            counts[step.state] += 1
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
            run_first_seq=self.run_first_seq,
            runs=self.state.runs,
            created_at=self.state.created_at,
            updated_at=self.state.updated_at,
        )

    @workflow.query
    def events(self, query: EventsQuery) -> EventsPage:
        """This run's events with seq > ``after_seq``, at most ``limit`` of them and about
        ``max_bytes`` of payload (never fewer than one event when one is left)."""
        start = max(query.after_seq + 1 - self.run_first_seq, 0)
        last = self.state.last_seq if query.up_to_seq is None else query.up_to_seq
        page: list[Event] = []
        size = 0
        for event in self.run_events[start : start + query.limit]:
            size += len(event.payload.encode("utf-8"))
            if event.seq > last or (page and size > query.max_bytes):
                break
            page.append(event)
        return EventsPage(
            events=page, run_first_seq=self.run_first_seq, last_seq=self.state.last_seq
        )

    @workflow.query
    def steps(self, query: StepsQuery) -> list[StepView]:
        """Steps in name order, filtered by state and by change since a write counter."""
        selected = sorted(
            (name, step)
            for name, step in self.state.steps.items()
            if (query.state is None or step.state is query.state)
            and step.changed_write > query.changed_after_write
        )
        return [self._step_view(name, step) for name, step in selected[: query.limit]]

    def _step_view(self, name: str, step: StepRecord) -> StepView:
        return StepView(
            step_name=name,
            state=step.state,
            kind=step.kind,
            result_event_seq=step.result_event_seq,
            attempt=step.attempt,
            updated_at=step.updated_at,
            result_validity=result_validity(step.state, step.result_event_seq),
            idempotency_key=f"{self.state.workflow_id}/{name}/{step.attempt}",
        )

    @workflow.query
    def request_outcome(self, lookup: RequestLookup) -> WriteOutcome | None:
        """The stored outcome of a request id whose digest matches, else None (lets a client
        answer a retried write after the task's workflow has closed)."""
        stored = self.state.requests.get(request_key(lookup.request_id))
        if stored is None or stored[0] != lookup.digest:
            return None
        return WriteOutcome(first_seq=stored[1], last_seq=stored[2], duplicate=True)
