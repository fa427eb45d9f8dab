"""The key store of sealed event text: one ``DataKey`` node per event, in Neo4j.

    (:DataKey {key_id, project_id, task_key, key: bytes, created_at})
    after a redaction: no ``key``, and ``redacted_at``, ``event_id``, ``seq`` (a tombstone)

Why Neo4j: the worker (the mirror opens sealed text before it writes it) and every client
with a ``TaskGraph`` reach it already, and it holds the plain text of every event anyway (the
mirror's copy), so keeping the keys there shows no one anything new. It makes Neo4j hold data
that the Temporal histories cannot give back: ``graph rebuild`` restores everything but the
keys, ``wipe_project`` keeps them, and a Neo4j lost without a backup loses the sealed text
(``docs/retention.md``).

A key is written before the event that needs it is sent; a refused or never-sent write
leaves an unused key, deleted with its task. ``fetch_keys`` runs inside the mirror's
transaction, after the task node is locked, so a redaction (which locks the task node first)
never races a mirror write of the text it removes.

``KeyStore`` is the key store's interface, all that sealing (``taskgraph.sealing``) needs of
it; ``taskgraph.graph.TaskGraph`` implements it with the functions here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, LiteralString, Protocol

if TYPE_CHECKING:  # the client imports this module (sealing): no driver import at run time
    from neo4j import AsyncManagedTransaction

KEY_SCHEMA: tuple[LiteralString, ...] = (
    "CREATE CONSTRAINT data_key IF NOT EXISTS FOR (n:DataKey) REQUIRE n.key_id IS UNIQUE",
    "CREATE INDEX data_key_task IF NOT EXISTS FOR (n:DataKey) ON (n.task_key)",
)
"""The key store's constraint and index (part of ``taskgraph.schema.SCHEMA``)."""


class KeyStore(Protocol):
    """Where the data keys of sealed event text are kept (``taskgraph.graph.TaskGraph``)."""

    async def put_keys(self, project_id: str, workflow_id: str, keys: Mapping[str, bytes]) -> None:
        """Store data keys (key id -> key) of the task ``workflow_id`` in one transaction."""
        ...

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The keys of ``key_ids``: key id -> key, None for a destroyed key; absent: unknown."""
        ...

    async def drop_keys(self, project_id: str, key_ids: Sequence[str]) -> None:
        """Delete keys that sealed nothing the workflow took."""
        ...


_PUT: LiteralString = """
UNWIND $keys AS k
CREATE (:DataKey {key_id: k.key_id, key: k.key, project_id: $p, task_key: $task_key,
                  created_at: datetime()})
"""

_FETCH: LiteralString = """
UNWIND $ids AS id
MATCH (k:DataKey {key_id: id})
WHERE k.project_id = $p
RETURN k.key_id AS key_id, k.key AS key
"""


async def store_keys(
    tx: AsyncManagedTransaction, project_id: str, task_key: str, keys: Mapping[str, bytes]
) -> None:
    """Create the ``DataKey`` nodes of ``keys`` (key id -> key) for task ``task_key``."""
    rows = [{"key_id": key_id, "key": key} for key_id, key in keys.items()]
    await (await tx.run(_PUT, keys=rows, p=project_id, task_key=task_key)).consume()


async def fetch_keys(
    tx: AsyncManagedTransaction, project_id: str, key_ids: Sequence[str]
) -> dict[str, bytes | None]:
    """The keys of ``key_ids`` in ``project_id``: key id -> key, or None for a key a redaction
    destroyed; a key id the store does not have is absent."""
    result = await tx.run(_FETCH, ids=list(set(key_ids)), p=project_id)
    return {
        record["key_id"]: None if record["key"] is None else bytes(record["key"])
        async for record in result
    }
