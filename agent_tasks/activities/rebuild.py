"""Rebuild the Neo4j graph from the Temporal histories: one pass over each run's history.

For each task (one workflow id), oldest run first: fetch the run's history once, replay it
in this process with ``temporalio.worker.Replayer`` and an interceptor that keeps the replayed
``TaskWorkflow``'s ledger (``ReplayedRun``), and copy that ledger with ``copy_run``, each
written node stamped with this rebuild's id. Only when every run is copied does it delete
the task's event and step nodes it did not write (``GraphStore.drop_unmarked``): nothing is
deleted before its replacement is written.

So a rebuild can be stopped at any point (Ctrl-C, a crash, Neo4j going away) and the graph
still holds every event it held before, and each rewritten one; running it again redoes the
task from the histories (each node merged on its key, so nothing is doubled) and ends with
the same graph. Its cost is one history fetch and one in-process replay per run, where a
query per page of a closed run made a worker replay the whole run for every page (a
60,000-event task: 30 to 40 minutes).
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
    """True when ``history`` holds no workflow task yet: only its start event, while the
    server holds the run's first workflow task back (``firstWorkflowTaskBackoff``: a run that
    continued as new right after the last, a cron or retry start). Such a run has run no
    workflow code, so it holds nothing of its own to replay; and temporalio's ``Replayer``
    (SDK 1.35) given such a history never returns, and cannot be cancelled."""
    scheduled = EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    return not any(event.event_type == scheduled for event in history.events)


async def replay_run(client: Client, workflow_id: str, run_id: str) -> Ledger | None:
    """Fetch one run's history (one paged pass) and replay it in this process; returns the
    ledger as the replay leaves it (a closed run's final state, an open run's current one),
    or None for a run before its first workflow task (``before_first_workflow_task``).

    The replay runs ``TaskWorkflow`` without the sandbox: it only reads, and the workflow
    code is the worker's own (a replay failure means the worker could not run it either).

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
    """Rebuild one task from its runs (``executions``, of one workflow id), oldest first, then
    drop what the rebuild did not write (see the module docstring); returns events copied.
    While the task is open, the bound of that drop is the newest replayed state (its last
    seq, its last write's time), since the live mirror may write newer nodes meanwhile. A run
    before its first workflow task holds nothing of its own and is passed over; a task with
    no other run is left as it is (0 events).

    Raises:
        Exception: from the fetch, the replay or Neo4j; nothing is deleted then.
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
    """Rebuild a project's tasks (or one task) in Neo4j from the Temporal histories.

    Finds every run of the project's tasks in Temporal visibility first; then rebuilds task
    by task (``rebuild_task``). A task that fails is reported and the others go on; a task
    with no run found is not touched. Agent, session and project nodes are merged, not
    deleted: to drop stale ones, ``wipe_project`` first.

    Returns:
        The counts and the tasks that failed (``RebuildReport``).

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
