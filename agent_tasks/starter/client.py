"""The client apps import: ``ConversationHistory`` over a client from ``config.connect()``.

Writes never raise for a refusal: they return a ``WriteResult`` whose ``error`` is an
``ErrorCode``. A lost or unreachable server raises ``TaskServiceUnavailable``. Arguments that
are not of the right shape (an unknown kind, an over-long name, a payload that is not text)
raise pydantic's ``ValidationError`` naming the field, before anything is sent.

Deduplication is the workflow's own: each write carries a request id, and the workflow answers a
repeated id (same arguments) with the stored result (``duplicate`` True), in a window of the task's
last ``REQUEST_WINDOW`` writes that survives continue-as-new. Update ids are left to the SDK
(random), since the server's update-id deduplication lasts one run only and ignores the arguments.

``ConversationHistory`` declares every public method as a method with its signature and its
contract (``help()`` and ``inspect.signature`` read them), each calling the room that runs it;
the rooms, each one job and each holding the rooms it calls:
``starter.transport.Transport`` (the settings and the calls: retries, the time limit, the
ordered lane of writes), ``starter.reads.TaskReads`` (one task through the cross-run reader
``tasklog.reader.TaskReader``, which the activities share; the graph store's reads),
``starter.writes.TaskWrites`` (events, steps, finish, decisions),
``starter.lifecycle.TaskLifecycle`` (create, cancel, wait, input) and ``starter.turns.TaskTurns``
(resume, continue, retry a step, branch). No room inherits another.
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

    # ------------------------------------------------------- the reads (starter.reads.TaskReads)

    async def get_task(self, name: str) -> GetTaskResult:
        """The task view (no event bodies); ``found`` False when the name is not in this
        project. Works for running and finished tasks; a closed one is read without a worker
        (``tasklog.reader``: its result, or the graph store), however its run closed.

        Raises:
            pydantic.ValidationError: ``name`` is not a task name (field ``task``).
        """
        return await self.reads.get_task(name)

    async def wait_mirrored(self, task: str, timeout_s: float | None = None) -> bool:
        """Wait until Neo4j holds every write the task had taken when the call began, for a
        read across tasks that must see them: with a graph, until the task node's
        ``mirrored_write`` reaches the view's ``writes`` (the mirror copies a write within
        about ``MIRROR_FOLLOW_AGE`` of its acknowledgement); without one, until the view's
        ``unmirrored_writes`` is 0, which the workflow learns later, when the mirror's call
        ends (``MIRROR_FOLLOW_IDLE`` after the last write). Polled every ``MIRRORED_POLL_S``.

        Returns:
            True once Neo4j holds them; False when the task is not found or ``timeout_s``
            (None: this object's ``timeout_s``) passed first (Neo4j down or slow: the view's
            ``mirror_error`` says why).
        """
        return await self.reads.wait_mirrored(task, timeout_s)

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
        return await self.reads.list_events(task, after_seq, limit)

    async def answer_outcome(
        self, task: str, request_id: str, *, after_seq: int = 0
    ) -> AnswerOutcome:
        """What the task did with the answer sent by signal under ``request_id``
        (``submit_input(..., request_id=...)``; a signal returns nothing of its fate): the
        ``input_response`` event the task recorded with that request id, read from the task's
        events after ``after_seq`` (``list_events``, a page of ``PAGE_LIMIT_MAX`` at a time, so
        a closed task is read without a worker too). ``outcome`` is ``taken``, ``rejected``
        or ``late`` (with ``error``), or ``pending`` while the task has recorded nothing of it.

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
        ``STEPS_PAGE_MAX``). A task holds up to ``MAX_STEPS_PER_TASK`` steps; the steps a run holds
        (open ones, and those changed in it) come from the workflow, the steps closed in earlier
        runs from Neo4j (and from those runs while Neo4j lacks them), the newest record of each name
        winning.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field
                (``StepsRead``).
            GraphNotConfigured: the task has steps of earlier runs and no graph was given.
        """
        return await self.reads.list_steps(task, state, limit, after_name=after_name)

    async def list_tasks(
        self, status: TaskStatus | str | None = None, limit: int = 50
    ) -> list[str]:
        """Task names of this project from Temporal visibility (works without Neo4j),
        newest first, optionally of one status (the ``TaskStatus`` search attribute).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (``TaskListFilter``).
        """
        return await self.reads.list_tasks(status, limit)

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
        return await self.reads.list_decisions(task, after_seq, limit)

    async def get_decision(self, decision_id: str) -> DecisionRow | None:
        """The decision of this project with id ``decision_id`` (as ``list_decisions`` reads
        it), None when Neo4j has none.

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
        """This project's tasks from Neo4j, in name order after ``after_name`` (the paging
        cursor: pass the last name of a page), filtered by status, agent, session, parent,
        a part of the name, the creation time (``since`` <= created < ``until``) or an open
        input request (``TaskFilter``).

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
        """The task and its child tasks down to ``depth`` levels (0 to 20), from Neo4j.

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
        """Events across this project's tasks by kind, name and time range (``since`` <= time
        < ``until``, timezone-aware), oldest first, from Neo4j (``EventFilter``).
        ``failed_only`` keeps the results of failed steps (for example every failed tool call).

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
        """Steps across this project's tasks in a state (for example every ``unknown`` step
        that needs a person), from Neo4j (``StepFilter``).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        return await self.reads.find_steps(state=state, limit=limit)

    async def failed_tool_calls(self) -> list[ToolFailures]:
        """Failed tool calls across this project's tasks, by tool name, from Neo4j."""
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
        """Append one event; ``result.event`` is the recorded event (``result.seq`` its
        seq). A payload over ``MAX_PAYLOAD_CHARS`` characters is cut (the event keeps the full
        length and SHA-256). See ``record_events``."""
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

        A batch over one update's bounds (``MAX_EVENTS_PER_UPDATE`` events or
        ``MAX_PAYLOAD_BYTES`` of JSON) is sent as several updates,
        each under a request id derived from ``request_id`` (``chunk_request_id``). They are
        not atomic together: on a refusal, the updates before it stay recorded, the result
        has ``recorded`` False and ``first_seq``/``last_seq`` of what was recorded, and a
        retry with the same request id records the rest once.

        With a graph, each event's text is sealed first (``sealing.seal``) under its own
        key, a leaf of the task's key tree, and the split is of the sealed events. The tree is
        stored in Neo4j before this process's first write to the task is sent (one
        transaction, waited for at most ``KEY_STORE_WAIT_S``: else the write is refused
        ``key_store_unavailable`` and nothing is sent); later writes need no Neo4j. Keys of
        events the workflow did not take (a refusal, a repeated request id) were never
        stored: they cost nothing.
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
        """Set one step's state (``STEP_TRANSITIONS``). ``result_event_seq`` must name an
        event of this task (else ``event_not_found``). A new step's kind defaults to tool."""
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
        """Apply step writes in order. Up to ``MAX_STEPS_PER_UPDATE`` writes are one update, all or
        nothing; larger lists are split like ``record_events``. A list naming more distinct steps
        than a task may hold is refused (``step_limit_reached``) before anything is sent."""
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
        """Close the task as done, failed or cancelled. The workflow completes once the
        mirror has caught up; later writes are refused with ``task_closed``. A retry with
        the same request id after the close still returns the stored result."""
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
        """Create a task, or return the existing one of that name and goal.

        Uses update-with-start: the workflow starts if it is not running and the
        ``create_task`` update runs in its first workflow task. The same name with the same
        goal returns the existing task (``duplicate`` True, ``created`` False, ``task`` its view,
        as the ledger's guide has it); another goal is ``task_exists``.
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
            branched_from: the task's log starts as a copy of this task's events up to this
                seq (``branch_from`` is the way to ask for it).
            task_queue: the task queue its workflow runs on (its agent, tools and model
                calls); None: this object's ``task_queue``.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``TaskStart``), naming
                the field; nothing is sent.
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
        """Cancel the task: a Temporal cancel request, the same as ``temporal workflow cancel``
        or the Web UI's. The task cancels its agent (a running tool sees the cancellation) and,
        unless ``cascade`` is False, the child tasks its agent spawned (each reports
        ``cancelled`` back); it settles every step left ``in_progress`` as ``unknown``, records
        a final event, ends ``cancelled`` (view, search attribute, Neo4j) and its workflow
        closes as cancelled. (Terminating the workflow instead is the unclean path: nothing of
        this happens.) A task that already ended ``done`` or ``failed`` while children it
        spawned still run (its workflow open for their ends) keeps its status: the cancel is
        recorded (a ``cancel_after_end`` note), its running children are cancelled, and the
        view, the search attribute, Neo4j and Temporal (``COMPLETED``) keep saying how it
        ended (``workflows.task.TaskWorkflow._cancelled_after_end`` says why it is recorded,
        not refused).

        Returns:
            ``recorded`` True once requested (``wait_task`` waits for the end);
            ``task_not_found``; ``task_closed`` when the task's workflow had already closed.
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
        """Answer an input request by signal (fire and forget): ``recorded`` True once the
        signal is in the task's history. Signals of one client to one task are sent in call
        order (the task's lane, as writes are), so answers sent one after the other reach the
        task in that order. The task takes it when it runs (``inbox.take_answer``): a repeat
        of the request id is ignored; an answer is bound to one request, the one it names
        (kept until that request is asked, if it is not yet) or, with ``input_id`` None, the
        oldest request open when it arrives (with none open it is rejected, never kept for a
        later one); one that fails the request's schema is recorded as rejected (an
        ``input_response`` event named ``rejected``) and the request stays open; one naming a
        request that timed out is recorded as ``late`` and changes nothing.

        Returns:
            ``recorded``; ``task_closed`` when the task has ended; ``task_not_found``.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field, or
                an answer no request may take (``_input_answer``); nothing is sent.
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
        (no such open request, or ``input_id`` None while several are open),
        ``input_invalid`` (the schema's message), ``input_closed`` (the
        request timed out or closed), ``task_closed`` (the task has ended).

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field, or
                an answer no request may take (``_input_answer``); nothing is sent.
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
        ``ApprovalChoice``; ``workflows.agents.approvals`` says what each choice does):
        ``accept``, ``edit`` with ``arguments`` (checked against the tool's argument model's
        JSON Schema on arrival: ``input_invalid`` names the field), ``answer`` with ``text``
        (the tool's result for the model) or ``ignore``. The decision's author is this
        client's ``agent_id``.

        ``digest`` is the digest of the call the person was shown (``ApprovalAsk.digest``, in
        full or its first 12 or more characters): the task refuses the answer
        (``approval_stale``) when the request now asks about another call. None: the digest of
        the call the request asks about when this reads it (for code that decides on what it
        reads itself).

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
        (``workflows.lifecycle``; ``awaiting_children`` with no child running is ``queued`` at
        once). Refusals: ``run_by_agent`` (an agent task's agent sets its own), ``task_closed``
        and those of every write.

        Raises:
            pydantic.ValidationError: another status (``done``, ``failed``, ``cancelled``:
                ``finish_task``; ``awaiting_input``: ``request_input``).
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
        """Ask a person for input on a recorded task (its agent runs in the app): an
        ``input_request`` event (``result.seq``), the request in the view, status
        ``awaiting_input`` until every open request is answered (``respond``,
        ``submit_input``), then ``queued``. Refusals: ``input_exists``, ``schema_invalid``,
        ``input_limit_reached``, ``run_by_agent`` and those of every write.

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
        """Start a child task ``name`` of the recorded task ``parent`` (a child workflow, a
        recorded task one level below it, labelled ``spawn_key`` in the parent): returns once
        it has started; its end comes back to the parent as a ``child_result`` event. The
        parent's status is left as it is (set ``awaiting_children`` to wait). Refusals:
        ``task_exists`` (the key or name used already), ``child_limit_reached``,
        ``run_by_agent`` and those of every write.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, naming the field.
        """
        return await self.lifecycle.spawn_child(
            parent, spawn_key, name, goal, session_id=session_id, request_id=request_id
        )

    async def wait_task(
        self, task: str, *, until: TaskStatus | str | None = None
    ) -> TaskView | None:
        """Wait until the task's workflow has ended (an agent task finished, failed or was
        cancelled, and the mirror caught up) and return its final view; None when the task is
        not in this project. Waits without a time limit (wrap it in ``asyncio.timeout``).

        With ``until`` (a ``TaskStatus`` or its value, ``"awaiting_input"`` say), return the
        view as soon as the task has that status or has ended, whichever comes first (its
        ``status`` says which): the view is read by query every ``STATUS_POLL_S`` seconds, so a
        status held for less than that may be missed (an ended status never is).

        Raises:
            pydantic.ValidationError: ``until`` is not a status (field ``until``).
        """
        return await self.lifecycle.wait_task(task, until=until)

    # ---------------------------- resume, continue, retry, branch (starter.turns.TaskTurns)

    async def resume_task(self, task: str, *, retry: Sequence[StepRetry] = ()) -> WriteResult:
        """Run a failed or cancelled agent task's agent again, in a new run of the same task
        (its workflow id, started from the last run's state), replaying the turn it set out to
        run: steps that completed keep their results and ``unknown`` ones their ``unknown``
        outcome (agent code's steps are memoized by name; nothing runs an ``unknown`` step
        again unless ``retry`` names it), a failed one runs again under a new idempotency key;
        the budgets count afresh. Only a turn that committed nothing resumes: a failed run was
        rolled back (its events hidden from the model), so its turn resumes; a run cancelled
        after its tools ran is continued instead (``continue_task``), never replayed.

        Args:
            task: the task's name.
            retry: steps a person asks to run again (``retry_step`` of a closed task).

        Returns:
            ``recorded`` True once started; ``task_not_found``; ``not_resumable`` for a task
            that runs, a recorded task, or one that ended ``done``; ``no_resumable_turn`` for
            an interrupted turn that committed something.
        """
        return await self.turns.resume_task(task, retry=retry)

    async def continue_task(self, task: str, *, retry: Sequence[StepRetry] = ()) -> WriteResult:
        """Continue a failed or cancelled agent task's interrupted turn (one whose tools ran
        before it was cancelled: ``has_interrupted_turn``) in a new run: the model is asked
        again with what the turn committed, its closed calls included (an ``unknown`` one with
        its "effect unknown" result), with no new user message; no interrupted call is run
        again (the model decides). If the model calls the same tool with the same arguments as
        a call that ended ``unknown``, that call runs as a retry of the unknown step, under its
        idempotency key (``same-call-same-key``), so a server that deduplicates by key performs
        the effect once. Agent code starts again from the top, its steps memoized.

        Returns:
            as ``resume_task``; ``no_interrupted_turn`` when the last turn was not interrupted
            after its tools ran (``resume_task`` it).
        """
        return await self.turns.continue_task(task, retry=retry)

    async def has_interrupted_turn(self, task: str) -> bool:
        """True when the task's last turn was interrupted after its tools ran and the model has
        not answered since (continue it with ``continue_task``); False for a task of this
        project that has none, or no such task."""
        return await self.turns.has_interrupted_turn(task)

    async def retry_step(
        self, task: str, step: str, *, reason: str, request_id: str | None = None
    ) -> WriteResult:
        """Ask that the agent task's ``unknown`` or ``failed`` step run again when its agent
        code reaches it (recorded as a decision citing the step, by this client's agent id):
        an ``unknown`` step under its old idempotency key (its effect may have happened), a
        failed one as a new attempt. A running task takes it at once (the ``retry_step``
        update); a failed or cancelled one is run again with it (``continue_task`` for an
        interrupted turn, else ``resume_task``). The tool loop names a step by its round, so
        its model, not a retry, decides whether a call runs again.

        Returns:
            ``recorded``; ``task_not_found``; ``step_not_found``; ``invalid_transition`` (the
            step is not ``unknown`` or ``failed``); ``not_resumable`` (a recorded task, or one
            that ended ``done``).

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
        """Start a new line from a point of a task's log: a new task ``name`` (same goal,
        agent, session and metadata) whose log is a copy of ``source``'s events 1 to ``seq``
        (the same kinds, authors and text; sealed text sealed again under the branch's own
        keys), linked in Neo4j by ``BRANCHED_FROM {seq}``. The source is untouched. An agent
        task's branch then continues from there: it reuses what its source settled before the
        point (a step that ended ``completed`` or ``unknown`` with its result at ``seq`` or
        before returns that result, its tool not called again; a question answered at ``seq``
        or before returns its answer, nobody asked; a child whose end was recorded at ``seq``
        or before is not spawned again), its agent code runs again from the top,
        live from the point on, the model asked with the copied transcript and no new user
        message (docs/agent-tasks.md, "Branch"); a recorded one takes writes once the copy is
        done (this call returns then).

        The branch runs on the task queue its source's workflow runs on (where its agent's
        code, tools and model are: the source's workers), whatever this object's
        ``task_queue`` is; ``task_queue`` names another (say, workers with a newer model). A
        source whose task queue Temporal no longer knows (its history passed the namespace's
        retention) branches onto this object's.

        Unlike Temporal's reset, which rewinds a workflow's own history to a workflow task and
        runs it again under the same workflow id (its later events gone from the new run), a
        branch is a second task: both lines stay, each with its own log, steps and
        decisions, and a branch point is any event seq, not a workflow task.

        Returns:
            ``recorded`` with the branch's view once its log holds the copy;
            ``task_not_found`` (no source); ``event_not_found`` (``seq`` past the source's
            last event); ``task_exists`` (the name is taken); ``task_busy`` (the copy did
            not finish within ``timeout_s``: it goes on).

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
        """End the use of Temporal cleanly before the process exits (``async with
        ConversationHistory(...) as history`` calls it): waits for the pages still being
        published (``starter.pages``), then until the Temporal SDK's runtime threads
        have left Python (``config.release_runtime``), without which an app that writes and
        exits can abort in the interpreter's finalization. The client, the graph and the
        broker stay open (they belong to the caller); calling it twice is harmless."""
        if self.transport.pages is not None:
            await self.transport.pages.published()
        await release_runtime()
