"""TaskWorkflow: one task. Its history is the task's durable event log.

Writes arrive as updates with thin handlers over the ledger (``workflows.ledger``). Refusals and
repeated request ids are answered by update validators, so they leave nothing in the history;
accepted writes run in synchronous handlers, one at a time, so seqs have no gaps.

The run loop mirrors the ledger into the graph store through ``workflows.mirror_calls``,
continues-as-new when Temporal suggests it (handlers finished), and returns the final ``TaskView``
once the task is finished and mirrored. Runs recorded before ``MIRROR_WITHOUT_DEBOUNCE`` still
replay their debounce timer. The agent's runs (``workflows.runs``) and the family
(``workflows.spawning``) have rooms of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
    FailureError,
)

with workflow.unsafe.imports_passed_through():
    # Pass-through is safe: these modules are deterministic (stdlib, pydantic, temporalio) and
    # hold no state between workflow runs; sharing them avoids re-importing pydantic models.
    from agent_tasks.contract import (
        CLOSED_STATUSES,
        HISTORY_BACKPRESSURE_EVENTS,
        MIRROR_BATCH_EVENTS,
        MIRROR_DEBOUNCE_MS,
        AgentRun,
        AgentSpec,
        ChildEnd,
        EventInput,
        EventKind,
        EventsPage,
        EventsQuery,
        FinishTaskInput,
        InputAnswer,
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
    )
    from agent_tasks.contract.errors import CONTINUING_AS_NEW, ErrorCode, failure_text, refusal
    from agent_tasks.contract.human import child_end
    from agent_tasks.contract.lifecycle import AskInput, SetStatusInput, SpawnInput
    from agent_tasks.contract.search import TASK_STATUS
    from agent_tasks.workflows import children, inbox, lifecycle, pages, retries
    from agent_tasks.workflows.agents.context import AgentContext
    from agent_tasks.workflows.agents.registry import McpSessions, agent_function, agent_tools
    from agent_tasks.workflows.agents.runner import AgentParked
    from agent_tasks.workflows.decisions import check_citations
    from agent_tasks.workflows.ledger import Ledger
    from agent_tasks.workflows.mirror_calls import MirrorCalls, continue_suggested
    from agent_tasks.workflows.patches import (
        ANSWERS_BOUND,
        APP_LIFECYCLE,
        BRANCH_REUSE,
        CANCEL_AFTER_END,
        CANCEL_RULE,
        CONTINUE_WITHOUT_MIRROR,
        MIRROR_WITHOUT_DEBOUNCE,
        TURN_RULES,
    )
    from agent_tasks.workflows.runs import begin_run, close, end_run
    from agent_tasks.workflows.spawning import (
        children_running,
        copy_branch,
        copying,
        reconcile_children,
        reuse_before_point,
        start_child,
        task_id,
        tell_parent,
    )

CHILD_CANCEL_WAIT = timedelta(minutes=1)
"""How long a cancelled parent waits for its cancelled children to report their end."""


# Long: the @workflow.defn class: Temporal's handlers must be its methods
@workflow.defn
class TaskWorkflow:
    """One task: its ledger, kept in the graph store by the mirror, continued-as-new when
    suggested."""

    @workflow.init
    def __init__(self, input: TaskWorkflowInput) -> None:
        if input.carried is not None:
            self.ledger = Ledger(input.carried)
            if input.resume:
                self.ledger.reopen(workflow.now())
                for retry in input.retry:
                    with contextlib.suppress(ApplicationError):  # checked by the client
                        retries.retry_step(self.ledger, retry, workflow.now())
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
        self.agent: AgentContext | None = None
        """The running agent's context (agent tasks)."""
        self.agent_task: asyncio.Task[None] | None = None
        """The running agent (agent tasks): done once it parked, finished or failed."""
        self.cancelling = False
        """True once the task is being cancelled (``CANCEL_RULE``): the agent's waits wake up and it
        starts nothing more."""
        self.mirror = MirrorCalls(self.ledger, self._agent_running, self._ended)
        """This run's mirror calls and its drain before continue-as-new."""

    @workflow.run
    async def run(self, input: TaskWorkflowInput) -> TaskView:
        """Run the agent (agent tasks), mirror, continue-as-new and finish; returns the final view
        once finished and mirrored. A cancel request ends it ``cancelled`` (``_cancelled``)."""
        try:
            return await self._run()
        except asyncio.CancelledError:
            # A cancel request from the server; not an eviction from the worker's cache (which
            # cancels the workflow's tasks too, and must change nothing).
            if workflow.cancellation_reason() is None:
                raise
            if self.ledger.closed and workflow.patched(CANCEL_AFTER_END):
                return await self._cancelled_after_end()
            await self._cancelled()
            raise

    # Long: TaskWorkflow's run loop: mirror, continue-as-new, finish; its patched branches must keep
    # their order
    async def _run(self) -> TaskView:
        ledger = self.ledger
        if copying(ledger):
            await copy_branch(ledger, continue_suggested)
            agent_branch = ledger.state.start.agent is not None and not copying(ledger)
            if agent_branch and workflow.patched(BRANCH_REUSE):
                await reuse_before_point(ledger)
        if self.resumed and children_running(ledger):
            await reconcile_children(ledger)
        if ledger.state.start.agent is not None and not ledger.closed:
            self.agent_task = asyncio.create_task(self._run_agent(ledger.state.start.agent))
        while True:
            await workflow.wait_condition(
                lambda: ledger.unmirrored or self._ended() or continue_suggested()
            )
            if (
                continue_suggested()
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
                        await self.mirror.call()
                    continue
                # The next run mirrors what this one has not (a closed run still answers
                # queries), so neither a Neo4j outage nor a long mirror holds up the switch.
                self.mirror.draining = True
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._continue_as_new()
            if ledger.unmirrored and not self.mirror.refused:
                # patched() first: the first call places the patch's marker, so it must not
                # hang on ``urgent`` (whether continue-as-new is suggested can read otherwise
                # on a replay than it did when the run was recorded)
                if not workflow.patched(MIRROR_WITHOUT_DEBOUNCE) and not (
                    ledger.closed or continue_suggested()
                ):
                    # Runs recorded before the patch waited for a debounce timer here.
                    try:
                        await workflow.wait_condition(
                            lambda: (
                                ledger.unmirrored_events >= MIRROR_BATCH_EVENTS
                                or ledger.closed
                                or continue_suggested()
                            ),
                            timeout=timedelta(milliseconds=MIRROR_DEBOUNCE_MS),
                        )
                    except TimeoutError:
                        pass
                self.mirror.drain_if_due()
                await self.mirror.call()
                continue
            self.mirror.drain_if_due()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if ledger.unmirrored and not self.mirror.refused:
                continue
            if ledger.closed:
                if not self._ended():
                    # spawned children still run: their ends come by signal, to this run or,
                    # once continue-as-new is suggested, to the next (no busy loop here)
                    if continue_suggested():
                        self._continue_as_new()
                    continue
                await tell_parent(ledger)
                return pages.view(ledger)
            self._continue_as_new()

    # ---------------------------------------------------------------- the agent

    def _ended(self) -> bool:
        """The task is closed and every spawned child has ended: the workflow may complete once
        mirrored."""
        return self.ledger.closed and not children_running(self.ledger)

    def _agent_running(self) -> bool:
        return self.agent_task is not None and not self.agent_task.done()

    def cancel_requested(self) -> bool:
        """True from the moment Temporal delivers a cancel request, under ``CANCEL_RULE``."""
        if self.cancelling:
            return True
        return workflow.cancellation_reason() is not None and workflow.patched(CANCEL_RULE)

    async def _run_agent(self, spec: AgentSpec) -> None:
        """Run the task's agent until it finishes, fails (an ``error`` event naming the cause:
        ``failure_text``) or parks for continue-as-new. After a cancel request it ends without
        closing the task: ``_cancelled`` closes it."""
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
            begin_run(ledger, start, workflow.now())
        function = agent_function(spec.name)
        sessions = McpSessions()  # a stateful MCP server's session lives for this run
        try:
            try:
                tools = await agent_tools(spec, sessions)
                self.agent = AgentContext(
                    ledger, spec, ledger.state.agent_run, tools, self, sessions
                )
                if function is None:
                    raise ApplicationError(f"no agent {spec.name!r} is registered on the worker")
                answer = await function(self.agent)
            finally:
                await sessions.close()
        except AgentParked:
            return
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the agent's failure is the task's, recorded; never a crash
            if not self.cancel_requested():
                error = failure_text(err)
                end_run(ledger, error, workflow.now())
                self._finish(TaskStatus.FAILED, error=error)
        else:
            if not self.cancel_requested():
                end_run(ledger, None, workflow.now())
                self._finish(TaskStatus.DONE, result=answer)

    def set_status(self, status: TaskStatus) -> None:
        """Change an open task's status (an event), and its search attribute."""
        self.ledger.set_status(status, workflow.now())
        workflow.upsert_search_attributes([TASK_STATUS.value_set(status.value)])

    def _finish(
        self, status: TaskStatus, *, result: str | None = None, error: str | None = None
    ) -> None:
        """Close the task from workflow code (``workflows.runs.close``) and set its search
        attribute."""
        close(self.ledger, status, workflow.now(), result=result, error=error)
        workflow.upsert_search_attributes([TASK_STATUS.value_set(status.value)])

    async def start_child(self, start: TaskStart) -> str | None:
        """Start a child task its agent spawned (``workflows.spawning.start_child``)."""
        return await start_child(start)

    async def _cancelled(self) -> None:
        """A cancel request, by the one cancellation rule (``CANCEL_RULE``; the table is in
        ``docs/agent-tasks.md``): the agent starts nothing more, the activities it awaits are
        cancelled and awaited, the children cancelled (unless ``keep_children``), steps left
        ``in_progress`` settled ``unknown``, open requests closed, and the task closed ``cancelled``
        and mirrored."""
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
        await self._cascade()
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
        while ledger.unmirrored and not self.mirror.refused:
            await self.mirror.call(bounded=False, final=True)
        await tell_parent(ledger)

    async def _cascade(self) -> None:
        """Cancel the running children (unless ``keep_children`` came) and wait up to
        ``CHILD_CANCEL_WAIT`` for each to report its end."""
        ledger = self.ledger
        if not self.cascade or not children_running(ledger):
            return
        for child in ledger.state.children.values():
            if child.status not in CLOSED_STATUSES:
                handle = workflow.get_external_workflow_handle(
                    task_id(ledger.state.start.project_id, child.name)
                )
                with contextlib.suppress(FailureError):
                    await handle.cancel()
        with contextlib.suppress(TimeoutError):  # each reports cancelled by signal
            await workflow.wait_condition(
                lambda: not children_running(ledger), timeout=CHILD_CANCEL_WAIT
            )

    async def _cancelled_after_end(self) -> TaskView:
        """A cancel request reaching a task already ``done`` or ``failed`` (``CANCEL_AFTER_END``): a
        ``cancel_after_end`` note, the running children cancelled (unless ``keep_children``), and
        the workflow completes as the task ended. Recorded, not refused: the server delivers a
        cancel whoever sends it (``docs/agent-tasks.md``)."""
        ledger = self.ledger
        payload = f'{{"status": "{ledger.state.status.value}"}}'
        note = EventInput(kind=EventKind.NOTE, name="cancel_after_end", payload=payload)
        request_id = internal_request_id(f"cancel-after-end/{ledger.state.writes}")
        now = workflow.now()  # a closed task takes no write: the note goes in as a child's end
        outcome = ledger.add_events([note], ledger.state.start.agent_id, request_id, now)
        ledger.accept(request_id, args_digest(note), outcome.first_seq, outcome.last_seq, now)
        if not self.cascade:  # the children run on: the task waits for their ends as before
            return await self._run()
        await self._cascade()
        while ledger.unmirrored and not self.mirror.refused:
            await self.mirror.call(bounded=False, final=True)
        await tell_parent(ledger)
        return pages.view(ledger)

    # ---------------------------------------------------------------- run loop helpers

    def _continue_as_new(self) -> NoReturn:
        """Continue as a new run carrying the ledger's state (``Ledger.carry_over``)."""
        carried = self.ledger.carry_over(workflow.info().run_id)
        workflow.continue_as_new(
            TaskWorkflowInput(carried=carried),
            search_attributes=workflow.info().typed_search_attributes,
        )

    def _admit(self) -> None:
        """Admission, in validators only (replay never depends on it): the drain
        (``CONTINUING_AS_NEW``), the history length, and a branch still copying (``task_busy``)."""
        if copying(self.ledger):
            raise refusal(ErrorCode.TASK_BUSY, "the branch is copying its source's events")
        if self.mirror.draining:
            raise ApplicationError(
                "continuing as new: retry", type=CONTINUING_AS_NEW, non_retryable=True
            )
        if workflow.info().get_current_history_length() > HISTORY_BACKPRESSURE_EVENTS:
            raise refusal(ErrorCode.TASK_BUSY, "history is long while the mirror catches up")

    def _single_writer(self) -> None:
        """An agent task's agent is the single writer of its steps, events and end: outside writes
        but notes are refused (``run_by_agent``). Validators only."""
        if self.ledger.state.start.agent is not None:
            raise refusal(
                ErrorCode.RUN_BY_AGENT,
                "this task is run by its agent: from outside it takes notes, input and cancel",
            )

    # ---------------------------------------------------------------- updates

    @workflow.update
    def create_task(self, input: TaskStart) -> WriteOutcome:
        """Create the task (sent with the start by update-with-start): ``created`` True for the
        creating request id; the same goal again is ``DUPLICATE``, another goal ``task_exists``."""
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
        self.ledger.check_write(input.request_id, input)
        self._admit()
        if any(event.kind is not EventKind.NOTE for event in input.events):
            self._single_writer()
        input.check_counts()
        check_citations(self.ledger.step, input, self.ledger.state.last_seq)

    @workflow.update
    def set_steps(self, input: SetStepsInput) -> WriteOutcome:
        """Apply step changes in order, all or nothing (``STEP_TRANSITIONS``)."""
        return self.ledger.set_steps(input, workflow.now())

    @set_steps.validator
    def _check_set_steps(self, input: SetStepsInput) -> None:
        self.ledger.check_write(input.request_id, input)
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
        self.ledger.check_write(input.request_id, input)
        self._admit()
        self._single_writer()

    # ---------------------------------------------------------------- queries

    @workflow.query
    def view(self) -> TaskView:
        """The task view, without event bodies."""
        return pages.view(self.ledger)

    @workflow.query
    def events(self, query: EventsQuery) -> EventsPage:
        """This run's events (``pages.events_page``)."""
        return pages.events_page(self.ledger, query)

    @workflow.query
    def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """The mirror activity's read of one page (``pages.mirror_page``), with whether the run
        waits for the mirror call to end (``MirrorPage.end``)."""
        page = pages.mirror_page(self.ledger, query)
        page.end = self.ledger.closed or continue_suggested()
        return page

    @workflow.query
    def steps(self, query: StepsQuery) -> StepsPage:
        """A page of the steps this run holds, in name order (``pages.steps_page``)."""
        return pages.steps_page(self.ledger, query)

    # ---------------------------------------------------------------- input and children

    @workflow.signal
    def submit_input(self, answer: InputAnswer) -> None:
        """An answer to an input request, fire and forget (``inbox.take_answer``); a finished task
        ignores it."""
        if not self.ledger.closed:
            bound = workflow.patched(ANSWERS_BOUND)
            inbox.take_answer(self.ledger, answer, workflow.now(), bound=bound)
            self._settle()

    @workflow.update
    def respond(self, answer: InputAnswer) -> WriteOutcome:
        """An answer to an input request, validated on arrival (``inbox.admit_respond``): accepted,
        or refused with nothing recorded."""
        outcome = inbox.respond(self.ledger, answer, workflow.now())
        self._settle()
        return outcome

    @respond.validator
    def _check_respond(self, answer: InputAnswer) -> None:
        inbox.admit_respond(self.ledger, answer, workflow.now())
        self._admit()

    @workflow.update
    def retry_step(self, retry: StepRetry) -> WriteOutcome:
        """Ask that an ``unknown`` or ``failed`` step run again (``retries.retry_step``)."""
        return retries.retry_step(self.ledger, retry, workflow.now())

    @retry_step.validator
    def _check_retry(self, retry: StepRetry) -> None:
        retries.check_retry(self.ledger, retry)
        self._admit()
        if self.ledger.state.start.agent is None:
            raise refusal(
                ErrorCode.NOT_RESUMABLE,
                "a recorded task's steps are set by its writer (set_step), not retried",
            )

    @workflow.signal
    def child_ended(self, end: ChildEnd) -> None:
        """A child task's end (it signals before it completes): a ``child_result`` event."""
        children.child_ended(self.ledger, end, workflow.now())
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
        task."""
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
        """Open an input request of a recorded task: ``awaiting_input`` until answered, then
        ``queued``."""
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
        """Start a child task of a recorded task; returns once its workflow started (its end comes
        back by ``child_ended``)."""
        outcome, child = lifecycle.spawn(self.ledger, input, workflow.now())
        refused = await self.start_child(child)
        if refused is not None:  # the child is recorded ended, as an agent's spawn records it
            why = bound_text(f"could not start: {refused}")
            wid = task_id(child.project_id, child.name)
            children.child_ended(
                self.ledger,
                child_end(child.name, wid, TaskStatus.FAILED, error=why),
                workflow.now(),
            )
        return outcome

    @spawn.validator
    def _check_spawn(self, input: SpawnInput) -> None:
        lifecycle.check_spawn(self.ledger, input)
        self._check_lifecycle()

    @workflow.query
    def resume_state(self) -> TaskState:
        """The state a ``resume`` starts from (``carry_over``), asked of a closed agent task's last
        run."""
        return self.ledger.carry_over(workflow.info().run_id)

    @workflow.query
    def request_outcome(self, lookup: RequestLookup) -> WriteOutcome | None:
        """The stored outcome of a request id whose digest matches, else None (answers a retried
        write after the workflow closed)."""
        return self.ledger.request_outcome(lookup)
