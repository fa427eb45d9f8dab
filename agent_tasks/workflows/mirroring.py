"""The mirror policy of a task: what the next mirror call copies (an earlier run's backlog
first, at most ``MIRROR_MAX_EVENTS`` events; the current run by a call that follows it), what
a success or a failure records, and how long the workflow pauses after failures; with the
mirror activity's timeouts and retries and the follower's cadence. The ledger calls the
bookkeeping with its state; ``TaskWorkflow`` the rest.

Since the ``mirror-follows-run`` patch one call mirrors the current run for as long as it is
written to (``MirrorInput.follow``, ``activities.mirror``): it waits for each new workflow
task of the run by a long poll of the run's history, copies what it wrote (at most once per
``MIRROR_FOLLOW_AGE``: a cadence that costs no timer), and ends when the run has been idle for
``MIRROR_FOLLOW_IDLE``, after ``MIRROR_FOLLOW_MAX``, or once the run ends and everything is
copied. So a write adds no workflow task and no activity of its own; the workflow learns how
far the graph store got when the call ends (``MirrorOutcome``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import NamedTuple

from temporalio.common import RetryPolicy

from agent_tasks.contract import MIRROR_ERROR_CHARS, MirrorInput, MirrorOutcome, TaskState
from agent_tasks.contract.errors import MIRROR_DATA_ERROR


class MirrorTarget(NamedTuple):
    """One mirror call: its activity input and what a success records."""

    input: MirrorInput
    """The activity's input (references only)."""
    up_to_write: int | None
    """The write counter reached when the call covers its run's last event, else None."""
    from_backlog: bool
    """True when it copies an earlier run (``TaskState.mirror_backlog``)."""


def mirror_target(
    state: TaskState,
    run_id: str,
    max_events: int,
    *,
    follow: bool = False,
    history_token: str | None = None,
) -> MirrorTarget:
    """What the next mirror call copies: the oldest backlog run first, else this run
    (``run_id``), at most ``max_events`` events, or with ``follow`` everything this run
    writes while the call follows it (``MirrorInput.follow``, from ``history_token``)."""
    if state.mirror_backlog:
        oldest = state.mirror_backlog[0]
        after = max(state.mirrored_seq, oldest.after_seq)
        up_to = min(oldest.up_to_seq, after + max_events)
        return MirrorTarget(
            MirrorInput(
                workflow_id=state.workflow_id,
                run_id=oldest.run_id,
                after_seq=after,
                up_to_seq=up_to,
                after_write=max(state.mirrored_write, oldest.after_write),
            ),
            up_to_write=oldest.up_to_write if up_to == oldest.up_to_seq else None,
            from_backlog=True,
        )
    up_to = state.last_seq if follow else min(state.last_seq, state.mirrored_seq + max_events)
    return MirrorTarget(
        MirrorInput(
            workflow_id=state.workflow_id,
            run_id=run_id,
            after_seq=state.mirrored_seq,
            up_to_seq=up_to,
            after_write=state.mirrored_write,
            follow=follow,
            history_token=history_token if follow else None,
        ),
        up_to_write=state.writes if up_to == state.last_seq else None,
        from_backlog=False,
    )


def mirrored(state: TaskState, target: MirrorTarget, outcome: MirrorOutcome) -> None:
    """Record a successful mirror call of ``target``: its events, and its writes when it
    reached the end of its run, are in Neo4j; a backlog run copied to its end is dropped. A
    call that followed its run got as far as its ``outcome`` says (never less than the
    target: it copied that first)."""
    state.mirror_error = None
    state.mirror_failures = 0
    if target.input.follow:
        state.mirrored_seq = max(target.input.up_to_seq, outcome.up_to_seq or 0)
        state.mirrored_write = max(target.up_to_write or 0, outcome.up_to_write or 0)
        return
    state.mirrored_seq = target.input.up_to_seq
    if target.up_to_write is not None:
        state.mirrored_write = target.up_to_write
        if target.from_backlog:
            state.mirror_backlog.pop(0)


def mirror_failed(state: TaskState, error: str) -> None:
    """Record a failed mirror call (its retries spent) and why (cut to
    ``MIRROR_ERROR_CHARS``)."""
    state.mirror_error = error[:MIRROR_ERROR_CHARS]
    state.mirror_failures += 1


MIRROR_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_attempts=3,
    non_retryable_error_types=[MIRROR_DATA_ERROR],
)
"""One mirror call: three attempts, 1 s then 2 s apart; a data error fails at once."""
MIRROR_START_TO_CLOSE = timedelta(seconds=60)
"""Longest one mirror attempt may run (at most ``MIRROR_MAX_EVENTS`` events, in pages of one
query and one bounded graph-store transaction each); a follower's is ``MIRROR_FOLLOW_MAX``
longer."""
MIRROR_FOLLOW_IDLE = timedelta(seconds=5)
"""A follower ends once its run has had no new workflow task for this long: long enough to
cover a writer's pauses (a model's turn, a person's typing), short enough that idle tasks
hold no activity slot (the next write starts a new follower, where the last one stopped)."""
MIRROR_FOLLOW_MAX = timedelta(minutes=1)
"""A follower ends after following this long (the workflow starts the next as a write
waits): one activity and one workflow task a minute for a task written to all the time."""
MIRROR_FOLLOW_AGE = timedelta(milliseconds=100)
"""The follower's cadence: a copy at most this often (the rest of this age is waited out
before the next long poll), so the writes that come back to back share one long poll and one
page (built from the history, or read by one query) per 100 ms, and a lone write is copied at
once (on the worker's clock: no timer in the history)."""
MIRROR_FOLLOW_GAP = timedelta(seconds=1)
"""The follower's cadence while its run's writes come as published pages (``broker``
``PageMessage``: each copied as it comes, no poll needed): it polls the history at most this
often, for what no page brought (another kind of write, a signal, the run's end, a page
lost). A page that does not follow what the follower holds makes it poll at once."""
MIRROR_HEARTBEAT = timedelta(seconds=10)
"""The mirror activity heartbeats while it runs; an attempt whose worker died (killed, cut
off) is retried once this passes without a heartbeat, not after ``MIRROR_START_TO_CLOSE``.
(Timeouts are not part of replay's command matching: changing them needs no patch.)"""
MIRROR_PAUSE = timedelta(seconds=1)
"""After a failed mirror call the workflow records ``mirror_error``, keeps accepting writes,
and calls again after ``mirror_pause(failures)``: 2 s, 4 s, 8 s, 16 s, then 30 s, and 5 minutes
once an outage has lasted ``MIRROR_LONG_OUTAGE_FAILURES`` calls; without end (the store may be
down for days; a data error may be fixed by deploying a new worker)."""
MIRROR_PAUSE_MAX = timedelta(seconds=30)
"""The longest pause between failed mirror calls in a short outage."""
MIRROR_PAUSE_LONG = timedelta(minutes=5)
"""The pause in a long outage: few enough calls that a week of outage adds a few thousand
history events, at the cost of up to 5 minutes before the mirror notices the store is back."""
MIRROR_LONG_OUTAGE_FAILURES = 20
"""Failed calls in a row (about 9 minutes of pauses) after which the outage counts as long."""
MIRROR_PAUSE_DOUBLINGS = 5
"""Doublings after which the pause has passed ``MIRROR_PAUSE_MAX`` (1 s * 2**5 = 32 s)."""


def mirror_pause(failures: int) -> timedelta:
    """The pause after ``failures`` failed mirror calls in a row (1 or more, carried across
    continue-as-new): ``MIRROR_PAUSE * 2**failures`` capped at ``MIRROR_PAUSE_MAX``, then
    ``MIRROR_PAUSE_LONG`` past ``MIRROR_LONG_OUTAGE_FAILURES``. The exponent is capped before
    the power is taken (an uncapped ``2**failures`` overflowed ``timedelta`` after 47 failures,
    about 1.5 hours of outage, and failed the workflow task for good). Timer durations are not
    part of replay's determinism check, so the schedule may change without a patch."""
    if failures > MIRROR_LONG_OUTAGE_FAILURES:
        return MIRROR_PAUSE_LONG
    pause: timedelta = MIRROR_PAUSE * 2 ** min(failures, MIRROR_PAUSE_DOUBLINGS)
    return min(pause, MIRROR_PAUSE_MAX)
