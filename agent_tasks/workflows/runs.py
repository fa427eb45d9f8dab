"""The runs of a task's agent as the log records them (``TURN_RULES``, ``docs/agent-tasks.md``):
``run_started``, then ``run_finished`` or ``run_failed`` with a ``rolled_back`` note; and the task
closed from workflow code (``close``).
"""

from __future__ import annotations

import json
from datetime import datetime

from agent_tasks.contract import (
    ROLLED_BACK,
    EventInput,
    EventKind,
    FinishTaskInput,
    TaskStatus,
    internal_request_id,
)
from agent_tasks.workflows import inbox
from agent_tasks.workflows.ledger import Ledger


def begin_run(ledger: Ledger, start: str, now: datetime) -> None:
    """Start a run: a ``run_started`` note (``{"run": n, "start": "turn" | "resume" |
    "continuation"}``), the run open, what the turn had committed kept for a rollback."""
    run = ledger.state.agent_run
    assert run is not None
    run.run += 1
    run.run_open = True
    run.committed_before_run = run.turn_committed
    payload = json.dumps({"run": run.run, "start": start})
    note = EventInput(kind=EventKind.NOTE, name="run_started", payload=payload)
    run.run_seq = ledger.append([note], f"run/{run.run}", now).first_seq


def end_run(ledger: Ledger, error: str | None, now: datetime) -> None:
    """End the open run: ``run_finished``, or ``run_failed`` with ``error`` and a ``rolled_back``
    note over the run's events (the turn is as before the run: still resumable or continuable). A
    task recorded before ``TURN_RULES`` records nothing."""
    run = ledger.state.agent_run
    if run is None or not run.run_open:
        return
    run.run_open = False
    head = {"run": run.run}
    if error is None:
        run.turn_committed = False
        notes = [EventInput(kind=EventKind.NOTE, name="run_finished", payload=json.dumps(head))]
    else:
        run.turn_committed = run.committed_before_run
        failed = json.dumps({**head, "error": error}, ensure_ascii=False)
        notes = [EventInput(kind=EventKind.NOTE, name="run_failed", payload=failed)]
        span = {"from_seq": run.run_seq + 1, "to_seq": ledger.state.last_seq}
        if span["from_seq"] <= span["to_seq"]:
            notes.append(
                EventInput(kind=EventKind.NOTE, name=ROLLED_BACK, payload=json.dumps(span))
            )
    ledger.append(notes, f"run/{run.run}/end", now)


def close(
    ledger: Ledger,
    status: TaskStatus,
    now: datetime,
    *,
    result: str | None = None,
    error: str | None = None,
) -> None:
    """Close the task from workflow code: open requests closed, an ``error`` event if it failed, the
    status event and the finish, under request ids from the write counter."""
    inbox.close_inputs(ledger, f"task {status.value}", now)
    events = [EventInput(kind=EventKind.NOTE, name="status", payload=status.value)]
    if error is not None:
        events.insert(0, EventInput(kind=EventKind.ERROR, name="agent", payload=error))
    ledger.append(events, f"end/{ledger.state.writes}", now)
    ledger.finish(
        FinishTaskInput(
            agent_id=ledger.state.start.agent_id,
            status=status,
            result=result,
            error=error,
            request_id=internal_request_id(f"finish/{ledger.state.writes}"),
        ),
        now,
    )
