"""API keys of the HTTP API (``server``), stored hashed in the graph store (either:
``taskgraph.port.RecordStore``): one ``ApiKey`` node per key, scoped to one project.

    (:ApiKey {key_id, project_id, name, person, digest, created_at, revoked_at})

A key names the person who holds it (``person``, given at creation): what a request made with
it writes is authored by that person, so one person holding several keys (and the page's
sessions of any of them) is one author, and one approver of a call that needs several
(``ApiKey.author``). A key made before persons were kept (no ``person``) is its own person,
``key-{key_id}``, as every key was then.

Neo4j keeps the times as datetimes; FalkorDB, which has no zoned datetime and keeps whole
seconds in its ``localdatetime``, as integer microseconds since the Unix epoch, sent by the
client (``$now``).

A key reads ``atk_{key_id}_{secret}``: ``key_id`` (16 hex characters) names it in lists, logs
and revocations and is not secret; ``secret`` is 32 random bytes (``secrets.token_urlsafe``).
Only ``digest``, the SHA-256 of the whole key, is stored, so the store cannot give a key back;
``keys create`` shows it once. A fast hash is the right one here: the secret has 256 bits of
entropy, so no guess can be tested against a digest (a slow hash protects low-entropy
passwords). A check compares digests in constant time (``hmac.compare_digest``).

Revoked keys keep their node (``revoked_at``): the id is never given out again.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictStr, TypeAdapter

from agent_tasks.taskgraph.models import as_datetime, epoch_us
from agent_tasks.taskgraph.port import GraphStore, Statement

KEY_PREFIX = "atk_"
"""How every key starts (so a leaked one is recognised by secret scanners and people)."""
_KEY = re.compile(r"^atk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_CONTROL = r"\x00-\x1f\x7f-\x9f"
_PERSON_PATTERN = rf"^[^{_CONTROL}]*[^\s{_CONTROL}][^{_CONTROL}]*$"
_PERSON: TypeAdapter[str] = TypeAdapter(
    Annotated[StrictStr, Field(min_length=1, max_length=128, pattern=_PERSON_PATTERN)]
)
"""A key's person: an author's name (``contract.ShortText``), no control characters, not
blank."""

_CREATE: Statement = {
    # the time: Neo4j's datetime(); FalkorDB's $now, microseconds (module docstring)
    "neo4j": """
CREATE (k:ApiKey {key_id: $key_id, project_id: $project_id, name: $name, person: $person,
                  digest: $digest, created_at: datetime()})
RETURN k
""",
    "falkordb": """
CREATE (k:ApiKey {key_id: $key_id, project_id: $project_id, name: $name, person: $person,
                  digest: $digest, created_at: $now})
RETURN k
""",
}
_FIND: Statement = "MATCH (k:ApiKey {key_id: $key_id}) RETURN k"
_LIST: Statement = """
MATCH (k:ApiKey) WHERE k.project_id = $project_id RETURN k ORDER BY k.created_at, k.key_id
"""
_REVOKE: Statement = {
    # the time: Neo4j's datetime(); FalkorDB's $now, microseconds (module docstring)
    "neo4j": """
MATCH (k:ApiKey {key_id: $key_id})
SET k.revoked_at = coalesce(k.revoked_at, datetime())
RETURN k
""",
    "falkordb": """
MATCH (k:ApiKey {key_id: $key_id})
SET k.revoked_at = coalesce(k.revoked_at, $now)
RETURN k
""",
}


class ApiKey(BaseModel):
    """An API key as stored (never the key itself)."""

    key_id: str
    """Its public id."""
    project_id: str
    """The one project it reads and writes."""
    name: str
    """What it is for (given at creation)."""
    person: str | None = None
    """Who holds it (given at creation); None for a key made before persons were kept."""
    created_at: datetime
    """When it was made."""
    revoked_at: datetime | None = None
    """When it was revoked; a revoked key is refused."""

    @property
    def author(self) -> str:
        """Who a request made with this key (or a page's session of it) is: the author of
        what it writes and the approver of what it accepts. The key's person, or
        ``key-{key_id}`` for a key without one."""
        return self.person if self.person is not None else f"key-{self.key_id}"


def digest(key: str) -> str:
    """SHA-256 hex of the whole key (what is stored)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> tuple[str, str]:
    """A new key: ``(key_id, key)``."""
    key_id = secrets.token_hex(8)
    return key_id, f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def key_id_of(key: str) -> str | None:
    """The id in a key of the right form, None for anything else."""
    match = _KEY.match(key)
    return match.group(1) if match else None


def record_of(node: Any) -> ApiKey:
    """The record of an ``ApiKey`` node (its properties, from either store)."""
    revoked = node.get("revoked_at")
    return ApiKey(
        key_id=node["key_id"],
        project_id=node["project_id"],
        name=node["name"],
        person=node.get("person"),
        created_at=as_datetime(node["created_at"]),
        revoked_at=None if revoked is None else as_datetime(revoked),
    )


class Records:
    """Records of the HTTP API kept in the graph store, each query one statement
    (``RecordStore.records``: Neo4j's managed transaction, transient errors retried).

    Args:
        graph: the graph store (either adapter).
    """

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    async def _run(
        self, statement: Statement, *, write: bool = True, **params: Any
    ) -> list[dict[str, Any]]:
        """The rows of ``statement``; ``$now`` is the time now in microseconds (FalkorDB's
        statements read it; Neo4j's use the server's ``datetime()``)."""
        now = epoch_us(datetime.now(UTC))
        return await self.graph.records(statement, write=write, now=now, **params)

    async def init_schema(self) -> None:
        """Create the store's schema, these records' constraints with it (idempotent)."""
        await self.graph.ensure_schema()


class ApiKeyStore(Records):
    """The API keys in the graph store (unique ``key_id``)."""

    async def create(
        self, project_id: str, name: str, person: str | None = None
    ) -> tuple[ApiKey, str]:
        """Make a key for ``project_id`` held by ``person`` (None: the key is its own person,
        ``key-{key_id}``); returns its record and the key (shown once, never stored).

        Raises:
            pydantic.ValidationError: ``person`` is not an author's name (1 to 128 characters,
                no control characters, not blank).
        """
        if person is not None:
            person = _PERSON.validate_python(person)
        key_id, key = new_key()
        rows = await self._run(
            _CREATE,
            key_id=key_id,
            project_id=project_id,
            name=name,
            person=person,
            digest=digest(key),
        )
        return record_of(rows[0]["k"]), key

    async def check(self, key: str) -> ApiKey | None:
        """The record of ``key`` when it is a key of this store and not revoked; None for
        anything else (unknown, malformed, wrong secret, revoked)."""
        key_id = key_id_of(key)
        if key_id is None:
            return None
        rows = await self._run(_FIND, write=False, key_id=key_id)
        if not rows:
            return None
        node = rows[0]["k"]
        if not hmac.compare_digest(node["digest"], digest(key)):
            return None
        record = record_of(node)
        return None if record.revoked_at is not None else record

    async def revoke(self, key_id: str) -> ApiKey | None:
        """Revoke a key by id (idempotent); None when there is no such key."""
        rows = await self._run(_REVOKE, key_id=key_id)
        return record_of(rows[0]["k"]) if rows else None

    async def list(self, project_id: str) -> list[ApiKey]:
        """The keys of a project, revoked ones included, oldest first."""
        return [
            record_of(row["k"])
            for row in await self._run(_LIST, write=False, project_id=project_id)
        ]
