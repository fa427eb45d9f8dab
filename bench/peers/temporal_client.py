"""The client side both Temporal peers share: start, wait, cancel, signal the approval, query
what waits for it, measure the history and replay it (``temporalio`` only; the peers'
environment runs it)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError
from temporalio.worker import Replayer

from bench.peers import protocol
from bench.peers.script import prompt


class Approvals:
    """The approval a workflow waits for: the call shown (``pending``) and the answers that
    came (the ``approve`` signal), the same in both Temporal peers' workflows."""

    def __init__(self) -> None:
        self.pending: dict[str, Any] | None = None
        self.answers = 0

    async def wait(self, shown: dict[str, Any] | None) -> None:
        """Show ``shown`` until an answer comes, and take it."""
        self.pending = shown
        await workflow.wait_condition(lambda: self.answers > 0)
        self.answers -= 1
        self.pending = None


class ApprovingWorkflow:
    """The ``approve`` signal and the ``pending_approval`` query of a peer's workflow (its
    base class)."""

    def __init__(self) -> None:
        self.approvals = Approvals()

    @workflow.signal
    def approve(self) -> None:
        self.approvals.answers += 1

    @workflow.query
    def pending_approval(self) -> dict[str, Any] | None:
        return self.approvals.pending


# Long: the protocol's operations of one runtime, each a few lines, in one closure
def operations(
    client: Client, queue: str, workflow: Any, changed: Any, plugins: list[Any]
) -> dict[str, protocol.Operation]:
    """The protocol's operations for ``workflow`` (its run takes the goal; its signal
    ``approve``, its query ``pending_approval``); ``changed`` is the workflow with the agent's
    code changed (the read tool renamed), for the replay."""

    class Ops:
        async def start(self, task: str, turns: int, amount: int = 5) -> None:
            await client.start_workflow(
                workflow.run, prompt(task, turns, amount), id=task, task_queue=queue
            )

        async def wait(self, task: str, within_s: float) -> dict[str, Any]:
            handle = client.get_workflow_handle(task)
            try:
                output = await asyncio.wait_for(handle.result(), within_s)
            except TimeoutError:
                return {"status": "timeout", "output": await self._stuck(task)}
            except WorkflowFailureError as err:
                cancelled = isinstance(err.cause, CancelledError)
                return {"status": "cancelled" if cancelled else "failed", "output": str(err.cause)}
            return {"status": "done", "output": str(output)}

        async def _stuck(self, task: str) -> str:
            """Why an open workflow makes no progress: its last workflow task failure."""
            failed = ""
            async for event in client.get_workflow_handle(task).fetch_history_events():
                if event.HasField("workflow_task_failed_event_attributes"):
                    failure = event.workflow_task_failed_event_attributes.failure
                    failed = f"its workflow task failed (retried without end): {failure.message}"
            return failed or "still running"

        async def pending(self, task: str) -> dict[str, Any] | None:
            found = await client.get_workflow_handle(task).query("pending_approval")
            return found or None

        async def approve(self, task: str) -> dict[str, Any]:
            await client.get_workflow_handle(task).signal("approve")
            return {"sent": True}

        async def cancel(self, task: str) -> None:
            await client.get_workflow_handle(task).cancel()

        async def storage(self, task: str) -> dict[str, Any]:
            size = rows = 0
            async for event in client.get_workflow_handle(task).fetch_history_events():
                size += event.ByteSize()
                rows += 1
            return {"bytes": size, "rows": rows, "unit": "history events"}

        async def replay(self, task: str) -> dict[str, Any]:
            history = await client.get_workflow_handle(task).fetch_history()
            replayer = Replayer(workflows=[changed], plugins=plugins)
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            failure = result.replay_failure
            detail = (
                "Temporal's Replayer (a pre-deploy check): the read tool renamed replays"
                if failure is None
                else f"Temporal's Replayer (a pre-deploy check) catches the read tool renamed: "
                f"{type(failure).__name__}: {str(failure)[:100]}"
            )
            return {"offered": True, "passed": failure is not None, "detail": detail}

        async def recover(self, tasks: list[str]) -> None:
            """Nothing to do: Temporal hands the tasks to the new worker."""

    ops = Ops()
    names = ("start", "wait", "pending", "approve", "cancel", "storage", "replay", "recover")
    out: dict[str, protocol.Operation] = {name: getattr(ops, name) for name in names}
    out["run"] = lambda task, turns: protocol.timed_run(ops, task, turns)
    return out
