"""An HTTP call that makes its effect once: the helper a tool calls an HTTP API with (``http_call``,
over ``httpx``; ``docs/agent-tasks.md``).

Every request carries the step's idempotency key as the ``Idempotency-Key`` header (the IETF draft's
name): the same on every retry of the attempt, on ``resume``/``continue``, and on a ``retry`` of an
``unknown`` step, so a server deduplicating by it performs the effect once.

The answer is mapped at the activity edge (``http_failure``):

=======================  ===========================================================
the answer               the activity
=======================  ===========================================================
2xx, 3xx                 returns the response
429, 503                 retryable after ``Retry-After`` (``activities.retry_after``);
                         over ``MAX_SERVER_WAIT``: not retried, naming the wait
other 4xx                not retryable: status and ``ERROR_BODY_CHARS`` of the body
502, 504                 a gateway's answer: ``ToolOutcomeUnknown``
other 5xx                retryable (the retry policy's backoff)
not sent                 retryable (``NOT_SENT``)
sent, none readable      ``ToolOutcomeUnknown`` (connection lost, timeout, body that
                         cannot be decoded, or is not JSON for ``answer_json``)
=======================  ===========================================================

``ToolOutcomeUnknown`` (``registry.OUTCOME_UNKNOWN``) says the server may have performed the call:
an ``idempotent=True`` tool retries it under the same key, and the last attempt ends the step
``unknown``, never ``failed`` (whose next call would carry a new key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from pydantic import JsonValue
from temporalio.exceptions import ApplicationError

from agent_tasks.activities.retry_after import asked_wait_s, retry_delay, too_long
from agent_tasks.activities.tools import ToolContext
from agent_tasks.workflows.agents.registry import OUTCOME_UNKNOWN

IDEMPOTENCY_HEADER = "Idempotency-Key"
"""The request header that carries the step's idempotency key."""
ERROR_BODY_CHARS = 1_000
"""Characters of a failed answer's body kept in the error (the model reads it): an API's message,
not a page of HTML."""
HTTP_TOOL_ERROR = "HttpToolError"
"""ApplicationError type of a failed HTTP call (its details: the status, 0 for no answer)."""
RETRY_AFTER_STATUS = frozenset({429, 503})
"""Statuses whose ``Retry-After`` sets the next retry's delay."""
GATEWAY_STATUS = frozenset({502, 504})
"""Statuses a gateway answers with for the server: no answer of the server's, which may have taken
the request."""
NOT_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)
"""``httpx`` errors raised before a request left the client; any other failure may come after the
server took it."""
HTTP_TIMEOUT_S = 30.0
"""Seconds a request waits for the server by default (keep it under ``start_to_close_s``)."""


@dataclass(frozen=True)
class RetryDecision:
    """What an HTTP answer means for the activity (``retry_decision``)."""

    ok: bool
    """The call succeeded (2xx or 3xx)."""
    retryable: bool
    """A failure a retry may cure (429, 5xx); False for a success and for other 4xx."""
    delay: timedelta | None = None
    """The server's ``Retry-After`` for 429 and 503 (None: the retry policy's backoff)."""
    asked_s: float | None = None
    """Set when the server asked for a wait over ``MAX_SERVER_WAIT`` (seconds): not retried."""


def retry_decision(status: int, headers: Mapping[str, str], now: datetime) -> RetryDecision:
    """The activity's decision for an answer with ``status`` and ``headers`` (the module's table;
    ``now``, aware, dates an HTTP-date ``Retry-After``)."""
    if status < 400:
        return RetryDecision(ok=True, retryable=False)
    if status in RETRY_AFTER_STATUS:
        wait_s = asked_wait_s(headers, now)
        if too_long(wait_s) is not None:
            return RetryDecision(ok=False, retryable=False, asked_s=wait_s)
        return RetryDecision(False, True, retry_delay(wait_s))
    return RetryDecision(ok=False, retryable=status >= 500)


def http_failure(
    method: str, url: str, status: int, headers: Mapping[str, str], body: str, now: datetime
) -> ApplicationError | None:
    """The activity's error for an answer (``retry_decision``), or None for a success: naming the
    call and status, with ``ERROR_BODY_CHARS`` of ``body``, the status as detail."""
    decision = retry_decision(status, headers, now)
    if decision.ok:
        return None
    shown = body if len(body) <= ERROR_BODY_CHARS else body[:ERROR_BODY_CHARS] + "…"
    if status in GATEWAY_STATUS:
        return unknown_outcome(method, url, f"a gateway's HTTP {status}: {shown}", status)
    long = too_long(decision.asked_s)
    return ApplicationError(
        f"{method} {url} answered HTTP {status}{'' if long is None else f'; {long}'}: {shown}",
        status,
        type=HTTP_TOOL_ERROR,
        non_retryable=not decision.retryable,
        next_retry_delay=decision.delay,
    )


def unknown_outcome(method: str, url: str, what: str, status: int = 0) -> ApplicationError:
    """The retryable ``ToolOutcomeUnknown`` of a request that may have reached the server and got no
    readable answer (``what`` came instead; details: ``status``, 0 for none)."""
    return ApplicationError(
        f"{method} {url} got no answer of the server's own after the request was sent "
        f"({what}): the server may have performed it",
        status,
        type=OUTCOME_UNKNOWN,
    )


async def http_call(
    context: ToolContext,
    method: str,
    url: str,
    *,
    json: JsonValue = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = HTTP_TIMEOUT_S,
    client: httpx.AsyncClient | None = None,
) -> httpx.Response:
    """Send one request with the step's ``Idempotency-Key`` and map its answer (the module's table).

    Args:
        context: the tool's context (its ``idempotency_key`` is sent).
        method: ``GET``, ``POST``...
        url: the full URL.
        json: the body, sent as JSON (None: no body).
        headers: more headers (an ``Idempotency-Key`` among them is replaced by the step's).
        timeout_s: seconds the request waits for the server.
        client: the worker's ``httpx.AsyncClient`` (base URL, auth); None: one for this call.

    Returns:
        The response of a 2xx or 3xx answer, its body read.

    Raises:
        ApplicationError: ``HttpToolError`` (status and bounded body) or ``ToolOutcomeUnknown``.
    """
    sent = {k: v for k, v in (headers or {}).items() if k.lower() != IDEMPOTENCY_HEADER.lower()}
    sent[IDEMPOTENCY_HEADER] = context.idempotency_key
    own = client is None
    session = httpx.AsyncClient() if client is None else client
    try:
        response = await session.request(
            method,
            url,
            json=json,
            headers=sent,
            timeout=timeout_s,
        )
    except NOT_SENT as err:  # no connection: the server did not get the request
        raise ApplicationError(
            f"{method} {url} was not sent: {type(err).__name__}: {err}", 0, type=HTTP_TOOL_ERROR
        ) from err
    except httpx.RequestError as err:  # sent: the answer was lost, cut, late or undecodable
        raise unknown_outcome(method, url, f"{type(err).__name__}: {err}") from err
    finally:
        if own:
            await session.aclose()
    failure = http_failure(
        method, url, response.status_code, response.headers, response.text, datetime.now(UTC)
    )
    if failure is not None:
        raise failure
    return response


def answer_json(response: httpx.Response) -> JsonValue:
    """The body of ``http_call``'s ``response`` as JSON (None for an empty body):
    ``answer_json(await http_call(context, "POST", url, json=...))``.

    Raises:
        ApplicationError: ``ToolOutcomeUnknown`` for a body that is not JSON.
    """
    if not response.content:
        return None
    try:
        answer: JsonValue = response.json()
    except ValueError as err:  # not JSON, or not UTF-8 (the JSON decoder's UnicodeDecodeError)
        request = response.request
        what = f"HTTP {response.status_code} whose body is not JSON: {err}"
        raise unknown_outcome(request.method, str(request.url), what, response.status_code) from err
    return answer
