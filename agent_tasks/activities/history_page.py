"""A followed run's next mirror page built from the history events its long poll brought, so a write
costs the mirror no ``mirror_page`` query.

When the new workflow tasks took only ``record_events`` updates, each update's input and result give
its events' seqs, author, request id and time (``Event.recorded``); the view moves only
``last_seq``, ``writes`` (one per update) and ``updated_at`` (``Ledger.accept``). Each update must
follow the view's ``last_seq`` by one seq. Otherwise ``history_page`` returns None and the follower
queries: an agent task; any other history event (another update, a signal, an activity, a timer, a
marker, a search attribute); continue-as-new suggested; a decision (its citations need the steps); a
gap in seqs; a reset position.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from agent_tasks.contract import Event, RecordEventsInput, TaskView, WriteOutcome

RECORD_EVENTS = "record_events"
"""The update whose writes a history page is built from (``TaskWorkflow.record_events``)."""

_WORKFLOW_TASK = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    }
)
"""History events that change no ledger state by themselves."""


async def history_page(
    converter: DataConverter, view: TaskView, history: Sequence[HistoryEvent] | None
) -> tuple[TaskView, list[Event]] | None:
    """The view and events that ``history`` (new history events, in order) adds to ``view`` (the
    last one written), or None where the history cannot serve (module docstring); events the view
    holds are left out. ``converter`` is the worker's (models and codec).

    Raises:
        Exception: a payload the converter cannot decode.
    """
    if history is None or view.agent is not None:
        return None
    accepted: dict[int, HistoryEvent] = {}
    writes: list[tuple[RecordEventsInput, WriteOutcome]] = []
    for event in history:
        kind = event.event_type
        if kind in _WORKFLOW_TASK:
            started = event.workflow_task_started_event_attributes
            if (
                kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
                and started.suggest_continue_as_new
            ):
                return None
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name != RECORD_EVENTS:
                return None
            accepted[event.event_id] = event
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            completed = event.workflow_execution_update_completed_event_attributes
            start = accepted.pop(completed.accepted_event_id, None)
            if start is None or not completed.outcome.HasField("success"):
                return None
            [outcome] = await converter.decode(completed.outcome.success.payloads, [WriteOutcome])
            if 0 < outcome.last_seq <= view.last_seq:
                continue  # the view holds it (a published page brought it): input not decoded
            request = start.workflow_execution_update_accepted_event_attributes.accepted_request
            [input] = await converter.decode(request.input.args.payloads, [RecordEventsInput])
            writes.append((input, outcome))
        else:
            return None
    if accepted:  # an update accepted and not completed: its handler is still running
        return None
    return applied(view, writes)


def applied(
    view: TaskView, writes: list[tuple[RecordEventsInput, WriteOutcome]]
) -> tuple[TaskView, list[Event]] | None:
    """``view`` and its new events after ``writes`` (``record_events`` inputs and results in order,
    from the history or published pages), by the ledger's rule, or None; a result with
    ``WriteOutcome.writes`` must be the view's next, else another write came between."""
    last_seq, count, updated_at = view.last_seq, view.writes, view.updated_at
    events: list[Event] = []
    for input, outcome in writes:
        if outcome.last_seq <= view.last_seq:
            continue  # the view holds it already
        if (
            outcome.first_seq != last_seq + 1
            or outcome.last_seq - outcome.first_seq + 1 != len(input.events)
            or outcome.time is None
            or outcome.writes not in (None, count + 1)
            or any(item.cites is not None for item in input.events)
        ):
            return None
        events += (
            Event.recorded(
                item,
                workflow_id=view.workflow_id,
                seq=outcome.first_seq + offset,
                author=input.agent_id,
                time=outcome.time,
                request_id=input.request_id,
            )
            for offset, item in enumerate(input.events)
        )
        last_seq, count, updated_at = outcome.last_seq, count + 1, outcome.time
    if not events:
        return view, []
    moved = {"last_seq": last_seq, "writes": count, "updated_at": updated_at}
    return view.model_copy(update=moved), events
