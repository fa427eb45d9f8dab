"""Who calls: API keys scoped to one project each (``server.apikeys``), read from the
``Authorization: Bearer <key>`` header (or ``X-API-Key: <key>``) and nowhere else, so a key
never lands in an access log's request line or a proxy's URL log. A query parameter or a
cookie is never read for a key.

The page (``server.page``) calls the same routes with a session instead: its cookie
``SESSION_COOKIE`` (HttpOnly, SameSite=Strict) holds a session of the key its person signed in
with (``server.pagesessions``), and every request that changes something (any method but
GET, HEAD and OPTIONS) must carry the session's CSRF token in ``CSRF_HEADER`` (the page reads
it from the ``CSRF_COOKIE``), or it is refused 403 ``csrf_failed``. A presented key wins over a
cookie.

Each request's key is checked against Neo4j (one indexed read); a revoked key is refused from
the next request on. The key's project scopes everything the request reads and writes: a path
under ``/projects/{project_id}`` naming another project is 403, and a task of another project
is never found through it.

``StreamSlots`` bounds the open streams of each key in a server process.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from fastapi import Request

from agent_tasks.server.apikeys import ApiKey, ApiKeyStore
from agent_tasks.server.errors import ApiError
from agent_tasks.server.pagesessions import PageSessionStore, csrf_token

BEARER = "bearer "


def presented_key(request: Request) -> str | None:
    """The key the request presents (``Authorization: Bearer`` or ``X-API-Key``), or None."""
    header = request.headers.get("authorization", "")
    if header[: len(BEARER)].lower() == BEARER:
        return header[len(BEARER) :].strip()
    return request.headers.get("x-api-key")


SESSION_COOKIE = "atk_session"
"""The page's session cookie (HttpOnly): a session token."""
CSRF_COOKIE = "atk_csrf"
"""The page's CSRF token, readable by its script (not HttpOnly)."""
CSRF_HEADER = "x-csrf-token"
"""The header a page's changing request carries the CSRF token in."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def authenticate(request: Request, keys: ApiKeyStore, sessions: PageSessionStore) -> ApiKey:
    """The key's record, checked (a presented key, else the page's session); the project of
    the path, if any, must be the key's.

    Raises:
        ApiError: 401 ``unauthorized`` (no key, an unknown, malformed or revoked one, or a
            session that is not live), 403 ``csrf_failed`` (a session's changing request
            without its CSRF token), 403 ``forbidden`` (the path names another project).
    """
    key = presented_key(request)
    session = request.cookies.get(SESSION_COOKIE)
    if not key and session:
        record = await sessions.check(session)
        if record is None:
            raise ApiError(401, "unauthorized", "the session has ended: sign in again")
        sent = request.headers.get(CSRF_HEADER, "")
        if request.method not in SAFE_METHODS and not hmac.compare_digest(
            sent, csrf_token(session)
        ):
            raise ApiError(403, "csrf_failed", f"a page's request needs its {CSRF_HEADER}")
        return _in_project(request, record)
    if not key:
        raise ApiError(
            401,
            "unauthorized",
            "an API key is needed: Authorization: Bearer <key> (agent-tasks keys create)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    record = await keys.check(key)
    if record is None:
        raise ApiError(
            401,
            "unauthorized",
            "the API key is not valid (unknown or revoked)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return _in_project(request, record)


def _in_project(request: Request, record: ApiKey) -> ApiKey:
    """``record``, when the path names no project or the key's.

    Raises:
        ApiError: 403 ``forbidden``.
    """
    named = request.path_params.get("project_id")
    if named is not None and named != record.project_id:
        raise ApiError(403, "forbidden", "this API key is not for that project")
    return record


@dataclass
class StreamSlots:
    """Open streams per key in this process, at most ``limit`` each."""

    limit: int
    held: dict[str, int] = field(default_factory=dict)

    def take(self, key_id: str) -> None:
        """Take a slot for a new stream of ``key_id``.

        Raises:
            ApiError: 429 ``too_many_streams``.
        """
        if self.held.get(key_id, 0) >= self.limit:
            raise ApiError(
                429,
                "too_many_streams",
                f"this API key holds {self.limit} open streams (AGENT_TASKS_STREAMS_PER_KEY)",
                headers={"Retry-After": "5"},
            )
        self.held[key_id] = self.held.get(key_id, 0) + 1

    def give_back(self, key_id: str) -> None:
        """Free a slot of ``key_id``."""
        left = self.held.get(key_id, 0) - 1
        if left > 0:
            self.held[key_id] = left
        else:
            self.held.pop(key_id, None)
