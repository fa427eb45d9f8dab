"""The reads of ``ConversationHistory``: one task through the cross-run reader
(``tasklog.reader.TaskReader``), the task list from Temporal visibility, and the decisions and
cross-task reads from the graph store."""

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
    """What the ``input_response`` event says of its answer: taken, or ``rejected`` / ``late`` with
    the request and the reason (``workflows.inbox``)."""
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
        """The cross-run reader over this object's client and graph store, its calls through
        ``call``."""
        return TaskReader(self.transport.client, self.transport.graph, self.transport.call)

    async def get_task(self, name: str) -> GetTaskResult:
        """Runs ``ConversationHistory.get_task`` (whose docstring is the contract)."""
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
        """Runs ``ConversationHistory.wait_mirrored`` (whose docstring is the contract)."""
        view = (await self.get_task(task)).view
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.transport.timeout_s if timeout_s is None else timeout_s)
        writes = 0 if view is None else view.writes
        while view is not None and view.unmirrored_writes:
            if self.transport.graph is not None:
                held = await self.transport.graph.reads.mirrored_write(
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
        """Runs ``ConversationHistory.list_events`` (whose docstring is the contract)."""
        EventsRead(task=task, after_seq=after_seq, limit=limit)
        page = await self.reader.events(self.transport.workflow_id(task), after_seq, limit)
        if page is None:
            return EventsResult(found=False)
        events, cursor = page
        return EventsResult(found=True, events=events, next_after_seq=cursor)

    async def answer_outcome(
        self, task: str, request_id: str, *, after_seq: int = 0
    ) -> AnswerOutcome:
        """Runs ``ConversationHistory.answer_outcome`` (whose docstring is the contract)."""
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
        """Runs ``ConversationHistory.list_steps`` (whose docstring is the contract)."""
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
        """Runs ``ConversationHistory.list_tasks`` (whose docstring is the contract)."""
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
        """Runs ``ConversationHistory.list_decisions`` (whose docstring is the contract)."""
        read = DecisionsRead(task=task, after_seq=after_seq, limit=limit)
        rows = await self.require_graph().reads.decisions(
            self.transport.project_id,
            workflow_id=self.transport.workflow_id(task),
            after_seq=read.after_seq,
            limit=read.limit,
        )
        found = bool(rows) or (await self.get_task(task)).found
        cursor = rows[-1].seq if len(rows) == read.limit else None
        return DecisionsResult(found=found, decisions=rows, next_after_seq=cursor)

    async def get_decision(self, decision_id: str) -> DecisionRow | None:
        """Runs ``ConversationHistory.get_decision`` (whose docstring is the contract)."""
        decision_id = checked(decision_id, ShortText, "decision_id")
        rows = await self.require_graph().reads.decisions(
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
        """Runs ``ConversationHistory.find_tasks`` (whose docstring is the contract)."""
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
        return await self.require_graph().reads.find_tasks(self.transport.project_id, where)

    async def task_tree(self, task: str, depth: int = 3) -> list[TreeRow]:
        """Runs ``ConversationHistory.task_tree`` (whose docstring is the contract)."""
        return await self.require_graph().reads.task_tree(
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
        """Runs ``ConversationHistory.find_events`` (whose docstring is the contract)."""
        where = EventFilter(
            kind=kind, name=name, since=since, until=until, failed_only=failed_only, limit=limit
        )
        return await self.require_graph().reads.find_events(self.transport.project_id, where)

    async def find_steps(
        self, *, state: StepState | str | None = None, limit: int = 50
    ) -> list[StepRow]:
        """Runs ``ConversationHistory.find_steps`` (whose docstring is the contract)."""
        return await self.require_graph().reads.find_steps(
            self.transport.project_id, StepFilter(state=state, limit=limit)
        )

    async def failed_tool_calls(self) -> list[ToolFailures]:
        """Runs ``ConversationHistory.failed_tool_calls`` (whose docstring is the contract)."""
        return await self.require_graph().reads.failed_tool_calls(self.transport.project_id)

    def require_graph(self) -> GraphStore:
        """The graph store, for a read that needs it.

        Raises:
            GraphNotConfigured: no graph was given.
        """
        if self.transport.graph is None:
            raise GraphNotConfigured("this read needs Neo4j: pass graph= to ConversationHistory")
        return self.transport.graph
