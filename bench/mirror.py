"""The least a mirror of the bare workflows' events into the graph store costs: the second
baseline of ``python -m bench`` ("bare + minimal mirror").

``MinimalMirror`` is a plain projector beside the bare worker: it tails the history of each
bare workflow it is told to follow (``follow``: one long poll of ``GetWorkflowExecutionHistory``
with ``wait_new_event`` at a time, from where the last one stopped), takes each ``append``
update's input (the events, JSON as sent) and result (the list's length, so the events' seqs)
from the history, and writes what came in one transaction per batch, one ``UNWIND`` statement
per kind of write: the task nodes (with their project and agent), the event nodes (with
``HAS_EVENT`` and a new event's ``AUTHORED_BY``), the ``NEXT`` links. The same nodes and
relationships as the product's mirror (``taskgraph.neo4j.writes``) with the properties the bare
history holds, and nothing else: no sealing, no page checks, no view, no broker, no activity,
no query. One transaction in flight; what comes while it runs is the next batch (no timer).

The task node's ``mirrored_seq`` is the watermark the bench waits for, as for the product's
tasks (``Bench.mirrored_keys``). A tool for measuring, never a mirror of the product's tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, LiteralString

from neo4j import AsyncDriver, AsyncManagedTransaction
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client

POLL_WAIT = timedelta(seconds=20)
"""One long poll at most (the server answers empty when nothing came)."""

_CLOSED = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    }
)

_TASKS: LiteralString = """
UNWIND $tasks AS tk
MERGE (t:Task {key: tk.key})
SET t.project_id = tk.project_id, t.name = tk.name, t.agent_id = tk.agent_id,
    t.last_seq = tk.last_seq, t.mirrored_seq = tk.last_seq,
    t.updated_at = datetime({epochSeconds: tk.time[0], nanosecond: tk.time[1]})
MERGE (p:Project {project_id: tk.project_id})
MERGE (p)-[:HAS_TASK]->(t)
MERGE (a:Agent {key: tk.project_id + '/' + tk.agent_id})
  ON CREATE SET a.project_id = tk.project_id, a.agent_id = tk.agent_id
MERGE (t)-[:CREATED_BY]->(a)
"""
_EVENTS: LiteralString = """
UNWIND $events AS ev
MATCH (t:Task {key: ev.task})
MERGE (e:Event {key: ev.task + '#' + toString(ev.seq)})
WITH t, e, ev, e.kind IS NULL AS fresh
SET e += ev.props, e.seq = ev.seq,
    e.time = datetime({epochSeconds: ev.time[0], nanosecond: ev.time[1]}),
    e.task_key = t.key, e.project_id = t.project_id, e.task_name = t.name
MERGE (t)-[:HAS_EVENT]->(e)
WITH t, e WHERE fresh
MATCH (a:Agent {key: t.project_id + '/' + t.agent_id})
CREATE (e)-[:AUTHORED_BY]->(a)
"""
_NEXT: LiteralString = """
UNWIND $links AS link
MATCH (a:Event {key: link[0]})
MATCH (b:Event {key: link[1]})
MERGE (a)-[:NEXT]->(b)
"""


@dataclass
class _Batch:
    """What waits to be written: per task its newest seq and time, the events, the links."""

    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    links: list[list[str]] = field(default_factory=list)


class MinimalMirror:
    """Tails bare workflows' histories and writes their events to the graph store (the module
    docstring).

    Args:
        client: a Temporal client (any converter: the payloads are read as JSON).
        driver, database: the Neo4j driver and database to write to.
        project_id, agent_id: the project and author the mirrored tasks are written under.
    """

    def __init__(
        self, client: Client, driver: AsyncDriver, database: str, project_id: str, agent_id: str
    ) -> None:
        self.client = client
        self.driver = driver
        self.database = database
        self.project_id = project_id
        self.agent_id = agent_id
        self._batch = _Batch()
        self._wake = asyncio.Event()
        self._tails: set[asyncio.Task[None]] = set()
        self._writer: asyncio.Task[None] | None = None
        self._writing = False
        self.transactions = 0
        """Transactions written so far."""

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[MinimalMirror]:
        """The mirror's writer while open; every tail and the writer stop on exit."""
        self._writer = asyncio.ensure_future(self._write())
        try:
            yield self
        finally:
            for running in (*self._tails, self._writer):
                running.cancel()
            for running in (*self._tails, self._writer):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await running

    async def settled(self) -> None:
        """Wait until nothing the tails took waits to be written, nor is being written (looked
        at every 50 ms, twice in a row: a poll may answer in between)."""
        quiet = 0
        while quiet < 2:
            busy = bool(self._batch.tasks) or self._writing
            quiet = 0 if busy else quiet + 1
            await asyncio.sleep(0.05)

    def follow(self, workflow_id: str) -> None:
        """Tail ``workflow_id``'s history from its first event until the workflow closes."""
        tail = asyncio.ensure_future(self._tail(workflow_id))
        self._tails.add(tail)
        tail.add_done_callback(self._tails.discard)

    async def _tail(self, workflow_id: str) -> None:
        name = workflow_id.rsplit("/", 1)[-1]
        request = GetWorkflowExecutionHistoryRequest(
            namespace=self.client.namespace,
            execution=WorkflowExecution(workflow_id=workflow_id),
            wait_new_event=True,
            skip_archival=True,
        )
        inputs: dict[int, bytes] = {}
        while True:
            response = await self.client.workflow_service.get_workflow_execution_history(
                request, timeout=POLL_WAIT + timedelta(seconds=1), retry=True
            )
            if response.next_page_token:
                request.next_page_token = response.next_page_token
            closed = False
            for event in response.history.events:
                kind = event.event_type
                if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                    accepted = event.workflow_execution_update_accepted_event_attributes
                    inputs[event.event_id] = accepted.accepted_request.input.args.payloads[0].data
                elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
                    completed = event.workflow_execution_update_completed_event_attributes
                    data = inputs.pop(completed.accepted_event_id, None)
                    if data is None or not completed.outcome.HasField("success"):
                        continue
                    length = json.loads(completed.outcome.success.payloads[0].data)
                    items = json.loads(data)
                    if not isinstance(items, list) or not isinstance(length, int):
                        continue  # another update of the bare workflow (``call``)
                    moment = event.event_time
                    time = [moment.seconds, moment.nanos]
                    self._add(workflow_id, name, items, length, time)
                elif kind in _CLOSED:
                    closed = True
            if closed or not response.next_page_token:  # no token: the history is whole
                return

    def _add(
        self, task: str, name: str, items: list[dict[str, Any]], length: int, time: list[int]
    ) -> None:
        batch = self._batch
        first = length - len(items) + 1
        batch.tasks[task] = {
            "key": task,
            "project_id": self.project_id,
            "name": name,
            "agent_id": self.agent_id,
            "last_seq": length,
            "time": time,
        }
        for offset, item in enumerate(items):
            seq = first + offset
            batch.events.append({"task": task, "seq": seq, "time": time, "props": item})
            if seq > 1:
                batch.links.append([f"{task}#{seq - 1}", f"{task}#{seq}"])
        self._wake.set()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._batch = self._batch, _Batch()
            if not batch.tasks:
                continue
            tasks = list(batch.tasks.values())

            async def work(
                tx: AsyncManagedTransaction, batch: _Batch = batch, tasks: list[Any] = tasks
            ) -> None:
                await (await tx.run(_TASKS, tasks=tasks)).consume()
                await (await tx.run(_EVENTS, events=batch.events)).consume()
                if batch.links:
                    await (await tx.run(_NEXT, links=batch.links)).consume()

            self._writing = True
            try:
                async with self.driver.session(database=self.database) as session:
                    await session.execute_write(work)
            finally:
                self._writing = False
            self.transactions += 1
