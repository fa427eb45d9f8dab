"""The runs of a task's agent as the log records them (the turn rules, ``TURN_RULES``;
docs/agent-tasks.md): a ``run_started`` note when a run begins, ``run_finished`` or
``run_failed`` when it ends, and a failed run's events rolled back (a ``rolled_back`` note the
model's transcript honours); and the task closed from workflow code when its agent ends or it
is cancelled (``close``). The workflow calls these with its ledger and ``workflow.now()``.
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
    """Start a run of the agent: a ``run_started`` note (``{"run": n, "start": "turn" |
    "resume" | "continuation"}``), the run open, what the turn had committed before it kept
    (what a failure rolls back to)."""
    run = ledger.state.agent_run
    assert run is not None
    run.run += 1
    run.run_open = True
    run.committed_before_run = run.turn_committed
    payload = json.dumps({"run": run.run, "start": start})
    note = EventInput(kind=EventKind.NOTE, name="run_started", payload=payload)
    run.run_seq = ledger.append([note], f"run/{run.run}", now).first_seq


def end_run(ledger: Ledger, error: str | None, now: datetime) -> None:
    """End the open run: finished (a ``run_finished`` note; the turn is done, it committed
    nothing left to continue) or failed (a ``run_failed`` note with ``error``, then a
    ``rolled_back`` note ``{"from_seq", "to_seq"}`` covering the run's events, which the model
    never sees again; the turn is as it was before the run, so a failed first run is
    resumable and a failed continuation stays continuable). A run of a task recorded before
    ``TURN_RULES`` is never open: nothing is recorded."""
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
    """Close the task from workflow code: its open input requests closed (an ``input_closed``
    note each), an ``error`` event when it failed, the status event and the finish, under
    request ids derived from the write counter (``internal_request_id``)."""
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
