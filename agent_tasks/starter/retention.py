"""``HistoryRetention``: remove recorded history, one event's text or a whole task
(``docs/retention.md``).

**Redaction** (``redact_event``) removes an event's text and keeps the event (seq, kind, time,
length, SHA-256): from the reads, from the graph store, and from Temporal by destroying the event's
data key, which leaves only ciphertext in every copy of the history (crypto-shredding). A plain-text
event is refused ``event_not_sealed``.

**Deletion** (``delete_task``) writes a tombstone (the name is never reused), deletes every run from
Temporal, then the graph store's nodes and data keys; each part is idempotent, so an interrupted
deletion is completed by calling it again.

Both return the decisions they affect, read once the task's mirror caught up.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.contract import (
    CLOSED_STATUSES,
    ShortText,
    TaskStatus,
    TaskView,
    bound_text,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.contract.handlers import Signal
from agent_tasks.contract.human import child_end
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import DeleteResult, RedactResult
from agent_tasks.taskgraph.models import TaskRead
from agent_tasks.taskgraph.retention import EventLocation

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    from agent_tasks.taskgraph.port import GraphStore

FIND_WAIT_S = 5.0
"""How long ``redact_event`` waits for the graph store to have an event id it does not find yet
(seconds): ids are found through the store, which the mirror fills tens of ms after a write."""
POLL_S = 0.1
"""Pause between two looks while waiting (seconds)."""


class HistoryRetention:
    """Redaction and deletion of a project's recorded history.

    Args:
        client: from ``connect()`` (pydantic data converter).
        project_id: scopes everything, as in ``ConversationHistory``.
        agent_id: who redacts or deletes (kept on the tombstones).
        graph: the graph store (the key store, the event index, the mirror); every call needs it.
        task_queue: the workers' task queue.
        timeout_s: seconds one Temporal call may take, and the longest wait for a mirror to catch up
            or a deleted run to be gone.

    Raises:
        ValidationError: a malformed project id or agent id.
    """

    def __init__(
        self,
        client: Client,
        project_id: str,
        agent_id: str,
        *,
        graph: GraphStore | None = None,
        task_queue: str = "agent-tasks",
        timeout_s: float = 30.0,
    ) -> None:
        self.tasks = ConversationHistory(
            client, project_id, agent_id, task_queue=task_queue, graph=graph, timeout_s=timeout_s
        )
        self.client = client
        self.project_id = self.tasks.project_id
        self.agent_id = self.tasks.agent_id
        self.timeout_s = timeout_s

    async def redact_event(self, event_id: str) -> RedactResult:
        """Remove the text of the event ``event_id`` (``Event.id``) from every read path, the graph
        store and, by destroying its data key, Temporal; repeating it changes nothing
        (``duplicate``).

        Returns:
            ``affected_decision_ids`` (now needing review). Refusals: ``event_not_found`` (none in
            this project, or not in the graph store within ``FIND_WAIT_S``), ``event_not_sealed``.

        Raises:
            pydantic.ValidationError: ``event_id`` is not text.
            GraphNotConfigured: no graph was given.
        """
        event_id = checked(event_id, ShortText, "event_id")
        graph = self.tasks.reads.require_graph()
        location = await self._find(graph, event_id)
        if location is None:
            return RedactResult(
                recorded=False,
                error=ErrorCode.EVENT_NOT_FOUND,
                message=(
                    f"no event {event_id!r} in project {self.project_id!r} (an event is found "
                    "once the mirror has copied it to Neo4j: see the task's mirror_error)"
                ),
                event_id=event_id,
            )
        if location.key_id is None:
            return RedactResult(
                recorded=False,
                error=ErrorCode.EVENT_NOT_SEALED,
                message=(
                    f"event seq {location.seq} of task {location.task_name!r} was recorded as "
                    "plain text: it is in the workflow history for good; delete_task removes it"
                ),
                event_id=event_id,
                task=location.task_name,
                seq=location.seq,
            )
        await self._mirror_caught_up(location.task_name)
        affected = await graph.redact(self.project_id, location, self.agent_id)
        return RedactResult(
            recorded=True,
            duplicate=location.redacted,
            event_id=event_id,
            task=location.task_name,
            seq=location.seq,
            affected_decision_ids=affected,
        )

    async def delete_task(self, name: str, include_decisions: bool = True) -> DeleteResult:
        """Delete the task ``name``: every run from Temporal, its graph store nodes and data keys;
        its name stays taken (a tombstone). With ``include_decisions`` False its decisions stay,
        detached. A running child's parent is told it ended ``cancelled``.

        Returns:
            what was removed; ``duplicate`` when deleted before. Refusal: ``task_not_found``.

        Raises:
            pydantic.ValidationError: ``name`` is not a task name (field ``task``).
            GraphNotConfigured: no graph was given.
        """
        TaskRead(task=name)
        graph = self.tasks.reads.require_graph()
        workflow_id = self.tasks.workflow_id(name)
        runs = await self._runs(workflow_id)
        state = await graph.retention.name_state(self.project_id, workflow_id)
        if not (runs or state.mirrored or state.deleted):
            return DeleteResult(
                recorded=False,
                error=ErrorCode.TASK_NOT_FOUND,
                message=f"no task {name!r} in project {self.project_id!r}",
                task=name,
            )
        view = None
        cancelled: list[str] = []
        if runs:
            await self._mirror_caught_up(name)
            view = (await self.tasks.get_task(name)).view
        if view is not None:
            cancelled = await self._cancel_children(view)
        new = await graph.retention.tombstone(self.project_id, workflow_id, name, self.agent_id)
        pending = await self._delete_runs(workflow_id, runs)
        if view is not None and view.parent is not None and view.status not in CLOSED_STATUSES:
            await self._tell_parent(view.parent, name)
        removed = await graph.retention.delete_task_nodes(
            self.project_id, workflow_id, include_decisions=include_decisions
        )
        return DeleteResult(
            recorded=True,
            duplicate=not new,
            task=name,
            runs_deleted=runs,
            runs_pending=pending,
            events_deleted=removed.events,
            steps_deleted=removed.steps,
            keys_destroyed=removed.keys,
            decisions_kept=not include_decisions,
            affected_decision_ids=removed.decisions,
            children_cancelled=cancelled,
        )

    # ------------------------------------------------------------------ helpers

    async def _cancel_children(self, view: TaskView) -> list[str]:
        """Cancel the task's running children by the cascade rule, so a deleted parent leaves none
        running; returns their names."""
        cancelled = []
        for child in view.children.values():
            if child.status in CLOSED_STATUSES:
                continue
            if (await self.tasks.cancel_task(child.name)).recorded:
                cancelled.append(child.name)
        return cancelled

    async def _tell_parent(self, parent: str, name: str) -> None:
        """Tell a deleted running task's parent it ended ``cancelled`` (the ``child_ended`` signal,
        under the child's own request id, so it counts once)."""
        deleted = bound_text(f"deleted by {self.agent_id}")
        end = child_end(name, self.tasks.workflow_id(name), TaskStatus.CANCELLED, error=deleted)
        handle = self.tasks.client.get_workflow_handle(self.tasks.workflow_id(parent))
        try:
            await self.tasks.transport.call(lambda: handle.signal(Signal.CHILD_ENDED, end))
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    async def _find(self, graph: GraphStore, event_id: str) -> EventLocation | None:
        """The event's place from the graph store, waiting up to ``FIND_WAIT_S``; None at once for a
        string that is not a UUID."""
        try:
            uuid.UUID(event_id)
        except ValueError:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FIND_WAIT_S
        while True:
            location = await graph.retention.find_event(self.project_id, event_id)
            if location is not None or loop.time() >= deadline:
                return location
            await asyncio.sleep(POLL_S)

    async def _mirror_caught_up(self, task: str) -> None:
        """Wait up to ``timeout_s`` until the graph store has every accepted write of ``task``; a
        task Temporal no longer has, or a mirror that does not catch up, ends the wait."""
        await self.tasks.wait_mirrored(task, timeout_s=self.timeout_s)

    async def _runs(self, workflow_id: str) -> list[str]:
        """Every run id of the task's workflow Temporal still has, newest first, following each
        run's start event back (no visibility query, which would need the id quoted)."""
        runs: list[str] = []
        run_id: str | None = None
        try:
            run_id = (await self.client.get_workflow_handle(workflow_id).describe()).run_id
            while run_id:
                handle = self.client.get_workflow_handle(workflow_id, run_id=run_id)
                async for event in handle.fetch_history_events(page_size=1):
                    runs.append(run_id)
                    started = event.workflow_execution_started_event_attributes
                    run_id = started.continued_execution_run_id or None
                    break
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        return runs

    async def _delete_runs(self, workflow_id: str, runs: list[str]) -> list[str]:
        """Delete each run (a running one is terminated first) and wait up to ``timeout_s`` until
        Temporal has none; returns those it still had. A closed run goes once the server saves its
        queue progress (``history.transferProcessorUpdateAckInterval``, 30 s by default)."""
        for run_id in runs:
            execution = WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
            try:
                await self.client.workflow_service.delete_workflow_execution(
                    DeleteWorkflowExecutionRequest(
                        namespace=self.client.namespace, workflow_execution=execution
                    ),
                    retry=True,
                )
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while runs and loop.time() < deadline:
            runs = [r for r in runs if await self._exists(workflow_id, r)]
            if runs:
                await asyncio.sleep(POLL_S)
        return runs

    async def _exists(self, workflow_id: str, run_id: str) -> bool:
        try:
            await self.client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True
