"""The client apps import: ``ConversationHistory`` over a client from ``config.connect()``.

Writes never raise for a refusal: they return a ``WriteResult`` whose ``error`` is an ``ErrorCode``.
An unreachable server raises ``TaskServiceUnavailable``; an argument of the wrong shape raises
pydantic's ``ValidationError`` naming the field, before anything is sent.

Deduplication is the workflow's own, by request id, in a window of ``REQUEST_WINDOW`` writes that
survives continue-as-new (the server's update-id deduplication lasts one run and ignores the
arguments). Each public method calls the room that runs it: ``starter.transport``,
``starter.reads``, ``starter.writes``, ``starter.lifecycle`` and ``starter.turns``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue
from temporalio.client import Client

from agent_tasks.config import release_runtime
from agent_tasks.contract import (
    PAGE_LIMIT_MAX,
    AgentSpec,
    ApprovalType,
    BranchPoint,
    EventInput,
    EventKind,
    ProjectId,
    Role,
    ShortText,
    StepKind,
    StepRetry,
    StepState,
    StepWrite,
    TaskStatus,
    TaskView,
)
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.lifecycle import TaskLifecycle
from agent_tasks.starter.reads import TaskReads
from agent_tasks.starter.results import (
    AnswerOutcome,
    DecisionsResult,
    EventsResult,
    GetTaskResult,
    StepsResult,
    WriteResult,
)
from agent_tasks.starter.transport import Transport
from agent_tasks.starter.turns import TaskTurns
from agent_tasks.starter.writes import TaskWrites
from agent_tasks.taskgraph.models import (
    DecisionRow,
    EventRow,
    StepRow,
    TaskRow,
    ToolFailures,
    TreeRow,
)

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    from agent_tasks.broker import Broker
    from agent_tasks.taskgraph.port import GraphStore


# Long: the published face, one method per operation of the ledger guide and the Tasks API,
# each with its contract and a one-line call of the room that runs it
class ConversationHistory:
    """A project's tasks, seen and written as one agent.

    Args:
        client: from ``connect()`` (pydantic data converter).
        project_id: scopes every read and write (1 to 64 of ``[A-Za-z0-9_.-]``); another project's
            task is ``task_not_found`` here.
        agent_id: author of the events and steps this object writes.
        session_id: session new tasks belong to, if any.
        task_queue: the workers' task queue.
        graph: the graph store (``taskgraph.port.GraphStore``), needed for earlier runs' events,
            decisions and cross-task reads (else ``GraphNotConfigured``); with it event text is
            sealed (``sealing.seal``), so ``redact_event`` can remove it from the history.
        timeout_s: seconds one Temporal call may take; past it, ``TaskServiceUnavailable``.
        broker: where each event write is published, signed, for the task's mirror
            (``starter.pages``); needs ``graph``. None: the mirror polls the history alone.

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

    # ------------------------------------------------------- the reads (starter.reads.TaskReads)

    async def get_task(self, name: str) -> GetTaskResult:
        """The task view (no event bodies); ``found`` False when the name is not in this project. A
        closed task is read without a worker (its result, or the graph store).

        Raises:
            pydantic.ValidationError: ``name`` is not a task name (field ``task``).
        """
        return await self.reads.get_task(name)

    async def wait_mirrored(self, task: str, timeout_s: float | None = None) -> bool:
        """Wait until the graph store holds every write the task had taken when the call began (for
        a cross-task read that must see them), polling every ``MIRRORED_POLL_S``.

        Returns:
            True once it does; False when the task is not found or ``timeout_s`` (None: this
            object's) passed first (the view's ``mirror_error`` says why).
        """
        return await self.reads.wait_mirrored(task, timeout_s)

    async def list_events(self, task: str, after_seq: int = 0, limit: int = 50) -> EventsResult:
        """Events with seq > ``after_seq`` in seq order, at most ``limit`` (1 to 200), across every
        run: the current run's from the workflow, earlier runs' from the graph store up to the
        mirror's watermark and from those runs beyond it, so a read never waits for the mirror.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``EventsRead``).
            GraphNotConfigured: earlier runs' mirrored events are needed and no graph was given.
            GraphIncomplete: the graph store lacks some of them (``agent-tasks graph rebuild``).
        """
        return await self.reads.list_events(task, after_seq, limit)

    async def answer_outcome(
        self, task: str, request_id: str, *, after_seq: int = 0
    ) -> AnswerOutcome:
        """What the task did with the answer sent by signal under ``request_id``: its
        ``input_response`` event, read after ``after_seq``. ``outcome`` is ``taken``, ``rejected``
        or ``late`` (with ``error``), or ``pending`` while nothing is recorded.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape.
            GraphNotConfigured, GraphIncomplete: as ``list_events``.
        """
        return await self.reads.answer_outcome(task, request_id, after_seq=after_seq)

    async def list_steps(
        self,
        task: str,
        state: StepState | str | None = None,
        limit: int = PAGE_LIMIT_MAX,
        *,
        after_name: str | None = None,
    ) -> StepsResult:
        """A page of the task's steps in name order after ``after_name``, optionally of one state,
        each with its ``result_validity`` and ``idempotency_key``; at most ``limit`` (1 to
        ``STEPS_PAGE_MAX``). Steps closed in earlier runs come from the graph store.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``StepsRead``).
            GraphNotConfigured: the task has steps of earlier runs and no graph was given.
        """
        return await self.reads.list_steps(task, state, limit, after_name=after_name)

    async def list_tasks(
        self, status: TaskStatus | str | None = None, limit: int = 50
    ) -> list[str]:
        """Task names of this project from Temporal visibility (no graph store needed), newest
        first, optionally of one status.

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (``TaskListFilter``).
        """
        return await self.reads.list_tasks(status, limit)

    async def list_decisions(
        self, task: str, after_seq: int = 0, limit: int = 50
    ) -> DecisionsResult:
        """A page of the task's decisions in seq order after ``after_seq``, at most ``limit`` (1 to
        200), from the graph store (as far as the mirror has copied), each with ``needs_review``: a
        cited event redacted, a cited step changed since, or its task deleted.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``DecisionsRead``).
            GraphNotConfigured: no graph was given.
        """
        return await self.reads.list_decisions(task, after_seq, limit)

    async def get_decision(self, decision_id: str) -> DecisionRow | None:
        """The decision ``decision_id`` of this project (as ``list_decisions`` reads it), or None.

        Raises:
            pydantic.ValidationError: ``decision_id`` is not text.
            GraphNotConfigured: no graph was given.
        """
        return await self.reads.get_decision(decision_id)

    async def find_tasks(
        self,
        *,
        status: TaskStatus | str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        parent: str | None = None,
        name_contains: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        open_inputs: bool = False,
        after_name: str | None = None,
        limit: int = 50,
    ) -> list[TaskRow]:
        """This project's tasks from the graph store, in name order after ``after_name`` (the paging
        cursor), filtered as ``TaskFilter`` says (status, agent, session, parent, name part,
        creation time ``since`` <= created < ``until``, an open input request).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        return await self.reads.find_tasks(
            status=status,
            agent_id=agent_id,
            session_id=session_id,
            parent=parent,
            name_contains=name_contains,
            since=since,
            until=until,
            open_inputs=open_inputs,
            after_name=after_name,
            limit=limit,
        )

    async def task_tree(self, task: str, depth: int = 3) -> list[TreeRow]:
        """The task and its child tasks down to ``depth`` levels (0 to 20), from the graph store.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``TreeRead``).
            GraphNotConfigured: no graph was given.
        """
        return await self.reads.task_tree(task, depth)

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
        """Events across this project's tasks by kind, name and time (``since`` <= time < ``until``,
        aware), oldest first, from the graph store (``EventFilter``); ``failed_only`` keeps the
        results of failed steps.

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        return await self.reads.find_events(
            kind=kind, name=name, since=since, until=until, failed_only=failed_only, limit=limit
        )

    async def find_steps(
        self, *, state: StepState | str | None = None, limit: int = 50
    ) -> list[StepRow]:
        """Steps across this project's tasks in a state (every ``unknown`` step, say), from the
        graph store (``StepFilter``).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        return await self.reads.find_steps(state=state, limit=limit)

    async def failed_tool_calls(self) -> list[ToolFailures]:
        """Failed tool calls across this project's tasks, by tool name, from the graph store."""
        return await self.reads.failed_tool_calls()

    # ---------------------------------------- the writes to a log (starter.writes.TaskWrites)

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
        """Append one event; ``result.event`` is the recorded event. A payload over
        ``MAX_PAYLOAD_CHARS`` is cut (the event keeps the full length and SHA-256). See
        ``record_events``."""
        return await self.writes.record_event(
            task, kind, payload, role=role, name=name, call_id=call_id, request_id=request_id
        )

    async def record_events(
        self,
        task: str,
        events: Sequence[EventInput | dict[str, Any]],
        *,
        request_id: str | None = None,
    ) -> WriteResult:
        """Append events in order, with consecutive seqs.

        A batch over one update's bounds (``MAX_EVENTS_PER_UPDATE``, ``MAX_PAYLOAD_BYTES``) is sent
        as several updates (``chunk_request_id``), not atomic together: after a refusal the earlier
        ones stay (``recorded`` False, the seqs of what was recorded), and a retry with the same
        request id records the rest once.

        With a graph, each event's text is sealed first under its own key (``sealing.seal``); the
        task's key tree is stored before this process's first write to the task (waited for at most
        ``KEY_STORE_WAIT_S``, else ``key_store_unavailable`` and nothing is sent).
        """
        return await self.writes.record_events(task, events, request_id=request_id)

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
        """Set one step's state (``STEP_TRANSITIONS``); ``result_event_seq`` must name an event of
        this task (``event_not_found``). A new step's kind defaults to tool."""
        return await self.writes.set_step(
            task,
            step_name,
            state,
            kind=kind,
            result_event_seq=result_event_seq,
            request_id=request_id,
        )

    async def set_steps(
        self, task: str, steps: Sequence[StepWrite], *, request_id: str | None = None
    ) -> WriteResult:
        """Apply step writes in order: up to ``MAX_STEPS_PER_UPDATE`` are one update, all or
        nothing; larger lists are split like ``record_events``. More distinct steps than a task may
        hold are refused (``step_limit_reached``) before anything is sent."""
        return await self.writes.set_steps(task, steps, request_id=request_id)

    async def finish_task(
        self,
        task: str,
        status: TaskStatus | str,
        *,
        result: str | None = None,
        error: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Close the task as done, failed or cancelled; later writes are refused ``task_closed``,
        and a retry with the same request id returns the stored result."""
        return await self.writes.finish_task(
            task, status, result=result, error=error, request_id=request_id
        )

    async def record_decision(
        self,
        task: str,
        statement: str,
        *,
        cites_events: Sequence[int | str] = (),
        cites_steps: Sequence[str] = (),
        request_id: str | None = None,
    ) -> WriteResult:
        """Record a decision: a ``decision`` event whose payload is ``statement``, citing earlier
        events of the task by seq or id and steps by name (at most 100 each). ``result.event`` is
        the decision; its ``cites`` keep each step's state and attempt now, against which
        ``list_decisions`` judges ``needs_review``.

        Refusals: ``event_not_found``, ``step_not_found``, and those of every write.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        return await self.writes.record_decision(
            task,
            statement,
            cites_events=cites_events,
            cites_steps=cites_steps,
            request_id=request_id,
        )

    # -------------------------- create, cancel, wait, answer (starter.lifecycle.TaskLifecycle)

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
        branched_from: BranchPoint | None = None,
        task_queue: str | None = None,
    ) -> WriteResult:
        """Create a task, or return the existing one of that name and goal, by update-with-start.

        The same name and goal returns the existing task (``duplicate`` True, ``created`` False);
        another goal is ``task_exists``, as is a finished task's name, and (with a graph) a deleted
        task's or one past the namespace's retention. ``result.task`` is the view.

        Args:
            name: 1 to 200 characters, no control characters.
            goal: at most 4,000 characters.
            request_id: 1 to 64 characters; a new UUID when None.
            metadata: at most 16 entries, keys up to 128 and values up to 500 characters.
            parent: the parent task in this project (``parent_not_found`` if missing).
            parent_may_follow: skip that check (the importer: a subagent run may come before its
                parent, linked to a placeholder until then).
            session_id: the session of this task; None: this object's ``session_id``.
            agent: the agent that runs the task (an agent task, ``queued``); None: a recorded task
                (``open``).
            branched_from: the log starts as a copy of this task's events up to its seq (use
                ``branch_from``).
            task_queue: the task queue its workflow runs on; None: this object's ``task_queue``.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``TaskStart``), naming the
                field; nothing is sent.
        """
        return await self.lifecycle.create_task(
            name,
            goal,
            request_id=request_id,
            metadata=metadata,
            parent=parent,
            parent_may_follow=parent_may_follow,
            session_id=session_id,
            agent=agent,
            branched_from=branched_from,
            task_queue=task_queue,
        )

    async def cancel_task(self, task: str, *, cascade: bool = True) -> WriteResult:
        """Cancel the task by a Temporal cancel request, by the one cancellation rule
        (``docs/agent-tasks.md``, "Cancellation"): the agent stops, children are cancelled unless
        ``cascade`` is False, steps left ``in_progress`` end ``unknown``, and the task ends
        ``cancelled``. A task already ``done`` or ``failed`` with children running keeps its status:
        the cancel is recorded and its children cancelled.

        Returns:
            ``recorded`` True once requested (``wait_task`` waits for the end); ``task_not_found``;
            ``task_closed`` when the workflow had already closed.
        """
        return await self.lifecycle.cancel_task(task, cascade=cascade)

    async def submit_input(
        self,
        task: str,
        answer: JsonValue,
        *,
        input_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Answer an input request by signal (fire and forget): ``recorded`` True once the signal is
        in the history; one client's signals reach a task in call order. The task binds it to the
        request it names, or the oldest open one (``inbox.take_answer``); its fate is
        ``answer_outcome``'s.

        Returns:
            ``recorded``; ``task_closed`` when the task has ended; ``task_not_found``.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, or an answer no request may
                take (``_input_answer``); nothing is sent.
        """
        return await self.lifecycle.submit_input(
            task, answer, input_id=input_id, request_id=request_id
        )

    async def respond(
        self,
        task: str,
        answer: JsonValue,
        *,
        input_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Answer an input request by update, validated on arrival: ``recorded`` with the
        ``input_response`` event's seq, or refused with nothing recorded: ``input_not_requested``
        (no such open request, or ``input_id`` None while several are open), ``input_invalid``,
        ``input_closed``, ``task_closed``.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, or an answer no request may
                take (``_input_answer``); nothing is sent.
        """
        return await self.lifecycle.respond(task, answer, input_id=input_id, request_id=request_id)

    async def approve(
        self,
        task: str,
        input_id: str,
        choice: ApprovalType,
        *,
        arguments: Mapping[str, JsonValue] | None = None,
        text: str | None = None,
        digest: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Answer the approval request ``input_id`` of a tool call (``respond`` with an
        ``ApprovalChoice``): ``accept``, ``edit`` with ``arguments`` (checked against the tool's
        schema: ``input_invalid``), ``answer`` with ``text``, or ``ignore``; authored by this
        client's ``agent_id``.

        ``digest``: of the call the person was shown (in full, or 12 or more leading characters);
        the task refuses ``approval_stale`` if the request now asks about another call. None: the
        digest this reads now.

        Raises:
            pydantic.ValidationError: a choice of the wrong shape; nothing is sent.
        """
        return await self.lifecycle.approve(
            task,
            input_id,
            choice,
            arguments=arguments,
            text=text,
            digest=digest,
            request_id=request_id,
        )

    async def set_status(
        self, task: str, status: TaskStatus | str, *, request_id: str | None = None
    ) -> WriteResult:
        """Set a recorded task's status: ``queued``, ``in_progress`` or ``awaiting_children``
        (``awaiting_children`` with no child running is ``queued`` at once). Refusals:
        ``run_by_agent``, ``task_closed`` and those of every write.

        Raises:
            pydantic.ValidationError: another status (``finish_task`` ends a task; ``request_input``
                sets ``awaiting_input``).
        """
        return await self.lifecycle.set_status(task, status, request_id=request_id)

    async def request_input(
        self,
        task: str,
        input_id: str,
        prompt: str,
        schema: Mapping[str, JsonValue] | None = None,
        *,
        request_id: str | None = None,
    ) -> WriteResult:
        """Ask a person for input on a recorded task: an ``input_request`` event (``result.seq``),
        the request in the view, ``awaiting_input`` until every open request is answered, then
        ``queued``. Refusals: ``input_exists``, ``schema_invalid``, ``input_limit_reached``,
        ``run_by_agent`` and those of every write.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        return await self.lifecycle.request_input(
            task, input_id, prompt, schema, request_id=request_id
        )

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
        """Start a child task ``name`` of the recorded task ``parent`` (labelled ``spawn_key``
        there); returns once it has started, and its end comes back as a ``child_result`` event.
        Refusals: ``task_exists``, ``child_limit_reached``, ``run_by_agent`` and those of every
        write.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        return await self.lifecycle.spawn_child(
            parent, spawn_key, name, goal, session_id=session_id, request_id=request_id
        )

    async def wait_task(
        self, task: str, *, until: TaskStatus | str | None = None
    ) -> TaskView | None:
        """Wait until the task's workflow has ended (and the mirror caught up) and return its final
        view; None when the task is not in this project. No time limit (wrap it in
        ``asyncio.timeout``).

        With ``until`` (a ``TaskStatus`` or its value), return as soon as the task has that status
        or has ended; the view is read every ``STATUS_POLL_S``, so a shorter status may be missed.

        Raises:
            pydantic.ValidationError: ``until`` is not a status (field ``until``).
        """
        return await self.lifecycle.wait_task(task, until=until)

    # ---------------------------- resume, continue, retry, branch (starter.turns.TaskTurns)

    async def resume_task(self, task: str, *, retry: Sequence[StepRetry] = ()) -> WriteResult:
        """Run a failed or cancelled agent task's agent again in a new run, replaying the turn it
        set out to run (``docs/agent-tasks.md``, "Turns"): completed steps keep their results,
        ``unknown`` ones stay unknown unless ``retry`` names them, failed ones run under a new key;
        budgets count afresh.

        Returns:
            ``recorded`` True once started; ``task_not_found``; ``not_resumable`` (running,
            recorded, or ended ``done``); ``no_resumable_turn`` (the turn committed something:
            ``continue_task`` it).
        """
        return await self.turns.resume_task(task, retry=retry)

    async def continue_task(self, task: str, *, retry: Sequence[StepRetry] = ()) -> WriteResult:
        """Continue a failed or cancelled agent task's interrupted turn (``has_interrupted_turn``)
        in a new run: the model is asked again with what the turn committed and no new user message;
        no interrupted call runs again on its own.

        Returns:
            as ``resume_task``; ``no_interrupted_turn`` when the last turn was not interrupted after
            its tools ran.
        """
        return await self.turns.continue_task(task, retry=retry)

    async def has_interrupted_turn(self, task: str) -> bool:
        """True when the task's last turn was interrupted after its tools ran and the model has not
        answered since; False otherwise, or for no such task."""
        return await self.turns.has_interrupted_turn(task)

    async def retry_step(
        self, task: str, step: str, *, reason: str, request_id: str | None = None
    ) -> WriteResult:
        """Ask that an agent task's ``unknown`` or ``failed`` step run again when its code reaches
        it (a decision citing the step): an ``unknown`` step keeps its key, a failed one is a new
        attempt. A running task takes it at once; a failed or cancelled one is run again with it.

        Returns:
            ``recorded``; ``task_not_found``; ``step_not_found``; ``invalid_transition`` (not
            ``unknown`` or ``failed``); ``not_resumable`` (a recorded task, or one ended ``done``).

        Raises:
            pydantic.ValidationError: a malformed step name or reason.
        """
        return await self.turns.retry_step(task, step, reason=reason, request_id=request_id)

    async def branch_from(
        self,
        source: str,
        seq: int,
        name: str,
        *,
        request_id: str | None = None,
        task_queue: str | None = None,
    ) -> WriteResult:
        """Start a new task ``name`` (the source's goal, agent, session, metadata) whose log is a
        copy of ``source``'s events 1 to ``seq``, linked by ``BRANCHED_FROM {seq}``; the source is
        untouched. An agent task's branch reuses what the source settled by the point and runs on
        live from it (``docs/agent-tasks.md``, "Branch"); it runs on the source's task queue unless
        ``task_queue`` names another.

        Returns:
            ``recorded`` with the branch's view once its log holds the copy; ``task_not_found``;
            ``event_not_found`` (``seq`` past the source's last event); ``task_exists``;
            ``task_busy`` (the copy goes on past ``timeout_s``).

        Raises:
            pydantic.ValidationError: a malformed name or seq.
        """
        return await self.turns.branch_from(
            source, seq, name, request_id=request_id, task_queue=task_queue
        )

    # ---------------------------------------------------------------- the end

    async def __aenter__(self) -> ConversationHistory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """End the use of Temporal before the process exits (``async with`` calls it): waits for
        pages still being published, then for the SDK's runtime threads to leave Python
        (``config.release_runtime``), which an exiting app needs. Client, graph store and broker
        stay open (the caller's); calling it twice is harmless."""
        if self.transport.pages is not None:
            await self.transport.pages.published()
        await release_runtime()
