"""Reading a task's events across its runs: the one way the client and the activities (tools
reading their call's arguments, the model reading its transcript) read events by seq.

A task's events live in three places: the current run holds its own (by query); Neo4j holds
every earlier run's up to the mirror's watermark (``mirrored_seq``); the earlier runs whose
writes Neo4j lacks still hold theirs (``mirror_backlog``: a closed run answers queries). So a
read never waits for the mirror.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from temporalio.client import Client

from taskgraph.sealing import open_events
from workflows.errors import GraphIncomplete, GraphNotConfigured
from workflows.models import PAGE_LIMIT_MAX, Event, EventsPage, EventsQuery, project_of
from workflows.task import TaskWorkflow

if TYPE_CHECKING:  # the driver is loaded by whoever makes the graph (the client loads none)
    from taskgraph.graph import TaskGraph

QUERY_TIMEOUT = timedelta(seconds=10)
"""RPC timeout of each query a read sends (answered by a worker from its cache, or by a
replay of a closed run)."""

_T = TypeVar("_T")
Call = Callable[[Callable[[], Awaitable[_T]]], Awaitable[_T]]


async def _direct(call: Callable[[], Awaitable[_T]]) -> _T:
    return await call()


async def earlier_events(
    client: Client,
    graph: TaskGraph | None,
    workflow_id: str,
    page: EventsPage,
    after_seq: int,
    up_to: int,
    call: Call[EventsPage] = _direct,
) -> list[Event]:
    """Seqs ``after_seq + 1`` to ``up_to`` of the runs before the one ``page`` came from, in
    order: from Neo4j up to ``page.mirrored_seq``, then from the backlog runs that hold the rest
    (a run's page may end early at the query's byte budget: fewer events come back, in order).

    Args:
        call: runs each query (the client passes its retrying wrapper).

    Raises:
        GraphNotConfigured: mirrored seqs are needed and ``graph`` is None.
        GraphIncomplete: Neo4j lacks some of them (``agent-tasks graph rebuild``).
    """
    events: list[Event] = []
    if after_seq < page.mirrored_seq:
        if graph is None:
            raise GraphNotConfigured("this read needs Neo4j: pass graph= to ConversationHistory")
        stop = min(up_to, page.mirrored_seq)
        events = await graph.events(
            project_of(workflow_id), workflow_id, after_seq, stop, stop - after_seq
        )
        if [e.seq for e in events] != list(range(after_seq + 1, stop + 1)):
            raise GraphIncomplete(
                f"Neo4j lacks events {after_seq + 1}..{stop} of {workflow_id}: "
                "run `agent-tasks graph rebuild`"
            )
        after_seq = stop
    for run in page.mirror_backlog:
        stop = min(up_to, run.up_to_seq)
        if after_seq >= stop:
            continue
        earlier = client.get_workflow_handle(workflow_id, run_id=run.run_id)
        query = EventsQuery(after_seq=after_seq, up_to_seq=stop, limit=stop - after_seq)
        got = await call(
            partial(earlier.query, TaskWorkflow.events, query, rpc_timeout=QUERY_TIMEOUT)
        )
        events += got.events
        if not got.events or got.events[-1].seq < stop:
            break
        after_seq = stop
    return events


async def task_events(
    client: Client,
    graph: TaskGraph | None,
    workflow_id: str,
    run_id: str,
    after_seq: int,
    up_to_seq: int,
) -> list[Event]:
    """Every event of the task with ``after_seq < seq <= up_to_seq``, in order, read from the
    run ``run_id`` (a run of the task that holds ``up_to_seq``) and the places that hold the
    earlier ones (``earlier_events``), in pages within the payload budget; sealed text opened
    (``taskgraph.sealing.open_events``: a note or an input a client wrote to the task).

    Raises:
        GraphNotConfigured, GraphIncomplete: as ``earlier_events``, or a sealed event's key
            is missing.
        temporalio.service.RPCError: a query failed.
    """
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    events: list[Event] = []
    while after_seq < up_to_seq:
        stop = min(up_to_seq, after_seq + PAGE_LIMIT_MAX)
        page = await handle.query(
            TaskWorkflow.events,
            EventsQuery(after_seq=after_seq, up_to_seq=stop, limit=stop - after_seq),
            rpc_timeout=QUERY_TIMEOUT,
        )
        got = page.events
        if after_seq + 1 < page.run_first_seq:
            got = await earlier_events(
                client, graph, workflow_id, page, after_seq, min(stop, page.run_first_seq - 1)
            )
        if not got:
            raise GraphIncomplete(f"{workflow_id}: events {after_seq + 1}..{stop} are not found")
        events += got
        after_seq = got[-1].seq
    return await open_events(graph, project_of(workflow_id), events)
