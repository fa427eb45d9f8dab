"""Three shapes of a task's mirror, at their smallest, for ``bench.bench_mirror_designs``.

Each workflow is ``bench.bare.BareWorkflow`` (an update appends items to a list) with a mirror
that copies the items to Neo4j by the activity ``design_mirror`` (``bench.bench_mirror_designs``),
which reads them back by the ``page`` query (references in, bounded pages out, as the product's
mirror). They differ only in when the activity runs:

- ``PerWrite``: a call as soon as a write waits, at most one in flight (the product's mirror
  before the follower: a workflow task and an activity per write when writes come one by one);
- ``Cadence``: a call once ``CADENCE_EVENTS`` items wait or the oldest waited ``CADENCE_AGE``
  (a workflow timer): fewer calls, a timer per batch;
- ``Follower``: one call per run that follows the run's history (a long poll) and copies what
  each new workflow task wrote, ending when idle; the workflow learns how far it got when it
  ends.

Only ``temporalio`` is imported here: the sandbox re-imports a workflow's module for each run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

DESIGN_MIRROR = "design_mirror"
"""The prototype mirror activity's name."""
CADENCE_EVENTS = 100
"""``Cadence``: items waiting that start a call at once."""
CADENCE_AGE = timedelta(milliseconds=100)
"""``Cadence``: the longest an item waits for its call (a workflow timer)."""
FOLLOW_TIMEOUT = timedelta(seconds=60)
"""``Follower``: the longest one call may run (it ends on its own after 30 s or when idle)."""


@dataclass
class MirrorCall:
    """The prototype mirror's input: references only."""

    workflow_id: str
    run_id: str
    after: int
    """Items after this index are copied ..."""
    up_to: int
    """... up to this one (a ``Follower`` call goes on past it while the run grows)."""
    follow: bool = False


@dataclass
class Page:
    """The ``page`` query's answer."""

    items: list[dict[str, Any]]
    total: int
    closed: bool


class _Items:
    """The state and handlers every design shares."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.mirrored = 0
        self.closed = False

    def _call(self, follow: bool = False) -> MirrorCall:
        info = workflow.info()
        return MirrorCall(info.workflow_id, info.run_id, self.mirrored, len(self.items), follow)

    async def _mirror(self, follow: bool = False) -> None:
        reached: int = await workflow.execute_activity(
            DESIGN_MIRROR,
            self._call(follow),
            result_type=int,
            start_to_close_timeout=FOLLOW_TIMEOUT,
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=3),
        )
        self.mirrored = max(self.mirrored, reached)

    @workflow.update
    def append(self, items: list[dict[str, Any]]) -> int:
        """Append ``items``; returns how many the workflow holds."""
        self.items.extend(items)
        return len(self.items)

    @workflow.query
    def page(self, after: int) -> Page:
        """At most 100 items after ``after``."""
        return Page(self.items[after : after + 100], len(self.items), self.closed)

    @workflow.signal
    def close(self) -> None:
        """End the run once mirrored."""
        self.closed = True

    def _waiting(self) -> bool:
        return len(self.items) > self.mirrored


@workflow.defn(name="DesignPerWrite")
class PerWrite(_Items):
    """A mirror call as soon as a write waits, at most one in flight."""

    @workflow.run
    async def run(self) -> int:
        """Mirror until closed and mirrored; returns the items held."""
        while True:
            await workflow.wait_condition(lambda: self._waiting() or self.closed)
            if not self._waiting():
                return len(self.items)
            await self._mirror()


@workflow.defn(name="DesignCadence")
class Cadence(_Items):
    """A mirror call per ``CADENCE_EVENTS`` items or ``CADENCE_AGE``, whichever comes first."""

    @workflow.run
    async def run(self) -> int:
        """Mirror until closed and mirrored; returns the items held."""
        while True:
            await workflow.wait_condition(lambda: self._waiting() or self.closed)
            if not self._waiting():
                return len(self.items)
            try:
                await workflow.wait_condition(
                    lambda: len(self.items) - self.mirrored >= CADENCE_EVENTS or self.closed,
                    timeout=CADENCE_AGE,
                )
            except TimeoutError:
                pass
            await self._mirror()


@workflow.defn(name="DesignFollower")
class Follower(_Items):
    """One mirror call that follows the run; another once it ended idle and a write waits."""

    @workflow.run
    async def run(self) -> int:
        """Mirror until closed and mirrored; returns the items held."""
        while True:
            await workflow.wait_condition(lambda: self._waiting() or self.closed)
            if not self._waiting():
                return len(self.items)
            await self._mirror(follow=True)
