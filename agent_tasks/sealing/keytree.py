"""Key trees: the data keys of sealed event text, each event its own, all derived from one
secret stored per writer and task, and any one of them destroyed by a redaction.

A key tree is the tree of Goldreich, Goldwasser and Micali ("How to construct random
functions", 1986), a puncturable pseudorandom function, with HMAC-SHA256 as its generator: a
binary tree ``DEPTH`` levels deep of 32-byte secrets whose root is random and whose node's
children are ``HMAC-SHA256(node, 0x00)`` and ``HMAC-SHA256(node, 0x01)``; leaf ``i`` is the
AES-256 key of the ``i``-th event its writer seals.

- The key store holds, of each tree, nodes that cover the leaves whose keys still exist: the
  root at first. Destroying leaf ``i`` (``puncture``) replaces the node above it by the
  siblings of its path down to ``i``: every other leaf derives as before, and since HMAC
  cannot be inverted nothing stored derives leaf ``i`` any more (a redaction).
- A writer (``Frontier``) holds only nodes that cover the leaves it has not used: it takes
  the leaves in order, about two HMACs each, and cannot derive a key it already used
  (forward secrecy), so an event's key exists only in the key store once it is sealed.

The tree's last leaf (``PAGE_LEAF``) seals no event: it is the writer's key for signing the
pages it publishes on the broker for the mirror (``broker.PageMessage``), which a worker
reads from the key store as it reads any leaf, so that only a writer the key store knows
can hand the mirror a page.

So a writer stores one secret per task (one key-store transaction at its first write to the
task) and seals every later write without the key store: through a Neo4j outage of any
length, and at no extra round trip. Pure Python over ``hmac`` (no driver): the client uses it.

Key ids are UUIDs of version 8 (RFC 9562's custom layout): 90 random bits name the tree and
32 bits the leaf (``key_id``, ``parse_key_id``), so they match the UUID pattern event inputs
always had (a worker deployed before key trees still decodes them) and differ from the
version-4 ids of the single data keys stored before (``taskgraph.neo4j.keys``).
"""

from __future__ import annotations

import base64
import hmac
import os
import uuid
from collections.abc import Callable
from typing import NamedTuple

DEPTH = 32
"""Levels of a tree: ``2**32`` leaves, one per event its writer seals."""
SECRET_BYTES = 32
"""A node's secret, and so a leaf's AES-256 key: 32 bytes."""
_LEAF_BITS = 32
_LEAF_MASK = (1 << _LEAF_BITS) - 1
PAGE_LEAF = (1 << DEPTH) - 1
"""The leaf no event takes: its writer's signing key for the pages it publishes."""
_VERSION = 8


class Node(NamedTuple):
    """A node of a key tree: its depth (0: the root), its position at that depth (0 to
    ``2**depth - 1``, left to right), its secret."""

    depth: int
    position: int
    secret: bytes

    def covers(self, leaf: int) -> bool:
        """True when ``leaf`` is under this node."""
        return leaf >> (DEPTH - self.depth) == self.position


_BITS = (b"\x00", b"\x01")


def _child(secret: bytes, bit: int) -> bytes:
    return hmac.digest(secret, _BITS[bit], "sha256")


def _bit(leaf: int, depth: int) -> int:
    """The branch towards ``leaf`` taken below a node at ``depth``."""
    return (leaf >> (DEPTH - depth - 1)) & 1


def derive(node: Node, leaf: int) -> bytes:
    """The key of ``leaf``, derived from ``node`` above it (``node.covers(leaf)``)."""
    secret = node.secret
    for depth in range(node.depth, DEPTH):
        secret = _child(secret, _bit(leaf, depth))
    return secret


def leaf_key(nodes: list[Node], leaf: int) -> bytes | None:
    """The key of ``leaf`` from a tree's stored ``nodes``; None when no node covers it (its
    key was destroyed)."""
    for node in nodes:
        if node.covers(leaf):
            return derive(node, leaf)
    return None


def leaf_keys(nodes: list[Node], leaves: list[int]) -> dict[int, bytes | None]:
    """``leaf_key`` of each of ``leaves``, sharing the HMACs of common paths: a run of
    consecutive leaves (a batch of one writer) costs about two HMACs each, not ``DEPTH``."""
    memo: dict[tuple[int, int], bytes] = {}  # (depth, position) -> secret; nodes are disjoint
    out: dict[int, bytes | None] = {}
    for leaf in leaves:
        node = next((n for n in nodes if n.covers(leaf)), None)
        if node is None:
            out[leaf] = None
            continue
        secret = node.secret
        for depth in range(node.depth + 1, DEPTH + 1):
            position = leaf >> (DEPTH - depth)
            cached = memo.get((depth, position))
            if cached is None:
                cached = memo[depth, position] = _child(secret, position & 1)
            secret = cached
        out[leaf] = secret
    return out


def puncture(nodes: list[Node], leaf: int) -> list[Node]:
    """``nodes`` without any that derives ``leaf``: the node above it replaced by the
    siblings of the path from it down to ``leaf`` (at most ``DEPTH`` of them), the others
    kept; unchanged when no node covers ``leaf`` (it was destroyed before)."""
    out: list[Node] = []
    for node in nodes:
        if not node.covers(leaf):
            out.append(node)
            continue
        position, secret = node.position, node.secret
        for depth in range(node.depth, DEPTH):
            bit = _bit(leaf, depth)
            out.append(Node(depth + 1, position * 2 + 1 - bit, _child(secret, 1 - bit)))
            position, secret = position * 2 + bit, _child(secret, bit)
    return out


class Frontier:
    """A writer's part of a tree: nodes covering the leaves it has not used, in order.

    Args:
        root: the tree's root secret (``new_root``).
    """

    def __init__(self, root: bytes) -> None:
        self._stack = [Node(0, 0, root)]
        self.page_key = derive(self._stack[0], PAGE_LEAF)
        """The key of ``PAGE_LEAF``: the writer signs its published pages with it."""

    def take(self) -> tuple[int, bytes]:
        """The next unused leaf and its key; what derives it is gone from the frontier.

        Raises:
            IndexError: the tree's leaves but ``PAGE_LEAF`` are used up.
        """
        stack = self._stack
        if stack[-1].depth == DEPTH and stack[-1].position == PAGE_LEAF:
            raise IndexError("the key tree's leaves are used up")
        depth, position, secret = stack.pop()
        while depth < DEPTH:  # down the left edge, the right child of each level kept
            depth, position = depth + 1, position * 2
            stack.append(Node(depth, position + 1, hmac.digest(secret, b"\x01", "sha256")))
            secret = hmac.digest(secret, b"\x00", "sha256")
        return position, secret


def new_root() -> bytes:
    """A tree's random root secret (``SECRET_BYTES`` from the OS's random source)."""
    return os.urandom(SECRET_BYTES)


def new_tree_id() -> str:
    """A new tree's id: the key id of its leaf 0, 90 random bits in a version-8 UUID."""
    return key_id(str(uuid.UUID(int=int.from_bytes(os.urandom(16), "big"))), 0)


def key_id(tree_id: str, leaf: int) -> str:
    """The key id of ``leaf`` of the tree ``tree_id``: the tree's bits with the leaf in the
    low 32, as a version-8 UUID (RFC 9562: version bits 48-51, variant bits 64-65)."""
    return key_ids(tree_id)(leaf)


def key_ids(tree_id: str) -> Callable[[int], str]:
    """``key_id`` of the tree ``tree_id`` as a function of the leaf, the tree's bits read once
    (a batch's ids: the UUID's text written directly, about a microsecond each)."""
    bits = uuid.UUID(tree_id).int & ~_LEAF_MASK
    bits &= ~(0xF << 76)
    bits |= _VERSION << 76
    bits &= ~(0x3 << 62)
    bits |= 0x2 << 62

    def of(leaf: int) -> str:
        digits = f"{bits | leaf:032x}"
        return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"

    return of


def parse_key_id(key: str) -> tuple[str, int] | None:
    """The tree id and leaf of a key tree's key id; None for another id (a single data key
    of before, a version-4 UUID, or text that is no UUID)."""
    try:
        parsed = uuid.UUID(key)
    except ValueError:
        return None
    if parsed.version != _VERSION:
        return None
    return str(uuid.UUID(int=parsed.int & ~_LEAF_MASK)), parsed.int & _LEAF_MASK


def encode(nodes: list[Node]) -> list[str]:
    """Nodes as the key store keeps them: ``"depth:position:base64 secret"``."""
    return [f"{n.depth}:{n.position}:{base64.b64encode(n.secret).decode('ascii')}" for n in nodes]


def decode(stored: list[str]) -> list[Node]:
    """``encode``'s inverse."""
    nodes = []
    for text in stored:
        depth, position, secret = text.split(":")
        nodes.append(Node(int(depth), int(position), base64.b64decode(secret)))
    return nodes
