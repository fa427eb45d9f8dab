"""The mirror calls of one run of a task: at most one ``mirror_task`` call in flight (what it copies
is ``workflows.mirroring``'s policy), a pause after a failure, and the drain before continue-as-new
with its bound (``MIRROR_DRAIN_WAIT``). It calls ``temporalio.workflow``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from agent_tasks.contract import MIRROR_ACTIVITY, MIRROR_MAX_EVENTS, MirrorOutcome
from agent_tasks.contract.errors import MIRROR_REFUSED
from agent_tasks.workflows import mirroring
from agent_tasks.workflows.ledger import Ledger
from agent_tasks.workflows.mirroring import (
    MIRROR_FOLLOW_MAX,
    MIRROR_HEARTBEAT,
    MIRROR_RETRY,
    MIRROR_START_TO_CLOSE,
    mirror_pause,
)
from agent_tasks.workflows.patches import (
    CONTINUE_WITHOUT_MIRROR,
    MIRROR_DRAIN_BOUND,
    MIRROR_FOLLOWS_RUN,
    MIRROR_REFUSAL_CLOSES,
)

MIRROR_DRAIN_WAIT = timedelta(seconds=10)
"""The longest a mirror call in flight may hold up a suggested continue-as-new: then it is cancelled
and its unmirrored writes go to the next run's backlog (``MirrorCalls._bound``)."""


def continue_suggested() -> bool:
    """True once Temporal suggests that the run continue as new."""
    return workflow.info().is_continue_as_new_suggested()


class MirrorCalls:
    """The mirror calls of one run.

    Args:
        ledger: the run's ledger.
        agent_running: True while the agent runs (a failure's pause ends early once continue-as-new
            is suggested and the agent parked).
        ended: True once the task is closed and nothing of it runs on.
    """

    def __init__(
        self, ledger: Ledger, agent_running: Callable[[], bool], ended: Callable[[], bool]
    ) -> None:
        self.ledger = ledger
        self.agent_running = agent_running
        self.ended = ended
        self.refused = False
        """True once the graph store refused and recorded a call's data while the task was ending
        (``MIRROR_REFUSED``): the run completes, and ``taskgraph.refusals`` brings the writes
        later."""
        self.draining = False
        """True once continue-as-new is due: writes are turned away until the new run."""
        self.history_token: str | None = None
        """Where this run's last follower stopped reading the history
        (``MirrorInput.history_token``)."""

    def drain_if_due(self) -> None:
        """Once continue-as-new is due, turn writes away until the mirror caught up and the new run
        takes them; never while the mirror fails, so a graph store outage holds up no write.
        Validators read the flag: no command, no replay change."""
        if continue_suggested() and not self.ledger.state.mirror_failures:
            self.draining = True

    async def call(self, *, bounded: bool = True, final: bool = False) -> None:
        """Mirror the next waiting writes (``mirroring.mirror_target``); after a failure, pause
        (``mirror_pause``) unless the store refused the data as the task ends. A ``bounded`` call
        holds up continue-as-new at most ``MIRROR_DRAIN_WAIT``; a ``final`` one is a closed task's
        last.

        Raises:
            asyncio.CancelledError: the workflow is being cancelled.
        """
        target = mirroring.mirror_target(
            self.ledger.state,
            workflow.info().run_id,
            MIRROR_MAX_EVENTS,
            follow=workflow.patched(MIRROR_FOLLOWS_RUN),
            history_token=self.history_token,
        )
        longest = MIRROR_START_TO_CLOSE
        if target.input.follow:
            longest += MIRROR_FOLLOW_MAX
        handle = workflow.start_activity(
            MIRROR_ACTIVITY,
            target.input,
            result_type=MirrorOutcome,
            start_to_close_timeout=longest,
            heartbeat_timeout=MIRROR_HEARTBEAT,
            retry_policy=MIRROR_RETRY,
        )
        bound = asyncio.create_task(self._bound(handle)) if bounded else None
        try:
            outcome = await handle
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                if bound is not None and bound.done() and bound.result():
                    return  # continue-as-new is due: the next run mirrors these writes
                raise asyncio.CancelledError from err  # the workflow is being cancelled
            # Neo4j down past the activity's retries, or a data error: keep the ledger open
            # and writable, show the error in the view, and try again after a pause.
            mirroring.mirror_failed(self.ledger.state, str(err.cause or err))
            self.draining = False
            if self._refusal_closes(err, final):
                self.refused = True
                return
            pause = mirror_pause(self.ledger.state.mirror_failures)
            if workflow.patched(CONTINUE_WITHOUT_MIRROR):
                # A pause may last minutes: continue-as-new as soon as it is suggested (and
                # the agent, if any, has parked).
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: continue_suggested() and not self.agent_running(),
                        timeout=pause,
                    )
            else:
                await workflow.sleep(pause)
            return
        mirroring.mirrored(self.ledger.state, target, outcome)
        if target.input.follow:
            self.history_token = outcome.history_token

    def _refusal_closes(self, err: ActivityError, final: bool) -> bool:
        """True when ``err`` is a refusal the store keeps (``MIRROR_REFUSED``) and the task is
        ending: the run may complete without those writes (``MIRROR_REFUSAL_CLOSES``)."""
        cause = err.cause
        if not isinstance(cause, ApplicationError) or cause.type != MIRROR_REFUSED:
            return False
        if not self.ledger.closed or not (final or self.ended()):
            return False
        return workflow.patched(MIRROR_REFUSAL_CLOSES)

    async def _bound(self, handle: workflow.ActivityHandle[MirrorOutcome]) -> bool:
        """Cancel ``handle`` once continue-as-new is due and the call has run ``MIRROR_DRAIN_WAIT``
        past it (a stalled graph store), so the run continues as new; True when it cancelled the
        call."""
        await workflow.wait_condition(lambda: handle.done() or continue_suggested())
        if handle.done() or not workflow.patched(MIRROR_DRAIN_BOUND):
            return False
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(handle.done, timeout=MIRROR_DRAIN_WAIT)
        if handle.done():
            return False
        handle.cancel()
        return True
