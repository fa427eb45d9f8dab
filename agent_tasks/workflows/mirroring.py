"""The mirror policy of a task: what the next mirror call copies (an earlier run's backlog first,
then the current run by a call that follows it), what a success or failure records, the pause after
failures, and the activity's timeouts, retries and cadence.

A following call (``MirrorInput.follow``, ``activities.mirror``) long-polls the run's history,
copies each new workflow task's writes at most once per ``MIRROR_FOLLOW_AGE``, and ends after
``MIRROR_FOLLOW_IDLE`` idle, ``MIRROR_FOLLOW_MAX``, or the run's end; so a write adds no workflow
task or activity of its own.
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
    """What the next mirror call copies: the oldest backlog run first, else this run (``run_id``),
    at most ``max_events`` events, or with ``follow`` all it writes while followed (from
    ``history_token``)."""
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
    """Record a successful mirror call of ``target``: its events (and its writes, at its run's end)
    are in the graph store, a backlog run copied to its end is dropped; a follower got as far as
    ``outcome`` says."""
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
    """Record a failed mirror call (retries spent) and why (cut to ``MIRROR_ERROR_CHARS``)."""
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
"""Longest one mirror attempt may run (``MIRROR_MAX_EVENTS`` events in bounded pages); a follower's
is ``MIRROR_FOLLOW_MAX`` longer."""
MIRROR_FOLLOW_IDLE = timedelta(seconds=5)
"""A follower ends once its run has had no new workflow task this long: it covers a writer's pauses,
and an idle task holds no activity slot."""
MIRROR_FOLLOW_MAX = timedelta(minutes=1)
"""A follower ends after following this long: one activity a minute for a task always written to."""
MIRROR_FOLLOW_AGE = timedelta(milliseconds=100)
"""The follower's cadence: a copy at most this often, so back-to-back writes share one long poll and
one page, and a lone write is copied at once (worker's clock: no timer in the history)."""
MIRROR_FOLLOW_GAP = timedelta(seconds=1)
"""The follower's history poll interval while writes come as published pages (``broker``
``PageMessage``), for what no page brought; a page that does not follow on polls at once."""
MIRROR_HEARTBEAT = timedelta(seconds=10)
"""Heartbeat timeout of the mirror activity: a dead worker's attempt is retried this soon (timeouts
are not matched on replay: no patch needed)."""
MIRROR_PAUSE = timedelta(seconds=1)
"""The first pause after a failed mirror call (``mirror_pause``); writes are accepted meanwhile and
the calls never stop (a store may be down for days, a data error fixed by a new worker)."""
MIRROR_PAUSE_MAX = timedelta(seconds=30)
"""The longest pause between failed mirror calls in a short outage."""
MIRROR_PAUSE_LONG = timedelta(minutes=5)
"""The pause in a long outage: a week of outage adds a few thousand history events."""
MIRROR_LONG_OUTAGE_FAILURES = 20
"""Failed calls in a row (about 9 minutes of pauses) after which an outage is long."""
MIRROR_PAUSE_DOUBLINGS = 5
"""Doublings after which the pause has passed ``MIRROR_PAUSE_MAX`` (1 s * 2**5 = 32 s)."""


def mirror_pause(failures: int) -> timedelta:
    """The pause after ``failures`` failed calls in a row (1 or more, carried): ``MIRROR_PAUSE *
    2**failures`` capped at ``MIRROR_PAUSE_MAX``, then ``MIRROR_PAUSE_LONG`` past
    ``MIRROR_LONG_OUTAGE_FAILURES`` (the exponent is capped first, so ``timedelta`` never
    overflows). Timer durations are not matched on replay: no patch needed."""
    if failures > MIRROR_LONG_OUTAGE_FAILURES:
        return MIRROR_PAUSE_LONG
    pause: timedelta = MIRROR_PAUSE * 2 ** min(failures, MIRROR_PAUSE_DOUBLINGS)
    return min(pause, MIRROR_PAUSE_MAX)
