"""The writes of ``ConversationHistory`` to a task's log (events, sealed with a graph store; steps;
finish; decisions), each by update in the task's lane; a batch over one update's bounds is split."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import StrictInt, StrictStr
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.contract import (
    MAX_EVENTS_PER_UPDATE,
    MAX_PAYLOAD_BYTES,
    MAX_STEPS_PER_TASK,
    MAX_STEPS_PER_UPDATE,
    CitesInput,
    Event,
    EventInput,
    EventKind,
    FinishTaskInput,
    RecordEventsInput,
    RequestLookup,
    Role,
    SetStepsInput,
    StepKind,
    StepName,
    StepState,
    StepWrite,
    TaskStatus,
    args_digest,
    event_id,
    model_size,
    valid_request_id,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.contract.handlers import REQUEST_OUTCOME, Update
from agent_tasks.sealing.seal import KeyStoreUnavailable, seal_events
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.reads import TaskReads
from agent_tasks.starter.results import WriteResult, from_outcome, refused
from agent_tasks.starter.transport import Transport, lane, request_id_or_new

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    pass


def chunk_request_id(request_id: str, index: int) -> str:
    """Request id of the ``index``-th update of a split batch: the caller's for the first, 40 hex of
    ``sha256(request_id/index)`` for the others (stable for the same call)."""
    if index == 0:
        return request_id
    return hashlib.sha256(f"{request_id}/{index}".encode()).hexdigest()[:40]


def split_events(events: Sequence[EventInput]) -> Iterator[list[EventInput]]:
    """Split events into update-sized lists: at most ``MAX_EVENTS_PER_UPDATE`` events and about
    ``MAX_PAYLOAD_BYTES`` of JSON each."""
    chunk: list[EventInput] = []
    size = 0
    for event in events:
        event_size = model_size(event)
        if chunk and (len(chunk) == MAX_EVENTS_PER_UPDATE or size + event_size > MAX_PAYLOAD_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(event)
        size += event_size
    if chunk:
        yield chunk


class TaskWrites:
    """The writes of ``ConversationHistory`` to a task's log (its published write methods)."""

    def __init__(self, transport: Transport, reads: TaskReads) -> None:
        self.transport = transport
        self.reads = reads

    async def update(self, task: str, update: Any, input: Any) -> WriteResult:
        """Send one write update in the task's lane (``lane``: call order)."""
        async with lane(self.transport.client, self.transport.workflow_id(task)):
            return await self._send(task, update, input)

    async def _send(self, task: str, update: Any, input: Any) -> WriteResult:
        """Send one write update (the caller holds the task's lane); map refusals, duplicates
        and a closed or missing task."""
        try:
            return await self.transport.execute_update(task, update, input)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            # the digest only here: 1.7 ms of CPU for a batch of 200 events
            digest = args_digest(input)
            return await self._closed_or_missing(task, input.request_id, digest)

    async def _closed_or_missing(self, task: str, request_id: str, digest: str) -> WriteResult:
        """A write found no running workflow: the task is closed (a retried request id is answered
        from its state) or not in this project."""
        handle = self.transport.handle(task)
        try:
            await self.transport.call(handle.describe)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            if await self.reads.reader.expired(self.transport.workflow_id(task)) is not None:
                return refused(
                    ErrorCode.TASK_CLOSED,
                    f"task {task!r} is finished (its history passed the namespace's retention)",
                )
            return refused(
                ErrorCode.TASK_NOT_FOUND,
                f"no task {task!r} in project {self.transport.project_id!r}",
            )
        stored = await self.transport.call(
            lambda: REQUEST_OUTCOME.on(handle, RequestLookup(request_id=request_id, digest=digest))
        )
        if stored is not None:
            return from_outcome(stored)
        return refused(ErrorCode.TASK_CLOSED, f"task {task!r} is finished")

    async def record_event(
        self,
        task: str,
        kind: EventKind | str,
        payload: str = "",
        *,
        role: Role | str | None = None,
        name: str | None = None,
        call_id: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.record_event`` (whose docstring is the contract)."""
        event = EventInput.model_validate(
            {"kind": kind, "payload": payload, "role": role, "name": name, "call_id": call_id}
        )
        return await self._record_one(task, event, request_id)

    async def _record_one(
        self, task: str, event: EventInput, request_id: str | None
    ) -> WriteResult:
        """Record one event and return it as ``result.event``: built from what was sent for a new
        plain write, read back for a repeated request id or a decision (which records cited steps'
        states)."""
        request_id = request_id_or_new(request_id)
        result, (sent,) = await self._record(task, [event], request_id)
        if not result.recorded or result.seq is None:
            return result
        if result.time is None or event.cites is not None:
            page = await self.reads.list_events(task, after_seq=result.seq - 1, limit=1)
            result.event = page.events[0]
            return result
        recorded = Event.recorded(
            sent,
            workflow_id=self.transport.workflow_id(task),
            seq=result.seq,
            author=self.transport.agent_id,
            time=result.time,
            request_id=request_id,
        )
        result.event = recorded.model_copy(update={"payload": event.payload, "sealed": None})
        return result

    async def record_events(
        self,
        task: str,
        events: Sequence[EventInput | dict[str, Any]],
        *,
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.record_events`` (whose docstring is the contract)."""
        inputs: list[EventInput] = checked(events, list[EventInput], "events")
        result, _ = await self._record(task, inputs, request_id_or_new(request_id))
        return result

    async def _record(
        self, task: str, inputs: list[EventInput], request_id: str
    ) -> tuple[WriteResult, list[EventInput]]:
        """``record_events``, also returning the inputs as sent (sealed); the lane is held from
        before the sealing on, so writes keep call order."""
        if not inputs:  # refused by the model's own rule: at least one event
            RecordEventsInput(agent_id=self.transport.agent_id, events=[], request_id=request_id)
        if not valid_request_id(request_id):
            refusal = refused(ErrorCode.INVALID_REQUEST_ID, "request_id must be 1 to 64 characters")
            return refusal, inputs
        total = WriteResult(recorded=True, duplicate=True)
        async with lane(self.transport.client, self.transport.workflow_id(task)):
            try:
                sent = await self._seal(task, inputs)
            except KeyStoreUnavailable as err:
                return refused(ErrorCode.KEY_STORE_UNAVAILABLE, str(err)), inputs
            for index, chunk in enumerate(split_events(sent)):
                result = await self._send(
                    task,
                    Update.RECORD_EVENTS,
                    RecordEventsInput(
                        agent_id=self.transport.agent_id,
                        events=chunk,
                        request_id=chunk_request_id(request_id, index),
                    ),
                )
                if not result.recorded:
                    total = result.model_copy(
                        update={"first_seq": total.first_seq, "last_seq": total.last_seq}
                    )
                    break
                total = total.model_copy(
                    update={
                        "first_seq": total.first_seq or result.first_seq,
                        "last_seq": result.last_seq,
                        "duplicate": total.duplicate and result.duplicate,
                        "time": result.time,
                    }
                )
        return total, sent

    async def _seal(self, task: str, events: list[EventInput]) -> list[EventInput]:
        """``events`` sealed (``sealing.seal.seal_events``) with a graph store; as they are without
        one.

        Raises:
            KeyStoreUnavailable: the task's key tree was needed and not stored.
        """
        if self.transport.graph is None:
            return events
        return await seal_events(
            self.transport.graph,
            self.transport.project_id,
            self.transport.workflow_id(task),
            events,
        )

    async def set_step(
        self,
        task: str,
        step_name: str,
        state: StepState | str,
        *,
        kind: StepKind | str | None = None,
        result_event_seq: int | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.set_step`` (whose docstring is the contract)."""
        write = StepWrite.model_validate(
            {
                "step_name": step_name,
                "state": state,
                "kind": kind,
                "result_event_seq": result_event_seq,
            }
        )
        return await self.set_steps(task, [write], request_id=request_id)

    async def set_steps(
        self, task: str, steps: Sequence[StepWrite], *, request_id: str | None = None
    ) -> WriteResult:
        """Runs ``ConversationHistory.set_steps`` (whose docstring is the contract)."""
        request_id = request_id_or_new(request_id)
        if len({write.step_name for write in steps}) > MAX_STEPS_PER_TASK:
            return refused(
                ErrorCode.STEP_LIMIT_REACHED, f"a task holds at most {MAX_STEPS_PER_TASK} steps"
            )
        result = WriteResult(recorded=True, duplicate=True)
        for index in range(0, max(len(steps), 1), MAX_STEPS_PER_UPDATE):
            result = await self.update(
                task,
                Update.SET_STEPS,
                SetStepsInput(
                    agent_id=self.transport.agent_id,
                    steps=list(steps[index : index + MAX_STEPS_PER_UPDATE]),
                    request_id=chunk_request_id(request_id, index // MAX_STEPS_PER_UPDATE),
                ),
            )
            if not result.recorded:
                return result
        return result

    async def finish_task(
        self,
        task: str,
        status: TaskStatus | str,
        *,
        result: str | None = None,
        error: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.finish_task`` (whose docstring is the contract)."""
        return await self.update(
            task,
            Update.FINISH_TASK,
            FinishTaskInput.model_validate(
                {
                    "agent_id": self.transport.agent_id,
                    "status": status,
                    "result": result,
                    "error": error,
                    "request_id": request_id_or_new(request_id),
                }
            ),
        )

    async def record_decision(
        self,
        task: str,
        statement: str,
        *,
        cites_events: Sequence[int | str] = (),
        cites_steps: Sequence[str] = (),
        request_id: str | None = None,
    ) -> WriteResult:
        """Runs ``ConversationHistory.record_decision`` (whose docstring is the contract)."""
        cited = checked(cites_events, list[StrictInt | StrictStr], "cites_events")
        steps = checked(cites_steps, list[StepName], "cites_steps")
        event = EventInput.model_validate(
            {"kind": EventKind.DECISION, "payload": statement, "cites": CitesInput(steps=steps)}
        )
        seqs = await self._cited_seqs(task, cited)
        if isinstance(seqs, WriteResult):
            return seqs
        event = event.model_copy(update={"cites": CitesInput(events=seqs, steps=steps)})
        return await self._record_one(task, event, request_id)

    async def _cited_seqs(self, task: str, cited: Sequence[int | str]) -> list[int] | WriteResult:
        """The seqs of cited events: seqs as they are, ids (``event_id``) matched against the task's
        seqs from the newest down (derived: no lookup); a refusal when the task or an id is not
        found."""
        ids = {c for c in cited if isinstance(c, str)}
        found: dict[str, int] = {}
        if ids:
            view = (await self.reads.get_task(task)).view
            if view is None:
                return refused(
                    ErrorCode.TASK_NOT_FOUND,
                    f"no task {task!r} in project {self.transport.project_id!r}",
                )
            workflow_id = self.transport.workflow_id(task)
            for seq in range(view.last_seq, 0, -1):
                candidate = event_id(workflow_id, seq)
                if candidate in ids:
                    found[candidate] = seq
                    if len(found) == len(ids):
                        break
            if missing := ids - found.keys():
                return refused(
                    ErrorCode.EVENT_NOT_FOUND, f"no event of task {task!r} has id {min(missing)}"
                )
        return [found[c] if isinstance(c, str) else c for c in cited]
