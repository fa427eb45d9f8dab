"""The floor our writes are measured against: Temporal itself, with nothing of ours on top.

``BareWorkflow`` is the least a Temporal workflow can be to hold a task's events: an update
that appends its argument (a list of events as JSON objects) to a list and returns its
length, with no validator, no request ids, no mirror and no continue-as-new; a second update
runs one bare activity (``bare_tool``, which returns its argument) and returns its result.
``BareSteps`` runs bare activities one after another, the floor of an agent task's steps.
The benchmarks send it the same events, through a client with the plain pydantic data
converter (no payload codec), on the same server as our task workflows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

BARE_WORKFLOW = "BareWorkflow"
"""The bare workflow's type name."""


@activity.defn
async def bare_tool(argument: str) -> str:
    """The bare activity: returns its argument."""
    return argument


@workflow.defn(name=BARE_WORKFLOW)
class BareWorkflow:
    """A list of events, appended to by update, until the ``close`` signal."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.closed = False

    @workflow.run
    async def run(self) -> int:
        """Wait for ``close``; returns the number of items held."""
        await workflow.wait_condition(lambda: self.closed)
        return len(self.items)

    @workflow.update
    def append(self, items: list[dict[str, Any]]) -> int:
        """Append ``items``; returns how many the workflow holds."""
        self.items.extend(items)
        return len(self.items)

    @workflow.update
    async def call(self, argument: str) -> str:
        """Run ``bare_tool(argument)`` as an activity; returns its result."""
        return await workflow.execute_activity(
            bare_tool, argument, start_to_close_timeout=timedelta(seconds=30)
        )

    @workflow.signal
    def close(self) -> None:
        """Let the run end."""
        self.closed = True


@workflow.defn(name="BareSteps")
class BareSteps:
    """``steps`` activities one after another: the floor a step is measured against."""

    @workflow.run
    async def run(self, steps: int) -> None:
        """Run ``bare_tool`` ``steps`` times, one after another."""
        for i in range(steps):
            await workflow.execute_activity(
                bare_tool, f"step {i}", start_to_close_timeout=timedelta(seconds=30)
            )


def bare_worker(client: Client, task_queue: str) -> Worker:
    """A worker of ``BareWorkflow`` and ``BareSteps`` (with ``bare_tool``) on
    ``task_queue``."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[BareWorkflow, BareSteps],
        activities=[bare_tool],
        graceful_shutdown_timeout=timedelta(seconds=5),
    )


async def start_bare(client: Client, workflow_id: str, task_queue: str) -> WorkflowHandle[Any, Any]:
    """Start one bare workflow; returns its handle."""
    return await client.start_workflow(BareWorkflow.run, id=workflow_id, task_queue=task_queue)
