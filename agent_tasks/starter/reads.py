"""The reads of ``ConversationHistory``: one task (view, events, steps) through the shared
cross-run reader (``tasklog.reader.TaskReader``), the project's task list from Temporal
visibility, and the decisions and cross-task reads from Neo4j."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import TYPE_CHECKING

from agent_tasks.contract import (
    PAGE_LIMIT_MAX,
    Event,
    EventKind,
    ShortText,
    StepState,
    TaskStatus,
    task_workflow_id,
)
from agent_tasks.contract.errors import GraphNotConfigured
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.results import (
    AnswerOutcome,
    DecisionsResult,
    EventsResult,
    GetTaskResult,
    StepsResult,
)
from agent_tasks.starter.transport import Transport
from agent_tasks.taskgraph.models import (
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
from agent_tasks.tasklog.reader import TaskReader

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    from agent_tasks.taskgraph.port import GraphStore

MIRRORED_POLL_S = 0.02
"""How often ``wait_mirrored`` reads the task node (seconds)."""


def answer_outcome_of(event: Event) -> AnswerOutcome:
    """What the ``input_response`` event ``event`` says of the answer it records: taken (named
    by its request), or ``rejected`` / ``late`` with the request and the reason its payload
    holds (``workflows.inbox``)."""
    if event.name not in ("rejected", "late"):
        return AnswerOutcome(found=True, outcome="taken", input_id=event.name, event=event)
    said = json.loads(event.payload)
    return AnswerOutcome(
        found=True,
        outcome="rejected" if event.name == "rejected" else "late",
        input_id=said.get("input_id"),
        error=said.get("error"),
        event=event,
    )


class TaskReads:
    """The reads of ``ConversationHistory`` (its published read methods)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    @property
    def reader(self) -> TaskReader:
        """The cross-run reader over this object's client and graph, its calls sent through
        ``call`` (retries, ``timeout_s``)."""
        return TaskReader(self.transport.client, self.transport.graph, self.transport.call)

    async def get_task(self, name: str) -> GetTaskResult:
        """The task view (no event bodies); ``found`` False when the name is not in this
        project. Works for running and finished tasks; a closed one is read without a worker
        (``tasklog.reader``: its result, or the graph store), however its run closed.

        Raises:
            pydantic.ValidationError: ``name`` is not a task name (field ``task``).
        """
        TaskRead(task=name)
        found = await self.reader.view(self.transport.workflow_id(name))
        if found is None:
            return GetTaskResult(found=False)
        return GetTaskResult(
            found=True,
            view=found.view,
            source=found.source,
            workflow_status=found.workflow_status,
        )

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
        view = (await self.get_task(task)).view
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.transport.timeout_s if timeout_s is None else timeout_s)
        writes = 0 if view is None else view.writes
        while view is not None and view.unmirrored_writes:
            if self.transport.graph is not None:
                held = await self.transport.graph.mirrored_write(
                    self.transport.project_id, self.transport.workflow_id(task)
                )
                if held >= writes:
                    return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(MIRRORED_POLL_S)
            if self.transport.graph is None:
                view = (await self.get_task(task)).view
        return view is not None

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
        page = await self.reader.events(self.transport.workflow_id(task), after_seq, limit)
        if page is None:
            return EventsResult(found=False)
        events, cursor = page
        return EventsResult(found=True, events=events, next_after_seq=cursor)

    async def answer_outcome(
        self, task: str, request_id: str, *, after_seq: int = 0
    ) -> AnswerOutcome:
        """What the task did with the answer sent by signal under ``request_id``
        (``submit_input(..., request_id=...)``; a signal returns nothing of its fate): the
        ``input_response`` event the task recorded with that request id, read from the task's
        events after ``after_seq`` (``list_events``, a page of ``PAGE_LIMIT_MAX`` at a time, so
        a closed task is read without a worker too).

        Raises:
            pydantic.ValidationError: an argument of the wrong shape.
            GraphNotConfigured, GraphIncomplete: as ``list_events``.
        """
        after: int | None = after_seq
        while after is not None:
            page = await self.list_events(task, after_seq=after, limit=PAGE_LIMIT_MAX)
            if not page.found:
                return AnswerOutcome(found=False)
            for event in page.events:
                if event.kind is EventKind.INPUT_RESPONSE and event.request_id == request_id:
                    return answer_outcome_of(event)
            after = page.next_after_seq
        return AnswerOutcome(found=True, outcome="pending")

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
        read = StepsRead(task=task, state=state, limit=limit, after_name=after_name)
        wf = self.transport.workflow_id(task)
        page = await self.reader.steps(wf, read.state, read.limit, read.after_name)
        if page is None:
            return StepsResult(found=False)
        steps, cursor = page
        return StepsResult(found=True, steps=steps, next_after_name=cursor)

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
            f"WorkflowType = 'TaskWorkflow' AND ProjectId = '{self.transport.project_id}'"
            " AND ExecutionStatus != 'ContinuedAsNew'"
        )
        if where.status is not None:
            query += f" AND TaskStatus = '{where.status.value}'"
        prefix = task_workflow_id(self.transport.project_id, "")
        names: list[str] = []
        async for execution in self.transport.client.list_workflows(query, limit=where.limit):
            names.append(execution.id.removeprefix(prefix))
        return names

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
        rows = await self.require_graph().decisions(
            self.transport.project_id,
            workflow_id=self.transport.workflow_id(task),
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
            pydantic.ValidationError: ``decision_id`` is not text.
            GraphNotConfigured: no graph was given.
        """
        decision_id = checked(decision_id, ShortText, "decision_id")
        rows = await self.require_graph().decisions(
            self.transport.project_id, decision_id=decision_id, limit=1
        )
        return rows[0] if rows else None

    # ------------------------------------------------------------------ cross-task reads (Neo4j)

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
        where = TaskFilter(
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
        return await self.require_graph().find_tasks(self.transport.project_id, where)

    async def task_tree(self, task: str, depth: int = 3) -> list[TreeRow]:
        """The task and its child tasks down to ``depth`` levels (0 to 20), from Neo4j.

        Raises:
            pydantic.ValidationError: an argument of the wrong shape (``TreeRead``).
            GraphNotConfigured: no graph was given.
        """
        return await self.require_graph().task_tree(
            self.transport.project_id, TreeRead(task=task, depth=depth)
        )

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
        return await self.require_graph().find_events(self.transport.project_id, where)

    async def find_steps(
        self, *, state: StepState | str | None = None, limit: int = 50
    ) -> list[StepRow]:
        """Steps across this project's tasks in a state (for example every ``unknown`` step
        that needs a person), from Neo4j (``StepFilter``).

        Raises:
            pydantic.ValidationError: a filter of the wrong shape (names the field).
            GraphNotConfigured: no graph was given.
        """
        return await self.require_graph().find_steps(
            self.transport.project_id, StepFilter(state=state, limit=limit)
        )

    async def failed_tool_calls(self) -> list[ToolFailures]:
        """Failed tool calls across this project's tasks, by tool name, from Neo4j."""
        return await self.require_graph().failed_tool_calls(self.transport.project_id)

    def require_graph(self) -> GraphStore:
        """The graph store, for a read that needs it.

        Raises:
            GraphNotConfigured: no graph was given.
        """
        if self.transport.graph is None:
            raise GraphNotConfigured("this read needs Neo4j: pass graph= to ConversationHistory")
        return self.transport.graph
