"""Reading a task across its runs: the one reader of the client (``ConversationHistory``'s
reads of one task) and the activities (tools reading their call's arguments, the model
reading its transcript).

A task's events live in three places: the current run holds its own (by query); Neo4j holds
every earlier run's up to the mirror's watermark (``mirrored_seq``); the earlier runs whose
writes Neo4j lacks still hold theirs (``mirror_backlog``: a closed run answers queries). So a
read never waits for the mirror. Steps the same way: the current run holds its open steps and
those changed in it, Neo4j the steps closed in earlier runs, the backlog runs what Neo4j lacks.
A task whose history Temporal deleted (the namespace's retention) is read from Neo4j alone.

A CLOSED task is read without a query, so no worker runs (or replays) its code and none needs
to be polling its queue: every query is sent with ``reject_condition=NOT_OPEN``, which the
server answers at once for a closed run (``WorkflowQueryRejectedError``, with the run's
status) without a worker. Its view is then the workflow's result when the run COMPLETED (a
task that completed returns its final view once mirrored: one read of the close event of its
history), else (CANCELED, TERMINATED, FAILED, TIMED_OUT) the view the graph store keeps: a
task closed by its own run (cancelled: a run that closes cancelled has no result, but
mirrors everything before it closes) left its whole closed view there (``closed_view``),
unless the store refused a page of it (``taskgraph.refusals``: the task closed without it,
and is queried until the store takes it),
while a run that ended without closing its task (terminated, timed out, failed) left what its
mirror had written by then. Its events and steps come from the graph store, which holds all
of them (the run closed only once mirrored) or, for a run ended from outside, those its
mirror had written, up to the view's ``last_seq``. Why these and not a replay of the history:
a replay is what a query costs (the worker's whole last run, with the code it has now, and
no answer at all while no worker polls the queue); the result is one small payload the server
already stores, and the graph store is the read model built for exactly these reads. Only a
reader without a graph store, or a closed task the store lacks, still queries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryRejectedError,
)
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.contract import (
    PAGE_LIMIT_MAX,
    STEPS_PAGE_MAX,
    Event,
    EventsPage,
    EventsQuery,
    StepsQuery,
    StepState,
    StepView,
    TaskView,
    project_of,
)
from agent_tasks.contract.errors import GraphIncomplete, GraphNotConfigured
from agent_tasks.contract.handlers import EVENTS, STEPS, VIEW
from agent_tasks.sealing.seal import open_events
from agent_tasks.taskgraph.models import NEO4J_INT_MAX
from agent_tasks.taskgraph.refusals import Refusals

if TYPE_CHECKING:  # the driver is loaded by whoever makes the graph (the client loads none)
    from agent_tasks.taskgraph.port import GraphStore

QUERY_TIMEOUT = timedelta(seconds=10)
"""RPC timeout of each query the reader sends to an earlier run or from an activity
(answered by a worker from its cache, or by a replay of a closed run)."""

_T = TypeVar("_T")


class Call(Protocol):
    """Runs one Temporal call (the client passes its retrying ``_call``); ``workflow_id`` is
    the workflow it goes to, for the error that names its task queue."""

    async def __call__(
        self, call: Callable[[], Awaitable[_T]], workflow_id: str | None = None
    ) -> _T:
        """``call()``'s answer."""


Source = Literal["temporal", "neo4j"]
"""Where a task's view came from: its workflow (its query or its result), or the graph store
(a closed run that did not complete, or a task Temporal has no history of)."""


class Found(NamedTuple):
    """A task's view as ``TaskReader.view`` found it."""

    view: TaskView
    source: Source
    """Where it came from."""
    workflow_status: str | None = None
    """The latest run's close status when it is closed (``COMPLETED``, ``CANCELED``,
    ``TERMINATED``, ``FAILED``, ``TIMED_OUT``); None for an open run, or a task Temporal has
    no history of."""


_NOT_OPEN = QueryRejectCondition.NOT_OPEN


async def _direct(call: Callable[[], Awaitable[_T]], workflow_id: str | None = None) -> _T:
    return await call()


class TaskReader:
    """Reads one task's view, events and steps across its runs.

    Args:
        client: the Temporal client (the product's data converter).
        graph: the Neo4j task graph: earlier runs' events and steps, the key store of sealed
            text, tasks past the namespace's retention; None: those reads raise
            ``GraphNotConfigured``.
        call: runs each Temporal call (retries and the time limit: the client's transport);
            by default directly.
    """

    def __init__(self, client: Client, graph: GraphStore | None, call: Call = _direct) -> None:
        self.client = client
        self.graph = graph
        self.call = call

    async def _found(
        self, query: Callable[[], Awaitable[_T]], workflow_id: str
    ) -> tuple[bool, _T | None]:
        """``query``'s answer (a query of ``workflow_id``), or ``(False, None)`` when the
        workflow does not exist."""
        try:
            return True, await self.call(query, workflow_id)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False, None
            raise

    async def view(self, workflow_id: str) -> Found | None:
        """The task's view, where it came from and how its run closed; None when neither
        Temporal nor the graph store has the task."""
        handle = self.client.get_workflow_handle(workflow_id)
        found, view, closed = await self._ask(
            workflow_id, lambda when: VIEW.on(handle, reject_condition=when)
        )
        if closed is not None:
            return closed
        if found:
            assert view is not None
            return Found(view, "temporal")
        view = await self.expired(workflow_id)
        return None if view is None else Found(view, "neo4j")

    async def _ask(
        self,
        workflow_id: str,
        ask: Callable[[QueryRejectCondition | None], Awaitable[_T]],
        graph_needed: bool = False,
    ) -> tuple[bool, _T | None, Found | None]:
        """``ask``'s query of ``workflow_id`` sent to an open run only: ``(found, answer,
        None)``, ``found`` False when the workflow does not exist; for a closed task read
        without a worker (``closed``; with ``graph_needed``, only when a graph store is given)
        ``(True, None, its view)``; a closed run read so cannot be (no graph store, or the
        store lacks the task) is queried (a worker replays it)."""
        try:
            found, answer = await self._found(lambda: ask(_NOT_OPEN), workflow_id)
            return found, answer, None
        except WorkflowQueryRejectedError as rejected:
            if self.graph is not None or not graph_needed:
                closed = await self.closed(workflow_id, rejected.status)
                if closed is not None:
                    return True, None, closed
        found, answer = await self._found(lambda: ask(None), workflow_id)
        return found, answer, None

    async def closed(
        self, workflow_id: str, status: WorkflowExecutionStatus | None
    ) -> Found | None:
        """The view of a closed task read without a worker (the module docstring): a task
        whose latest run ``status`` is COMPLETED from its result ("temporal"), one that closed
        otherwise from the graph store ("neo4j"); None when it must be queried (no graph
        store, the store lacks the task, or it refused a page of it)."""
        closed_as = None if status is None else status.name
        if status is WorkflowExecutionStatus.COMPLETED:
            handle = self.client.get_workflow_handle(workflow_id, result_type=TaskView)
            view = await self.call(lambda: handle.result(follow_runs=False), workflow_id)
            return Found(view, "temporal", closed_as)
        found = await self.expired(workflow_id)
        if found is None or await self._refused(workflow_id):
            return None
        return Found(found, "neo4j", closed_as)

    async def _refused(self, workflow_id: str) -> bool:
        """True when the graph store refused a page of the task and lacks it still (its
        closed view there may be older than the run's: the run is queried instead)."""
        return self.graph is not None and await Refusals(self.graph).held(workflow_id)

    async def expired(self, workflow_id: str) -> TaskView | None:
        """The view the graph store keeps of a task (a closed run's, or one Temporal has no
        history of: deleted after the namespace's retention); None without a graph store or
        when it has no such task."""
        if self.graph is None:
            return None
        return await self.graph.reads.task_view(project_of(workflow_id), workflow_id)

    async def events(
        self, workflow_id: str, after_seq: int, limit: int
    ) -> tuple[list[Event], int | None] | None:
        """Events with seq > ``after_seq`` in seq order, at most ``limit``, across every run
        (the module docstring), sealed text opened, and the cursor of the next page (None at
        the end); None when the task does not exist.

        Raises:
            GraphNotConfigured: mirrored seqs of earlier runs are needed and no graph was given.
            GraphIncomplete: Neo4j lacks some of them (run ``agent-tasks graph rebuild``).
        """
        query = EventsQuery(after_seq=after_seq, limit=limit)
        handle = self.client.get_workflow_handle(workflow_id)
        _, page, closed = await self._ask(
            workflow_id,
            lambda when: EVENTS.on(handle, query, reject_condition=when),
            graph_needed=True,
        )
        if closed is not None:
            stored = await self._stored_events(workflow_id, closed[0], after_seq, limit)
            if stored is not None:
                return stored
            page = await self.call(partial(EVENTS.on, handle, query), workflow_id)
        if page is None:
            view = await self.expired(workflow_id)
            return (
                None
                if view is None
                else await self._stored_events(workflow_id, view, after_seq, limit)
            )
        events: list[Event] = []
        if after_seq + 1 < page.run_first_seq:
            up_to = min(page.run_first_seq - 1, after_seq + limit)
            events = await self.earlier_events(workflow_id, page, after_seq, up_to, self.call)
        if not events or events[-1].seq == page.run_first_seq - 1:
            events += page.events[: limit - len(events)]
        events = await open_events(self.graph, project_of(workflow_id), events)
        last = events[-1].seq if events else after_seq
        return events, last if last < page.last_seq else None

    async def _stored_events(
        self, workflow_id: str, view: TaskView, after_seq: int, limit: int
    ) -> tuple[list[Event], int | None] | None:
        """``events`` of a task from the graph store alone, up to ``view.last_seq`` (a closed
        task's, or one Temporal has no history of: ``expired``), sealed text opened; None
        without a graph store, or when it lacks one of those seqs (a closed task is then
        queried)."""
        if self.graph is None:
            return None
        project = project_of(workflow_id)
        events = await self.graph.reads.events(
            project, workflow_id, after_seq, view.last_seq, limit
        )
        last = min(view.last_seq, after_seq + limit)
        if [e.seq for e in events] != list(range(after_seq + 1, last + 1)):
            return None
        events = await open_events(self.graph, project, events)
        return events, last if last < view.last_seq else None

    async def earlier_events(
        self,
        workflow_id: str,
        page: EventsPage,
        after_seq: int,
        up_to: int,
        call: Call = _direct,
    ) -> list[Event]:
        """Seqs ``after_seq + 1`` to ``up_to`` of the runs before the one ``page`` came from,
        in order: from Neo4j up to ``page.mirrored_seq``, then from the backlog runs that hold
        the rest (a run's page may end early at the query's byte budget: fewer events come
        back, in order).

        Args:
            call: runs each query of a backlog run.

        Raises:
            GraphNotConfigured: mirrored seqs are needed and no graph was given.
            GraphIncomplete: Neo4j lacks some of them (``agent-tasks graph rebuild``).
        """
        events: list[Event] = []
        if after_seq < page.mirrored_seq:
            if self.graph is None:
                raise GraphNotConfigured(
                    "this read needs Neo4j: pass graph= to ConversationHistory"
                )
            stop = min(up_to, page.mirrored_seq)
            events = await self.graph.reads.events(
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
            earlier = self.client.get_workflow_handle(workflow_id, run_id=run.run_id)
            query = EventsQuery(after_seq=after_seq, up_to_seq=stop, limit=stop - after_seq)
            got = await call(
                partial(EVENTS.on, earlier, query, rpc_timeout=QUERY_TIMEOUT),
                workflow_id,
            )
            events += got.events
            if not got.events or got.events[-1].seq < stop:
                break
            after_seq = stop
        return events

    async def task_events(
        self, workflow_id: str, run_id: str, after_seq: int, up_to_seq: int
    ) -> list[Event]:
        """Every event of the task with ``after_seq < seq <= up_to_seq``, in order, read from
        the run ``run_id`` (a run of the task that holds ``up_to_seq``) and the places that
        hold the earlier ones (``earlier_events``), in pages within the payload budget; sealed
        text opened (``sealing.seal.open_events``: a note or an input a client wrote to
        the task). The activities' read: each query is sent once, within ``QUERY_TIMEOUT``
        (the activity's retry policy retries).

        Raises:
            GraphNotConfigured, GraphIncomplete: as ``earlier_events``, or a sealed event's key
                is missing.
            temporalio.service.RPCError: a query failed.
        """
        handle = self.client.get_workflow_handle(workflow_id, run_id=run_id)
        events: list[Event] = []
        while after_seq < up_to_seq:
            stop = min(up_to_seq, after_seq + PAGE_LIMIT_MAX)
            page = await EVENTS.on(
                handle,
                EventsQuery(after_seq=after_seq, up_to_seq=stop, limit=stop - after_seq),
                rpc_timeout=QUERY_TIMEOUT,
            )
            got = page.events
            if after_seq + 1 < page.run_first_seq:
                got = await self.earlier_events(
                    workflow_id, page, after_seq, min(stop, page.run_first_seq - 1)
                )
            if not got:
                raise GraphIncomplete(
                    f"{workflow_id}: events {after_seq + 1}..{stop} are not found"
                )
            events += got
            after_seq = got[-1].seq
        return await open_events(self.graph, project_of(workflow_id), events)

    async def steps(
        self,
        workflow_id: str,
        state: StepState | None,
        limit: int,
        after_name: str | None,
    ) -> tuple[list[StepView], str | None] | None:
        """A page of the task's steps in name order after ``after_name``, in ``state`` when
        not None, at most ``limit``, and the cursor of the next page (None at the end); None
        when the task does not exist. The steps a run holds come from the workflow, those
        closed in earlier runs from Neo4j (and from those runs while Neo4j lacks them), the
        newest record of each name winning.

        Raises:
            GraphNotConfigured: the task has steps of earlier runs and no graph was given.
        """
        query = StepsQuery(state=state, limit=limit, after_name=after_name)
        handle = self.client.get_workflow_handle(workflow_id)
        _, page, closed = await self._ask(
            workflow_id,
            lambda when: STEPS.on(handle, query, reject_condition=when),
            graph_needed=True,
        )
        if page is None:
            if closed is None and await self.expired(workflow_id) is None:
                return None
            # The graph store has every step of a task closed (mirrored before it closed) or
            # that Temporal no longer has: ``older`` is all of them.
        elif not page.earlier and not page.mirror_backlog:
            return page.steps, page.next_after_name
        if self.graph is None:
            raise GraphNotConfigured("this read needs Neo4j: pass graph= to ConversationHistory")
        older = await self.graph.reads.steps(
            project_of(workflow_id),
            workflow_id,
            state=state,
            after_name=after_name,
            limit=limit,
            up_to_write=NEO4J_INT_MAX if page is None else page.run_first_write,
        )
        if page is None:
            more = len(older) == limit
            return older, older[-1].step_name if more else None
        upper = older[-1].step_name if len(older) == limit else None
        merged = {step.step_name: step for step in older}
        runs = [(run.run_id, run.after_write) for run in page.mirror_backlog]
        for run_id, after_write in [*runs, (None, 0)]:  # newer runs' records win
            run = self.client.get_workflow_handle(workflow_id, run_id=run_id)
            merged |= await self._held_steps(run, after_write, after_name, upper)
        chosen = sorted(
            (s for s in merged.values() if state is None or s.state is state),
            key=lambda s: s.step_name,
        )
        steps = chosen[:limit]
        more = len(chosen) > limit or upper is not None
        cursor = steps[-1].step_name if steps else upper
        return steps, cursor if more else None

    async def _held_steps(
        self,
        run: WorkflowHandle[Any, Any],
        after_write: int,
        after_name: str | None,
        upper: str | None,
    ) -> dict[str, StepView]:
        """The steps ``run`` holds changed after ``after_write``, whatever their state, with
        ``after_name < name <= upper`` (no upper bound when None), by name."""
        held: dict[str, StepView] = {}
        while True:
            query = StepsQuery(
                changed_after_write=after_write, after_name=after_name, limit=STEPS_PAGE_MAX
            )
            page = await self.call(partial(STEPS.on, run, query), run.id)
            held |= {s.step_name: s for s in page.steps if upper is None or s.step_name <= upper}
            after_name = page.next_after_name
            if after_name is None or (upper is not None and after_name >= upper):
                return held
