"""The mirror calls of one run of a task, as its workflow makes them: at most one
``mirror_task`` call in flight (what it copies is ``workflows.mirroring``'s policy), a pause
after a call that failed (``mirror_pause``), and the drain before continue-as-new (writes
turned away until the next run takes them) with its bound (``MIRROR_DRAIN_WAIT``).
``TaskWorkflow`` owns one ``MirrorCalls`` per run; it runs in the workflow (it calls
``temporalio.workflow``).
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
"""The longest a mirror call in flight may hold up continue-as-new once it is suggested: past
it the call is cancelled and the run continues as new anyway, its unmirrored writes carried
to the next run's backlog (``MirrorCalls._bound``)."""


def continue_suggested() -> bool:
    """True once Temporal suggests that the run continue as new."""
    return workflow.info().is_continue_as_new_suggested()


class MirrorCalls:
    """The mirror calls of one run.

    Args:
        ledger: the run's ledger (what waits for the mirror, and where outcomes go).
        agent_running: True while the task's agent runs (a pause after a failure ends early
            once continue-as-new is suggested and the agent has parked).
        ended: True once the task is closed and nothing of it runs on (its workflow may
            complete once mirrored).
    """

    def __init__(
        self, ledger: Ledger, agent_running: Callable[[], bool], ended: Callable[[], bool]
    ) -> None:
        self.ledger = ledger
        self.agent_running = agent_running
        self.ended = ended
        self.refused = False
        """True once the graph store refused a call of this run for its data while the task was
        ending, the refusal kept in the store (``MIRROR_REFUSED``): the run completes without
        those writes in the store, and the store's refusal brings them there later
        (``taskgraph.refusals``). Since ``MIRROR_REFUSAL_CLOSES``."""
        self.draining = False
        """True once continue-as-new is due: writes are turned away until the new run."""
        self.history_token: str | None = None
        """Where this run's last mirror follower stopped reading the run's history: the next
        one starts there (``MirrorInput.history_token``; not carried: a run has its own)."""

    def drain_if_due(self) -> None:
        """Once continue-as-new is due, turn writes away (the client sends them again) until
        the mirror has caught up and the new run takes them; never while the mirror fails,
        so that writes are not held up by a Neo4j outage. Validators read the flag, so it
        adds no command and changes no replay."""
        if continue_suggested() and not self.ledger.state.mirror_failures:
            self.draining = True

    async def call(self, *, bounded: bool = True, final: bool = False) -> None:
        """Mirror the next waiting writes (``mirroring.mirror_target``: an earlier run's first,
        at most ``MIRROR_MAX_EVENTS`` events; this run's by a call that follows the run,
        ``MIRROR_FOLLOWS_RUN``); after a failure, pause (``mirror_pause``), unless the store
        refused the call for its data as the task ends (``refused``). A ``bounded`` call (the
        run loop's; the final mirror of a cancel is not) holds up continue-as-new at most
        ``MIRROR_DRAIN_WAIT`` (``_bound``); a ``final`` one is the last of a closed task
        whatever runs on (a cancel's).

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
        ending (closed, and ``final`` or ``ended``): the run may complete without the refused
        writes in the store (``MIRROR_REFUSAL_CLOSES``; runs recorded before it paused and
        called again for ever)."""
        cause = err.cause
        if not isinstance(cause, ApplicationError) or cause.type != MIRROR_REFUSED:
            return False
        if not self.ledger.closed or not (final or self.ended()):
            return False
        return workflow.patched(MIRROR_REFUSAL_CLOSES)

    async def _bound(self, handle: workflow.ActivityHandle[MirrorOutcome]) -> bool:
        """Cancel the mirror call ``handle`` when continue-as-new is due and the call has run
        ``MIRROR_DRAIN_WAIT`` past that (a stalled Neo4j; a normal call takes milliseconds),
        so the run continues as new and its unmirrored writes go to the next run's backlog;
        returns True when it cancelled the call. Runs recorded before ``MIRROR_DRAIN_BOUND``
        waited for the call's three attempts (about 3 minutes against a stalled Neo4j)."""
        await workflow.wait_condition(lambda: handle.done() or continue_suggested())
        if handle.done() or not workflow.patched(MIRROR_DRAIN_BOUND):
            return False
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(handle.done, timeout=MIRROR_DRAIN_WAIT)
        if handle.done():
            return False
        handle.cancel()
        return True
