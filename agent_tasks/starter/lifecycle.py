"""The lifecycle of ``ConversationHistory``'s tasks: create (update-with-start), cancel and
wait, and the answers to input requests (by signal or by update). Running a task's agent
again (resume, continue, retry, branch) is ``starter.turns``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, JsonValue
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.common import TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.contract import (
    CLOSED_STATUSES,
    MAX_CHILDREN,
    MAX_DEPTH,
    AgentSpec,
    ApprovalChoice,
    ApprovalType,
    BranchPoint,
    InputAnswer,
    TaskName,
    TaskStart,
    TaskStatus,
    TaskView,
    TaskWorkflowInput,
    WriteOutcome,
    valid_request_id,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.contract.handlers import WORKFLOW_TYPE, Signal, Update
from agent_tasks.contract.lifecycle import AskInput, SetStatusInput, SpawnInput
from agent_tasks.contract.search import search_attributes
from agent_tasks.contract.waits import answer_error
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.reads import TaskReads
from agent_tasks.starter.results import WriteResult, from_outcome, refused
from agent_tasks.starter.transport import (
    Transport,
    from_update_failure,
    lane,
    request_id_or_new,
    retrieve_start,
)
from agent_tasks.starter.writes import TaskWrites

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    pass


def _any_request_may_take(answer: JsonValue) -> JsonValue:
    error = answer_error({}, answer)
    if error is not None:
        raise ValueError(error)
    return answer


STATUS_POLL_S = 0.2
"""How often ``wait_task(..., until=...)`` reads the task's view (seconds)."""

Answer = Annotated[JsonValue, AfterValidator(_any_request_may_take)]
"""An answer as a client sends one: JSON that some request may take (``answer_error`` with
an empty schema: at most ``MAX_ANSWER_CHARS`` characters, no NaN or infinity)."""


# Long: ConversationHistory's lifecycle layer; the input-answering methods could become a layer of
# their own later
class TaskLifecycle:
    """Creating, cancelling, resuming and waiting for tasks, and answering their input
    requests (``ConversationHistory``'s published methods of those)."""

    def __init__(self, transport: Transport, reads: TaskReads, writes: TaskWrites) -> None:
        self.transport = transport
        self.reads = reads
        self.writes = writes

    # Long: one published call: validate, refuse a taken name, update-with-start in the name's lane;
    # mostly docstring
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
        """Runs ``ConversationHistory.create_task`` (whose docstring is the contract)."""
        request_id = request_id_or_new(request_id)
        if not valid_request_id(request_id):
            return refused(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
        checked(name, TaskName, "name")  # the rule every call that names a task checks
        checked(parent, TaskName | None, "parent")
        start = TaskStart.model_validate(
            {
                "project_id": self.transport.project_id,
                "name": name,
                "goal": goal,
                "agent_id": self.transport.agent_id,
                "session_id": self.transport.session_id if session_id is None else session_id,
                "parent": parent,
                "metadata": {} if metadata is None else metadata,
                "request_id": request_id,
                "agent": agent,
                "branched_from": branched_from,
            }
        )
        if parent is not None and not parent_may_follow and not await self._exists(parent):
            return refused(ErrorCode.PARENT_NOT_FOUND, f"no parent task {parent!r} in this project")
        status = TaskStatus.OPEN if agent is None else TaskStatus.QUEUED
        async with lane(self.transport.client, self.transport.workflow_id(name)):
            taken = await self._name_taken(name)
            if taken is not None:
                return refused(ErrorCode.TASK_EXISTS, taken)
            operation: WithStartWorkflowOperation[Any, TaskView] = WithStartWorkflowOperation(
                WORKFLOW_TYPE,
                TaskWorkflowInput(start=start),
                result_type=TaskView,
                id=self.transport.workflow_id(name),
                task_queue=task_queue or self.transport.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes(search_attributes(start, status)),
            )
            try:
                outcome = await self.transport.call(
                    lambda: self.transport.client.execute_update_with_start_workflow(
                        Update.CREATE_TASK,
                        start,
                        start_workflow_operation=operation,
                        result_type=WriteOutcome,
                    )
                )
                result = from_outcome(outcome)
            except WorkflowUpdateFailedError as err:  # a refusal, or the task exists already
                result = from_update_failure(err)
            except WorkflowAlreadyStartedError:
                found = await self.reads.get_task(name)
                if found.view is not None and found.view.goal == goal:
                    return WriteResult(recorded=True, duplicate=True, task=found.view)
                return refused(ErrorCode.TASK_EXISTS, f"task {name!r} exists (finished)")
            finally:
                await retrieve_start(operation)
        if result.recorded:
            result.task = (await self.reads.get_task(name)).view
        return result

    async def _name_taken(self, name: str) -> str | None:
        """Why ``name`` may not be created although Temporal has no workflow of it, or None: a
        deleted task's tombstone, or a task past retention the graph store keeps. Without a graph
        store the mirror still refuses it (``TaskIncarnationError``)."""
        if self.transport.graph is None:
            return None
        state = await self.transport.graph.retention.name_state(
            self.transport.project_id, self.transport.workflow_id(name)
        )
        if state.deleted:
            return f"task {name!r} was deleted; a task name is never reused"
        if state.mirrored:
            try:
                await self.transport.call(self.transport.handle(name).describe)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                return (
                    f"task {name!r} exists: its history passed the namespace's retention, "
                    "Neo4j keeps it"
                )
        return None

    async def cancel_task(self, task: str, *, cascade: bool = True) -> WriteResult:
        """Runs ``ConversationHistory.cancel_task`` (whose docstring is the contract)."""
        handle = self.transport.handle(task)
        try:
            description = await self.transport.call(handle.describe)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return refused(
                    ErrorCode.TASK_NOT_FOUND,
                    f"no task {task!r} in project {self.transport.project_id!r}",
                )
            raise
        if description.close_time is not None:
            return refused(ErrorCode.TASK_CLOSED, f"task {task!r} has ended")
        if not cascade:
            await self.transport.call(lambda: handle.signal(Signal.KEEP_CHILDREN))
        await self.transport.call(handle.cancel)
        if self.transport.pages is not None:
            self.transport.pages.nudge(handle.id)
        if cascade:
            await self._cancel_children(handle.id)
        return WriteResult(recorded=True)

    async def _cancel_children(self, workflow_id: str, depth: int = 0) -> None:
        """The cascade sent from the client too: a cancel request to each running child of
        ``workflow_id`` and theirs, down to ``MAX_DEPTH``, so the request is in each child's history
        when ``cancel_task`` returns, even while the parent's worker is down."""
        if depth >= MAX_DEPTH:
            return
        for child in await self._running_children(workflow_id):
            with contextlib.suppress(RPCError):  # it ended meanwhile: nothing to cancel
                await self.transport.client.get_workflow_handle(child).cancel()
            await self._cancel_children(child, depth + 1)

    async def _running_children(self, workflow_id: str) -> list[str]:
        """The workflow ids of ``workflow_id``'s children that may still run (at most
        ``MAX_CHILDREN``): the current run's pending children (``DescribeWorkflowExecution``,
        current at once) and earlier runs' from visibility (``ParentWorkflowId``, which may lag)."""
        found: dict[str, None] = {}
        client = self.transport.client
        with contextlib.suppress(RPCError):  # gone: visibility still names its children
            description = await client.get_workflow_handle(workflow_id).describe()
            found.update(
                dict.fromkeys(c.workflow_id for c in description.raw_description.pending_children)
            )
        literal = workflow_id.replace("\\", "\\\\").replace("'", "\\'")
        query = f"ParentWorkflowId = '{literal}' AND ExecutionStatus = 'Running'"
        async for child in client.list_workflows(query, limit=MAX_CHILDREN):
            found[child.id] = None
        return list(found)[:MAX_CHILDREN]

    async def submit_input(
        self,
        task: str,
        answer: JsonValue,
        *,
        input_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.submit_input`` (whose docstring is the contract)."""
        signal = self._input_answer(answer, input_id, request_id)
        handle = self.transport.handle(task)
        try:
            async with lane(self.transport.client, self.transport.workflow_id(task)):
                await self.transport.call(lambda: handle.signal(Signal.SUBMIT_INPUT, signal))
                if self.transport.pages is not None:
                    self.transport.pages.nudge(handle.id)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            if await self._exists(task):
                return refused(ErrorCode.TASK_CLOSED, f"task {task!r} has ended")
            return refused(
                ErrorCode.TASK_NOT_FOUND,
                f"no task {task!r} in project {self.transport.project_id!r}",
            )
        return WriteResult(recorded=True)

    async def respond(
        self,
        task: str,
        answer: JsonValue,
        *,
        input_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.respond`` (whose docstring is the contract)."""
        update = self._input_answer(answer, input_id, request_id)
        return await self.writes.update(task, Update.RESPOND, update)

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
        """Runs ``ConversationHistory.approve`` (whose docstring is the contract)."""
        request = None
        found = (await self.reads.get_task(task)).view
        if found is not None:
            request = next((r for r in found.pending_inputs if r.input_id == input_id), None)
        asked = None if request is None or request.approval is None else request.approval.digest
        if asked is not None and (
            digest is None or (len(digest) >= 12 and asked.startswith(digest))
        ):
            digest = asked  # the call shown is the call asked about
        answer = ApprovalChoice(
            type=choice,
            arguments=None if arguments is None else dict(arguments),
            text=text,
            digest=digest,
        )
        dumped: JsonValue = answer.model_dump(mode="json", exclude_none=True)
        return await self.respond(task, dumped, input_id=input_id, request_id=request_id)

    def _input_answer(
        self, answer: JsonValue, input_id: str | None, request_id: str | None
    ) -> InputAnswer:
        """The answer as sent, checked against the rules every answer meets (``answer_error`` with
        an empty schema).

        Raises:
            pydantic.ValidationError: an argument of the wrong shape, or an answer over
                ``MAX_ANSWER_CHARS`` of JSON, NaN or an infinity (field ``answer``); nothing is
                sent.
        """
        return InputAnswer(
            answer=checked(answer, Answer, "answer"),
            input_id=input_id,
            agent_id=self.transport.agent_id,
            request_id=request_id_or_new(request_id),
        )

    # ------------------------------------------------------------------ a recorded task's lifecycle

    async def set_status(
        self, task: str, status: TaskStatus | str, *, request_id: str | None = None
    ) -> WriteResult:
        """Runs ``ConversationHistory.set_status`` (whose docstring is the contract)."""
        write = SetStatusInput.model_validate(
            {
                "agent_id": self.transport.agent_id,
                "status": status,
                "request_id": request_id_or_new(request_id),
            }
        )
        return await self.writes.update(task, Update.UPDATE_STATUS, write)

    async def request_input(
        self,
        task: str,
        input_id: str,
        prompt: str,
        schema: Mapping[str, JsonValue] | None = None,
        *,
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.request_input`` (whose docstring is the contract)."""
        write = AskInput.model_validate(
            {
                "agent_id": self.transport.agent_id,
                "input_id": input_id,
                "prompt": prompt,
                "json_schema": {} if schema is None else schema,
                "request_id": request_id_or_new(request_id),
            }
        )
        return await self.writes.update(task, Update.ASK, write)

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
        """Runs ``ConversationHistory.spawn_child`` (whose docstring is the contract)."""
        write = SpawnInput(
            agent_id=self.transport.agent_id,
            spawn_key=spawn_key,
            name=name,
            goal=goal,
            session_id=session_id,
            request_id=request_id_or_new(request_id),
        )
        return await self.writes.update(parent, Update.SPAWN, write)

    async def wait_task(
        self, task: str, *, until: TaskStatus | str | None = None
    ) -> TaskView | None:
        """Runs ``ConversationHistory.wait_task`` (whose docstring is the contract)."""
        if until is not None:
            return await self._wait_status(task, checked(until, TaskStatus, "until"))
        handle = self.transport.client.get_workflow_handle(
            self.transport.workflow_id(task), result_type=TaskView
        )
        try:
            view: TaskView = await handle.result()
            return view
        except WorkflowFailureError:  # cancelled (or failed): its last view says how
            return (await self.reads.get_task(task)).view
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    async def _wait_status(self, task: str, status: TaskStatus) -> TaskView | None:
        while True:
            view = (await self.reads.get_task(task)).view
            if view is None or view.status is status or view.status in CLOSED_STATUSES:
                return view
            await asyncio.sleep(STATUS_POLL_S)

    async def _exists(self, task: str) -> bool:
        """True when a task of that name exists in this project (running or ended)."""
        try:
            await self.transport.call(self.transport.handle(task).describe)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True
