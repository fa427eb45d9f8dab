"""The mirror: copies a task run's events, steps and task fields from Temporal to Neo4j.

``copy_run`` reads one run's state back by query (the view, the steps changed after a write
counter, and the events of a seq range in pages bounded by count, ``MIRROR_PAGE_EVENTS``, and
bytes, ``MIRROR_PAGE_BYTES``) and writes each page in one managed transaction. Writes are
MERGEs on stable keys, so repeating a copy changes nothing. It serves the mirror activity
(whose input carries references only: task, run, seq range, write watermark) and the rebuild
of Neo4j from the Temporal histories (``rebuild``).

Error mapping at the activity edge: Neo4j errors that may pass (``is_retryable()``: deadlock,
unavailable, leader switch, session expired) raise a retryable ``ApplicationError`` of type
``MirrorUnavailable``, retried by the workflow's retry policy; any other Neo4j error, and a
value the driver cannot send (``OverflowError``, ``TypeError``, ``ValueError``), raises a
non-retryable ``ApplicationError`` of type ``MirrorDataError`` whose message names the task and
the seq range.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import timedelta
from typing import TypeVar

from neo4j.exceptions import DriverError, Neo4jError
from pydantic import BaseModel, TypeAdapter
from temporalio import activity
from temporalio.client import Client, WorkflowExecution
from temporalio.exceptions import ApplicationError

from taskgraph.graph import TaskGraph
from workflows.errors import MIRROR_DATA_ERROR, MIRROR_UNAVAILABLE
from workflows.models import (
    MAX_STEPS_PER_TASK,
    MIRROR_ACTIVITY,
    EventsQuery,
    MirrorInput,
    MirrorOutcome,
    ProjectId,
    StepsQuery,
    task_workflow_id,
)
from workflows.task import TaskWorkflow

MIRROR_PAGE_EVENTS = 100
"""Events read per query page and written per transaction."""
MIRROR_PAGE_BYTES = 1_048_576
"""Payload bytes (UTF-8) per query page, at most (one event may pass it alone)."""
QUERY_TIMEOUT = timedelta(seconds=10)
"""RPC timeout of each query the mirror sends to its workflow (answered by the worker that
runs the activity, from its cache, in milliseconds)."""

_T = TypeVar("_T")


async def heartbeating(work: Awaitable[_T]) -> _T:
    """Await ``work`` inside an activity while heartbeating every quarter of the activity's
    heartbeat timeout (none when it has no heartbeat timeout).

    The heartbeat says "this worker is alive and on it": when the worker dies, the server
    retries the attempt after the heartbeat timeout. It does not say the work advances; each
    step of the work is bounded by its own timeout instead (``QUERY_TIMEOUT``,
    ``taskgraph.graph.NEO4J_CALL_TIMEOUT_S``), so a silent peer cannot hold the attempt.
    """
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return await work

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(timeout.total_seconds() / 4)

    beats = asyncio.create_task(beat())
    try:
        return await work
    finally:
        beats.cancel()


async def copy_run(
    client: Client,
    graph: TaskGraph,
    workflow_id: str,
    run_id: str | None,
    *,
    after_seq: int = 0,
    up_to_seq: int | None = None,
    after_write: int = 0,
) -> MirrorOutcome:
    """Copy events ``after_seq < seq <= up_to_seq`` (None: the run's newest), the steps
    changed after ``after_write``, and the task node, from one run to Neo4j.

    Raises:
        ApplicationError: ``MirrorDataError`` when the run does not hold the asked events.
        neo4j.exceptions.Neo4jError, neo4j.exceptions.DriverError: from the writes.
        temporalio.service.RPCError: from the queries.
    """
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    view = await handle.query(TaskWorkflow.view, rpc_timeout=QUERY_TIMEOUT)
    last = view.last_seq if up_to_seq is None else up_to_seq
    steps = await handle.query(
        TaskWorkflow.steps,
        StepsQuery(changed_after_write=after_write, limit=MAX_STEPS_PER_TASK),
        rpc_timeout=QUERY_TIMEOUT,
    )
    after = max(after_seq, view.run_first_seq - 1)
    written = 0
    unwritten_steps = steps  # go with the first transaction, with the first page of events
    while True:
        events = []
        if after < last:
            page = await handle.query(
                TaskWorkflow.events,
                EventsQuery(
                    after_seq=after,
                    up_to_seq=last,
                    limit=MIRROR_PAGE_EVENTS,
                    max_bytes=MIRROR_PAGE_BYTES,
                ),
                rpc_timeout=QUERY_TIMEOUT,
            )
            if not page.events:
                raise ApplicationError(
                    f"task {workflow_id}: events {after + 1}..{last} are not in run {run_id}",
                    type=MIRROR_DATA_ERROR,
                    non_retryable=True,
                )
            events = page.events
        await graph.write_task(view, events, unwritten_steps)
        unwritten_steps = []
        written += len(events)
        if not events or events[-1].seq >= last:
            break
        after = events[-1].seq
    return MirrorOutcome(events=written, steps=len(steps))


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


async def rebuild(
    client: Client, graph: TaskGraph, project_id: str, task: str | None = None
) -> RebuildReport:
    """Rebuild a project's tasks (or one task) in Neo4j from the Temporal histories.

    Finds every run of the project's tasks in Temporal visibility first; then, task by task,
    deletes the task's event and step nodes and copies every run, oldest first, by querying
    each run (Temporal replays its history on a worker to answer). A task that fails is
    reported and the others go on; a task with no run found is not touched. Agent, session and
    project nodes are merged, not deleted: to drop stale ones, ``wipe_project`` first.

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
            await graph.wipe_task(project_id, workflow_id)
            for execution in sorted(executions, key=lambda e: e.start_time):
                copied = await copy_run(client, graph, workflow_id, execution.run_id)
                events += copied.events
        except Exception as err:  # report the task, rebuild the others
            failed.append(f"{workflow_id}: {err}")
    return RebuildReport(
        tasks=len(runs), runs=sum(len(e) for e in runs.values()), events=events, failed=failed
    )


class MirrorActivities:
    """The mirror activity with its dependencies: a Temporal client (to query the workflow)
    and the task graph (to write Neo4j)."""

    def __init__(self, client: Client, graph: TaskGraph) -> None:
        self.client = client
        self.graph = graph

    @activity.defn(name=MIRROR_ACTIVITY)
    async def mirror_task(self, input: MirrorInput) -> MirrorOutcome:
        """Mirror events ``after_seq < seq <= up_to_seq``, the steps changed after
        ``after_write``, and the task node, heartbeating (``heartbeating``). Returns the
        counts written."""
        try:
            return await heartbeating(
                copy_run(
                    self.client,
                    self.graph,
                    input.workflow_id,
                    input.run_id,
                    after_seq=input.after_seq,
                    up_to_seq=input.up_to_seq,
                    after_write=input.after_write,
                )
            )
        except (Neo4jError, DriverError, OverflowError, TypeError, ValueError) as err:
            where = f"task {input.workflow_id} seqs {input.after_seq + 1}..{input.up_to_seq}"
            if isinstance(err, Neo4jError | DriverError) and err.is_retryable():
                raise ApplicationError(
                    f"Neo4j unavailable while mirroring {where}: {err}", type=MIRROR_UNAVAILABLE
                ) from err
            raise ApplicationError(
                f"Neo4j refused the mirror of {where}: {err}",
                type=MIRROR_DATA_ERROR,
                non_retryable=True,
            ) from err
