"""A task's family from its workflow's side: the children it starts, the parent it tells of its end,
a branch's copy of its source, and a resumed parent's look at its children. The ledger's side is
``workflows.children``. Calls ``temporalio.workflow``; the workflow and signal names
(``TASK_WORKFLOW``, ``CHILD_ENDED``) are held to the class's by ``tests/test_plugin.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from agent_tasks.contract import (
    BRANCH_ACTIVITY,
    BRANCH_REUSE_ACTIVITY,
    CHILD_ENDS_ACTIVITY,
    CLOSED_STATUSES,
    MAX_WORKFLOW_ID,
    AgentRun,
    BranchPage,
    BranchQuery,
    BranchReuse,
    BranchReuseQuery,
    ChildEnds,
    ChildEndsInput,
    EventInput,
    EventKind,
    RecordEventsInput,
    SetStepsInput,
    StepWrite,
    TaskStart,
    TaskStatus,
    TaskWorkflowInput,
    internal_request_id,
    task_workflow_id,
)
from agent_tasks.contract.human import child_end
from agent_tasks.contract.search import search_attributes
from agent_tasks.workflows import children
from agent_tasks.workflows.ledger import Ledger
from agent_tasks.workflows.patches import BOUNDED_WORKFLOW_IDS


def task_id(project_id: str, name: str) -> str:
    """The workflow id of another task of the project as a command names it: bounded
    (``task_workflow_id``) past ``MAX_WORKFLOW_ID`` under the ``bounded-workflow-ids`` patch, plain
    otherwise; the marker is recorded only for such a long id."""
    plain = task_workflow_id(project_id, name, bounded=False)
    if len(plain) <= MAX_WORKFLOW_ID or not workflow.patched(BOUNDED_WORKFLOW_IDS):
        return plain
    return task_workflow_id(project_id, name)


TASK_WORKFLOW = "TaskWorkflow"
"""The task workflow's registered name (``workflows.task.TaskWorkflow``): its children's type."""
CHILD_ENDED = "child_ended"
"""The name of the signal by which a child tells its parent of its end."""
CHILD_ENDS_TIMEOUT = timedelta(seconds=60)
"""Longest run of the ``child_ends`` activity and of one page of a branch's copy."""


def children_running(ledger: Ledger) -> bool:
    """True while a child task this task spawned has not reported its end."""
    return any(c.status not in CLOSED_STATUSES for c in ledger.state.children.values())


async def start_child(start: TaskStart) -> str | None:
    """Start a child task: a child workflow abandoned when this run continues-as-new or closes (its
    end comes back by signal). Returns None once started, else why: a taken workflow id means the
    child is not this task's, so nothing waits for it."""
    status = TaskStatus.OPEN if start.agent is None else TaskStatus.QUEUED
    workflow_id = task_id(start.project_id, start.name)
    try:
        await workflow.start_child_workflow(
            TASK_WORKFLOW,
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


async def tell_parent(ledger: Ledger) -> None:
    """Signal the parent of a spawned task (depth 1 or more) that it ended (``CHILD_ENDED``); an
    ended parent is no error. A task created from outside with ``parent`` is only linked
    (``CHILD_OF``) and signals nothing."""
    state = ledger.state
    if state.start.parent is None or state.start.depth == 0:
        return
    parent = workflow.get_external_workflow_handle(
        task_id(state.start.project_id, state.start.parent)
    )
    end = child_end(state.start.name, state.workflow_id, state.status, state.result, state.error)
    with contextlib.suppress(FailureError):
        await parent.signal(CHILD_ENDED, end)


async def reconcile_children(ledger: Ledger) -> None:
    """A resumed parent learns, by the ``child_ends`` activity, the ends of children that had not
    reported (their signal found no run); each is recorded under the child's own request id, so it
    counts once."""
    state = ledger.state
    names = [c.name for c in state.children.values() if c.status not in CLOSED_STATUSES]
    found: ChildEnds = await workflow.execute_activity(
        CHILD_ENDS_ACTIVITY,
        ChildEndsInput(project_id=state.start.project_id, names=names),
        result_type=ChildEnds,
        start_to_close_timeout=CHILD_ENDS_TIMEOUT,
    )
    for end in found.ends:
        children.child_ended(ledger, end, workflow.now())


def copying(ledger: Ledger) -> bool:
    """True while a branch has not copied its source's events up to the branch point."""
    branch = ledger.state.start.branched_from
    return branch is not None and ledger.state.last_seq < branch.seq


async def copy_branch(ledger: Ledger, stop: Callable[[], bool]) -> None:
    """Copy a branch's source events up to the branch point a page at a time (``branch_events``),
    with their authors and seqs, until done or ``stop()`` (the next run goes on)."""
    state = ledger.state
    branch = state.start.branched_from
    assert branch is not None
    source = task_id(state.start.project_id, branch.task)
    while copying(ledger) and not stop():
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
            ledger.record_events(
                RecordEventsInput(
                    agent_id=author,
                    events=copies,
                    request_id=internal_request_id(f"branch/{state.last_seq}"),
                ),
                workflow.now(),
            )


async def reuse_before_point(ledger: Ledger) -> None:
    """What an agent task's branch reuses from its source (``branch_reuse``), once copied and before
    the agent starts: each step settled ``completed`` or ``unknown`` by the branch point, with its
    result event, so its step returns that result; each answer by the point, so ``ask`` returns it;
    each child ended by the point, so ``spawn`` starts nothing; and the source's rounds, so new step
    names never repeat. What ended after the point runs live, under the branch's own keys. A
    ``branch_reused`` note (``{"steps": n, "answers": m}``) records it."""
    state = ledger.state
    branch = state.start.branched_from
    assert branch is not None
    source = task_id(state.start.project_id, branch.task)
    after: str | None = None
    steps = 0
    while True:
        found: BranchReuse = await workflow.execute_activity(
            BRANCH_REUSE_ACTIVITY,
            BranchReuseQuery(source_workflow_id=source, up_to_seq=branch.seq, after_name=after),
            result_type=BranchReuse,
            start_to_close_timeout=CHILD_ENDS_TIMEOUT,
        )
        if after is None:
            state.answered.update(found.answers)
            state.children.update(found.children)
            state.agent_run = AgentRun(started_at=workflow.now(), round_base=found.rounds)
        if found.steps:
            writes = [
                StepWrite(
                    step_name=s.step_name,
                    state=s.state,
                    kind=s.kind,
                    result_event_seq=s.result_event_seq,
                )
                for s in found.steps
            ]
            ledger.set_steps(
                SetStepsInput(
                    agent_id=state.start.agent_id,
                    steps=writes,
                    request_id=internal_request_id(f"branch-steps/{state.writes}"),
                ),
                workflow.now(),
            )
            steps += len(writes)
        if found.next_after_name is None:
            break
        after = found.next_after_name
    payload = json.dumps({"steps": steps, "answers": len(state.answered)})
    note = EventInput(kind=EventKind.NOTE, name="branch_reused", payload=payload)
    ledger.append([note], f"branch-reused/{state.writes}", workflow.now())
