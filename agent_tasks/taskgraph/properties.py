"""The properties of the graph's nodes from the ledger's models, in either store (times as ``epoch``
pairs; FalkorDB's adapter sends microseconds)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agent_tasks.contract import CLOSED_STATUSES, BoundedText, Event, StepView, TaskView
from agent_tasks.taskgraph.models import utc


def task_properties(view: TaskView) -> dict[str, Any]:
    """Task node properties from a view (metadata, result, error as JSON text; ``pending_inputs``
    the open requests' ids). A closed task's node also keeps its whole view (``closed_view``), so a
    closed run is read without a worker."""
    return {
        "key": view.workflow_id,
        "project_id": view.project_id,
        "name": view.name,
        "goal": view.goal,
        "agent_id": view.agent_id,
        "session_id": view.session_id,
        "parent": view.parent,
        "metadata": json.dumps(view.metadata, ensure_ascii=False, sort_keys=True),
        "status": view.status.value,
        "result": None if view.result is None else view.result.text,
        "error": None if view.error is None else view.error.text,
        **_full("result", view.result),
        **_full("error", view.error),
        "last_seq": view.last_seq,
        "writes": view.writes,
        "branched_at_seq": None if view.branched_from is None else view.branched_from.seq,
        "runs": view.runs,
        "pending_inputs": [request.input_id for request in view.pending_inputs],
        "closed_view": closed_view(view),
        "created_at": utc(view.created_at),
        "updated_at": utc(view.updated_at),
    }


def closed_view(view: TaskView) -> str | None:
    """The ``closed_view`` property: the view as ASCII JSON when its task is closed, else None (the
    property removed)."""
    if view.status not in CLOSED_STATUSES:
        return None
    return json.dumps(view.model_dump(mode="json"), ensure_ascii=True, separators=(",", ":"))


def _full(field: str, text: BoundedText | None) -> dict[str, Any]:
    """The full length and SHA-256 of a result or error text as properties, for ``task_view``."""
    return {
        f"{field}_full_length": None if text is None else text.full_length,
        f"{field}_full_sha256": None if text is None else text.full_sha256,
    }


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch(moment: datetime) -> list[int]:
    """``[seconds, nanoseconds]`` of an aware ``moment`` since the epoch, exactly; the statement
    makes it a UTC datetime equal to the driver's own encoding, which is slow (pure Python).

    Raises:
        ValueError: ``moment`` is naive (``taskgraph.models.utc``).
    """
    since = utc(moment) - _EPOCH
    return [since.days * 86_400 + since.seconds, since.microseconds * 1_000]


def event_properties(event: Event) -> dict[str, Any]:
    """Event node properties of an opened event: ``time`` as ``epoch``, ``cites`` as JSON, ``usage``
    as ``input_tokens`` and ``output_tokens``; never sealed text. ``event_fields`` reverses it."""
    props = event.model_dump(mode="python", exclude={"sealed", "cites", "usage"})
    props["cites"] = None if event.cites is None else event.cites.model_dump_json()
    if event.usage is not None:
        props |= event.usage.model_dump()
    props["time"] = epoch(event.time)
    props["kind"] = event.kind.value
    props["role"] = None if event.role is None else event.role.value
    props["truncated"] = event.truncated
    return props


def step_properties(step: StepView) -> dict[str, Any]:
    """Step node properties (``updated_at`` as ``epoch``)."""
    props = step.model_dump(mode="python")
    props["updated_at"] = epoch(step.updated_at)
    for field in ("state", "kind", "result_validity"):
        props[field] = props[field].value
    return props
