"""The wait a server asks for before a retry, read one way for every peer the activities call
over HTTP (the HTTP tool's API, the model's API) and bounded.

A server names its wait in ``retry-after-ms`` (OpenAI's, milliseconds) or ``Retry-After``
(seconds, or an HTTP date: RFC 9110; a decimal number of seconds is taken too, as the
``openai`` client takes it). The activity's retry then waits that long (Temporal's
``next_retry_delay``), up to ``MAX_SERVER_WAIT``. A server that asks for longer is not retried:
the failure names the wait it asked for (``too_long``), so a task never sleeps a day on a
server's word, and never retries sooner than the server asked (which a rate limiter may punish
with a longer ban); a person or the model decides what to do. A value that is neither form
(negative, ``soon``) is no wait: the retry policy's own backoff applies.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

MAX_SERVER_WAIT = timedelta(minutes=5)
"""The longest wait before a retry that a server may ask for and get. Longer than a rate
limiter's usual window (a minute), short of a wait that leaves a task hanging unseen (a
``Retry-After: 86400`` is a day)."""


def asked_wait_s(headers: Mapping[str, str], now: datetime) -> float | None:
    """The seconds ``headers`` ask to wait before a retry, at ``now`` (aware): ``retry-after-ms``
    first, then ``Retry-After`` (names in any case); a date in the past is 0. None: no such
    header, or a value that is neither a non-negative number nor an HTTP date."""
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
    """The next retry's delay for a server's wait of ``wait_s`` seconds (None: no wait asked,
    or one over ``MAX_SERVER_WAIT``, which is not retried: ``too_long``)."""
    if wait_s is None or too_long(wait_s) is not None:
        return None
    return timedelta(seconds=wait_s)


def too_long(wait_s: float | None) -> str | None:
    """Why a server's wait of ``wait_s`` seconds is not waited for (it is over
    ``MAX_SERVER_WAIT``), for the failure's text; None when it is waited for."""
    bound = MAX_SERVER_WAIT.total_seconds()
    if wait_s is None or wait_s <= bound:
        return None
    return (
        f"it asks to wait {wait_s:,.0f} s before a retry, longer than a retry waits for a "
        f"server ({bound:,.0f} s): not retried"
    )
