"""The children of a task's ledger: a spawned child recorded (a ``child_task`` event) and its end
recorded when its ``child_ended`` signal comes (a ``child_result`` event, whole JSON).
"""

from __future__ import annotations

from datetime import datetime

from temporalio.exceptions import ApplicationError

from agent_tasks.contract import (
    CHILD_RESULT_PREVIEW_CHARS,
    BoundedText,
    ChildEnd,
    ChildRecord,
    EventInput,
    EventKind,
    args_digest,
    json_within,
)
from agent_tasks.workflows.book import Book


def add_child(book: Book, key: str, record: ChildRecord, now: datetime) -> None:
    """Record a spawned child task (a ``child_task`` event naming it)."""
    event = EventInput(kind=EventKind.CHILD_TASK, name=key[:128], payload=record.name)
    record.result_seq = None
    book.append([event], f"spawn/{key}", now)
    book.state.children[key] = record


def child_ended(book: Book, end: ChildEnd, now: datetime) -> None:
    """A spawned child's end (``child_ended``): a ``child_result`` event and its record updated; a
    repeat, or an end from a task that is not this one's child, is ignored."""
    key = next((k for k, c in book.state.children.items() if c.name == end.child), None)
    try:
        if key is None or book.stored(end.request_id, end) is not None:
            return
    except ApplicationError:
        return
    text = end.result or end.error or BoundedText(text="", full_length=0, full_sha256="")
    head = {"child": end.child, "status": end.status.value}
    event = EventInput(
        kind=EventKind.CHILD_RESULT, name=key, payload=json_within(head, "text", text.text)
    )
    outcome = book.add_events([event], book.state.start.agent_id, end.request_id, now)
    book.accept(end.request_id, args_digest(end), outcome.first_seq, outcome.last_seq, now)
    record = book.state.children[key]
    record.status, record.result_seq = end.status, outcome.first_seq
    record.result = text.text[:CHILD_RESULT_PREVIEW_CHARS]
