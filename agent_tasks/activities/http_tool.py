"""An HTTP call that makes its effect once: the helper a tool calls an HTTP API with
(``http_call``), over ``httpx`` (installed with the package, as the MCP client needs it).

Every request carries the step's idempotency key (``ToolContext.idempotency_key``) as the
``Idempotency-Key`` header (the name of the IETF draft "The Idempotency-Key HTTP Header Field"):
the same key on every retry of the attempt, on a ``resume`` or ``continue`` of the task, and on
a person's ``retry`` of a step that ended ``unknown`` (``workflows.agents.steps``), so a server
that deduplicates by the key performs the effect once however often the call is sent. A new
attempt (a retry of a step that ended ``failed``) has a new key.

The answer is mapped to the activity's outcome at the activity edge (``http_failure``):

=======================  ===========================================================
the answer               the activity
=======================  ===========================================================
2xx, 3xx                 returns the response
429, 503                 retryable, after the server's ``Retry-After`` (seconds or an
                         HTTP date: ``activities.retry_after``) as the next retry's
                         delay (``next_retry_delay``); without one, the retry policy's
                         own backoff; one over ``MAX_SERVER_WAIT`` (5 minutes) is not
                         retried, the step failing with the wait the server asked for
other 4xx                not retryable: the step fails with the status and at most
                         ``ERROR_BODY_CHARS`` characters of the body
502, 504                 a gateway's answer, not the server's: ``ToolOutcomeUnknown``
other 5xx                retryable (the retry policy's backoff)
not sent                 retryable (no connection: ``NOT_SENT``)
sent, none readable      ``ToolOutcomeUnknown`` (a connection lost or cut before the
                         whole answer, a timeout, a body that cannot be decoded, and
                         for ``answer_json`` a body that is not JSON)
=======================  ===========================================================

Only an answer the server itself produced is its answer. A request that may have reached the
server and got none it can read ends ``ToolOutcomeUnknown`` (``registry.OUTCOME_UNKNOWN``), its
text saying that the server may have performed it: retried under the same key by an
``idempotent=True`` tool's retry policy, and the last attempt's ends the step ``unknown`` (run
again only under the same key: a person's ``retry``, the model's same call again), never
``failed``, whose next call would carry a new key. Otherwise whether a retryable failure is
retried is the tool's declaration: an ``idempotent=True`` tool is retried by its retry policy
(``max_attempts``), one declared ``idempotent=False`` runs once and its step fails. A tool
that sends the key may declare itself idempotent when the API deduplicates by it.
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
"""Characters of a failed answer's body kept in the error (the step's result, which the model
reads: enough for an API's error message, bounded so a page of HTML does not fill it)."""
HTTP_TOOL_ERROR = "HttpToolError"
"""ApplicationError type of a failed HTTP call (its details: the status, 0 for no answer)."""
RETRY_AFTER_STATUS = frozenset({429, 503})
"""Statuses whose ``Retry-After`` sets the next retry's delay."""
GATEWAY_STATUS = frozenset({502, 504})
"""Statuses a gateway or proxy answers with for the server (bad gateway, gateway timeout): no
answer of the server's own, which may have taken the request."""
NOT_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)
"""``httpx`` errors raised before a request left the client (no connection, none free, a
request it refused to send); every other failure of a request may come after the server took
it."""
HTTP_TIMEOUT_S = 30.0
"""Seconds a request waits for the server by default (keep it under the tool's
``start_to_close_s``)."""


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
    """The activity's decision for an answer with ``status`` and ``headers`` (the module's
    table; ``now``, aware, dates a ``Retry-After`` given as an HTTP date)."""
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
    """The activity's error for an answer (``retry_decision``), or None for a success: its
    message names the call and the status and holds at most ``ERROR_BODY_CHARS`` of
    ``body``; its details the status. A gateway's status (``GATEWAY_STATUS``) is
    ``unknown_outcome``'s."""
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
    """The ``ToolOutcomeUnknown`` of a request that may have reached the server and got no
    answer of its own that could be read (``what`` came instead; details: ``status``, 0 for
    none): retryable, under the same key."""
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
    """Send one request with the step's idempotency key (``Idempotency-Key``) and map its
    answer at the activity edge (the module's table).

    Args:
        context: the tool's context (its ``idempotency_key`` is sent).
        method: ``GET``, ``POST``...
        url: the full URL.
        json: the body, sent as JSON (None: no body).
        headers: more headers (an ``Idempotency-Key`` among them is replaced by the step's).
        timeout_s: seconds the request waits for the server.
        client: an ``httpx.AsyncClient`` of the worker's (its base URL, auth); None: one for
            this call.

    Returns:
        The response of a 2xx or 3xx answer, its body read (``answer_json`` reads it as JSON).

    Raises:
        ApplicationError: as the module's table says: ``HttpToolError`` (the status and a
            bounded body; retryable or not, after the server's ``Retry-After``), or
            ``ToolOutcomeUnknown`` (sent, and no answer of the server's own could be read).
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
    """The body of ``http_call``'s ``response`` read as JSON (None for an empty body: a 204),
    for a tool that reads its answer:
    ``answer_json(await http_call(context, "POST", url, json=...))``.

    Raises:
        ApplicationError: ``ToolOutcomeUnknown`` for a body that is not JSON (the server
            answered and its answer cannot be read: it may have performed the call).
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
