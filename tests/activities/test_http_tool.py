"""The HTTP tool's mapping of an answer to the activity's outcome (``activities.http_tool``):
pure functions, each expectation written out from the module's table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent_tasks.activities.http_tool import (
    ERROR_BODY_CHARS,
    GATEWAY_STATUS,
    HTTP_TOOL_ERROR,
    RetryDecision,
    http_failure,
    retry_after,
    retry_decision,
)
from agent_tasks.workflows.agents.registry import OUTCOME_UNKNOWN

NOW = datetime(2026, 12, 5, 0, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "wait"),
    [
        ("120", timedelta(minutes=2)),
        (" 0 ", timedelta(0)),
        ("Sat, 05 Dec 2026 00:00:30 GMT", timedelta(seconds=30)),
        ("Sat, 05 Dec 2026 00:00:30 -0000", timedelta(seconds=30)),
        ("Fri, 04 Dec 2026 23:00:00 GMT", timedelta(0)),  # in the past: no wait
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(value: str | None, wait: timedelta | None) -> None:
    assert retry_after(value, NOW) == wait


@pytest.mark.parametrize(
    ("status", "headers", "decision"),
    [
        (200, {}, RetryDecision(ok=True, retryable=False)),
        (201, {"Retry-After": "5"}, RetryDecision(ok=True, retryable=False)),
        (302, {}, RetryDecision(ok=True, retryable=False)),
        (429, {"Retry-After": "7"}, RetryDecision(False, True, timedelta(seconds=7))),
        (
            429,
            {"retry-after": "Sat, 05 Dec 2026 00:01:00 GMT"},
            RetryDecision(False, True, timedelta(minutes=1)),
        ),
        (429, {}, RetryDecision(False, True, None)),
        (503, {"Retry-After": "2"}, RetryDecision(False, True, timedelta(seconds=2))),
        (500, {"Retry-After": "9"}, RetryDecision(False, True, None)),  # only 429 and 503 say when
        (502, {}, RetryDecision(False, True, None)),
        (400, {"Retry-After": "3"}, RetryDecision(False, False, None)),
        (404, {}, RetryDecision(False, False, None)),
        (409, {}, RetryDecision(False, False, None)),
        (422, {}, RetryDecision(False, False, None)),
    ],
)
def test_the_status_decides_the_retry(
    status: int, headers: dict[str, str], decision: RetryDecision
) -> None:
    assert retry_decision(status, headers, NOW) == decision


def test_a_success_is_no_failure() -> None:
    assert http_failure("POST", "http://api/x", 204, {}, "", NOW) is None


def test_a_client_error_is_not_retried_and_names_the_status_and_a_bounded_body() -> None:
    body = "é" * 5_000
    failure = http_failure("POST", "http://api/charge", 422, {}, body, NOW)
    assert failure is not None
    assert (failure.type, failure.non_retryable, failure.details) == (HTTP_TOOL_ERROR, True, (422,))
    assert failure.message == f"POST http://api/charge answered HTTP 422: {'é' * ERROR_BODY_CHARS}…"


def test_a_503_is_retried_after_its_retry_after() -> None:
    failure = http_failure("GET", "http://api/x", 503, {"Retry-After": "4"}, "busy", NOW)
    assert failure is not None
    assert (failure.non_retryable, failure.next_retry_delay) == (False, timedelta(seconds=4))
    assert failure.message == "GET http://api/x answered HTTP 503: busy"


@pytest.mark.parametrize("status", sorted(GATEWAY_STATUS))
def test_a_gateways_status_is_no_answer_of_the_servers(status: int) -> None:
    """A 502 or 504 comes from a gateway in front of the server, which may have taken the
    request: an unknown outcome (retried under the same key), naming the status and body."""
    failure = http_failure("POST", "http://api/charge", status, {}, "upstream hung up", NOW)
    assert failure is not None
    assert (failure.type, failure.non_retryable, failure.details) == (
        OUTCOME_UNKNOWN,
        False,
        (status,),
    )
    assert failure.message == (
        f"POST http://api/charge got no answer of the server's own after the request was sent "
        f"(a gateway's HTTP {status}: upstream hung up): the server may have performed it"
    )
