"""Running an agent task's agent again, by the turn rules (docs/agent-tasks.md, "Turns"):
``resume_task`` replays a turn that committed nothing, ``continue_task`` continues one
interrupted after its tools ran, ``retry_step`` asks that an ``unknown`` or ``failed`` step run
again, ``branch_from`` starts a new task from a point of a task's log."""

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
        return await self._run_again(task, continuation=False, retry=retry)

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
        return await self._run_again(task, continuation=True, retry=retry)

    async def has_interrupted_turn(self, task: str) -> bool:
        """True when the task's last turn was interrupted after its tools ran and the model has
        not answered since (continue it with ``continue_task``); False for a task of this
        project that has none, or no such task."""
        view = (await self.reads.get_task(task)).view
        if view is None:
            return False
        return _interrupted(await self._agent_run(task, view))

    async def _last_state(self, task: str) -> TaskState:
        """The state the task's last run holds (the ``resume_state`` query, answered by a
        worker replaying the run when it has closed): what a closed task's view, read from
        the graph store, lacks (its agent, its agent's run)."""
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
        """The state of step ``step`` of a task whose workflow has ended: from its last run
        (which holds its open steps and those changed in it), else from Neo4j (a step closed in
        an earlier run); None when the task has no such step."""
        query = StepsQuery(step_name=step, limit=1)
        handle = self.transport.handle(task)
        page = await self.transport.call(lambda: STEPS.on(handle, query), handle.id)
        if page.steps:
            return page.steps[0].state
        if self.transport.graph is None:
            return None
        found = await self.transport.graph.step(
            self.transport.project_id, self.transport.workflow_id(task), step
        )
        return None if found is None else found.state

    async def _run_again(
        self, task: str, *, continuation: bool, retry: Sequence[StepRetry]
    ) -> WriteResult:
        """Start the next run of a failed or cancelled agent task from its last run's state
        (``resume_task``, ``continue_task``), on the task queue its last run ran on (its
        agent's workers), whatever this object's ``task_queue`` is."""
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

    # Long: one published call: check the point, create the branch, wait for its copy; mostly
    # docstring
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
