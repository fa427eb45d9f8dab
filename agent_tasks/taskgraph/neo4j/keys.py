"""The key store of sealed event text, in Neo4j: one ``KeyTree`` node per writer and task,
whose leaves are the events' data keys (``sealing.keytree``).

    (:KeyTree {tree_id, project_id, task_key, nodes: ["depth:position:base64 secret", ...],
               created_at})
    after a redaction: ``nodes`` punctured at the event's leaf, and ``destroyed``, the list
    of the leaves destroyed so far
    (:DataKey {key_id, project_id, task_key, key: bytes, created_at})
    a single key per event, as sealing stored them before key trees: read and redacted (no
    ``key``, with ``redacted_at``, ``event_id``, ``seq``), never written any more

Why the graph store: the worker (the mirror opens sealed text before it writes it) and every client
with a ``TaskGraph`` reach it already, and it holds the plain text of every event anyway (the
mirror's copy), so keeping the keys there shows no one anything new. It makes Neo4j hold data
that the Temporal histories cannot give back: ``graph rebuild`` restores everything but the
keys, ``wipe_project`` keeps them, and a Neo4j lost without a backup loses the sealed text
(``docs/retention.md``).

A tree is stored before the first event it seals is sent, and every later event of its writer
and task needs no write at all: unused leaves cost nothing. The mirror reads the keys
(``KEY_READS``) in its transaction's first statement, after it locks the task node, so a
redaction (which locks the task node first) never races a mirror write of the text it
removes.

``sealing.keys.KeyStore`` is the key store's interface, all that sealing needs of it;
``taskgraph.neo4j.graph.TaskGraph`` implements it with the functions here.
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
"""The read of the stored key material of some key ids (the parameters of ``KeyLookup``,
and ``$p`` the project): a clause that yields ``trees`` (each ``{id, nodes}``) and ``singles``
(each ``{id, key}``) for ``KeyLookup.keys``. A clause, so that the mirror reads the keys in the
statement that locks the task node (``taskgraph.neo4j.writes``), not in one more round trip."""


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
    """Destroy the key tree leaf ``key`` (a redaction; the caller has locked the task node, so
    no other redaction of the task's trees interleaves): punctured out of its tree's nodes
    (``sealing.keytree.puncture``) and listed in the tree's ``destroyed``. Returns False,
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
