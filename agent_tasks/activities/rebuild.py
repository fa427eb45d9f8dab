"""Rebuild the graph store from the Temporal histories: one pass over each run's history
(``docs/graph-stores.md``).

For each task, oldest run first: fetch the run's history once, replay it in this process
(``temporalio.worker.Replayer`` with an interceptor keeping the ledger, ``ReplayedRun``) and copy
the ledger with ``copy_run``, each node stamped with the rebuild's id. Only then are the task's
unstamped nodes deleted (``GraphStore.drop_unmarked``), so a rebuild stopped anywhere loses nothing,
and run again ends with the same graph.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, TypeAdapter
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus, WorkflowHistory
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from agent_tasks.activities.mirror import copy_run
from agent_tasks.contract import (
    MirrorPage,
    MirrorQuery,
    ProjectId,
    TaskView,
    task_workflow_id,
)
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.workflows import pages
from agent_tasks.workflows.ledger import Ledger
from agent_tasks.workflows.task import TaskWorkflow


class ReplayedRun:
    """One run's state as its replay left it (``copy_run``'s ``RunSource``)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def mirror_page(self, query: MirrorQuery) -> MirrorPage:
        """A page of the ledger's state (``pages.mirror_page``)."""
        return pages.mirror_page(self.ledger, query)


class _KeepLedger(Interceptor):
    """Keeps the ledger of each ``TaskWorkflow`` run the replayer starts."""

    def __init__(self) -> None:
        self.ledgers: list[Ledger] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        ledgers = self.ledgers

        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                instance = workflow.instance()
                if isinstance(instance, TaskWorkflow):
                    ledgers.append(instance.ledger)
                return await super().execute_workflow(input)

        return Inbound


def before_first_workflow_task(history: WorkflowHistory) -> bool:
    """True when ``history`` holds only its start event (the server holds back the first workflow
    task: ``firstWorkflowTaskBackoff``): such a run holds nothing to replay, and the ``Replayer``
    given it never returns."""
    scheduled = EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    return not any(event.event_type == scheduled for event in history.events)


async def replay_run(client: Client, workflow_id: str, run_id: str) -> Ledger | None:
    """Fetch one run's history and replay it in this process (no sandbox: it only reads); returns
    the ledger as the replay leaves it, or None for a run before its first workflow task.

    Raises:
        temporalio.service.RPCError: the history could not be fetched.
        temporalio.workflow.NondeterminismError, RuntimeError: the replay failed.
    """
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    if before_first_workflow_task(history):
        return None
    keep = _KeepLedger()
    replayer = Replayer(
        workflows=[TaskWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
        data_converter=client.data_converter,  # the worker's: models and payload codec
        interceptors=[keep],
    )
    await replayer.replay_workflow(history)
    if not keep.ledgers:
        raise RuntimeError(f"replaying {workflow_id} run {run_id} started no TaskWorkflow")
    return keep.ledgers[-1]


class RebuildReport(BaseModel):
    """What ``rebuild`` did."""

    tasks: int
    """Tasks found in Temporal visibility."""
    runs: int
    """Runs of those tasks."""
    events: int
    """Events copied."""
    failed: list[str]
    """``"workflow id: error"`` of each task that could not be rebuilt."""


async def rebuild_task(
    client: Client, graph: GraphStore, project_id: str, executions: list[WorkflowExecution]
) -> int:
    """Rebuild one task from its runs (``executions``, oldest first), then drop what it did not
    write; returns events copied. While the task is open the drop is bounded by the newest replayed
    state, since the live mirror may write newer nodes. A task with no run past its first workflow
    task is left as it is (0 events).

    Raises:
        Exception: from the fetch, the replay or the graph store; nothing is deleted then.
    """
    mark = uuid.uuid4().hex
    events = 0
    view: TaskView | None = None
    runs = sorted(executions, key=lambda e: e.start_time)
    for execution in runs:
        ledger = await replay_run(client, execution.id, execution.run_id)
        if ledger is None:
            continue
        copied = await copy_run(
            ReplayedRun(ledger), graph, f"task {execution.id} run {execution.run_id}", mark=mark
        )
        events += copied.events
        view = pages.view(ledger)
    if view is None:
        return 0
    open_task = runs[-1].status in (None, WorkflowExecutionStatus.RUNNING)
    await graph.drop_unmarked(
        project_id,
        view.workflow_id,
        mark,
        up_to_seq=view.last_seq if open_task else None,
        as_of=view.updated_at if open_task else None,
    )
    return events


async def rebuild(
    client: Client, graph: GraphStore, project_id: str, task: str | None = None
) -> RebuildReport:
    """Rebuild a project's tasks (or one task) in the graph store from the Temporal histories, task
    by task (``rebuild_task``); a failed task is reported and the rest go on. Agent, session and
    project nodes are merged, not deleted (``wipe_project`` first to drop stale ones).

    Raises:
        pydantic.ValidationError: ``project_id`` is not a valid project id.
    """
    TypeAdapter(ProjectId).validate_python(project_id)
    query = f"WorkflowType = 'TaskWorkflow' AND ProjectId = '{project_id}'"
    wanted = None if task is None else task_workflow_id(project_id, task)
    runs: dict[str, list[WorkflowExecution]] = {}
    async for execution in client.list_workflows(query):
        if wanted is None or execution.id == wanted:
            runs.setdefault(execution.id, []).append(execution)
    events, failed = 0, []
    for workflow_id, executions in sorted(runs.items()):
        try:
            events += await rebuild_task(client, graph, project_id, executions)
        except Exception as err:  # report the task, rebuild the others
            failed.append(f"{workflow_id}: {err}")
    return RebuildReport(
        tasks=len(runs), runs=sum(len(e) for e in runs.values()), events=events, failed=failed
    )
