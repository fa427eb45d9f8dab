"""The read pages of a task's ledger (the view, event and step pages, the mirror's page), each
bounded by count and by ``MAX_PAYLOAD_BYTES`` of JSON, never empty while something is left.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TypeVar

from pydantic import BaseModel

from agent_tasks.contract import (
    MAX_PAYLOAD_BYTES,
    STEPS_PAGE_MAX,
    Event,
    EventsPage,
    EventsQuery,
    MirrorPage,
    MirrorQuery,
    StepRecord,
    StepsPage,
    StepsQuery,
    StepState,
    StepView,
    TaskView,
    model_size,
)
from agent_tasks.workflows.book import Book
from agent_tasks.workflows.steps import idempotency_key, result_validity

_Item = TypeVar("_Item", bound=BaseModel)


def _fill(
    items: Iterable[_Item], max_bytes: int, used: int = 0, required: bool = True
) -> list[_Item]:
    """``items`` in order while the page's JSON (``used`` bytes so far) stays within ``max_bytes``;
    the first whatever its size when ``required``, so paging always advances."""
    page: list[_Item] = []
    for item in items:
        used += model_size(item)
        if used > max_bytes and (page or not required):
            break
        page.append(item)
    return page


def view(book: Book) -> TaskView:
    """The task view, without event bodies."""
    start = book.state.start
    counts = dict.fromkeys(StepState, 0)
    for state in (
        *(r.state for r in book.state.steps.values()),
        *(c.state for c in book.earlier_steps.values()),
    ):
        counts[state] += 1
    return TaskView(
        project_id=start.project_id,
        name=start.name,
        workflow_id=book.state.workflow_id,
        goal=start.goal,
        agent_id=start.agent_id,
        session_id=start.session_id,
        parent=start.parent,
        metadata=start.metadata,
        status=book.state.status,
        result=book.state.result,
        error=book.state.error,
        step_counts=counts,
        last_seq=book.state.last_seq,
        mirrored_seq=book.state.mirrored_seq,
        unmirrored_writes=book.state.writes - book.state.mirrored_write,
        mirror_error=book.state.mirror_error,
        mirror_failures=book.state.mirror_failures,
        run_first_seq=book.run_first_seq,
        runs=book.state.runs,
        mirror_backlog=book.state.mirror_backlog,
        branched_from=start.branched_from,
        closed_inputs=book.state.closed_inputs,
        writes=book.state.writes,
        agent=start.agent,
        agent_run=book.state.agent_run,
        pending_inputs=book.state.inputs,
        children=book.state.children,
        created_at=book.state.created_at,
        updated_at=book.state.updated_at,
    )


def events_page(book: Book, query: EventsQuery) -> EventsPage:
    """This run's events with seq > ``after_seq``: at most ``limit`` and ``max_bytes`` of JSON, one
    at least while any is left."""
    page = _fill(_events(book, query.after_seq, query.up_to_seq, query.limit), query.max_bytes)
    return EventsPage(
        events=page,
        run_first_seq=book.run_first_seq,
        last_seq=book.state.last_seq,
        mirrored_seq=book.state.mirrored_seq,
        mirror_backlog=book.state.mirror_backlog,
    )


def steps_page(book: Book, query: StepsQuery) -> StepsPage:
    """A page of the steps this run holds (open ones and those changed in this run) in name order,
    filtered as ``query`` says, within ``limit`` and ``MAX_PAYLOAD_BYTES`` (one at least)."""
    selected = _steps(
        book, query.changed_after_write, query.after_name, query.state, query.step_name
    )
    page = _fill((step_view(book, *item) for item in selected[: query.limit]), MAX_PAYLOAD_BYTES)
    return StepsPage(
        steps=page,
        next_after_name=page[-1].step_name if page and len(page) < len(selected) else None,
        earlier=bool(book.earlier_steps),
        run_first_write=book.run_first_write,
        mirror_backlog=book.state.mirror_backlog,
    )


def mirror_page(book: Book, query: MirrorQuery) -> MirrorPage:
    """The next page of what the mirror copies, within ``query.max_bytes``: the view (when asked),
    the steps changed after ``after_write`` in name order, then the events after ``after_seq``; at
    least one item while any is left."""
    task = view(book) if query.with_view else None
    used = 0 if task is None else model_size(task)
    selected = _steps(book, query.after_write, query.after_name)
    views = (step_view(book, *item) for item in selected[:STEPS_PAGE_MAX])
    steps = _fill(views, query.max_bytes, used, required=task is None)
    used += sum(model_size(step) for step in steps)
    page = MirrorPage(view=task, steps=steps, steps_done=len(steps) == len(selected))
    if page.steps_done:
        events = _events(book, query.after_seq, query.up_to_seq, query.events)
        page.events = _fill(events, query.max_bytes, used, required=task is None and not steps)
    return page


def _events(book: Book, after_seq: int, up_to_seq: int | None, limit: int) -> Iterator[Event]:
    """This run's events with ``after_seq < seq <= up_to_seq`` (None: the newest), at
    most ``limit``, in seq order."""
    start = max(after_seq + 1 - book.run_first_seq, 0)
    last = book.state.last_seq if up_to_seq is None else up_to_seq
    return itertools.takewhile(
        lambda event: event.seq <= last, book.run_events[start : start + limit]
    )


def _steps(
    book: Book,
    changed_after_write: int,
    after_name: str | None,
    state: StepState | None = None,
    step_name: str | None = None,
) -> list[tuple[str, StepRecord]]:
    """The steps this run holds, filtered by ``changed_after_write``, ``after_name``, ``state`` and
    ``step_name`` (None: any), in name order."""
    return sorted(
        (name, step)
        for name, step in book.state.steps.items()
        if (state is None or step.state is state)
        and step.changed_write > changed_after_write
        and (after_name is None or name > after_name)
        and (step_name is None or name == step_name)
    )


def step_view(book: Book, name: str, step: StepRecord) -> StepView:
    """A step record as readers see it, with its validity and idempotency key."""
    return StepView(
        step_name=name,
        state=step.state,
        kind=step.kind,
        result_event_seq=step.result_event_seq,
        attempt=step.attempt,
        updated_at=step.updated_at,
        result_validity=result_validity(step.state, step.result_event_seq),
        idempotency_key=idempotency_key(book.state.workflow_id, name, step.attempt),
        changed_write=step.changed_write,
    )
