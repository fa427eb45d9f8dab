"""Heartbeating an activity's work: the one helper the mirror and the tools share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity

_T = TypeVar("_T")

CANCEL_BEAT_S = 1.0
"""How often an activity that must hear a cancel soon heartbeats (seconds): the model call and a
tool with a heartbeat timeout; a cancel arrives only in a heartbeat's answer."""


async def heartbeating(work: Awaitable[_T], *, every_s: float | None = None) -> _T:
    """Await ``work`` inside an activity, heartbeating every quarter of its heartbeat timeout or
    every ``every_s`` seconds, whichever is sooner (neither: no heartbeats).

    A heartbeat says the worker is alive, not that the work advances: each step of the work has its
    own timeout (``activities.mirror.QUERY_TIMEOUT``,
    ``taskgraph.neo4j.driver.NEO4J_CALL_TIMEOUT_S``).
    """
    timeout = activity.info().heartbeat_timeout
    intervals = [every_s] if every_s else []
    if timeout:
        intervals.append(timeout.total_seconds() / 4)
    if not intervals:
        return await work
    interval = min(intervals)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    beats = asyncio.create_task(beat())
    try:
        return await work
    finally:
        beats.cancel()
