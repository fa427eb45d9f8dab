"""The wait a server asks for before a retry, read one way for every HTTP peer (the HTTP tool's API,
the model's) and bounded.

The wait is ``retry-after-ms`` (OpenAI's) or ``Retry-After`` (seconds, decimal too, or an HTTP date:
RFC 9110); the activity's retry waits it (``next_retry_delay``) up to ``MAX_SERVER_WAIT``. A longer
wait is not retried and the failure names it (``too_long``), so a task never sleeps a day on a
server's word nor retries sooner than asked. Any other value is no wait.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

MAX_SERVER_WAIT = timedelta(minutes=5)
"""The longest wait before a retry a server may ask for and get: over a rate limiter's usual minute,
short of leaving a task hanging unseen."""


def asked_wait_s(headers: Mapping[str, str], now: datetime) -> float | None:
    """The seconds ``headers`` ask to wait at ``now`` (aware): ``retry-after-ms`` first, then
    ``Retry-After``; a past date is 0; None: no such header or no valid value."""
    lower = {name.lower(): value for name, value in headers.items()}
    milliseconds = _number(lower.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = lower.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": the RFC's UTC
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


def _number(value: str | None) -> float | None:
    """``value`` as a finite non-negative number, else None."""
    try:
        number = float((value or "").strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def retry_delay(wait_s: float | None) -> timedelta | None:
    """The next retry's delay for a wait of ``wait_s`` seconds (None: none asked, or over
    ``MAX_SERVER_WAIT``)."""
    if wait_s is None or too_long(wait_s) is not None:
        return None
    return timedelta(seconds=wait_s)


def too_long(wait_s: float | None) -> str | None:
    """Why a wait of ``wait_s`` seconds is not waited for (over ``MAX_SERVER_WAIT``); None
    otherwise."""
    bound = MAX_SERVER_WAIT.total_seconds()
    if wait_s is None or wait_s <= bound:
        return None
    return (
        f"it asks to wait {wait_s:,.0f} s before a retry, longer than a retry waits for a "
        f"server ({bound:,.0f} s): not retried"
    )
