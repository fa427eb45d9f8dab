"""Running an agent task's agent again, by the turn rules (``docs/agent-tasks.md``, "Turns"):
``resume_task``, ``continue_task``, ``retry_step`` and ``branch_from``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from temporalio.common import TypedSearchAttributes, WorkflowIDReusePolicy

from agent_tasks.contract import (
    CLOSED_STATUSES,
    AgentRun,
    BranchPoint,
    StepRetry,
    StepsQuery,
    StepState,
    TaskName,
    TaskState,
    TaskStatus,
    TaskView,
    TaskWorkflowInput,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.contract.handlers import RESUME_STATE, STEPS, WORKFLOW_TYPE, Update
from agent_tasks.contract.search import search_attributes
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.lifecycle import TaskLifecycle
from agent_tasks.starter.reads import TaskReads
from agent_tasks.starter.results import WriteResult, refused
from agent_tasks.starter.transport import Transport, request_id_or_new
from agent_tasks.starter.writes import TaskWrites
from agent_tasks.taskgraph.models import Seq


def _interrupted(run: AgentRun | None) -> bool:
    """True when the task's last turn was interrupted after its tools ran (``AgentRun``'s
    ``turn_committed``: a step of the turn ended in a run that was not rolled back)."""
    return run is not None and run.turn_committed


class TaskTurns:
    """Resuming, continuing, retrying and branching agent tasks (``ConversationHistory``'s
    published methods of those)."""

    def __init__(
        self, transport: Transport, reads: TaskReads, writes: TaskWrites, lifecycle: TaskLifecycle
    ) -> None:
        self.transport = transport
        self.reads = reads
        self.writes = writes
        self.lifecycle = lifecycle

    async def resume_task(self, task: str, *, retry: Sequence[StepRetry] = ()) -> WriteResult:
        """Runs ``ConversationHistory.resume_task`` (whose docstring is the contract)."""
        return await self._run_again(task, continuation=False, retry=retry)

    async def continue_task(self, task: str, *, retry: Sequence[StepRetry] = ()) -> WriteResult:
        """Runs ``ConversationHistory.continue_task`` (whose docstring is the contract)."""
        return await self._run_again(task, continuation=True, retry=retry)

    async def has_interrupted_turn(self, task: str) -> bool:
        """Runs ``ConversationHistory.has_interrupted_turn`` (whose docstring is the contract)."""
        view = (await self.reads.get_task(task)).view
        if view is None:
            return False
        return _interrupted(await self._agent_run(task, view))

    async def _last_state(self, task: str) -> TaskState:
        """The state of the task's last run (``resume_state``; a closed run is replayed by a
        worker): the agent and its run, which a closed view from the graph store lacks."""
        handle = self.transport.handle(task)
        return await self.transport.call(lambda: RESUME_STATE.on(handle), handle.id)

    async def _agent_run(self, task: str, view: TaskView) -> AgentRun | None:
        """The agent's run of the task: the view's, or for a closed task read without it, the
        last run's (``_last_state``)."""
        if view.agent_run is not None or view.status not in CLOSED_STATUSES:
            return view.agent_run
        return (await self._last_state(task)).agent_run

    async def retry_step(
        self, task: str, step: str, *, reason: str, request_id: str | None = None
    ) -> WriteResult:
        """Runs ``ConversationHistory.retry_step`` (whose docstring is the contract)."""
        ask = StepRetry(
            step_name=step,
            agent_id=self.transport.agent_id,
            reason=reason,
            request_id=request_id_or_new(request_id),
        )
        found = await self.reads.get_task(task)
        if found.view is None:
            return refused(ErrorCode.TASK_NOT_FOUND, f"no task {task!r} in this project")
        if found.view.status not in CLOSED_STATUSES:
            return await self.writes.update(task, Update.RETRY_STEP, ask)
        state = await self._step_state(task, step)
        if state is None:
            return refused(ErrorCode.STEP_NOT_FOUND, f"the task has no step {step!r}")
        if state not in (StepState.UNKNOWN, StepState.FAILED):
            return refused(
                ErrorCode.INVALID_TRANSITION,
                f"step {step!r} is {state.value}: only an unknown or failed step is retried",
            )
        interrupted = _interrupted(await self._agent_run(task, found.view))
        return await self._run_again(task, continuation=interrupted, retry=[ask])

    async def _step_state(self, task: str, step: str) -> StepState | None:
        """The state of step ``step`` of an ended task: from its last run, else from the graph store
        (closed in an earlier run); None when there is none."""
        query = StepsQuery(step_name=step, limit=1)
        handle = self.transport.handle(task)
        page = await self.transport.call(lambda: STEPS.on(handle, query), handle.id)
        if page.steps:
            return page.steps[0].state
        if self.transport.graph is None:
            return None
        found = await self.transport.graph.reads.step(
            self.transport.project_id, self.transport.workflow_id(task), step
        )
        return None if found is None else found.state

    async def _run_again(
        self, task: str, *, continuation: bool, retry: Sequence[StepRetry]
    ) -> WriteResult:
        """Start the next run of a failed or cancelled agent task from its last state, on its last
        run's task queue (its agent's workers)."""
        found = await self.reads.get_task(task)
        if found.view is None:
            return refused(ErrorCode.TASK_NOT_FOUND, f"no task {task!r} in this project")
        view = found.view
        handle = self.transport.handle(task)
        description = await self.transport.call(handle.describe)
        resumable = (TaskStatus.FAILED, TaskStatus.CANCELLED)
        state = None
        if description.close_time is not None and view.status in resumable:
            state = await self._last_state(task)
        if state is None or state.start.agent is None:
            return refused(
                ErrorCode.NOT_RESUMABLE,
                f"task {task!r} is {view.status.value}: only a failed or cancelled agent task "
                "that has ended runs again",
            )
        interrupted = _interrupted(state.agent_run)
        if continuation and not interrupted:
            return refused(
                ErrorCode.NO_INTERRUPTED_TURN,
                f"task {task!r} has no interrupted turn (none of its tools ran since the model "
                "last answered, or the run failed and was rolled back): resume it",
            )
        if not continuation and interrupted:
            return refused(
                ErrorCode.NO_RESUMABLE_TURN,
                f"task {task!r} was interrupted after its tools ran: continue it "
                "(continue_task, agent-tasks continue), its calls are never run again",
            )
        start = TaskWorkflowInput(
            carried=state, resume=True, continuation=continuation, retry=list(retry)
        )
        await self.transport.call(
            lambda: self.transport.client.start_workflow(
                WORKFLOW_TYPE,
                start,
                result_type=TaskView,
                id=self.transport.workflow_id(task),
                task_queue=description.task_queue or self.transport.task_queue,  # where it ran
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                search_attributes=TypedSearchAttributes(
                    search_attributes(state.start, TaskStatus.QUEUED)
                ),
            )
        )
        return WriteResult(recorded=True)

    async def branch_from(
        self,
        source: str,
        seq: int,
        name: str,
        *,
        request_id: str | None = None,
        task_queue: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.branch_from`` (whose docstring is the contract)."""
        checked(source, TaskName, "source")
        checked(name, TaskName, "name")
        point = BranchPoint(task=source, seq=checked(seq, Seq, "seq"))
        found = await self.reads.get_task(source)
        if found.view is None:
            return refused(ErrorCode.TASK_NOT_FOUND, f"no task {source!r} in this project")
        view = found.view
        if point.seq > view.last_seq:
            return refused(
                ErrorCode.EVENT_NOT_FOUND,
                f"task {source!r} has events 1 to {view.last_seq}: no seq {seq} to branch at",
            )
        agent = view.agent
        if agent is None and view.status in CLOSED_STATUSES:  # read without its agent
            agent = (await self._last_state(source)).start.agent
        created = await self.lifecycle.create_task(
            name,
            view.goal,
            request_id=request_id,
            metadata=view.metadata,
            session_id=view.session_id,
            agent=agent,
            branched_from=point,
            task_queue=task_queue
            or await self.transport.task_queue_of(self.transport.workflow_id(source)),
        )
        if not created.recorded:
            return created
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.transport.timeout_s
        while (branch := (await self.reads.get_task(name)).view) is None or branch.last_seq < seq:
            if loop.time() > deadline:
                return refused(ErrorCode.TASK_BUSY, f"branch {name!r} is still copying")
            await asyncio.sleep(0.1)
        created.task = branch
        return created
