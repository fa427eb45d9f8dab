"""The ``child_ends`` activity: a resumed parent's look at the children that had not reported
an end. A child that ended while its parent was closed sent its ``child_ended`` signal to no
run (a closed workflow takes no signal), so the parent's next run asks Temporal instead: each
child's workflow, and for a closed one its final view (a query, which a worker of the task
queue answers by replaying the closed run)."""

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
        """The ends of the named children that have ended: a closed child's final status,
        result and error from its view; a child whose workflow is gone (deleted) ends
        ``cancelled``; one whose workflow closed without closing the task (terminated, timed
        out) ends ``failed`` naming how it closed. Children still running are left out."""
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
