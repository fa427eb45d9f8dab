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
    retry_decision,
)
from agent_tasks.activities.retry_after import MAX_SERVER_WAIT, asked_wait_s
from agent_tasks.workflows.agents.registry import OUTCOME_UNKNOWN

NOW = datetime(2026, 12, 5, 0, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"Retry-After": "120"}, 120.0),
        ({"Retry-After": " 0 "}, 0.0),
        ({"Retry-After": "Sat, 05 Dec 2026 00:00:30 GMT"}, 30.0),
        ({"Retry-After": "Sat, 05 Dec 2026 00:00:30 -0000"}, 30.0),
        ({"Retry-After": "Fri, 04 Dec 2026 23:00:00 GMT"}, 0.0),  # in the past: no wait
        ({"Retry-After": "1.5"}, 1.5),  # as the openai client reads it
        ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),  # OpenAI's, first
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),
        ({"Retry-After": "86400"}, 86_400.0),  # asked, and refused by the callers
        ({"Retry-After": "9" * 30}, 1e30 - 1),  # no overflow (urllib3#3743's crash)
        ({"Retry-After": "-5"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "inf"}, None),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": ""}, None),
        ({}, None),
    ],
)
def test_a_wait_is_seconds_or_an_http_date(headers: dict[str, str], wait: float | None) -> None:
    assert asked_wait_s(headers, NOW) == wait


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
        (503, {"Retry-After": "300"}, RetryDecision(False, True, MAX_SERVER_WAIT)),
        (429, {"Retry-After": "301"}, RetryDecision(False, False, None, 301.0)),
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


def test_a_wait_over_the_bound_is_not_retried_and_is_named() -> None:
    """hashicorp/go-retryablehttp#247 (a ``Retry-After: 3600`` slept past the client's
    maximum wait): a 429 asking for a day is not retried; the step fails at once, its text
    naming the wait the server asked for and the bound."""
    failure = http_failure("POST", "http://api/x", 429, {"Retry-After": "86400"}, "later", NOW)
    assert failure is not None
    assert (failure.type, failure.non_retryable, failure.next_retry_delay) == (
        HTTP_TOOL_ERROR,
        True,
        None,
    )
    assert failure.message == (
        "POST http://api/x answered HTTP 429; it asks to wait 86,400 s before a retry, longer "
        "than a retry waits for a server (300 s): not retried: later"
    )
