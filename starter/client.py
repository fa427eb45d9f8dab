"""The client apps import: ``ConversationHistory`` over a client from ``config.connect()``.

Writes never raise for a refusal: they return a ``WriteResult`` whose ``error`` is an
``ErrorCode``. A lost or unreachable server raises ``TaskServiceUnavailable``. Arguments that
are not of the right shape (an unknown kind, an over-long name, a payload that is not text)
raise pydantic's ``ValidationError`` naming the field, before anything is sent.

Deduplication is the workflow's own: each write carries a request id, and the workflow answers
a repeated id (same arguments) with the stored result (``duplicate`` True), in a window of the
task's last 2,000 writes that survives continue-as-new. Update ids are left to the SDK (random),
since the server's update-id deduplication lasts one run only and ignores the arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import JsonValue, TypeAdapter
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.reader import earlier_events
from config import release_runtime
from starter.results import (
    DecisionsResult,
    EventsResult,
    GetTaskResult,
    StepsResult,
    WriteResult,
    from_outcome,
    refused,
)
from taskgraph.models import (
    NEO4J_INT_MAX,
    DecisionRow,
    DecisionsRead,
    EventFilter,
    EventRow,
    EventsRead,
    StepFilter,
    StepRow,
    StepsRead,
    TaskFilter,
    TaskListFilter,
    TaskRead,
    TaskRow,
    ToolFailures,
    TreeRead,
    TreeRow,
)
from taskgraph.retention import name_state
from taskgraph.sealing import open_events, seal_events
from workflows.errors import (
    CONTINUING_AS_NEW,
    DUPLICATE,
    ErrorCode,
    GraphNotConfigured,
    TaskServiceUnavailable,
    error_code,
)
from workflows.models import (
    MAX_EVENTS_PER_UPDATE,
    MAX_PAYLOAD_BYTES,
    MAX_STEPS_PER_TASK,
    MAX_STEPS_PER_UPDATE,
    PAGE_LIMIT_MAX,
    STEPS_PAGE_MAX,
    AgentSpec,
    CitesInput,
    Event,
    EventInput,
    EventKind,
    EventsQuery,
    FinishTaskInput,
    InputAnswer,
    ProjectId,
    RecordEventsInput,
    RequestLookup,
    Role,
    SetStepsInput,
    ShortText,
    StepKind,
    StepsQuery,
    StepState,
    StepView,
    StepWrite,
    TaskStart,
    TaskStatus,
    TaskView,
    TaskWorkflowInput,
    WriteOutcome,
    args_digest,
    event_id,
    model_size,
    task_workflow_id,
    valid_request_id,
)
from workflows.models.lifecycle import AskInput, SetStatusInput, SpawnInput
from workflows.task import TaskWorkflow, search_attributes
from workflows.waits import answer_error

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    from taskgraph.graph import TaskGraph

_BUSY_BACKOFF_S = (0.02, 1.0)
"""Pause before resending a call the server turned away as busy (``_busy``): from 20 ms,
doubling, at most 1 s, each with random jitter down to half, until ``timeout_s`` has passed."""

_DRAIN_WAIT_S = 60.0
"""How long a write is sent again (seconds; from 20 ms doubling to 0.5 s apart) while its task
turns it away (``_RESEND``: normally one mirror call, tens of ms); then ``task_busy``."""

_T = TypeVar("_T")


_RESEND = (CONTINUING_AS_NEW, "UnprocessedUpdate")
"""Update failures that wrote nothing and pass by themselves, so the client sends the write
again: the task drains before continue-as-new, or the server turned the update away because
no workflow task processed it ("UnprocessedUpdate", seen under concurrent updates)."""


def _resend(err: WorkflowUpdateFailedError) -> bool:
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type in _RESEND


def _from_update_failure(err: WorkflowUpdateFailedError) -> WriteResult:
    cause = err.cause
    if _resend(err):
        return refused(ErrorCode.TASK_BUSY, f"the task turned the write away for {_DRAIN_WAIT_S} s")
    if isinstance(cause, ApplicationError):
        if cause.type == DUPLICATE:
            return from_outcome(WriteOutcome.model_validate(cause.details[0]))
        code = error_code(cause.type)
        if code is not None:
            return refused(code, cause.message)
    raise err


def _unavailable(err: Exception) -> TaskServiceUnavailable:
    return TaskServiceUnavailable(f"Temporal did not answer: {err}")


def _busy(err: RPCError) -> bool:
    """The server turned the call away unprocessed, for a moment: more than 10 updates in
    flight on one workflow (RESOURCE_EXHAUSTED), an update it aborted when the workflow task
    that was to take it did not complete ("workflow update was aborted"), or a query that came
    before a new run's first workflow task (right after continue-as-new: "Workflow task is not
    scheduled yet"). Nothing was written; resending is safe (request ids make it safe in any
    case)."""
    return (
        err.status == RPCStatusCode.RESOURCE_EXHAUSTED
        or (err.status == RPCStatusCode.UNAVAILABLE and "update was aborted" in err.message)
        or (
            err.status == RPCStatusCode.FAILED_PRECONDITION
            and "workflow task is not scheduled yet" in err.message.lower()
        )
    )


def _lost(err: RPCError) -> bool:
    return err.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.CANCELLED,
    )


class _Lane:
    """The writes of one client to one task, sent one at a time in call order."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()  # asyncio.Lock wakes its waiters first come, first served
        self.users = 0


_LANES: weakref.WeakKeyDictionary[Client, dict[str, _Lane]] = weakref.WeakKeyDictionary()
"""Per Temporal client: workflow id -> its lane (dropped when no call uses it)."""


@contextlib.asynccontextmanager
async def _lane(client: Client, workflow_id: str) -> AsyncIterator[None]:
    """Hold the lane of ``workflow_id`` on ``client``: the order guarantee of writes. Writes
    through one ``Client`` to one task are applied in the order their calls were made, also
    when they are made concurrently and when the task continues-as-new (a write turned away
    while the task drains is resent before the next one is sent), and the server's limit of
    10 updates in flight per workflow is never reached from one client."""
    lanes = _LANES.setdefault(client, {})
    lane = lanes.setdefault(workflow_id, _Lane())
    lane.users += 1
    try:
        async with lane.lock:
            yield
    finally:
        lane.users -= 1
        if not lane.users:
            del lanes[workflow_id]


def _or_new(request_id: str | None) -> str:
    """The caller's request id, or a new UUID when it is None (never for an empty string,
    which is refused as ``invalid_request_id``)."""
    return str(uuid.uuid4()) if request_id is None else request_id


def _no_worker(err: RPCError) -> bool:
    """A query the server answers at once with "no poller seen": no worker runs the task."""
    return err.status == RPCStatusCode.FAILED_PRECONDITION and "poller" in err.message


async def _retrieve_start(operation: WithStartWorkflowOperation[Any, Any]) -> None:
    """Retrieve the start operation's own outcome. The SDK keeps it in a future that it
    settles before the update-with-start call returns or raises, with the call's error when
    the start was not seen (a time-out cancels the call: ``CancelledError``); left unread,
    asyncio prints "Future exception was never retrieved" when the future is collected. The
    future is done here, so this does not wait (and never waits over a second)."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(operation.workflow_handle(), 1.0)


def chunk_request_id(request_id: str, index: int) -> str:
    """Request id of the ``index``-th update of a batch split across updates: the caller's
    own for the first, ``"{sha256(request_id/index)[:40]}"`` for the others (1 to 64
    characters, stable for the same call)."""
    if index == 0:
        return request_id
    return hashlib.sha256(f"{request_id}/{index}".encode()).hexdigest()[:40]


def split_events(events: Sequence[EventInput]) -> Iterator[list[EventInput]]:
    """Split events into update-sized lists: at most ``MAX_EVENTS_PER_UPDATE`` events and
    about ``MAX_PAYLOAD_BYTES`` of JSON each (one event is at most ~200 KB, since a payload is
    at most 32,000 characters)."""
    chunk: list[EventInput] = []
    size = 0
    for event in events:
        event_size = model_size(event)
        if chunk and (len(chunk) == MAX_EVENTS_PER_UPDATE or size + event_size > MAX_PAYLOAD_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(event)
        size += event_size
    if chunk:
        yield chunk


class ConversationHistory:
    """A project's tasks, seen and written as one agent.

    Args:
        client: from ``connect()`` (pydantic data converter).
        project_id: scopes every read and write (1 to 64 of ``[A-Za-z0-9_.-]``); a task of
            another project is ``task_not_found`` / ``found=False`` here.
        agent_id: author of the events and steps this object writes.
        session_id: session new tasks belong to, if any.
        task_queue: the workers' task queue.
        graph: the Neo4j task graph (``taskgraph.graph.TaskGraph``); needed to read events of
            earlier runs (``list_events``), tasks whose history passed the namespace's
            retention, decisions, and for the cross-task reads. None: those reads raise
            ``GraphNotConfigured``. With a graph, event text is sealed (one data key per
            event in its key store: ``taskgraph.sealing``) so that ``redact_event`` can remove
            it from the history; without one it is written in plain text.
        timeout_s: seconds one Temporal call may take (a write waits for a worker to run
            it); past that it raises ``TaskServiceUnavailable``.

    Raises:
        ValidationError: a malformed project id or agent id.
    """

    def __init__(
        self,
        client: Client,
        project_id: str,
        agent_id: str,
        *,
        session_id: str | None = None,
        task_queue: str = "agent-tasks",
        graph: TaskGraph | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.client = client
        self.project_id = TypeAdapter(ProjectId).validate_python(project_id)
        self.agent_id = TypeAdapter(ShortText).validate_python(agent_id)
        self.session_id = session_id
        self.task_queue = task_queue
        self.graph = graph
        self.timeout_s = timeout_s

    async def __aenter__(self) -> ConversationHistory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """End the use of Temporal cleanly before the process exits (``async with
        ConversationHistory(...) as history`` calls it): waits until the Temporal SDK's
        runtime threads have left Python (``config.release_runtime``), without which an app
        that writes and exits can abort in the interpreter's finalization. The client and the
        graph stay open (they belong to the caller); calling it twice is harmless."""
        await release_runtime()

    # ------------------------------------------------------------------ plumbing

    def workflow_id(self, task: str) -> str:
        """The workflow id of ``task`` in this project (``task_workflow_id``)."""
        return task_workflow_id(self.project_id, task)

    def _handle(self, task: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(self.workflow_id(task))

    async def _call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run one Temporal call within ``timeout_s``, resending it while the server turns it
        away as busy (``_busy``). Lost connections, no worker polling, and no answer in time
        raise ``TaskServiceUnavailable``; other ``RPCError``s propagate."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        delay, most = _BUSY_BACKOFF_S
        while True:
            try:
                return await asyncio.wait_for(call(), max(deadline - loop.time(), 0.001))
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
                raise TaskServiceUnavailable(
                    f"no answer within {self.timeout_s:g} s: is a worker polling task queue "
                    f"{self.task_queue!r}? A write may still be recorded once one is; retry it "
                    "with the same request id"
                ) from err
            except RPCError as err:
                if not _busy(err):
                    if _lost(err) or _no_worker(err):
                        raise _unavailable(err) from err
                    raise
                if loop.time() + delay >= deadline:
                    raise _unavailable(err) from err
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, most)

    async def _update(self, task: str, update: Any, input: Any) -> WriteResult:
        """Send one write update in the task's lane (``_lane``: call order)."""
        async with _lane(self.client, self.workflow_id(task)):
            return await self._send(task, update, input)

    async def _send(self, task: str, update: Any, input: Any) -> WriteResult:
        """Send one write update (the caller holds the task's lane); map refusals, duplicates
        and a closed or missing task."""
        if not valid_request_id(input.request_id):
            return refused(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
        handle = self._handle(task)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DRAIN_WAIT_S
        delay = 0.02
        while True:
            try:
                outcome = await self._call(
                    lambda: handle.execute_update(update, input, result_type=WriteOutcome)
                )
            except WorkflowUpdateFailedError as err:
                if _resend(err) and loop.time() < deadline:
                    await asyncio.sleep(delay)  # the new run takes it once the old ends
                    delay = min(delay * 2, 0.5)
                    continue
                return _from_update_failure(err)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                # the digest only here: 1.7 ms of CPU for a batch of 200 events
                digest = args_digest(input)
                return await self._closed_or_missing(task, input.request_id, digest)
            return from_outcome(outcome)

    async def _closed_or_missing(self, task: str, request_id: str, digest: str) -> WriteResult:
        """A write found no running workflow: the task is closed (answer a retried request
        id from the closed workflow's state) or does not exist in this project."""
        handle = self._handle(task)
        try:
            await self._call(handle.describe)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            if await self._expired(task) is not None:
                return refused(
                    ErrorCode.TASK_CLOSED,
                    f"task {task!r} is finished (its history passed the namespace's retention)",
                )
            return refused(ErrorCode.TASK_NOT_FOUND, f"no task {task!r} in this project")
        stored = await self._call(
            lambda: handle.query(
                TaskWorkflow.request_outcome, RequestLookup(request_id=request_id, digest=digest)
            )
        )
        if stored is not None:
            return from_outcome(stored)
        return refused(ErrorCode.TASK_CLOSED, f"task {task!r} is finished")

    # ------------------------------------------------------------------ writes

    async def create_task(
        self,
        name: str,
        goal: str,
        *,
        request_id: str | None = None,
        metadata: dict[str, str] | None = None,
        parent: str | None = None,
        parent_may_follow: bool = False,
        session_id: str | None = None,
        agent: AgentSpec | None = None,
    ) -> WriteResult:
        """Create a task, or return the existing one of that name and goal.

        Uses update-with-start: the workflow starts if it is not running and the
        ``create_task`` update runs in its first workflow task. The same name with the same
        goal returns the existing task (``created`` False); another goal is ``task_exists``.
        A finished task's name is never reused (id reuse policy REJECT_DUPLICATE), nor,
        with a graph, the name of a deleted task (its tombstone) or of one whose history
        passed the namespace's retention (its Neo4j node): both ``task_exists``. The
        result's ``task`` is the task's view.

        Args:
            name: 1 to 200 characters, no control characters.
            goal: at most 4,000 characters.
            request_id: 1 to 64 characters; a new UUID when None.
            metadata: at most 16 entries, keys up to 128 and values up to 500 characters.
            parent: name of the parent task in this project (child tasks); it must exist
                (``parent_not_found``).
            parent_may_follow: skip that check: the importer's case, where a published
                trajectory's subagent run may be imported before its parent (Neo4j's
                ``CHILD_OF`` then points at a placeholder node until the parent comes).
            session_id: the session of this task; None: this object's ``session_id``.
            agent: the agent that runs the task (an agent task: ``queued``, then
                ``in_progress`` once its agent starts); None: a recorded task (``open``).
        """
        request_id = _or_new(request_id)
        if not valid_request_id(request_id):
            return refused(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
        if parent is not None and not parent_may_follow and not await self._exists(parent):
            return refused(ErrorCode.PARENT_NOT_FOUND, f"no parent task {parent!r} in this project")
        start = TaskStart(
            project_id=self.project_id,
            name=name,
            goal=goal,
            agent_id=self.agent_id,
            session_id=self.session_id if session_id is None else session_id,
            parent=parent,
            metadata=metadata or {},
            request_id=request_id,
            agent=agent,
        )
        status = TaskStatus.OPEN if agent is None else TaskStatus.QUEUED
        async with _lane(self.client, self.workflow_id(name)):
            taken = await self._name_taken(name)
            if taken is not None:
                return refused(ErrorCode.TASK_EXISTS, taken)
            operation = WithStartWorkflowOperation(
                TaskWorkflow.run,
                TaskWorkflowInput(start=start),
                id=self.workflow_id(name),
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes(search_attributes(start, status)),
            )
            try:
                outcome = await self._call(
                    lambda: self.client.execute_update_with_start_workflow(
                        TaskWorkflow.create_task,
                        start,
                        start_workflow_operation=operation,
                    )
                )
            except WorkflowUpdateFailedError as err:
                return _from_update_failure(err)
            except WorkflowAlreadyStartedError:
                found = await self.get_task(name)
                if found.view is not None and found.view.goal == goal:
                    return WriteResult(recorded=True, duplicate=True, task=found.view)
                return refused(ErrorCode.TASK_EXISTS, f"task {name!r} exists (finished)")
            finally:
                await _retrieve_start(operation)
        result = from_outcome(outcome)
        if result.recorded:
            result.task = (await self.get_task(name)).view
        return result

    async def _name_taken(self, name: str) -> str | None:
        """Why ``name`` may not be created although Temporal has no workflow of it (None
        when it may): a deleted task's tombstone, or a task whose history Temporal deleted
        after the namespace's retention and Neo4j keeps. Needs the graph; without one, the
        mirror still refuses to write the new task into the old one's node
        (``TaskIncarnationError``)."""
        if self.graph is None:
            return None
        state = await name_state(self.graph, self.project_id, self.workflow_id(name))
        if state.deleted:
            return f"task {name!r} was deleted; a task name is never reused"
        if state.mirrored:
            try:
                await self._call(self._handle(name).describe)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                return (
                    f"task {name!r} exists: its history passed the namespace's retention, "
                    "Neo4j keeps it"
                )
        return None

    async def cancel_task(self, task: str, *, cascade: bool = True) -> WriteResult:
        """Cancel the task: a Temporal cancel request, the same as ``temporal workflow cancel``
        or the Web UI's. The task cancels its agent (a running tool sees the cancellation) and,
        unless ``cascade`` is False, the child tasks its agent spawned (each reports
        ``cancelled`` back); it settles every step left ``in_progress`` as ``unknown``, records
        a final event, ends ``cancelled`` (view, search attribute, Neo4j) and its workflow
        closes as cancelled. (Terminating the workflow instead is the unclean path: nothing of
        this happens.)

        Returns:
            ``recorded`` True once requested (``wait_task`` waits for the end);
            ``task_not_found``; ``task_closed`` when the task had already ended.
        """
        handle = self._handle(task)
        try:
            description = await self._call(handle.describe)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return refused(ErrorCode.TASK_NOT_FOUND, f"no task {task!r} in this project")
            raise
        if description.close_time is not None:
            return refused(ErrorCode.TASK_CLOSED, f"task {task!r} has ended")
        if not cascade:
            await self._call(lambda: handle.signal(TaskWorkflow.keep_children))
        await self._call(handle.cancel)
        return WriteResult(recorded=True)

    async def submit_input(
        self,
        task: str,
        answer: JsonValue,
        *,
        input_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Answer an input request by signal (fire and forget): ``recorded`` True once the
        signal is in the task's history. The task takes it when it runs: a repeat of the
        request id is ignored; an answer before its request is kept until the request is asked
        (the one it names, or with ``input_id`` None the next one); one that fails the request's
        schema is recorded as rejected (an ``input_response`` event named ``rejected``) and the
        request stays open. ``task_not_found`` when there is no such running task.

        Raises:
            ValueError: an answer no request may take (``_input_answer``); nothing is sent.
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        signal = self._input_answer(answer, input_id, request_id)
        handle = self._handle(task)
        try:
            await self._call(lambda: handle.signal(TaskWorkflow.submit_input, signal))
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return refused(ErrorCode.TASK_NOT_FOUND, f"no running task {task!r} in this project")
        return WriteResult(recorded=True)

    async def respond(
        self,
        task: str,
        answer: JsonValue,
        *,
        input_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Answer an input request by update, validated on arrival: ``recorded`` with the
        ``input_response`` event's seq, or refused with ``input_not_requested`` (no such open
        request) or ``input_invalid`` (the schema's message), nothing recorded.

        Raises:
            ValueError: an answer no request may take (``_input_answer``); nothing is sent.
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        update = self._input_answer(answer, input_id, request_id)
        return await self._update(task, TaskWorkflow.respond, update)

    def _input_answer(
        self, answer: JsonValue, input_id: str | None, request_id: str | None
    ) -> InputAnswer:
        """The answer as sent, checked first against the rules every answer meets whatever
        its schema (``workflows.waits.answer_error`` with an empty schema).

        Raises:
            ValueError: more than ``MAX_ANSWER_CHARS`` characters of JSON, or NaN or an
                infinity (nothing is sent).
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        error = answer_error({}, answer)
        if error is not None:
            raise ValueError(error)
        return InputAnswer(
            answer=answer,
            input_id=input_id,
            agent_id=self.agent_id,
            request_id=_or_new(request_id),
        )

    async def resume_task(self, task: str) -> WriteResult:
        """Run a failed or cancelled agent task's agent again, in a new run of the same task
        (its workflow id, started from the last run's state): the steps that completed keep
        their results (agent code's steps are memoized by name), the others run again (a
        failed one under a new idempotency key, an ``unknown`` one under its old key); the
        budgets count afresh.

        Returns:
            ``recorded`` True once started; ``task_not_found``; ``not_resumable`` for a task
            that runs, a recorded task, or one that ended ``done``.
        """
        found = await self.get_task(task)
        if found.view is None:
            return refused(ErrorCode.TASK_NOT_FOUND, f"no task {task!r} in this project")
        view = found.view
        handle = self._handle(task)
        description = await self._call(handle.describe)
        resumable = (TaskStatus.FAILED, TaskStatus.CANCELLED)
        if view.agent is None or description.close_time is None or view.status not in resumable:
            return refused(
                ErrorCode.NOT_RESUMABLE,
                f"task {task!r} is {view.status.value}: only a failed or cancelled agent task "
                "that has ended resumes",
            )
        state = await self._call(lambda: handle.query(TaskWorkflow.resume_state))
        await self._call(
            lambda: self.client.start_workflow(
                TaskWorkflow.run,
                TaskWorkflowInput(carried=state, resume=True),
                id=self.workflow_id(task),
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                search_attributes=TypedSearchAttributes(
                    search_attributes(state.start, TaskStatus.QUEUED)
                ),
            )
        )
        return WriteResult(recorded=True)

    async def wait_task(self, task: str) -> TaskView | None:
        """Wait until the task's workflow has ended (an agent task finished, failed or was
        cancelled, and the mirror caught up) and return its final view; None when the task is
        not in this project. Waits without a time limit (wrap it in ``asyncio.timeout``)."""
        handle = self.client.get_workflow_handle(self.workflow_id(task), result_type=TaskView)
        try:
            view: TaskView = await handle.result()
            return view
        except WorkflowFailureError:  # cancelled (or failed): its last view says how
            return (await self.get_task(task)).view
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    async def _exists(self, task: str) -> bool:
        """True when a task of that name exists in this project (running or ended)."""
        try:
            await self._call(self._handle(task).describe)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    async def record_event(
        self,
        task: str,
        kind: EventKind | str,
        payload: str = "",
        *,
        role: Role | str | None = None,
        name: str | None = None,
        call_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Append one event; ``result.event`` is the recorded event (``result.seq`` its
        seq). A payload over 32,000 characters is cut (the event keeps the full length and
        SHA-256). See ``record_events``."""
        event = EventInput.model_validate(
            {"kind": kind, "payload": payload, "role": role, "name": name, "call_id": call_id}
        )
        return await self._record_one(task, event, request_id)

    async def _record_one(
        self, task: str, event: EventInput, request_id: str | None
    ) -> WriteResult:
        """Record one event and return it as ``result.event``: built from what was sent for a
        new plain write (the outcome gives its seq and time), read back for a repeated
        request id (the stored outcome has no time) and for a decision (the workflow records
        the cited steps' state)."""
        request_id = _or_new(request_id)
        result, (sent,) = await self._record(task, [event], request_id)
        if not result.recorded or result.seq is None:
            return result
        if result.time is None or event.cites is not None:
            page = await self.list_events(task, after_seq=result.seq - 1, limit=1)
            result.event = page.events[0]
            return result
        recorded = Event.recorded(
            sent,
            workflow_id=self.workflow_id(task),
            seq=result.seq,
            author=self.agent_id,
            time=result.time,
            request_id=request_id,
        )
        result.event = recorded.model_copy(update={"payload": event.payload, "sealed": None})
        return result

    async def record_events(
        self,
        task: str,
        events: Sequence[EventInput | dict[str, Any]],
        *,
        request_id: str | None = None,
    ) -> WriteResult:
        """Append events in order, with consecutive seqs.

        A batch over one update's bounds (200 events or ~1 MiB) is sent as several updates,
        each under a request id derived from ``request_id`` (``chunk_request_id``). They are
        not atomic together: on a refusal, the updates before it stay recorded, the result
        has ``recorded`` False and ``first_seq``/``last_seq`` of what was recorded, and a
        retry with the same request id records the rest once.

        With a graph, each event's text is sealed first (``taskgraph.sealing``): its data key is
        stored in Neo4j before anything is sent (so a write needs Neo4j), and the split is of
        the sealed events. The keys of events the workflow did not take from this call (a
        refusal, a repeated request id) are deleted again; after an error (no answer) they
        stay, since the write may have been recorded.
        """
        inputs = [EventInput.model_validate(e) if isinstance(e, dict) else e for e in events]
        result, _ = await self._record(task, inputs, _or_new(request_id))
        return result

    async def _record(
        self, task: str, inputs: list[EventInput], request_id: str
    ) -> tuple[WriteResult, list[EventInput]]:
        """``record_events``; also returns the inputs as sent (sealed). The task's lane is
        held from before the sealing on, so that writes keep the order of their calls."""
        if not inputs:  # refused by the model's own rule: at least one event
            RecordEventsInput(agent_id=self.agent_id, events=[], request_id=request_id)
        if not valid_request_id(request_id):
            refusal = refused(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
            return refusal, inputs
        total = WriteResult(recorded=True, duplicate=True)
        async with _lane(self.client, self.workflow_id(task)):
            sent = await self._seal(task, inputs)
            new_keys = {e.key_id for e in sent if e.key_id} - {e.key_id for e in inputs}
            for index, chunk in enumerate(split_events(sent)):
                result = await self._send(
                    task,
                    TaskWorkflow.record_events,
                    RecordEventsInput(
                        agent_id=self.agent_id,
                        events=chunk,
                        request_id=chunk_request_id(request_id, index),
                    ),
                )
                if result.recorded and not result.duplicate:
                    new_keys -= {e.key_id for e in chunk}
                if not result.recorded:
                    total = result.model_copy(
                        update={"first_seq": total.first_seq, "last_seq": total.last_seq}
                    )
                    break
                total = total.model_copy(
                    update={
                        "first_seq": total.first_seq or result.first_seq,
                        "last_seq": result.last_seq,
                        "duplicate": total.duplicate and result.duplicate,
                        "time": result.time,
                    }
                )
        if new_keys and self.graph is not None:  # keys of text the workflow did not take
            await self.graph.drop_keys(self.project_id, [k for k in new_keys if k])
        return total, sent

    async def _seal(self, task: str, events: list[EventInput]) -> list[EventInput]:
        """``events`` sealed, their keys stored (``taskgraph.sealing.seal_events``), when the
        client has a graph (the key store); as they are without one."""
        if self.graph is None:
            return events
        return await seal_events(self.graph, self.project_id, self.workflow_id(task), events)

    async def set_step(
        self,
        task: str,
        step_name: str,
        state: StepState | str,
        *,
        kind: StepKind | str | None = None,
        result_event_seq: int | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Set one step's state (``STEP_TRANSITIONS``). ``result_event_seq`` must name an
        event of this task (else ``event_not_found``). A new step's kind defaults to tool."""
        write = StepWrite.model_validate(
            {
                "step_name": step_name,
                "state": state,
                "kind": kind,
                "result_event_seq": result_event_seq,
            }
        )
        return await self.set_steps(task, [write], request_id=request_id)

    async def set_steps(
        self, task: str, steps: Sequence[StepWrite], *, request_id: str | None = None
    ) -> WriteResult:
        """Apply step writes in order. Up to 200 writes are one update, all or nothing;
        larger lists are split like ``record_events``. A list naming more distinct steps than
        a task may hold is refused (``step_limit_reached``) before anything is sent."""
        request_id = _or_new(request_id)
        if len({write.step_name for write in steps}) > MAX_STEPS_PER_TASK:
            return refused(
                ErrorCode.STEP_LIMIT_REACHED, f"a task holds at most {MAX_STEPS_PER_TASK} steps"
            )
        result = WriteResult(recorded=True, duplicate=True)
        for index in range(0, max(len(steps), 1), MAX_STEPS_PER_UPDATE):
            result = await self._update(
                task,
                TaskWorkflow.set_steps,
                SetStepsInput(
                    agent_id=self.agent_id,
                    steps=list(steps[index : index + MAX_STEPS_PER_UPDATE]),
                    request_id=chunk_request_id(request_id, index // MAX_STEPS_PER_UPDATE),
                ),
            )
            if not result.recorded:
                return result
        return result

    async def finish_task(
        self,
        task: str,
        status: TaskStatus | str,
        *,
        result: str | None = None,
        error: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Close the task as done, failed or cancelled. The workflow completes once the
        mirror has caught up; later writes are refused with ``task_closed``. A retry with
        the same request id after the close still returns the stored result."""
        return await self._update(
            task,
            TaskWorkflow.finish_task,
            FinishTaskInput.model_validate(
                {
                    "agent_id": self.agent_id,
                    "status": status,
                    "result": result,
                    "error": error,
                    "request_id": _or_new(request_id),
                }
            ),
        )

    # ------------------------------------------------------------------ a recorded task's lifecycle

    async def set_status(
        self, task: str, status: TaskStatus | str, *, request_id: str | None = None
    ) -> WriteResult:
        """Set a recorded task's status: ``queued``, ``in_progress`` or ``awaiting_children``
        (``workflows.lifecycle``; ``awaiting_children`` with no child running is ``queued`` at
        once). Refusals: ``run_by_agent`` (an agent task's agent sets its own), ``task_closed``
        and those of every write.

        Raises:
            pydantic.ValidationError: another status (``done``, ``failed``, ``cancelled``:
                ``finish_task``; ``awaiting_input``: ``request_input``).
        """
        write = SetStatusInput.model_validate(
            {"agent_id": self.agent_id, "status": status, "request_id": _or_new(request_id)}
        )
        return await self._update(task, TaskWorkflow.update_status, write)

    async def request_input(
        self,
        task: str,
        input_id: str,
        prompt: str,
        schema: Mapping[str, JsonValue] | None = None,
        *,
        request_id: str | None = None,
    ) -> WriteResult:
        """Ask a person for input on a recorded task (its agent runs in the app): an
        ``input_request`` event (``result.seq``), the request in the view, status
        ``awaiting_input`` until every open request is answered (``respond``,
        ``submit_input``), then ``queued``. Refusals: ``input_exists``, ``schema_invalid``,
        ``input_limit_reached``, ``run_by_agent`` and those of every write.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        write = AskInput(
            agent_id=self.agent_id,
            input_id=input_id,
            prompt=prompt,
            json_schema=dict(schema or {}),
            request_id=_or_new(request_id),
        )
        return await self._update(task, TaskWorkflow.ask, write)

    async def spawn_child(
        self,
        parent: str,
        spawn_key: str,
        name: str,
        goal: str,
        *,
        session_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Start a child task ``name`` of the recorded task ``parent`` (a child workflow, a
        recorded task one level below it, labelled ``spawn_key`` in the parent): returns once
        it has started; its end comes back to the parent as a ``child_result`` event. The
        parent's status is left as it is (set ``awaiting_children`` to wait). Refusals:
        ``task_exists`` (the key or name used already), ``child_limit_reached``,
        ``run_by_agent`` and those of every write.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        write = SpawnInput(
            agent_id=self.agent_id,
            spawn_key=spawn_key,
            name=name,
            goal=goal,
            session_id=session_id,
            request_id=_or_new(request_id),
        )
        return await self._update(parent, TaskWorkflow.spawn, write)

    # ------------------------------------------------------------------ reads of one task

    async def _query(self, task: str, query: Callable[[], Awaitable[_T]]) -> tuple[bool, _T | None]:
        try:
            return True, await self._call(query)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False, None
            raise

    async def get_task(self, name: str) -> GetTaskResult:
        """The task view (no event bodies); ``found`` False when the name is not in this
        project. Works for running and finished tasks.

        Raises:
            pydantic.ValidationError: ``name`` is not a task name (field ``task``).
        """
        TaskRead(task=name)
        handle = self._handle(name)
        found, view = await self._query(name, lambda: handle.query(TaskWorkflow.view))
        if found:
            return GetTaskResult(found=True, view=view, source="temporal")
        view = await self._expired(name)
        if view is None:
            return GetTaskResult(found=False)
        return GetTaskResult(found=True, view=view, source="neo4j")

    async def _expired(self, name: str) -> TaskView | None:
        """The view Neo4j keeps of a task Temporal has no history of (deleted after the
        namespace's retention); None without a graph or when Neo4j has no such task."""
        if self.graph is None:
            return None
        return await self.graph.task_view(self.project_id, self.workflow_id(name))

    async def list_events(self, task: str, after_seq: int = 0, limit: int = 50) -> EventsResult:
        """Events with seq > ``after_seq`` in seq order, at most ``limit`` (1 to 200), across
        every run of the task: the current run's from the workflow (a reader sees its own
        writes at once), earlier runs' from Neo4j up to the mirror's watermark and from the
        earlier runs themselves beyond it (``TaskView.mirror_backlog``: a closed run still
        answers queries), so a read never waits for the mirror.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field
                (``EventsRead``: ``after_seq`` an int from 0, ``limit`` an int from 1 to 200).
            GraphNotConfigured: mirrored seqs of earlier runs are needed and no graph was given.
            GraphIncomplete: Neo4j lacks some of them (run ``agent-tasks graph rebuild``).
        """
        EventsRead(task=task, after_seq=after_seq, limit=limit)
        query = EventsQuery(after_seq=after_seq, limit=limit)
        handle = self._handle(task)
        _, page = await self._query(task, lambda: handle.query(TaskWorkflow.events, query))
        if page is None:
            return await self._expired_events(task, after_seq, limit)
        events: list[Event] = []
        if after_seq + 1 < page.run_first_seq:
            up_to = min(page.run_first_seq - 1, after_seq + limit)
            events = await earlier_events(
                self.client, self.graph, self.workflow_id(task), page, after_seq, up_to, self._call
            )
        if not events or events[-1].seq == page.run_first_seq - 1:
            events += page.events[: limit - len(events)]
        events = await open_events(self.graph, self.project_id, events)
        last = events[-1].seq if events else after_seq
        return EventsResult(
            found=True, events=events, next_after_seq=last if last < page.last_seq else None
        )

    async def _expired_events(self, task: str, after_seq: int, limit: int) -> EventsResult:
        """``list_events`` of a task Temporal has no history of: from Neo4j, when it has
        the task (``_expired``)."""
        view = await self._expired(task)
        if view is None or self.graph is None:
            return EventsResult(found=False)
        wf = self.workflow_id(task)
        events = await self.graph.events(self.project_id, wf, after_seq, view.last_seq, limit)
        last = events[-1].seq if events else after_seq
        return EventsResult(
            found=True, events=events, next_after_seq=last if last < view.last_seq else None
        )

    async def list_steps(
        self,
        task: str,
        state: StepState | str | None = None,
        limit: int = PAGE_LIMIT_MAX,
        *,
        after_name: str | None = None,
    ) -> StepsResult:
        """A page of the task's steps in name order after ``after_name``, optionally of one
        state, each with its ``result_validity`` and ``idempotency_key``; at most ``limit`` (1
        to 500). A task holds up to 10,000 steps; the steps a run holds (open ones, and those
        changed in it) come from the workflow, the steps closed in earlier runs from Neo4j (and
        from those runs while Neo4j lacks them), the newest record of each name winning.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field
                (``StepsRead``).
            GraphNotConfigured: the task has steps of earlier runs and no graph was given.
        """
        read = StepsRead(task=task, state=state, limit=limit, after_name=after_name)
        query = StepsQuery(state=read.state, limit=read.limit, after_name=read.after_name)
        handle = self._handle(task)
        _, page = await self._query(task, lambda: handle.query(TaskWorkflow.steps, query))
        if page is None:
            if await self._expired(task) is None:
                return StepsResult(found=False)
            # Neo4j has every step of a task Temporal no longer has: ``older`` is all of them.
        elif not page.earlier and not page.mirror_backlog:
            return StepsResult(found=True, steps=page.steps, next_after_name=page.next_after_name)
        older = await self._graph().steps(
            self.project_id,
            self.workflow_id(task),
            state=read.state,
            after_name=read.after_name,
            limit=read.limit,
            up_to_write=NEO4J_INT_MAX if page is None else page.run_first_write,
        )
        if page is None:
            more = len(older) == read.limit
            return StepsResult(
                found=True, steps=older, next_after_name=older[-1].step_name if more else None
            )
        upper = older[-1].step_name if len(older) == read.limit else None
        merged = {step.step_name: step for step in older}
        runs = [(run.run_id, run.after_write) for run in page.mirror_backlog]
        for run_id, after_write in [*runs, (None, 0)]:  # newer runs' records win
            run = self.client.get_workflow_handle(self.workflow_id(task), run_id=run_id)
            merged |= await self._held_steps(run, after_write, read.after_name, upper)
        chosen = sorted(
            (s for s in merged.values() if read.state is None or s.state is read.state),
            key=lambda s: s.step_name,
        )
        steps = chosen[: read.limit]
        more = len(chosen) > read.limit or upper is not None
        cursor = steps[-1].step_name if steps else upper
        return StepsResult(found=True, steps=steps, next_after_name=cursor if more else None)

    async def _held_steps(
        self,
        run: WorkflowHandle[Any, Any],
        after_write: int,
        after_name: str | None,
        upper: str | None,
    ) -> dict[str, StepView]:
        """The steps ``run`` holds changed after ``after_write``, whatever their state, with
        ``after_name < name <= upper`` (no upper bound when None), by name."""
        held: dict[str, StepView] = {}
        while True:
            query = StepsQuery(
                changed_after_write=after_write, after_name=after_name, limit=STEPS_PAGE_MAX
            )
            page = await self._call(partial(run.query, TaskWorkflow.steps, query))
            held |= {s.step_name: s for s in page.steps if upper is None or s.step_name <= upper}
            after_name = page.next_after_name
            if after_name is None or (upper is not None and after_name >= upper):
                return held

    async def list_tasks(
        self, status: TaskStatus | str | None = None, limit: int = 50
    ) -> list[str]:
        """Task names of this project from Temporal visibility (works without Neo4j),
        newest first, optionally of one status (the ``TaskStatus`` search attribute).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (``TaskListFilter``).
        """
        where = TaskListFilter(status=status, limit=limit)
        query = (
            f"WorkflowType = 'TaskWorkflow' AND ProjectId = '{self.project_id}'"
            " AND ExecutionStatus != 'ContinuedAsNew'"
        )
        if where.status is not None:
            query += f" AND TaskStatus = '{where.status.value}'"
        prefix = self.workflow_id("")
        names: list[str] = []
        async for execution in self.client.list_workflows(query, limit=where.limit):
            names.append(execution.id.removeprefix(prefix))
        return names

    # ------------------------------------------------------------------ decisions

    async def record_decision(
        self,
        task: str,
        statement: str,
        *,
        cites_events: Sequence[int | str] = (),
        cites_steps: Sequence[str] = (),
        request_id: str | None = None,
    ) -> WriteResult:
        """Record a decision: an event of kind ``decision`` whose payload is ``statement``
        (sealed and cut like any payload), citing earlier events of the task by seq or by id
        (at most 100) and steps of the task by name (at most 100). ``result.event`` is the
        decision: its ``id`` is the decision's id, its ``cites`` the cited seqs and the cited
        steps with their state and attempt now, which later reads compare with
        (``list_decisions``: ``needs_review``).

        Refusals: ``event_not_found`` (a seq that does not precede the decision, an id of no
        event of the task), ``step_not_found``, and those of every write.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        seqs = await self._cited_seqs(task, cites_events)
        if isinstance(seqs, WriteResult):
            return seqs
        event = EventInput(
            kind=EventKind.DECISION,
            payload=statement,
            cites=CitesInput(events=seqs, steps=list(cites_steps)),
        )
        return await self._record_one(task, event, request_id)

    async def _cited_seqs(self, task: str, cited: Sequence[int | str]) -> list[int] | WriteResult:
        """The seqs of cited events: seqs as they are, ids (``event_id``) matched against the
        task's seqs from the newest down (ids are derived, so this needs no lookup: about a
        microsecond a seq); a refusal when the task or an id is not found."""
        ids = {c for c in cited if isinstance(c, str)}
        found: dict[str, int] = {}
        if ids:
            view = (await self.get_task(task)).view
            if view is None:
                return refused(ErrorCode.TASK_NOT_FOUND, f"no task {task!r} in this project")
            workflow_id = self.workflow_id(task)
            for seq in range(view.last_seq, 0, -1):
                candidate = event_id(workflow_id, seq)
                if candidate in ids:
                    found[candidate] = seq
                    if len(found) == len(ids):
                        break
            if missing := ids - found.keys():
                return refused(
                    ErrorCode.EVENT_NOT_FOUND, f"no event of task {task!r} has id {min(missing)}"
                )
        return [found[c] if isinstance(c, str) else c for c in cited]

    async def list_decisions(
        self, task: str, after_seq: int = 0, limit: int = 50
    ) -> DecisionsResult:
        """A page of the task's decisions in seq order after ``after_seq``, at most ``limit``
        (1 to 200), from Neo4j (so as far as the mirror has copied them: normally within
        100 ms of the write; ``record_decision`` returns its decision at once). Each says
        whether it needs review (``DecisionRow.needs_review``): an event it cites was
        redacted, a step it cites changed since, or its task was deleted while it was kept.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``DecisionsRead``).
            GraphNotConfigured: no graph was given.
        """
        read = DecisionsRead(task=task, after_seq=after_seq, limit=limit)
        rows = await self._graph().decisions(
            self.project_id,
            workflow_id=self.workflow_id(task),
            after_seq=read.after_seq,
            limit=read.limit,
        )
        found = bool(rows) or (await self.get_task(task)).found
        cursor = rows[-1].seq if len(rows) == read.limit else None
        return DecisionsResult(found=found, decisions=rows, next_after_seq=cursor)

    async def get_decision(self, decision_id: str) -> DecisionRow | None:
        """The decision of this project with id ``decision_id`` (as ``list_decisions`` reads
        it), None when Neo4j has none.

        Raises:
            GraphNotConfigured: no graph was given.
        """
        rows = await self._graph().decisions(self.project_id, decision_id=decision_id, limit=1)
        return rows[0] if rows else None

    # ------------------------------------------------------------------ cross-task reads (Neo4j)

    async def find_tasks(
        self,
        *,
        status: TaskStatus | str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        parent: str | None = None,
        after_name: str | None = None,
        limit: int = 50,
    ) -> list[TaskRow]:
        """This project's tasks from Neo4j, in name order after ``after_name`` (the paging
        cursor: pass the last name of a page), filtered by status, agent, session or parent
        (``TaskFilter``).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        where = TaskFilter(
            status=status,
            agent_id=agent_id,
            session_id=session_id,
            parent=parent,
            after_name=after_name,
            limit=limit,
        )
        return await self._graph().find_tasks(self.project_id, where)

    async def task_tree(self, task: str, depth: int = 3) -> list[TreeRow]:
        """The task and its child tasks down to ``depth`` levels (0 to 20), from Neo4j.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``TreeRead``).
            GraphNotConfigured: no graph was given.
        """
        return await self._graph().task_tree(self.project_id, TreeRead(task=task, depth=depth))

    async def find_events(
        self,
        *,
        kind: EventKind | str | None = None,
        name: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        failed_only: bool = False,
        limit: int = 50,
    ) -> list[EventRow]:
        """Events across this project's tasks by kind, name and time range (``since`` <= time
        < ``until``, timezone-aware), oldest first, from Neo4j (``EventFilter``).
        ``failed_only`` keeps the results of failed steps (for example every failed tool call).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        where = EventFilter(
            kind=kind, name=name, since=since, until=until, failed_only=failed_only, limit=limit
        )
        return await self._graph().find_events(self.project_id, where)

    async def find_steps(
        self, *, state: StepState | str | None = None, limit: int = 50
    ) -> list[StepRow]:
        """Steps across this project's tasks in a state (for example every ``unknown`` step
        that needs a person), from Neo4j (``StepFilter``).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        return await self._graph().find_steps(self.project_id, StepFilter(state=state, limit=limit))

    async def failed_tool_calls(self) -> list[ToolFailures]:
        """Failed tool calls across this project's tasks, by tool name, from Neo4j."""
        return await self._graph().failed_tool_calls(self.project_id)

    def _graph(self) -> TaskGraph:
        if self.graph is None:
            raise GraphNotConfigured("this read needs Neo4j: pass graph= to ConversationHistory")
        return self.graph
