"""What sealing needs of a key store: ``KeyStore`` (one of the graph store's Protocols,
``taskgraph.port.GraphStore``; each adapter implements it), and ``KeyLookup``, which turns
the key material a store read (key trees and the single keys of before) into the data keys of
some key ids, the same way for every store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from agent_tasks.sealing.keytree import decode, leaf_keys, parse_key_id


class KeyStore(Protocol):
    """Where the data keys of sealed event text are kept (part of ``taskgraph.port.GraphStore``:
    ``taskgraph.neo4j.graph.TaskGraph``, ``taskgraph.falkordb.graph.FalkorGraph``)."""

    async def put_tree(self, project_id: str, workflow_id: str, tree_id: str, root: bytes) -> None:
        """Store a new key tree of the task ``workflow_id`` (one transaction).

        Raises:
            contract.errors.GraphError: it was not stored.
        """
        ...

    async def get_keys(self, project_id: str, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The keys of ``key_ids``: key id -> key, None for a destroyed key; absent: unknown."""
        ...


class KeyLookup:
    """Which stored key material opens some key ids: the key trees that derive them (tree id
    -> key id -> leaf) and the single data keys of before.

    Args:
        key_ids: the key ids (repeats are read once).
    """

    def __init__(self, key_ids: Iterable[str]) -> None:
        self.by_tree: dict[str, dict[str, int]] = {}
        self.singles: list[str] = []
        for key in sorted(set(key_ids)):
            where = parse_key_id(key)
            if where is None:
                self.singles.append(key)
            else:
                self.by_tree.setdefault(where[0], {})[key] = where[1]

    def parameters(self) -> dict[str, list[str]]:
        """The parameters of ``KEY_READS`` (``$trees``, ``$singles``)."""
        return {"trees": sorted(self.by_tree), "singles": self.singles}

    def keys(
        self, trees: Iterable[Mapping[str, Any]], singles: Iterable[Mapping[str, Any]]
    ) -> dict[str, bytes | None]:
        """The keys read by ``KEY_READS``: key id -> key, or None for a key a redaction
        destroyed; a key id the store does not have is absent. A key tree's leaves are
        derived from its stored nodes (``leaf_keys``)."""
        keys: dict[str, bytes | None] = {}
        for tree in trees:
            wanted = self.by_tree[tree["id"]]
            derived = leaf_keys(decode(tree["nodes"]), sorted(wanted.values()))
            keys.update({key: derived[leaf] for key, leaf in wanted.items()})
        for single in singles:
            keys[single["id"]] = None if single["key"] is None else bytes(single["key"])
        return keys
