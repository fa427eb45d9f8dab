"""The client apps import: ``ConversationHistory`` over a client from ``config.connect()``.

Writes never raise for a refusal: they return a ``WriteResult`` whose ``error`` is an
``ErrorCode``. A lost or unreachable server raises ``TaskServiceUnavailable``. Arguments that
are not of the right shape (an unknown kind, an over-long name, a payload that is not text)
raise pydantic's ``ValidationError`` naming the field, before anything is sent.

Deduplication is the workflow's own: each write carries a request id, and the workflow answers a
repeated id (same arguments) with the stored result (``duplicate`` True), in a window of the task's
last ``REQUEST_WINDOW`` writes that survives continue-as-new. Update ids are left to the SDK
(random), since the server's update-id deduplication lasts one run only and ignores the arguments.

``ConversationHistory`` declares every public method in one place (the table in its class body)
and has the rooms that run them, each one job and each holding the rooms it calls:
``starter.transport.Transport`` (the settings and the calls: retries, the time limit, the
ordered lane of writes), ``starter.reads.TaskReads`` (one task through the cross-run reader
``tasklog.reader.TaskReader``, which the activities share; the graph store's reads),
``starter.writes.TaskWrites`` (events, steps, finish, decisions),
``starter.lifecycle.TaskLifecycle`` (create, cancel, wait, input) and ``starter.turns.TaskTurns``
(resume, continue, retry a step, branch). No room inherits another.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Self,
    TypeVar,
    cast,
    overload,
)

from temporalio.client import Client

from agent_tasks.config import release_runtime
from agent_tasks.contract import ProjectId, ShortText
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.lifecycle import TaskLifecycle
from agent_tasks.starter.reads import TaskReads
from agent_tasks.starter.transport import Transport
from agent_tasks.starter.turns import TaskTurns
from agent_tasks.starter.writes import TaskWrites

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    from agent_tasks.broker import Broker
    from agent_tasks.taskgraph.port import GraphStore

_Room = TypeVar("_Room")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Runs(Generic[_Room, _P, _R]):
    """A public method of ``ConversationHistory``, run by one of its rooms: read on an
    instance it is the room's method bound to the room (its signature and docstring)."""

    def __init__(self, room: str, method: Callable[Concatenate[_Room, _P], _R]) -> None:
        self.room = room
        self.method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, history: None, owner: type[Any] | None = None) -> Self: ...

    @overload
    def __get__(self, history: object, owner: type[Any] | None = None) -> Callable[_P, _R]: ...

    def __get__(self, history: object, owner: type[Any] | None = None) -> Any:
        if history is None:
            return self
        return cast("Callable[_P, _R]", types.MethodType(self.method, getattr(history, self.room)))


# Long: the one place every public method is declared: the constructor, the settings the rooms
# share, and the table of methods with the room that runs each
class ConversationHistory:
    """A project's tasks, seen and written as one agent.

    Args:
        client: from ``connect()`` (pydantic data converter).
        project_id: scopes every read and write (1 to 64 of ``[A-Za-z0-9_.-]``); a task of
            another project is ``task_not_found`` / ``found=False`` here.
        agent_id: author of the events and steps this object writes.
        session_id: session new tasks belong to, if any.
        task_queue: the workers' task queue.
        graph: the graph store (``taskgraph.port.GraphStore``); needed to read events of
            earlier runs (``list_events``), tasks whose history passed the namespace's
            retention, decisions, and for the cross-task reads. None: those reads raise
            ``GraphNotConfigured``. With a graph, event text is sealed (one data key per
            event in its key store: ``sealing.seal``) so that ``redact_event`` can remove
            it from the history; without one it is written in plain text.
        timeout_s: seconds one Temporal call may take (a write waits for a worker to run
            it); past that it raises ``TaskServiceUnavailable``.
        broker: the broker (``broker.Broker``) on which each event write Temporal took is
            published, signed, for the task's mirror (``broker.PageMessage``): the worker
            copies it to the graph store without waiting for its poll of the history. Needs
            ``graph`` (the signing key is of the task's key tree). None: the mirror finds the
            writes by its poll alone, as fast at one write at a time and with one history
            poll per write more under many writers.

    Raises:
        ValidationError: a malformed project id, agent id or session id (naming it).
    """

    def __init__(
        self,
        client: Client,
        project_id: str,
        agent_id: str,
        *,
        session_id: str | None = None,
        task_queue: str = "agent-tasks",
        graph: GraphStore | None = None,
        timeout_s: float = 30.0,
        broker: Broker | None = None,
    ) -> None:
        self.transport = Transport(
            client,
            checked(project_id, ProjectId, "project_id"),
            checked(agent_id, ShortText, "agent_id"),
            checked(session_id, ShortText | None, "session_id"),
            task_queue,
            graph,
            timeout_s,
            broker,
        )
        """The settings and the calls (each room holds it)."""
        self.reads = TaskReads(self.transport)
        """The reads."""
        self.writes = TaskWrites(self.transport, self.reads)
        """The writes to a task's log."""
        self.lifecycle = TaskLifecycle(self.transport, self.reads, self.writes)
        """Creating, cancelling, waiting for tasks and answering their input."""
        self.turns = TaskTurns(self.transport, self.reads, self.writes, self.lifecycle)
        """Resuming, continuing, retrying and branching agent tasks."""

    # ---------------------------------------------------------------- the settings

    @property
    def client(self) -> Client:
        """The Temporal client."""
        return self.transport.client

    @property
    def project_id(self) -> str:
        """The project every read and write is scoped to."""
        return self.transport.project_id

    @property
    def agent_id(self) -> str:
        """The author of what this object writes (settable)."""
        return self.transport.agent_id

    @agent_id.setter
    def agent_id(self, agent_id: str) -> None:
        self.transport.agent_id = checked(agent_id, ShortText, "agent_id")

    @property
    def session_id(self) -> str | None:
        """The session new tasks belong to (settable)."""
        return self.transport.session_id

    @session_id.setter
    def session_id(self, session_id: str | None) -> None:
        self.transport.session_id = checked(session_id, ShortText | None, "session_id")

    @property
    def task_queue(self) -> str:
        """The workers' task queue (settable)."""
        return self.transport.task_queue

    @task_queue.setter
    def task_queue(self, task_queue: str) -> None:
        self.transport.task_queue = task_queue

    @property
    def graph(self) -> GraphStore | None:
        """The graph store, if any."""
        return self.transport.graph

    @property
    def broker(self) -> Broker | None:
        """The broker written pages are published on, if any."""
        return self.transport.broker

    @property
    def timeout_s(self) -> float:
        """Seconds one Temporal call may take (settable)."""
        return self.transport.timeout_s

    @timeout_s.setter
    def timeout_s(self, timeout_s: float) -> None:
        self.transport.timeout_s = timeout_s

    def workflow_id(self, task: str, field: str = "task") -> str:
        """The workflow id of ``task`` in this project (``Transport.workflow_id``).

        Raises:
            pydantic.ValidationError: ``task`` is not a task name (naming ``field``).
        """
        return self.transport.workflow_id(task, field)

    # ---------------------------------------------------------------- the methods, by room

    get_task = _Runs("reads", TaskReads.get_task)
    wait_mirrored = _Runs("reads", TaskReads.wait_mirrored)
    list_events = _Runs("reads", TaskReads.list_events)
    answer_outcome = _Runs("reads", TaskReads.answer_outcome)
    list_steps = _Runs("reads", TaskReads.list_steps)
    list_tasks = _Runs("reads", TaskReads.list_tasks)
    list_decisions = _Runs("reads", TaskReads.list_decisions)
    get_decision = _Runs("reads", TaskReads.get_decision)
    find_tasks = _Runs("reads", TaskReads.find_tasks)
    task_tree = _Runs("reads", TaskReads.task_tree)
    find_events = _Runs("reads", TaskReads.find_events)
    find_steps = _Runs("reads", TaskReads.find_steps)
    failed_tool_calls = _Runs("reads", TaskReads.failed_tool_calls)

    record_event = _Runs("writes", TaskWrites.record_event)
    record_events = _Runs("writes", TaskWrites.record_events)
    set_step = _Runs("writes", TaskWrites.set_step)
    set_steps = _Runs("writes", TaskWrites.set_steps)
    finish_task = _Runs("writes", TaskWrites.finish_task)
    record_decision = _Runs("writes", TaskWrites.record_decision)

    create_task = _Runs("lifecycle", TaskLifecycle.create_task)
    cancel_task = _Runs("lifecycle", TaskLifecycle.cancel_task)
    submit_input = _Runs("lifecycle", TaskLifecycle.submit_input)
    respond = _Runs("lifecycle", TaskLifecycle.respond)
    approve = _Runs("lifecycle", TaskLifecycle.approve)
    set_status = _Runs("lifecycle", TaskLifecycle.set_status)
    request_input = _Runs("lifecycle", TaskLifecycle.request_input)
    spawn_child = _Runs("lifecycle", TaskLifecycle.spawn_child)
    wait_task = _Runs("lifecycle", TaskLifecycle.wait_task)

    resume_task = _Runs("turns", TaskTurns.resume_task)
    continue_task = _Runs("turns", TaskTurns.continue_task)
    has_interrupted_turn = _Runs("turns", TaskTurns.has_interrupted_turn)
    retry_step = _Runs("turns", TaskTurns.retry_step)
    branch_from = _Runs("turns", TaskTurns.branch_from)

    # ---------------------------------------------------------------- the end

    async def __aenter__(self) -> ConversationHistory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """End the use of Temporal cleanly before the process exits (``async with
        ConversationHistory(...) as history`` calls it): waits for the pages still being
        published (``starter.pages``), then until the Temporal SDK's runtime threads
        have left Python (``config.release_runtime``), without which an app that writes and
        exits can abort in the interpreter's finalization. The client, the graph and the
        broker stay open (they belong to the caller); calling it twice is harmless."""
        if self.transport.pages is not None:
            await self.transport.pages.published()
        await release_runtime()
