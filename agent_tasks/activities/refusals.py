"""The retries of tasks whose mirror the graph store refused for their data
(``taskgraph.refusals``): a worker looks for due refusals every ``REFUSAL_SWEEP`` and retries each
from the task's history (``activities.rebuild.rebuild_task``).

A closed task the store now takes clears its refusal; refused again, it waits longer
(``taskgraph.refusals.retry_delay``). An open task's own mirror retries it. A refusal whose history
is gone, or whose task was deleted or replaced (``TaskIncarnationError``), is cleared. Workers claim
a refusal first (``CLAIM_FOR``); a double rebuild is harmless (idempotent writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Literal

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.activities.rebuild import rebuild_task
from agent_tasks.contract.errors import GraphError, TaskIncarnationError
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.refusals import MirrorRefusal, Refusals

logger = logging.getLogger(__name__)

REFUSAL_SWEEP = timedelta(minutes=1)
"""How often a worker looks for refusals whose retry time has come (one query)."""
REFUSALS_PER_SWEEP = 20
"""Refusals one look retries at most (each a fetch and replay of the task's histories)."""
CLAIM_FOR = timedelta(minutes=10)
"""How long a worker's claim keeps others off a refusal (a retry takes seconds; a dead worker's
claim lapses)."""

Outcome = Literal["mirrored", "open", "refused", "gone", "claimed"]
"""What a retry came to: mirrored; open (its own mirror retries); refused again; gone; claimed by
another worker."""


async def runs_of(client: Client, workflow_id: str) -> list[WorkflowExecution]:
    """Every run of the task ``workflow_id``, the newest last (each found from the next one's first
    event).

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when Temporal has no such workflow.
    """
    runs: list[WorkflowExecution] = []
    run_id: str | None = None
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        described = await handle.describe()
        runs.append(described)
        async for first in handle.fetch_history_events(page_size=1):
            before = first.workflow_execution_started_event_attributes
            run_id = before.continued_execution_run_id or None
            break
        else:
            run_id = None
        if run_id is None:
            return runs[::-1]


class RefusalRetries:
    """The retries of refused tasks, for one worker.

    Args:
        client: the worker's Temporal client (the histories).
        graph: the graph store the worker mirrors to.
    """

    def __init__(self, client: Client, graph: GraphStore) -> None:
        self.client = client
        self.graph = graph
        self.refusals = Refusals(graph)

    async def retry_due(self) -> dict[str, Outcome]:
        """Retry each refusal whose time has come (at most ``REFUSALS_PER_SWEEP``); returns each
        one's outcome by workflow id.

        Raises:
            GraphError: the store could not be read.
        """
        outcomes: dict[str, Outcome] = {}
        for refusal in await self.refusals.due(REFUSALS_PER_SWEEP):
            outcomes[refusal.workflow_id] = await self.retry(refusal)
        return outcomes

    async def retry(self, refusal: MirrorRefusal) -> Outcome:
        """Retry one refusal (the module docstring says how)."""
        if not await self.refusals.claim(refusal, CLAIM_FOR):
            return "claimed"
        try:
            runs = await runs_of(self.client, refusal.workflow_id)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                await self.refusals.defer(refusal, f"Temporal: {err}")
                return "refused"
            logger.warning(
                "mirror refusal of %s cleared: Temporal has no history of it", refusal.workflow_id
            )
            await self.refusals.clear(refusal)
            return "gone"
        if runs[-1].status in (None, WorkflowExecutionStatus.RUNNING):
            held = await self.graph.reads.mirrored_write(refusal.project_id, refusal.workflow_id)
            if held > refusal.after_write:
                await self.refusals.clear(refusal)
                return "mirrored"
            await self.refusals.defer(refusal, refusal.error)
            return "open"
        try:
            await rebuild_task(self.client, self.graph, refusal.project_id, runs)
        except TaskIncarnationError as err:
            logger.warning("mirror refusal of %s cleared: %s", refusal.workflow_id, err)
            await self.refusals.clear(refusal)
            return "gone"
        except Exception as err:  # the store refused again, or a history could not be read
            await self.refusals.defer(refusal, f"retry: {err}")
            return "refused"
        await self.refusals.clear(refusal)
        logger.info("mirror refusal of %s cleared: the store took the task", refusal.workflow_id)
        return "mirrored"

    @contextlib.asynccontextmanager
    async def running(self, every: timedelta = REFUSAL_SWEEP) -> AsyncIterator[None]:
        """While open, ``retry_due`` every ``every`` (a failed look is logged)."""

        async def sweep() -> None:
            while True:
                try:
                    await self.retry_due()
                except (GraphError, RPCError) as err:
                    logger.debug("refused mirror pages not retried this time: %s", err)
                await asyncio.sleep(every.total_seconds())

        task = asyncio.create_task(sweep())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
