"""Heartbeating an activity's work: the one helper the mirror and the tools share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity

_T = TypeVar("_T")

CANCEL_BEAT_S = 1.0
"""How often an activity that must hear a cancel soon heartbeats (seconds): the model call, and
a tool with a heartbeat timeout (a tool that waits on a socket or streams stops within about
this plus ``worker.HEARTBEAT_THROTTLE`` of its task's cancel, whatever its heartbeat timeout).
A cancel reaches an activity only in the server's answer to a heartbeat."""


async def heartbeating(work: Awaitable[_T], *, every_s: float | None = None) -> _T:
    """Await ``work`` inside an activity while heartbeating every quarter of the activity's
    heartbeat timeout or every ``every_s`` seconds, whichever is sooner (without a heartbeat
    timeout and ``every_s``: no heartbeats). A cancel of the activity reaches it only in the
    server's answer to a heartbeat, so an activity that must stop soon when its workflow no
    longer wants it (the model call) beats at ``every_s``.

    The heartbeat says "this worker is alive and on it": when the worker dies, the server
    retries the attempt after the heartbeat timeout. It does not say the work advances; each
    step of the work is bounded by its own timeout instead (``activities.mirror.QUERY_TIMEOUT``,
    ``taskgraph.neo4j.driver.NEO4J_CALL_TIMEOUT_S``), so a silent peer cannot hold the attempt.
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
