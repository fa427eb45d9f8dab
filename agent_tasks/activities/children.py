"""The ``child_ends`` activity: a resumed parent's look at the children that had not reported an end
(a closed workflow takes no signal): each child's workflow, and a closed one's final view."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.contract import (
    CHILD_ENDS_ACTIVITY,
    CLOSED_STATUSES,
    ChildEnds,
    ChildEndsInput,
    TaskStatus,
    bound_text,
    task_workflow_id,
)
from agent_tasks.contract.human import child_end
from agent_tasks.workflows.task import TaskWorkflow


class ChildActivities:
    """The children's activity with its dependency: a Temporal client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name=CHILD_ENDS_ACTIVITY)
    async def child_ends(self, input: ChildEndsInput) -> ChildEnds:
        """The ends of the named children that ended: a closed child's status, result and error from
        its view; a deleted one ``cancelled``; one closed without closing its task (terminated,
        timed out) ``failed``, naming how. Running children are left out."""
        ends = ChildEnds()
        for name in input.names:
            workflow_id = task_workflow_id(input.project_id, name)
            handle = self.client.get_workflow_handle(workflow_id)
            try:
                description = await handle.describe()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                gone = bound_text("its workflow no longer exists (deleted)")
                ends.ends.append(child_end(name, workflow_id, TaskStatus.CANCELLED, error=gone))
                continue
            if description.status is WorkflowExecutionStatus.RUNNING:
                continue
            view = await handle.query(TaskWorkflow.view)
            if view.status in CLOSED_STATUSES:
                end = child_end(name, workflow_id, view.status, view.result, view.error)
            else:
                closed = description.status.name if description.status else "closed"
                why = bound_text(f"its workflow closed {closed} before the task ended")
                end = child_end(name, workflow_id, TaskStatus.FAILED, error=why)
            ends.ends.append(end)
        return ends
