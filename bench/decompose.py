"""Split a row's cost between the parts of the mirror: ``python -m bench`` with some of the
mirror's work switched off in this process (the rows whose worker runs here: ``writes``,
``batch``, ``writers``, ``lag``).

    python -m bench.decompose full|query|poll|none [--follow-age MS] [python -m bench's options]

- ``full``: the product as it is;
- ``query``: the follower long-polls the run's history and builds each page (from the new
  history events, ``activities.history_page``, or by the ``mirror_page`` query where they do
  not carry it), but writes nothing to Neo4j (``TaskGraph.write_task`` returns at once);
- ``poll``: the follower long-polls the history but neither queries nor writes (``copy_run``
  returns at once);
- ``none``: the follower holds its activity slot until its worker stops, and neither polls,
  queries nor writes: the write path alone.

``--follow-age`` sets the follower's cadence (``MIRROR_FOLLOW_AGE``, 100 ms) for the run.

So ``full - query`` is a copy's Neo4j write (driver and Neo4j), ``query - poll`` its page,
``poll - none`` the long poll, and ``none`` against the bare baseline the write path without a
mirror. Only ``full`` keeps Neo4j current: the others skip ``Bench.settle`` and
``Bench.mirrored`` (the CPU row's wait for the mirror), and the rows that read Neo4j (the
mirror lag) mean nothing in them. A tool for measuring, never for a worker that serves tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from datetime import timedelta
from typing import Any

from temporalio import activity

import agent_tasks.activities.follow as following
import agent_tasks.activities.mirror as mirror
from agent_tasks.contract import MirrorOutcome
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.workflows.mirroring import MIRROR_FOLLOW_MAX
from bench.harness import Bench

VARIANTS = ("full", "query", "poll", "none")


async def _no_write(*_: Any, **__: Any) -> None:
    """``TaskGraph.write_task`` that writes nothing."""


async def _no_copy(*_: Any, after_seq: int = 0, **__: Any) -> MirrorOutcome:
    """``copy_run`` that reads and writes nothing: the run is held up to ``after_seq``."""
    return MirrorOutcome(events=0, steps=0, up_to_seq=after_seq)


async def _no_follow(_copy: Any, poll: Any, first: MirrorOutcome) -> MirrorOutcome:
    """``follow`` that waits for its worker to stop (at most ``MIRROR_FOLLOW_MAX``)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(
            activity.wait_for_worker_shutdown(), MIRROR_FOLLOW_MAX.total_seconds()
        )
    return first.model_copy(update={"history_token": poll.position})


async def _no_wait(*_: Any) -> None:
    """``Bench.settle`` and ``Bench.mirrored`` when Neo4j is not kept current."""


def switch_off(variant: str, follow_age_ms: int | None = None) -> None:
    """Switch off the mirror's parts that ``variant`` leaves out, and set the follower's
    cadence to ``follow_age_ms`` (None: as it is), for this process (the module docstring).

    Raises:
        SystemExit: ``variant`` is not one of ``VARIANTS``.
    """
    if variant not in VARIANTS:
        raise SystemExit(f"the variant is one of {', '.join(VARIANTS)}, not {variant!r}")
    replaced: list[tuple[object, str, object]] = []
    if follow_age_ms is not None:
        replaced.append((following, "MIRROR_FOLLOW_AGE", timedelta(milliseconds=follow_age_ms)))
    if variant != "full":
        replaced += [(Bench, "settle", _no_wait), (Bench, "mirrored", _no_wait)]
        replaced.append((TaskGraph, "write_task", _no_write))
    if variant in ("poll", "none"):
        replaced.append((mirror, "copy_run", _no_copy))
    if variant == "none":
        replaced.append((mirror, "follow", _no_follow))
    for owner, name, stand_in in replaced:
        setattr(owner, name, stand_in)


def _options(argv: list[str]) -> tuple[str, int | None]:
    """The variant and ``--follow-age``, taken out of ``argv`` (the rest is the bench's).

    Raises:
        SystemExit: ``--follow-age`` is not followed by a whole number of milliseconds.
    """
    variant = argv.pop(1) if len(argv) > 1 else ""
    if "--follow-age" not in argv:
        return variant, None
    at = argv.index("--follow-age")
    given = argv[at + 1 : at + 2]
    if not given or not given[0].isdigit():
        raise SystemExit(f"--follow-age takes a whole number of milliseconds, not {given}")
    del argv[at : at + 2]
    return variant, int(given[0])


if __name__ == "__main__":
    switch_off(*_options(sys.argv))
    from bench.__main__ import main

    main()
