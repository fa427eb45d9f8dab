"""A followed run's next mirror page built from the history events its long poll brought
(``activities.follow``), so that a write costs the mirror no ``mirror_page`` query (a query
makes the run's worker answer for each write, and the server hop twice).

The page of a run whose new workflow tasks took nothing but ``record_events`` updates is
known from the history alone: each accepted update's input holds its events
(``RecordEventsInput``) and its result (``WriteOutcome``) their seqs and workflow time; the
ledger's rule for such a write is that the events get those seqs, author, request id and time
(``Event.recorded``), the task's ``last_seq`` becomes the result's, its write counter
(``writes``) grows by one and its ``updated_at`` becomes that time (``Ledger.accept``),
and nothing else of the view changes. So the new view is the last one the follower wrote
with those three fields moved, and its write counter is counted from it: an update is new to
the view when its first seq follows the view's ``last_seq`` (a record_events write always
assigns one seq at least), and it follows it by exactly one seq, or the page is not built.

Where the history cannot serve, ``history_page`` returns None and the follower reads the page
by the ``mirror_page`` query as before:

- an agent task (``TaskView.agent``): its workflow code writes without an update;
- any history event but workflow task events and ``record_events`` updates accepted and
  completed with a result: another update (steps, finish, status, input, spawn, create), a
  signal (an answer, a child's end), an activity, a timer, a marker, a search attribute;
- a workflow task started with continue-as-new suggested (the page's ``end``);
- an event that cites (a decision: its citations are resolved against the steps, ``cite``);
- a run of events that does not follow the view's ``last_seq`` (a write the view missed);
- a reset of the follower's position (``HistoryPoll.events`` None).
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
    """The view and the events that ``history`` (a followed run's new history events, in
    order) adds to ``view`` (the last view the follower wrote), or None where the history
    cannot serve (the module docstring). Events the view already holds (seq <= its
    ``last_seq``) are left out.

    Args:
        converter: the worker's data converter (models and payload codec).
        view: the view the follower last wrote.
        history: the run's history events since ``view`` was read, or None (unknown).

    Returns:
        The new view and its new events in seq order (none: ``view`` unchanged), or None.

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
    """``view`` and its new events after ``writes`` (``record_events`` inputs and results,
    in history order: from the history, or a published page, ``broker.PublishedWrite``), by
    the ledger's rule (module docstring), or None. A result that carries the write counter
    (``WriteOutcome.writes``) must be the view's next: else a write of another kind came
    between, which only the history or the query shows."""
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
