"""The transport of ``ConversationHistory``: how its calls reach a task's workflow.

Every call runs within ``timeout_s`` and is resent while the server turns it away unprocessed for a
moment (``_busy``). One ``Client``'s writes to one task go one at a time in call order (``lane``),
and a write turned away while the task drains is resent until the new run takes it. Refusals and
duplicates come back as results (``WriteResult``, ``from_update_failure``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.contract import TaskName, WriteOutcome, task_workflow_id, valid_request_id
from agent_tasks.contract.errors import (
    CONTINUING_AS_NEW,
    DUPLICATE,
    ErrorCode,
    TaskServiceUnavailable,
    error_code,
)
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.results import WriteResult, from_outcome, refused

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    from agent_tasks.broker import Broker
    from agent_tasks.starter.pages import PagePublisher
    from agent_tasks.taskgraph.port import GraphStore

_BUSY_BACKOFF_S = (0.02, 1.0)
"""Pause before resending a call turned away as busy: from 20 ms, doubling to 1 s, jittered down to
half, until ``timeout_s``."""

_DRAIN_WAIT_S = 60.0
"""How long a write is resent while its task drains (seconds; 20 ms doubling to 0.5 s apart); then
``task_busy``."""

DESCRIBE_TIMEOUT_S = 5.0
"""How long the description that names a task's task queue in an error may take (seconds)."""

CLOSED_CHECK_S = 2.0
"""How long a write waits for its update before it looks whether the workflow has closed, and then
how often (seconds): Temporal keeps the call of an update a closing workflow never took."""

_T = TypeVar("_T")


_RESEND = (CONTINUING_AS_NEW, "UnprocessedUpdate")
"""Update failures that wrote nothing and pass by themselves, so the write is resent: the drain
before continue-as-new, and the server's "UnprocessedUpdate" (seen under concurrent updates)."""


def _resend(err: WorkflowUpdateFailedError) -> bool:
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type in _RESEND


def from_update_failure(err: WorkflowUpdateFailedError) -> WriteResult:
    """The result of a write the validator turned away: a repeated request id's stored result
    (``DUPLICATE``), a refusal with its ``ErrorCode``, or ``task_busy`` past ``_DRAIN_WAIT_S``.

    Raises:
        WorkflowUpdateFailedError: ``err`` itself when it carries no code of ours.
    """
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


def _unavailable(err: Exception, address: str, task_queue: str) -> TaskServiceUnavailable:
    """The error of a call Temporal did not answer, naming the server's address and the task
    queue."""
    return TaskServiceUnavailable(
        f"Temporal at {address} did not answer for task queue {task_queue!r} (is the server up, "
        f"and a worker polling {task_queue!r}?): {err}"
    )


_NOT_READY = (
    "workflow task is not scheduled yet",
    "due to unexpected workflow task failure",
    "due to workflow task in failed state",
)
"""Messages of the server's ``WorkflowNotReady`` (FAILED_PRECONDITION) for a call turned away before
anything was written: a query before a run's first workflow task, or an update whose workflow task
failed or keeps failing (as after a server restart; server 1.27 and on)."""


def _busy(err: RPCError) -> bool:
    """The server turned the call away unprocessed for a moment: over 10 updates in flight
    (RESOURCE_EXHAUSTED), an aborted update, or ``_NOT_READY``. Nothing was written, so resending is
    safe (and request ids make it safe anyway)."""
    message = err.message.lower()
    return (
        err.status == RPCStatusCode.RESOURCE_EXHAUSTED
        or (err.status == RPCStatusCode.UNAVAILABLE and "update was aborted" in message)
        or (
            err.status == RPCStatusCode.FAILED_PRECONDITION
            and any(words in message for words in _NOT_READY)
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
async def lane(client: Client, workflow_id: str) -> AsyncIterator[None]:
    """Hold the lane of ``workflow_id`` on ``client``: one client's writes to one task apply in call
    order, concurrent ones and across continue-as-new too, and never pass the server's 10 updates in
    flight."""
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


def request_id_or_new(request_id: str | None) -> str:
    """The caller's request id, or a new UUID when it is None (never for an empty string,
    which is refused as ``invalid_request_id``)."""
    return str(uuid.uuid4()) if request_id is None else request_id


def _no_worker(err: RPCError) -> bool:
    """A query the server answers at once with "no poller seen": no worker runs the task."""
    return err.status == RPCStatusCode.FAILED_PRECONDITION and "poller" in err.message


async def _first_or_closed(
    sent: asyncio.Future[Any], handle: WorkflowHandle[Any, Any]
) -> str | None:
    """Wait for ``sent`` (an update's call): None once done, or the close status's name when the
    workflow closed first (looked at after ``CLOSED_CHECK_S``, then as often), ``sent``
    cancelled."""
    while True:
        done, _ = await asyncio.wait({sent}, timeout=CLOSED_CHECK_S)
        if done:
            return None
        try:
            description = await handle.describe(rpc_timeout=timedelta(seconds=DESCRIBE_TIMEOUT_S))
        except RPCError:
            continue  # the call itself says what went wrong, in its time
        if description.status not in (None, WorkflowExecutionStatus.RUNNING):
            sent.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sent
            return description.status.name


def _aborted_by_close(err: RPCError) -> bool:
    """The server ended an update's call because its workflow closed before any workflow
    task took the update: nothing of it is in the history."""
    return err.status == RPCStatusCode.NOT_FOUND and "closing workflow" in err.message


def _ended_first(task: str, status: str) -> WriteResult:
    """The result of a write whose task's workflow closed (``status``) before it took it."""
    return refused(
        ErrorCode.TASK_CLOSED,
        f"task {task!r} ended ({status}) before it took this write: nothing of it was recorded",
    )


async def _close_status(handle: WorkflowHandle[Any, Any]) -> str:
    """The name of the workflow's close status (``closed`` when it cannot be read)."""
    try:
        description = await handle.describe(rpc_timeout=timedelta(seconds=DESCRIBE_TIMEOUT_S))
    except RPCError:
        return "closed"
    return "closed" if description.status is None else description.status.name


async def _after_close(handle: WorkflowHandle[Any, Any], update_id: str) -> WriteOutcome | None:
    """The outcome of update ``update_id`` of a workflow that closed while its call waited, or None
    when the server aborted it with the workflow (nothing recorded).

    Raises:
        WorkflowUpdateFailedError: the validator refused it before the workflow closed.
    """
    taken = handle.get_update_handle(update_id, result_type=WriteOutcome)
    try:
        outcome: WriteOutcome = await taken.result(
            rpc_timeout=timedelta(seconds=DESCRIBE_TIMEOUT_S)
        )
    except RPCError:
        return None
    return outcome


async def retrieve_start(operation: WithStartWorkflowOperation[Any, Any]) -> None:
    """Read the start operation's own outcome (already settled when the call returned), so asyncio
    does not print "Future exception was never retrieved"."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(operation.workflow_handle(), 1.0)


class Transport:
    """The calls of one ``ConversationHistory`` (each room holds it): its checked settings, a task's
    workflow, and the retrying call.

    Args:
        client: the Temporal client (the product's data converter).
        project_id: the project every read and write is scoped to (checked by the caller).
        agent_id: the author of what the rooms write.
        session_id: the session new tasks belong to.
        task_queue: the workers' task queue.
        graph: the graph store, if any.
        timeout_s: seconds one Temporal call may take.
        broker: where the task's mirror is told of each write (``starter.pages``); None: not.
    """

    def __init__(
        self,
        client: Client,
        project_id: str,
        agent_id: str,
        session_id: str | None,
        task_queue: str,
        graph: GraphStore | None,
        timeout_s: float,
        broker: Broker | None = None,
    ) -> None:
        self.client = client
        self.project_id = project_id
        self.agent_id = agent_id
        self.session_id = session_id
        self.task_queue = task_queue
        self.graph = graph
        self.timeout_s = timeout_s
        self.broker = broker
        self.pages: PagePublisher | None = None
        """What the task's mirror is told of each write (with a broker only)."""
        if broker is not None:  # the client SDK loads no broker module without a broker
            from agent_tasks.starter.pages import PagePublisher

            self.pages = PagePublisher(broker, graph)

    def workflow_id(self, task: str, field: str = "task") -> str:
        """The workflow id of ``task`` in this project (``task_workflow_id``): every call naming a
        task comes through here, so one rule checks every name.

        Raises:
            pydantic.ValidationError: ``task`` is not a ``TaskName`` (naming ``field``).
        """
        return task_workflow_id(self.project_id, checked(task, TaskName, field))

    def _unavailable(self, err: Exception, task_queue: str | None = None) -> TaskServiceUnavailable:
        address = self.client.service_client.config.target_host
        return _unavailable(err, address, task_queue or self.task_queue)

    async def task_queue_of(self, workflow_id: str | None) -> str | None:
        """The task queue the workflow runs on (from its description), None when unknown or not
        answered in ``DESCRIBE_TIMEOUT_S``."""
        if workflow_id is None:
            return None
        handle = self.client.get_workflow_handle(workflow_id)
        try:
            description = await asyncio.wait_for(handle.describe(), DESCRIBE_TIMEOUT_S)
        except (RPCError, TimeoutError):
            return None
        return description.task_queue

    def handle(self, task: str) -> WorkflowHandle[Any, Any]:
        """The handle of ``task``'s workflow (its current run).

        Raises:
            pydantic.ValidationError: ``task`` is not a ``TaskName``.
        """
        return self.client.get_workflow_handle(self.workflow_id(task))

    async def call(self, call: Callable[[], Awaitable[_T]], workflow_id: str | None = None) -> _T:
        """Run one Temporal call within ``timeout_s``, resending it while the server turns it away
        as busy. Lost connections, no worker polling and no answer in time raise
        ``TaskServiceUnavailable`` (naming ``workflow_id``'s task queue); other ``RPCError`` errors
        propagate."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        delay, most = _BUSY_BACKOFF_S
        while True:
            try:
                return await asyncio.wait_for(call(), max(deadline - loop.time(), 0.001))
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
                queue = await self.task_queue_of(workflow_id) or self.task_queue
                raise TaskServiceUnavailable(
                    f"no answer within {self.timeout_s:g} s from Temporal at "
                    f"{self.client.service_client.config.target_host}: is a worker polling task "
                    f"queue {queue!r}? A write may still be recorded once one is; "
                    "retry it with the same request id"
                ) from err
            except RPCError as err:
                if not _busy(err):
                    if _no_worker(err):
                        named = await self.task_queue_of(workflow_id)
                        raise self._unavailable(err, named) from err
                    if _lost(err):
                        raise self._unavailable(err) from err
                    raise
                if loop.time() + delay >= deadline:
                    raise self._unavailable(err) from err
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, most)

    async def execute_update(self, task: str, update: Any, input: Any) -> WriteResult:
        """Send one write update (the caller holds the task's lane), resent while the task drains
        (``_RESEND``, up to ``_DRAIN_WAIT_S``), refusals and duplicates mapped to results; a
        workflow that closes while the write waits gives ``task_closed``, or the outcome it took.

        Raises:
            temporalio.service.RPCError: ``NOT_FOUND`` when no workflow of the task runs, or another
                the server sent.
        """
        if not valid_request_id(input.request_id):
            return refused(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
        handle = self.handle(task)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DRAIN_WAIT_S
        delay = 0.02
        ids: list[str] = []  # each call's update id: random, as the SDK's, and known

        async def start() -> WorkflowUpdateHandle[WriteOutcome]:
            ids.append(str(uuid.uuid4()))
            return await handle.start_update(
                update,
                input,
                id=ids[-1],
                wait_for_stage=WorkflowUpdateStage.COMPLETED,
                result_type=WriteOutcome,
            )

        while True:
            try:
                # started and waited for as execute_update does, keeping the run that took it;
                # no answer in time names the task's own queue, not ours
                sent = asyncio.ensure_future(self.call(start, handle.id))
                closed = await _first_or_closed(sent, handle)
                if closed is not None:
                    ended = await _after_close(handle, ids[-1]) if ids else None
                    return _ended_first(task, closed) if ended is None else from_outcome(ended)
                started = sent.result()
                outcome = await started.result()
            except WorkflowUpdateFailedError as err:
                if _resend(err) and loop.time() < deadline:
                    await asyncio.sleep(delay)  # the new run takes it once the old ends
                    delay = min(delay * 2, 0.5)
                    continue
                return from_update_failure(err)
            except RPCError as err:
                if not _aborted_by_close(err):
                    raise
                return _ended_first(task, await _close_status(handle))
            if self.pages is not None:
                self.pages.wrote(handle.id, started.workflow_run_id, input, outcome)
            return from_outcome(outcome)
