"""TaskWorkflow: one task. Its history is the task's durable event log.

Writes arrive as updates with thin handlers over the ledger (``workflows.ledger``). Every
refusal is raised by an update *validator*, so a refused write leaves nothing in the history or
the state; accepted writes run in synchronous handlers, which Temporal runs one at a time, so
seqs have no gaps and a request id is written once. A repeated request id with the same
arguments is also answered by the validator (``DUPLICATE`` carrying the stored
``WriteOutcome``), so a retry adds nothing to the history.

The run loop mirrors the ledger into Neo4j through the ``mirror_task`` activity: at most one
call in flight, started as soon as a write waits. Since the ``MIRROR_FOLLOWS_RUN`` patch the
call for the current run follows it (``workflows.mirroring``): it copies each write as the run
takes it, so a write adds no workflow task and no activity of its own, and it ends when the
run is idle, after a bound, or when the run ends. Runs recorded before it called once per
batch (the writes that arrived while a call ran formed the next call's, at most
``MIRROR_MAX_EVENTS`` events), and before the ``MIRROR_WITHOUT_DEBOUNCE`` patch first waited
for a debounce timer (``MIRROR_BATCH_EVENTS`` events or ``MIRROR_DEBOUNCE_MS``); they still
replay that way. The loop continues-as-new when
Temporal suggests it, once every handler has finished and the mirror has caught up, and returns
the final ``TaskView`` once the task is finished and mirrored.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    # Pass-through is safe: these modules are deterministic (stdlib, pydantic, temporalio) and
    # hold no state between workflow runs; sharing them avoids re-importing pydantic models.
    from workflows import lifecycle
    from workflows.agents.context import AgentContext
    from workflows.agents.registry import agent_function, agent_tools
    from workflows.agents.runner import CANCEL_RULE, AgentParked
    from workflows.children import child_end
    from workflows.decisions import check_citations
    from workflows.errors import CONTINUING_AS_NEW, ErrorCode, failure_text, refusal
    from workflows.ledger import Ledger
    from workflows.mirroring import (
        MIRROR_FOLLOW_MAX,
        MIRROR_FOLLOWS_RUN,
        MIRROR_HEARTBEAT,
        MIRROR_RETRY,
        MIRROR_START_TO_CLOSE,
        MIRROR_WITHOUT_DEBOUNCE,
        mirror_pause,
    )
    from workflows.models import (
        BRANCH_ACTIVITY,
        CHILD_ENDS_ACTIVITY,
        CLOSED_STATUSES,
        HISTORY_BACKPRESSURE_EVENTS,
        MIRROR_ACTIVITY,
        MIRROR_BATCH_EVENTS,
        MIRROR_DEBOUNCE_MS,
        MIRROR_MAX_EVENTS,
        ROLLED_BACK,
        AgentRun,
        AgentSpec,
        BranchPage,
        BranchQuery,
        ChildEnd,
        ChildEnds,
        ChildEndsInput,
        EventInput,
        EventKind,
        EventsPage,
        EventsQuery,
        FinishTaskInput,
        InputAnswer,
        MirrorOutcome,
        MirrorPage,
        MirrorQuery,
        RecordEventsInput,
        RequestLookup,
        Role,
        SetStepsInput,
        StepRetry,
        StepsPage,
        StepsQuery,
        StepState,
        TaskStart,
        TaskState,
        TaskStatus,
        TaskView,
        TaskWorkflowInput,
        WriteOutcome,
        args_digest,
        bound_text,
        internal_request_id,
        task_workflow_id,
    )
    from workflows.models.lifecycle import AskInput, SetStatusInput, SpawnInput

PROJECT_ID = SearchAttributeKey.for_keyword("ProjectId")
AGENT_ID = SearchAttributeKey.for_keyword("AgentId")
SESSION_ID = SearchAttributeKey.for_keyword("SessionId")
TASK_STATUS = SearchAttributeKey.for_keyword("TaskStatus")
PARENT_TASK = SearchAttributeKey.for_keyword("ParentTask")
SEARCH_ATTRIBUTE_KEYS = (PROJECT_ID, AGENT_ID, SESSION_ID, TASK_STATUS, PARENT_TASK)
"""The custom search attributes a Temporal server must have registered for TaskWorkflow."""

CONTINUE_WITHOUT_MIRROR = "continue-as-new-without-mirror"
"""Patch id: a run continues-as-new when Temporal suggests it without waiting for the mirror;
what Neo4j lacks goes to the next run's ``mirror_backlog``. Before it, a run waited for the
mirror, so a long Neo4j outage grew its history towards Temporal's hard limit."""
APP_LIFECYCLE = "app-lifecycle"
"""Patch id: a recorded task that waits for input or children and has nothing left to wait for
goes back to ``queued`` after an answer or a child's end (``workflows.lifecycle``). Runs
recorded before it never had those statuses, so they never reach it."""


TURN_RULES = "turn-rules"
"""Patch id: each run of an agent is marked in the log (``run_started``, ``run_finished``,
``run_failed``) and a failed run is rolled back (``rolled_back``), the runtime's turn rules
(docs/agent-tasks.md). Runs recorded before it have no run notes."""
ANSWERS_BOUND = "answers-bound-to-requests"
"""Patch id: an answer by signal is bound to one request (``Ledger.take_answer``: without an
input id only to a request open when it arrives; a late one is recorded as late), one early
answer kept per request, up to ``MAX_EARLY_ANSWERS``."""

CHILD_CANCEL_WAIT = timedelta(minutes=1)
"""How long a cancelled parent waits for its cancelled children to report their end."""
MIRROR_DRAIN_WAIT = timedelta(seconds=10)
"""The longest a mirror call in flight may hold up continue-as-new once it is suggested: past
it the call is cancelled and the run continues as new anyway, its unmirrored writes carried
to the next run's backlog (``_bound_mirror_call``)."""
MIRROR_DRAIN_BOUND = "mirror-drain-bound"
"""Patch id: ``MIRROR_DRAIN_WAIT`` bounds a mirror call in flight when continue-as-new is
suggested."""
CHILD_ENDS_TIMEOUT = timedelta(seconds=60)
"""Longest run of the ``child_ends`` activity (a resumed parent's look at its children)."""


def search_attributes(start: TaskStart, status: TaskStatus) -> list[SearchAttributePair[str]]:
    """The custom search attributes of a task, so Temporal visibility can list tasks by
    project, agent, session, parent and status without Neo4j."""
    pairs = [
        SearchAttributePair(PROJECT_ID, start.project_id),
        SearchAttributePair(AGENT_ID, start.agent_id),
        SearchAttributePair(TASK_STATUS, status.value),
    ]
    if start.session_id is not None:
        pairs.append(SearchAttributePair(SESSION_ID, start.session_id))
    if start.parent is not None:
        pairs.append(SearchAttributePair(PARENT_TASK, start.parent))
    return pairs


@workflow.defn
class TaskWorkflow:
    """One task: its ledger, kept in Neo4j by the mirror, continued-as-new when suggested."""

    @workflow.init
    def __init__(self, input: TaskWorkflowInput) -> None:
        if input.carried is not None:
            self.ledger = Ledger(input.carried)
            if input.resume:
                self.ledger.reopen(workflow.now())
                for retry in input.retry:
                    with contextlib.suppress(ApplicationError):  # checked by the client
                        self.ledger.retry_step(retry, workflow.now())
        else:
            assert input.start is not None, "TaskWorkflowInput needs start or carried"
            self.ledger = Ledger.new(input.start, workflow.info().workflow_id, workflow.now())
            if input.spawned:  # a child its parent's agent started: no create_task update
                self.ledger.create(input.start, workflow.now())
        self.resumed = input.resume
        """True for the run ``resume`` started: it learns its children's real states first."""
        self.continuation = input.continuation
        """True for the run ``continue_task`` started: it continues an interrupted turn."""
        self.cascade = True
        """False once the ``keep_children`` signal came: a cancel leaves the children running."""
        self.draining = False
        """True once continue-as-new is due: writes are turned away until the new run."""
        self.agent: AgentContext | None = None
        """The running agent's context (agent tasks)."""
        self.agent_task: asyncio.Task[None] | None = None
        """The running agent (agent tasks): done once it parked, finished or failed."""
        self.cancelling = False
        """True once the task is being cancelled by the one cancellation rule (``CANCEL_RULE``):
        the agent's waits wake up and it starts nothing more."""
        self.history_token: str | None = None
        """Where this run's last mirror follower stopped reading the run's history: the next
        one starts there (``MirrorInput.history_token``; not carried: a run has its own)."""

    @workflow.run
    async def run(self, input: TaskWorkflowInput) -> TaskView:
        """Run the agent (agent tasks), mirror, continue-as-new and finish; returns the final
        view once finished and mirrored. A cancel request ends it ``cancelled``
        (``_cancelled``) and the workflow closes as cancelled."""
        try:
            return await self._run()
        except asyncio.CancelledError:
            # A cancel request from the server; not an eviction from the worker's cache (which
            # cancels the workflow's tasks too, and must change nothing).
            if workflow.cancellation_reason() is not None:
                await self._cancelled()
            raise

    async def _run(self) -> TaskView:
        ledger = self.ledger
        if self._copying():
            await self._copy_branch()
        if self.resumed and self._children_running():
            await self._reconcile_children()
        if ledger.state.start.agent is not None and not ledger.closed:
            self.agent_task = asyncio.create_task(self._run_agent(ledger.state.start.agent))
        while True:
            await workflow.wait_condition(
                lambda: ledger.unmirrored or self._ended() or self._should_continue()
            )
            if (
                self._should_continue()
                and (ledger.unmirrored or not ledger.closed)
                and workflow.patched(CONTINUE_WITHOUT_MIRROR)
            ):
                if self.agent is not None and self._agent_running():
                    # The agent stops at its next checkpoint; mirror meanwhile.
                    self.agent.checkpoint_due = True
                    await workflow.wait_condition(
                        lambda: ledger.unmirrored or not self._agent_running()
                    )
                    if ledger.unmirrored:
                        await self._mirror()
                    continue
                # The next run mirrors what this one has not (a closed run still answers
                # queries), so neither a Neo4j outage nor a long mirror holds up the switch.
                self.draining = True
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._continue_as_new()
            if ledger.unmirrored:
                # patched() first: the first call places the patch's marker, so it must not
                # hang on ``urgent`` (whether continue-as-new is suggested can read otherwise
                # on a replay than it did when the run was recorded)
                if not workflow.patched(MIRROR_WITHOUT_DEBOUNCE) and not (
                    ledger.closed or self._should_continue()
                ):
                    # Runs recorded before the patch waited for a debounce timer here.
                    try:
                        await workflow.wait_condition(
                            lambda: (
                                ledger.unmirrored_events >= MIRROR_BATCH_EVENTS
                                or ledger.closed
                                or self._should_continue()
                            ),
                            timeout=timedelta(milliseconds=MIRROR_DEBOUNCE_MS),
                        )
                    except TimeoutError:
                        pass
                self._drain_if_due()
                await self._mirror()
                continue
            self._drain_if_due()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if ledger.unmirrored:
                continue
            if ledger.closed:
                if not self._ended():
                    # spawned children still run: their ends come by signal, to this run or,
                    # once continue-as-new is suggested, to the next (no busy loop here)
                    if self._should_continue():
                        self._continue_as_new()
                    continue
                await self._tell_parent()
                return ledger.view()
            self._continue_as_new()

    # ---------------------------------------------------------------- the agent

    def _ended(self) -> bool:
        """The task is closed and every child its agent spawned has ended: the workflow may
        complete (once mirrored); a parent never completes before it recorded each child's
        end."""
        return self.ledger.closed and not self._children_running()

    def _children_running(self) -> bool:
        return any(c.status not in CLOSED_STATUSES for c in self.ledger.state.children.values())

    async def _tell_parent(self) -> None:
        """Signal the parent of a spawned task (depth 1 or more) that this task ended
        (``child_ended``), so the parent records a ``child_result`` event; a parent that has
        ended takes no signal, and that is not an error. Runs before the workflow completes. A
        task created from outside with ``parent`` set is linked only (Neo4j's ``CHILD_OF``):
        it signals nothing (an imported subagent run would otherwise write into its parent)."""
        state = self.ledger.state
        if state.start.parent is None or state.start.depth == 0:
            return
        parent = workflow.get_external_workflow_handle(
            task_workflow_id(state.start.project_id, state.start.parent)
        )
        end = child_end(
            state.start.name, state.workflow_id, state.status, state.result, state.error
        )
        with contextlib.suppress(FailureError):
            await parent.signal(TaskWorkflow.child_ended, end)

    def _copying(self) -> bool:
        """True while a branch (``TaskStart.branched_from``) has not copied its source's
        events up to the branch point: its log's first seqs are those events."""
        branch = self.ledger.state.start.branched_from
        return branch is not None and self.ledger.state.last_seq < branch.seq

    async def _copy_branch(self) -> None:
        """Copy a branch's source events up to the branch point, a page at a time (the
        ``branch_events`` activity), each page's events recorded under their authors' names
        with the same seqs as in the source. A run that continues as new meanwhile goes on
        where it stopped (the copy is done when ``last_seq`` reaches the point)."""
        state = self.ledger.state
        branch = state.start.branched_from
        assert branch is not None
        source = task_workflow_id(state.start.project_id, branch.task)
        while self._copying() and not self._should_continue():
            page: BranchPage = await workflow.execute_activity(
                BRANCH_ACTIVITY,
                BranchQuery(
                    source_workflow_id=source,
                    target_workflow_id=state.workflow_id,
                    after_seq=state.last_seq,
                    up_to_seq=branch.seq,
                ),
                result_type=BranchPage,
                start_to_close_timeout=CHILD_ENDS_TIMEOUT,
            )
            for author, events in itertools.groupby(page.events, key=lambda e: e.author):
                copies = [e.event for e in events]
                self.ledger.record_events(
                    RecordEventsInput(
                        agent_id=author,
                        events=copies,
                        request_id=internal_request_id(f"branch/{state.last_seq}"),
                    ),
                    workflow.now(),
                )

    async def _reconcile_children(self) -> None:
        """A resumed parent learns the real states of its children that had not reported an
        end (one may have ended while the parent was closed: its signal found no run), by the
        ``child_ends`` activity; each end found is recorded as the child's own signal would
        have been (the same request id, so a signal that comes too counts once)."""
        state = self.ledger.state
        names = [c.name for c in state.children.values() if c.status not in CLOSED_STATUSES]
        found: ChildEnds = await workflow.execute_activity(
            CHILD_ENDS_ACTIVITY,
            ChildEndsInput(project_id=state.start.project_id, names=names),
            result_type=ChildEnds,
            start_to_close_timeout=CHILD_ENDS_TIMEOUT,
        )
        for end in found.ends:
            self.ledger.child_ended(end, workflow.now())

    def _agent_running(self) -> bool:
        return self.agent_task is not None and not self.agent_task.done()

    def cancel_requested(self) -> bool:
        """True once a cancel request reached the task and the one cancellation rule applies
        (``CANCEL_RULE``; runs recorded before it never ask): from the moment Temporal
        delivers the request, before ``_cancelled`` has run."""
        if self.cancelling:
            return True
        return workflow.cancellation_reason() is not None and workflow.patched(CANCEL_RULE)

    async def _run_agent(self, spec: AgentSpec) -> None:
        """Run the task's agent until it finishes (``done``), fails (``failed``, with an
        ``error`` event: a budget, an unknown agent, an error of its code, each named by
        ``failure_text``) or parks at a checkpoint for continue-as-new. After a cancel request
        it ends without closing the task: ``_cancelled`` closes it ``cancelled`` whatever the
        agent code did with the cancellation."""
        if self.cancel_requested():
            return
        ledger = self.ledger
        branched = ledger.state.start.branched_from is not None
        if ledger.state.agent_run is None and branched:  # the copied log holds the goal
            ledger.state.agent_run = AgentRun(started_at=workflow.now())
        if ledger.state.agent_run is None:  # the first start: the goal is the first message
            ledger.state.agent_run = AgentRun(started_at=workflow.now())
            ledger.append(
                [
                    EventInput(
                        kind=EventKind.MESSAGE, role=Role.USER, payload=ledger.state.start.goal
                    )
                ],
                "goal",
                workflow.now(),
            )
        if ledger.state.status is not TaskStatus.IN_PROGRESS:
            self.set_status(TaskStatus.IN_PROGRESS)
        run = ledger.state.agent_run
        if (run.run == 0 or self.resumed) and workflow.patched(TURN_RULES):
            start = "resume" if self.resumed else "turn"
            if self.continuation or (branched and run.run == 0):
                start = "continuation"
            self._begin_run(start)
        function = agent_function(spec.name)
        try:
            tools = await agent_tools(spec)
            self.agent = AgentContext(ledger, spec, ledger.state.agent_run, tools, self)
            if function is None:
                raise ApplicationError(f"no agent {spec.name!r} is registered on the worker")
            answer = await function(self.agent)
        except AgentParked:
            return
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the agent's failure is the task's, recorded; never a crash
            if not self.cancel_requested():
                error = failure_text(err)
                self._end_run(error)
                self._finish(TaskStatus.FAILED, error=error)
        else:
            if not self.cancel_requested():
                self._end_run(None)
                self._finish(TaskStatus.DONE, result=answer)

    def _begin_run(self, start: str) -> None:
        """Start a run of the agent (``TURN_RULES``): a ``run_started`` note (``{"run": n,
        "start": "turn" | "resume" | "continuation"}``), the run open, what the turn had
        committed before it kept (what a failure rolls back to)."""
        run = self.ledger.state.agent_run
        assert run is not None
        run.run += 1
        run.run_open = True
        run.committed_before_run = run.turn_committed
        payload = json.dumps({"run": run.run, "start": start})
        note = EventInput(kind=EventKind.NOTE, name="run_started", payload=payload)
        run.run_seq = self.ledger.append([note], f"run/{run.run}", workflow.now()).first_seq

    def _end_run(self, error: str | None) -> None:
        """End the open run: finished (a ``run_finished`` note; the turn is done, it committed
        nothing left to continue) or failed (a ``run_failed`` note with ``error``, then a
        ``rolled_back`` note ``{"from_seq", "to_seq"}`` covering the run's events, which the
        model never sees again; the turn is as it was before the run, so a failed first run is
        resumable and a failed continuation stays continuable). A run of a task recorded
        before ``TURN_RULES`` is never open: nothing is recorded."""
        run = self.ledger.state.agent_run
        if run is None or not run.run_open:
            return
        run.run_open = False
        head = {"run": run.run}
        if error is None:
            run.turn_committed = False
            notes = [EventInput(kind=EventKind.NOTE, name="run_finished", payload=json.dumps(head))]
        else:
            run.turn_committed = run.committed_before_run
            failed = json.dumps({**head, "error": error}, ensure_ascii=False)
            notes = [EventInput(kind=EventKind.NOTE, name="run_failed", payload=failed)]
            span = {"from_seq": run.run_seq + 1, "to_seq": self.ledger.state.last_seq}
            if span["from_seq"] <= span["to_seq"]:
                notes.append(
                    EventInput(kind=EventKind.NOTE, name=ROLLED_BACK, payload=json.dumps(span))
                )
        self.ledger.append(notes, f"run/{run.run}/end", workflow.now())

    def set_status(self, status: TaskStatus) -> None:
        """Change an open task's status (an event), and its search attribute."""
        self.ledger.set_status(status, workflow.now())
        workflow.upsert_search_attributes([TASK_STATUS.value_set(status.value)])

    def _finish(
        self, status: TaskStatus, *, result: str | None = None, error: str | None = None
    ) -> None:
        """Close the task from workflow code: its open input requests closed (an
        ``input_closed`` note each), an ``error`` event when it failed, the status event, the
        finish and the search attribute."""
        ledger = self.ledger
        ledger.close_inputs(f"task {status.value}", workflow.now())
        events = [EventInput(kind=EventKind.NOTE, name="status", payload=status.value)]
        if error is not None:
            events.insert(0, EventInput(kind=EventKind.ERROR, name="agent", payload=error))
        ledger.append(events, f"end/{ledger.state.writes}", workflow.now())
        ledger.finish(
            FinishTaskInput(
                agent_id=ledger.state.start.agent_id,
                status=status,
                result=result,
                error=error,
                request_id=internal_request_id(f"finish/{ledger.state.writes}"),
            ),
            workflow.now(),
        )
        workflow.upsert_search_attributes([TASK_STATUS.value_set(status.value)])

    async def start_child(self, start: TaskStart) -> str | None:
        """Start a child task its agent spawned: a child workflow of the same type, abandoned
        when this run continues-as-new or closes (its end comes back by signal, which finds the
        parent's newest run). Returns None once started; when the workflow id is taken (by a
        task created from outside under that name, or an earlier task of it), why: the child
        is not this task's, so nothing waits for it and no cascade reaches it."""
        status = TaskStatus.OPEN if start.agent is None else TaskStatus.QUEUED
        workflow_id = task_workflow_id(start.project_id, start.name)
        try:
            await workflow.start_child_workflow(
                TaskWorkflow.run,
                TaskWorkflowInput(start=start, spawned=True),
                id=workflow_id,
                task_queue=workflow.info().task_queue,
                parent_close_policy=ParentClosePolicy.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes(search_attributes(start, status)),
            )
        except WorkflowAlreadyStartedError:
            return f"its workflow id {workflow_id!r} is already taken by another task"
        return None

    async def _cancelled(self) -> None:
        """A cancel request (client, CLI, ``temporal workflow cancel``, the Web UI), by the
        one cancellation rule (``CANCEL_RULE``; docs/agent-tasks.md has the table): the agent
        starts nothing more (``AgentContext.cancelled``); the activities it awaits are
        cancelled, and the workflow waits for them to end: a tool that heartbeats sees the
        cancel (its step ends ``unknown``), one that does not runs to its end (its real result
        is recorded), the model call is dropped at once. Then the children are cancelled (the
        cascade, unless ``keep_children`` came), every step left ``in_progress`` is settled
        ``unknown``, the open input requests are closed, the task closes ``cancelled`` (its
        status event is the final event) and is mirrored: the view, the search attribute,
        Neo4j and Temporal all say ``cancelled``. Runs recorded before the rule cancelled the
        agent's asyncio task instead."""
        ledger = self.ledger
        if workflow.patched(CANCEL_RULE):
            self.cancelling = True
            if self.agent is not None:
                self.agent.cancel_running()
            if self.agent_task is not None:
                await workflow.wait_condition(self.agent_task.done)
        elif self.agent_task is not None and not self.agent_task.done():
            self.agent_task.cancel()
            await workflow.wait([self.agent_task])
        if self.cascade and self._children_running():
            for child in ledger.state.children.values():
                if child.status not in CLOSED_STATUSES:
                    handle = workflow.get_external_workflow_handle(
                        task_workflow_id(ledger.state.start.project_id, child.name)
                    )
                    with contextlib.suppress(FailureError):
                        await handle.cancel()
            with contextlib.suppress(TimeoutError):  # each reports cancelled by signal
                await workflow.wait_condition(
                    lambda: not self._children_running(), timeout=CHILD_CANCEL_WAIT
                )
        if not ledger.closed:
            for name, step in list(ledger.state.steps.items()):
                if step.state is StepState.IN_PROGRESS:
                    ledger.move_step(
                        name,
                        StepState.UNKNOWN,
                        f"cancel/{name}/{ledger.state.writes}",
                        workflow.now(),
                    )
            self._finish(TaskStatus.CANCELLED)
        while ledger.unmirrored:
            await self._mirror(bounded=False)
        await self._tell_parent()

    # ---------------------------------------------------------------- run loop helpers

    def _should_continue(self) -> bool:
        return workflow.info().is_continue_as_new_suggested()

    def _continue_as_new(self) -> NoReturn:
        """Continue as a new run carrying the ledger's state (``Ledger.carry_over``)."""
        carried = self.ledger.carry_over(workflow.info().run_id)
        workflow.continue_as_new(
            TaskWorkflowInput(carried=carried),
            search_attributes=workflow.info().typed_search_attributes,
        )

    def _drain_if_due(self) -> None:
        """Once continue-as-new is due, turn writes away (the client sends them again) until
        the mirror has caught up and the new run takes them; never while the mirror fails,
        so that writes are not held up by a Neo4j outage. Validators read the flag, so it
        adds no command and changes no replay."""
        if self._should_continue() and not self.ledger.state.mirror_failures:
            self.draining = True

    async def _mirror(self, *, bounded: bool = True) -> None:
        """Mirror the next waiting writes (``Ledger.mirror_target``: an earlier run's first,
        at most ``MIRROR_MAX_EVENTS`` events; this run's by a call that follows the run,
        ``MIRROR_FOLLOWS_RUN``); after a failure, pause (``mirror_pause``). A ``bounded``
        call (the run loop's; the final mirror of a cancel is not) holds up continue-as-new
        at most ``MIRROR_DRAIN_WAIT`` (``_bound_mirror_call``)."""
        target = self.ledger.mirror_target(
            workflow.info().run_id,
            MIRROR_MAX_EVENTS,
            follow=workflow.patched(MIRROR_FOLLOWS_RUN),
            history_token=self.history_token,
        )
        longest = MIRROR_START_TO_CLOSE
        if target.input.follow:
            longest += MIRROR_FOLLOW_MAX
        handle = workflow.start_activity(
            MIRROR_ACTIVITY,
            target.input,
            result_type=MirrorOutcome,
            start_to_close_timeout=longest,
            heartbeat_timeout=MIRROR_HEARTBEAT,
            retry_policy=MIRROR_RETRY,
        )
        bound = asyncio.create_task(self._bound_mirror_call(handle)) if bounded else None
        try:
            outcome = await handle
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                if bound is not None and bound.done() and bound.result():
                    return  # continue-as-new is due: the next run mirrors these writes
                raise asyncio.CancelledError from err  # the workflow is being cancelled
            # Neo4j down past the activity's retries, or a data error: keep the ledger open
            # and writable, show the error in the view, and try again after a pause.
            self.ledger.mirror_failed(str(err.cause or err))
            self.draining = False
            pause = mirror_pause(self.ledger.state.mirror_failures)
            if workflow.patched(CONTINUE_WITHOUT_MIRROR):
                # A pause may last minutes: continue-as-new as soon as it is suggested (and
                # the agent, if any, has parked).
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: self._should_continue() and not self._agent_running(),
                        timeout=pause,
                    )
            else:
                await workflow.sleep(pause)
            return
        self.ledger.mirrored(target, outcome)
        if target.input.follow:
            self.history_token = outcome.history_token

    async def _bound_mirror_call(self, handle: workflow.ActivityHandle[MirrorOutcome]) -> bool:
        """Cancel the mirror call ``handle`` when continue-as-new is due and the call has run
        ``MIRROR_DRAIN_WAIT`` past that (a stalled Neo4j; a normal call takes milliseconds),
        so the run continues as new and its unmirrored writes go to the next run's backlog;
        returns True when it cancelled the call. Runs recorded before ``MIRROR_DRAIN_BOUND``
        waited for the call's three attempts (about 3 minutes against a stalled Neo4j)."""
        await workflow.wait_condition(lambda: handle.done() or self._should_continue())
        if handle.done() or not workflow.patched(MIRROR_DRAIN_BOUND):
            return False
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(handle.done, timeout=MIRROR_DRAIN_WAIT)
        if handle.done():
            return False
        handle.cancel()
        return True

    def _admit(self) -> None:
        """Admission, checked by validators only (so replaying an accepted write never depends
        on it): the drain before continue-as-new (``CONTINUING_AS_NEW``), the history length
        and a branch still copying its source (``task_busy``)."""
        if self._copying():
            raise refusal(ErrorCode.TASK_BUSY, "the branch is copying its source's events")
        if self.draining:
            raise ApplicationError(
                "continuing as new: retry", type=CONTINUING_AS_NEW, non_retryable=True
            )
        if workflow.info().get_current_history_length() > HISTORY_BACKPRESSURE_EVENTS:
            raise refusal(ErrorCode.TASK_BUSY, "history is long while the mirror catches up")

    def _single_writer(self) -> None:
        """An agent task's agent is the single writer of its steps, events and end: outside
        writes other than notes are refused (``run_by_agent``); input and cancel have their
        own paths. Checked by validators only."""
        if self.ledger.state.start.agent is not None:
            raise refusal(
                ErrorCode.RUN_BY_AGENT,
                "this task is run by its agent: from outside it takes notes, input and cancel",
            )

    # ---------------------------------------------------------------- updates

    @workflow.update
    def create_task(self, input: TaskStart) -> WriteOutcome:
        """Create the task (sent with the start by update-with-start). Returns ``created``
        True for the creating request id; an existing task with the same goal is answered by
        the validator (``DUPLICATE``, ``created`` False); another goal is ``task_exists``."""
        return self.ledger.create(input, workflow.now())

    @create_task.validator
    def _check_create(self, input: TaskStart) -> None:
        self.ledger.check_create(input)

    @workflow.update
    def record_events(self, input: RecordEventsInput) -> WriteOutcome:
        """Append events with consecutive seqs; returns the first and last seq."""
        return self.ledger.record_events(input, workflow.now())

    @record_events.validator
    def _check_record_events(self, input: RecordEventsInput) -> None:
        self.ledger.check_write(input.request_id, args_digest(input))
        self._admit()
        if any(event.kind is not EventKind.NOTE for event in input.events):
            self._single_writer()
        check_citations(self.ledger.step, input, self.ledger.state.last_seq)

    @workflow.update
    def set_steps(self, input: SetStepsInput) -> WriteOutcome:
        """Apply step changes in order, all or nothing (``STEP_TRANSITIONS``)."""
        return self.ledger.set_steps(input, workflow.now())

    @set_steps.validator
    def _check_set_steps(self, input: SetStepsInput) -> None:
        self.ledger.check_write(input.request_id, args_digest(input))
        self._admit()
        self._single_writer()
        self.ledger.check_steps(input, workflow.now())

    @workflow.update
    def finish_task(self, input: FinishTaskInput) -> WriteOutcome:
        """Close the task with a final status; later writes get ``task_closed``."""
        outcome = self.ledger.finish(input, workflow.now())
        workflow.upsert_search_attributes([TASK_STATUS.value_set(input.status.value)])
        return outcome

    @finish_task.validator
    def _check_finish(self, input: FinishTaskInput) -> None:
        self.ledger.check_write(input.request_id, args_digest(input))
        self._admit()
        self._single_writer()

    # ---------------------------------------------------------------- queries

    @workflow.query
    def view(self) -> TaskView:
        """The task view, without event bodies."""
        return self.ledger.view()

    @workflow.query
    def events(self, query: EventsQuery) -> EventsPage:
        """This run's events with seq > ``after_seq``: at most ``limit`` of them and at most
        ``max_bytes`` of JSON (never fewer than one event when one is left)."""
        return self.ledger.events_page(query)

    @workflow.query
    def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """The mirror activity's read: the view, the changed steps and the events of one page
        in one query (``Ledger.mirror_page``), and whether the run waits for the mirror's
        call to end (``MirrorPage.end``: closed, or continue-as-new suggested)."""
        page = self.ledger.mirror_page(query)
        page.end = self.ledger.closed or self._should_continue()
        return page

    @workflow.query
    def steps(self, query: StepsQuery) -> StepsPage:
        """A page of the steps this run holds, in name order (``Ledger.steps``)."""
        return self.ledger.steps(query)

    # ---------------------------------------------------------------- input and children

    @workflow.signal
    def submit_input(self, answer: InputAnswer) -> None:
        """An answer to an input request, fire and forget (``Ledger.take_answer``): a repeat
        is ignored, an answer naming a request not asked yet is kept for it, an answer bound
        to no open request or an invalid one is recorded as rejected (an open request stays
        open), one to a request that timed out is recorded as late. A finished task ignores
        it."""
        if not self.ledger.closed:
            bound = workflow.patched(ANSWERS_BOUND)
            self.ledger.take_answer(answer, workflow.now(), bound=bound)
            self._settle()

    @workflow.update
    def respond(self, answer: InputAnswer) -> WriteOutcome:
        """An answer to an input request, validated on arrival: accepted, or refused
        (``input_not_requested``, ``input_invalid`` with the validation message) with nothing
        recorded."""
        outcome = self.ledger.respond(answer, workflow.now())
        self._settle()
        return outcome

    @respond.validator
    def _check_respond(self, answer: InputAnswer) -> None:
        self.ledger.check_respond(answer)
        self._admit()

    @workflow.update
    def retry_step(self, retry: StepRetry) -> WriteOutcome:
        """Ask that an ``unknown`` or ``failed`` step of the agent run again when its code
        reaches it (``Ledger.retry_step``: a decision citing the step, by who asked)."""
        return self.ledger.retry_step(retry, workflow.now())

    @retry_step.validator
    def _check_retry(self, retry: StepRetry) -> None:
        self.ledger.check_retry(retry)
        self._admit()
        if self.ledger.state.start.agent is None:
            raise refusal(
                ErrorCode.NOT_RESUMABLE,
                "a recorded task's steps are set by its writer (set_step), not retried",
            )

    @workflow.signal
    def child_ended(self, end: ChildEnd) -> None:
        """A child task's end (it signals before it completes): a ``child_result`` event."""
        self.ledger.child_ended(end, workflow.now())
        self._settle()

    @workflow.signal
    def keep_children(self) -> None:
        """Make a later cancel leave the spawned child tasks running (``--no-cascade``)."""
        self.cascade = False

    # ---------------------------------------------------------------- a recorded task's lifecycle

    def _settle(self) -> None:
        """A recorded task that waits for nothing any more is ``queued`` again (the rule of
        ``workflows.lifecycle``)."""
        if lifecycle.waiting_for_nothing(self.ledger) and workflow.patched(APP_LIFECYCLE):
            self.set_status(TaskStatus.QUEUED)

    def _check_lifecycle(self) -> None:
        """What every lifecycle write needs besides its own rules: admission, and a recorded
        task (an agent task's agent sets its own status, asks and spawns)."""
        self._admit()
        self._single_writer()

    @workflow.update
    def update_status(self, input: SetStatusInput) -> WriteOutcome:
        """Set a recorded task's status (``queued``, ``in_progress``, ``awaiting_children``);
        ``awaiting_children`` with no child running is ``queued`` at once."""
        outcome = lifecycle.set_status(self.ledger, input, workflow.now())
        workflow.upsert_search_attributes([TASK_STATUS.value_set(input.status.value)])
        self._settle()
        return outcome

    @update_status.validator
    def _check_update_status(self, input: SetStatusInput) -> None:
        lifecycle.check_status(self.ledger, input)
        self._check_lifecycle()

    @workflow.update
    def ask(self, input: AskInput) -> WriteOutcome:
        """Open an input request of a recorded task: ``awaiting_input`` until its requests are
        answered (by ``respond`` or ``submit_input``), then ``queued``."""
        outcome = lifecycle.ask(self.ledger, input, workflow.now())
        self.set_status(TaskStatus.AWAITING_INPUT)
        self._settle()  # an answer kept from before the request took it already
        return outcome

    @ask.validator
    def _check_ask(self, input: AskInput) -> None:
        lifecycle.check_ask(self.ledger, input)
        self._check_lifecycle()

    @workflow.update
    async def spawn(self, input: SpawnInput) -> WriteOutcome:
        """Start a child task of a recorded task (``start_child``); returns once its workflow
        has started. Its end comes back by ``child_ended``."""
        outcome, child = lifecycle.spawn(self.ledger, input, workflow.now())
        refused = await self.start_child(child)
        if refused is not None:  # the child is recorded ended, as an agent's spawn records it
            why = bound_text(f"could not start: {refused}")
            wid = task_workflow_id(child.project_id, child.name)
            self.ledger.child_ended(
                child_end(child.name, wid, TaskStatus.FAILED, error=why), workflow.now()
            )
        return outcome

    @spawn.validator
    def _check_spawn(self, input: SpawnInput) -> None:
        lifecycle.check_spawn(self.ledger, input)
        self._check_lifecycle()

    @workflow.query
    def resume_state(self) -> TaskState:
        """The state a ``resume`` starts the task's next execution from (this run's
        ``carry_over``): asked of a closed agent task's last run."""
        return self.ledger.carry_over(workflow.info().run_id)

    @workflow.query
    def request_outcome(self, lookup: RequestLookup) -> WriteOutcome | None:
        """The stored outcome of a request id whose digest matches, else None (lets a client
        answer a retried write after the task's workflow has closed)."""
        return self.ledger.request_outcome(lookup)
