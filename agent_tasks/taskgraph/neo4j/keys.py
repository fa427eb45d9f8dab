"""The key store of sealed event text in Neo4j: one ``KeyTree`` node per writer and task, whose
leaves are the events' data keys (``sealing.keytree``); the interface is ``sealing.keys.KeyStore``.

    (:KeyTree {tree_id, project_id, task_key, nodes: ["depth:position:base64 secret", ...],
               created_at, destroyed: [punctured leaves]})
    (:DataKey {key_id, project_id, task_key, key: bytes, created_at})
    single keys from before key trees: read and redacted, never written

Why the graph store: the worker and every client reach it already, and it holds the plain text
anyway (the mirror's copy). So it holds data the histories cannot give back: a store lost without a
backup loses the sealed text (``docs/retention.md``). A tree is stored before its first event is
sent; later events need no write. The mirror reads keys after locking the task node, so a redaction
never races it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import LiteralString

from neo4j import AsyncManagedTransaction, AsyncTransaction

from agent_tasks.sealing.keys import KeyLookup
from agent_tasks.sealing.keytree import Node, decode, encode, parse_key_id, puncture

KEY_SCHEMA: tuple[LiteralString, ...] = (
    "CREATE CONSTRAINT key_tree IF NOT EXISTS FOR (n:KeyTree) REQUIRE n.tree_id IS UNIQUE",
    "CREATE INDEX key_tree_task IF NOT EXISTS FOR (n:KeyTree) ON (n.task_key)",
    "CREATE CONSTRAINT data_key IF NOT EXISTS FOR (n:DataKey) REQUIRE n.key_id IS UNIQUE",
    "CREATE INDEX data_key_task IF NOT EXISTS FOR (n:DataKey) ON (n.task_key)",
)
"""The key store's constraints and indexes (part of ``taskgraph.neo4j.schema.SCHEMA``)."""


_PUT_TREE: LiteralString = """
CREATE (:KeyTree {tree_id: $tree, project_id: $p, task_key: $task_key, nodes: $nodes,
                  created_at: datetime()})
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

KEY_READS: LiteralString = """
CALL () {
  UNWIND $trees AS id
  MATCH (k:KeyTree {tree_id: id})
  WHERE k.project_id = $p
  RETURN collect({id: k.tree_id, nodes: k.nodes}) AS trees
}
CALL () {
  UNWIND $singles AS id
  MATCH (k:DataKey {key_id: id})
  WHERE k.project_id = $p
  RETURN collect({id: k.key_id, key: k.key}) AS singles
}
"""
"""The read of the key material of some key ids (``KeyLookup``'s parameters, ``$p`` the project): a
clause yielding ``trees`` (``{id, nodes}``) and ``singles`` (``{id, key}``), so the mirror reads
keys in the statement that locks the task node."""


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
    """The keys of ``key_ids`` in ``project_id`` (``KeyLookup.keys``), in one statement
    (``KEY_READS``); none for no ids."""
    if not key_ids:
        return {}
    lookup = KeyLookup(key_ids)
    result = await tx.run(KEY_READS + "RETURN trees, singles", lookup.parameters(), p=project_id)
    record = await result.single(strict=True)
    return lookup.keys(record["trees"], record["singles"])


async def destroy_leaf(tx: AsyncManagedTransaction, project_id: str, key: str) -> bool:
    """Destroy the key tree leaf ``key`` (the caller has locked the task node): punctured out of its
    tree (``sealing.keytree.puncture``) and listed in ``destroyed``. False, changing nothing, for
    another kind of id or an unknown tree."""
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
