"""Pages of made-up tasks in the mirror's shapes: the page a graph object writes and rolls back to
plan its statements (``TaskGraph.ensure_ready``), and the benchmarks' pages and seeded tasks."""

from __future__ import annotations

from datetime import UTC, datetime

from agent_tasks.contract import (
    Event,
    EventKind,
    StepState,
    TaskStatus,
    TaskView,
    event_id,
    task_workflow_id,
)

WARM_UP_PROJECT = "agent-tasks-warm-up"
"""The project of the page ``ensure_ready`` writes and rolls back (nothing of it stays)."""


def seed_view(
    project_id: str,
    name: str,
    *,
    last_seq: int,
    now: datetime,
    status: TaskStatus = TaskStatus.OPEN,
) -> TaskView:
    """The view of a one-run task with no steps, as its mirror pages carry it, created and updated
    ``now``."""
    return TaskView(
        project_id=project_id,
        name=name,
        workflow_id=task_workflow_id(project_id, name),
        goal="seeded",
        agent_id="agent-tasks",
        session_id=None,
        parent=None,
        metadata={},
        status=status,
        result=None,
        error=None,
        step_counts=dict.fromkeys(StepState, 0),
        last_seq=last_seq,
        mirrored_seq=0,
        unmirrored_writes=0,
        mirror_error=None,
        run_first_seq=1,
        runs=1,
        created_at=now,
        updated_at=now,
    )


def seed_event(workflow_id: str, seq: int, payload: str, now: datetime) -> Event:
    """A message event of ``payload`` (its SHA-256 not computed: zeros) recorded ``now``."""
    return Event(
        id=event_id(workflow_id, seq),
        seq=seq,
        kind=EventKind.MESSAGE,
        payload=payload,
        full_length=len(payload),
        full_sha256="0" * 64,
        author="agent-tasks",
        time=now,
        request_id=f"r{seq}",
    )


def warm_up_page() -> tuple[TaskView, list[Event]]:
    """A task's first page with one event, in a mirror page's shapes (Neo4j caches plans by
    statement and parameter types)."""
    now = datetime.now(UTC)
    view = seed_view(WARM_UP_PROJECT, "warm-up", last_seq=1, now=now)
    return view, [seed_event(view.workflow_id, 1, "warm-up", now)]
