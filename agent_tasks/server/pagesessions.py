"""Sessions of the page (``server.page``): a person signs in with an API key once, and the
page's cookie then holds a session of that key; stored hashed in the graph store beside the
keys (either store: ``server.apikeys`` says how each keeps times).

    (:PageSession {session_id, key_id, digest, created_at, expires_at})

A session token reads ``ats_{session_id}_{secret}`` (as an API key does: 16 hex characters of
id, 32 random bytes of secret); only the SHA-256 of the whole token is stored. Each request
reads the session and its key in one query: a session whose key was revoked, that expired, or
that was signed out (its node deleted) is refused from the next request on. The sessions live
in the graph store, not in a server's memory, so API servers stay stateless: any of them takes any
session.

The page's CSRF token is derived from the session token (``csrf_token``: an HMAC of it), so
nothing more is stored and a page that cannot read the HttpOnly session cookie cannot make it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from agent_tasks.server.apikeys import ApiKey, Records, digest, record_of
from agent_tasks.taskgraph.dialect import Statement

SESSION_PREFIX = "ats_"
"""How every session token starts."""
_TOKEN = re.compile(r"^ats_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")

_CREATE: Statement = {
    # times: Neo4j's datetime() and duration; FalkorDB's $now and $s in microseconds
    "neo4j": """
CREATE (s:PageSession {session_id: $session_id, key_id: $key_id, digest: $digest,
                       created_at: datetime(), expires_at: datetime() + duration({seconds: $s})})
""",
    "falkordb": """
CREATE (s:PageSession {session_id: $session_id, key_id: $key_id, digest: $digest,
                       created_at: $now, expires_at: $now + $s * 1000000})
""",
}
_FIND: Statement = {
    # the time now: Neo4j's datetime(); FalkorDB's $now, microseconds
    "neo4j": """
MATCH (s:PageSession {session_id: $session_id})
MATCH (k:ApiKey {key_id: s.key_id})
RETURN s, k, s.expires_at > datetime() AS live
""",
    "falkordb": """
MATCH (s:PageSession {session_id: $session_id})
MATCH (k:ApiKey {key_id: s.key_id})
RETURN s, k, s.expires_at > $now AS live
""",
}
_DELETE: Statement = "MATCH (s:PageSession {session_id: $session_id}) DETACH DELETE s"


def csrf_token(session_token: str) -> str:
    """The CSRF token of a session: HMAC-SHA256 of the session token (hex)."""
    return hmac.new(session_token.encode("utf-8"), b"csrf", hashlib.sha256).hexdigest()


def _session_id(token: str) -> str | None:
    match = _TOKEN.match(token)
    return match.group(1) if match else None


class PageSessionStore(Records):
    """The page's sessions in the graph store (unique ``session_id``)."""

    async def create(self, key: ApiKey, lifetime: timedelta) -> str:
        """A new session of ``key`` for ``lifetime``; returns its token (only its SHA-256 is
        stored)."""
        session_id = secrets.token_hex(8)
        token = f"{SESSION_PREFIX}{session_id}_{secrets.token_urlsafe(32)}"
        seconds = int(lifetime.total_seconds())
        await self._run(
            _CREATE, session_id=session_id, key_id=key.key_id, digest=digest(token), s=seconds
        )
        return token

    async def check(self, token: str) -> ApiKey | None:
        """The key of a live session ``token``; None for anything else (unknown, malformed,
        expired, signed out, or its key revoked)."""
        session_id = _session_id(token)
        if session_id is None:
            return None
        rows = await self._run(_FIND, write=False, session_id=session_id)
        if not rows or not rows[0]["live"]:
            return None
        if not hmac.compare_digest(rows[0]["s"]["digest"], digest(token)):
            return None
        key = record_of(rows[0]["k"])
        return None if key.revoked_at is not None else key

    async def delete(self, token: str) -> None:
        """Sign a session out (idempotent; a malformed token changes nothing)."""
        session_id = _session_id(token)
        if session_id is not None:
            await self._run(_DELETE, session_id=session_id)
