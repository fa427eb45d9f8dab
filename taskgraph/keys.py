"""The key store of sealed event text, in Neo4j: one ``KeyTree`` node per writer and task,
whose leaves are the events' data keys (``taskgraph.keytree``).

    (:KeyTree {tree_id, project_id, task_key, nodes: ["depth:position:base64 secret", ...],
               created_at})
    after a redaction: ``nodes`` punctured at the event's leaf, and ``destroyed``, the list
    of the leaves destroyed so far
    (:DataKey {key_id, project_id, task_key, key: bytes, created_at})
    a single key per event, as sealing stored them before key trees: read and redacted (no
    ``key``, with ``redacted_at``, ``event_id``, ``seq``), never written any more

Why Neo4j: the worker (the mirror opens sealed text before it writes it) and every client
with a ``TaskGraph`` reach it already, and it holds the plain text of every event anyway (the
mirror's copy), so keeping the keys there shows no one anything new. It makes Neo4j hold data
that the Temporal histories cannot give back: ``graph rebuild`` restores everything but the
keys, ``wipe_project`` keeps them, and a Neo4j lost without a backup loses the sealed text
(``docs/retention.md``).

A tree is stored before the first event it seals is sent, and every later event of its writer
and task needs no write at all: unused leaves cost nothing. ``fetch_keys`` runs inside the
mirror's transaction, after the task node is locked, so a redaction (which locks the task node
first) never races a mirror write of the text it removes.

``KeyStore`` is the key store's interface, all that sealing (``taskgraph.sealing``) needs of
it; ``taskgraph.graph.TaskGraph`` implements it with the functions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, LiteralString, Protocol

from taskgraph.keytree import Node, decode, encode, leaf_keys, parse_key_id, puncture

if TYPE_CHECKING:  # the client imports this module (sealing): no driver import at run time
    from neo4j import AsyncManagedTransaction, AsyncTransaction

KEY_SCHEMA: tuple[LiteralString, ...] = (
    "CREATE CONSTRAINT key_tree IF NOT EXISTS FOR (n:KeyTree) REQUIRE n.tree_id IS UNIQUE",
    "CREATE INDEX key_tree_task IF NOT EXISTS FOR (n:KeyTree) ON (n.task_key)",
    "CREATE CONSTRAINT data_key IF NOT EXISTS FOR (n:DataKey) REQUIRE n.key_id IS UNIQUE",
    "CREATE INDEX data_key_task IF NOT EXISTS FOR (n:DataKey) ON (n.task_key)",
)
"""The key store's constraints and indexes (part of ``taskgraph.schema.SCHEMA``)."""


class KeyStore(Protocol):
    """Where the data keys of sealed event text are kept (``taskgraph.graph.TaskGraph``)."""

    async def put_tree(self, project_id: str, workflow_id: str, tree_id: str, root: bytes) -> None:
        """Store a new key tree of the task ``workflow_id`` (one transaction).

        Raises:
            neo4j.exceptions.Neo4jError, neo4j.exceptions.DriverError: it was not stored.
        """
        ...

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The keys of ``key_ids``: key id -> key, None for a destroyed key; absent: unknown."""
        ...


_PUT_TREE: LiteralString = """
CREATE (:KeyTree {tree_id: $tree, project_id: $p, task_key: $task_key, nodes: $nodes,
                  created_at: datetime()})
"""

_FETCH_TREES: LiteralString = """
UNWIND $ids AS id
MATCH (k:KeyTree {tree_id: id})
WHERE k.project_id = $p
RETURN k.tree_id AS tree_id, k.nodes AS nodes
"""

_READ_TREE: LiteralString = """
MATCH (k:KeyTree {tree_id: $id}) WHERE k.project_id = $p RETURN k.nodes AS nodes
"""

_PUNCTURE: LiteralString = """
MATCH (k:KeyTree {tree_id: $id}) WHERE k.project_id = $p
SET k.nodes = $nodes,
    k.destroyed = CASE WHEN $leaf IN coalesce(k.destroyed, []) THEN k.destroyed
                       ELSE coalesce(k.destroyed, []) + $leaf END
"""

_FETCH_SINGLE: LiteralString = """
UNWIND $ids AS id
MATCH (k:DataKey {key_id: id})
WHERE k.project_id = $p
RETURN k.key_id AS key_id, k.key AS key
"""


async def store_tree(
    tx: AsyncManagedTransaction, project_id: str, task_key: str, tree_id: str, root: bytes
) -> None:
    """Create the ``KeyTree`` node ``tree_id`` of task ``task_key`` holding its ``root``."""
    nodes = encode([Node(0, 0, root)])
    result = await tx.run(_PUT_TREE, tree=tree_id, p=project_id, task_key=task_key, nodes=nodes)
    await result.consume()


async def fetch_keys(
    tx: AsyncManagedTransaction | AsyncTransaction, project_id: str, key_ids: Sequence[str]
) -> dict[str, bytes | None]:
    """The keys of ``key_ids`` in ``project_id``: key id -> key, or None for a key a redaction
    destroyed; a key id the store does not have is absent. A key tree's leaves are derived
    from the tree's stored nodes (one read for all trees); single keys are read as they are."""
    leaves = {key: parse_key_id(key) for key in set(key_ids)}
    by_tree: dict[str, dict[str, int]] = {}
    for key, where in leaves.items():
        if where is not None:
            by_tree.setdefault(where[0], {})[key] = where[1]
    keys: dict[str, bytes | None] = {}
    if by_tree:
        result = await tx.run(_FETCH_TREES, ids=sorted(by_tree), p=project_id)
        async for record in result:
            wanted = by_tree[record["tree_id"]]
            derived = leaf_keys(decode(record["nodes"]), sorted(wanted.values()))
            keys.update({key: derived[leaf] for key, leaf in wanted.items()})
    singles = [key for key, where in leaves.items() if where is None]
    if singles:
        result = await tx.run(_FETCH_SINGLE, ids=singles, p=project_id)
        async for record in result:
            keys[record["key_id"]] = None if record["key"] is None else bytes(record["key"])
    return keys


async def destroy_leaf(tx: AsyncManagedTransaction, project_id: str, key: str) -> bool:
    """Destroy the key tree leaf ``key`` (a redaction; the caller has locked the task node, so
    no other redaction of the task's trees interleaves): punctured out of its tree's nodes
    (``taskgraph.keytree.puncture``) and listed in the tree's ``destroyed``. Returns False,
    changing nothing, for another kind of id (a single key is destroyed by the redaction's
    own statement) or an unknown tree; a leaf destroyed before stays destroyed."""
    where = parse_key_id(key)
    if where is None:
        return False
    tree_id, leaf = where
    result = await tx.run(_READ_TREE, id=tree_id, p=project_id)
    record = await result.single()
    if record is None:
        return False
    nodes = encode(puncture(decode(record["nodes"]), leaf))
    await (await tx.run(_PUNCTURE, id=tree_id, p=project_id, nodes=nodes, leaf=leaf)).consume()
    return True
