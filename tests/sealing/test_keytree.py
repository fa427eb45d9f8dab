"""Key trees (pure): a writer's leaves are the tree's leaves, every leaf is derived the same
way from whatever nodes cover it, a puncture destroys exactly one leaf, and key ids name their
tree and leaf. The expected keys are computed here from the definition (HMAC-SHA256 down the
path of the leaf's bits), not by the module's own walk."""

from __future__ import annotations

import hashlib
import hmac
import random
import uuid

import pytest

from agent_tasks.sealing.keytree import (
    DEPTH,
    PAGE_LEAF,
    Frontier,
    Node,
    decode,
    encode,
    key_id,
    key_ids,
    leaf_key,
    leaf_keys,
    new_root,
    new_tree_id,
    parse_key_id,
    puncture,
)


def by_definition(root: bytes, leaf: int) -> bytes:
    """Leaf ``leaf``'s key: from the root, HMAC-SHA256 with each of its 32 bits, high first."""
    secret = root
    for bit in f"{leaf:032b}":
        secret = hmac.new(secret, bytes([int(bit)]), hashlib.sha256).digest()
    return secret


def test_a_writer_takes_the_leaves_in_order_and_keeps_none_it_used() -> None:
    root = new_root()
    frontier = Frontier(root)
    taken = [frontier.take() for _ in range(300)]
    assert [leaf for leaf, _ in taken] == list(range(300))
    assert all(key == by_definition(root, leaf) for leaf, key in taken)
    assert len({key for _, key in taken}) == 300
    # forward secrecy: nothing the writer still holds derives a leaf it used
    held = frontier._stack
    assert len(held) <= DEPTH
    assert not any(node.covers(leaf) for node in held for leaf in range(300))
    for leaf in (300, 301, 511, 512, 2**20, 2**DEPTH - 1):  # and it covers every later one
        assert sum(node.covers(leaf) for node in held) == 1
    assert frontier.take()[0] == 300


def test_the_last_leaf_signs_pages_and_seals_no_event() -> None:
    root = new_root()
    frontier = Frontier(root)
    assert PAGE_LEAF == 2**DEPTH - 1
    assert frontier.page_key == by_definition(root, 2**DEPTH - 1)
    # a writer at the tree's end: the node above its last two leaves
    secret = root
    for bit in f"{(2**DEPTH - 1) >> 1:0{DEPTH - 1}b}":
        secret = hmac.new(secret, bytes([int(bit)]), hashlib.sha256).digest()
    frontier._stack = [Node(DEPTH - 1, (2**DEPTH - 1) >> 1, secret)]
    assert frontier.take() == (2**DEPTH - 2, by_definition(root, 2**DEPTH - 2))
    with pytest.raises(IndexError):
        frontier.take()


def test_a_puncture_destroys_one_leaf_and_keeps_every_other() -> None:
    root = new_root()
    nodes = [Node(0, 0, root)]
    rng = random.Random(7)
    destroyed: set[int] = set()
    for leaf in [0, 1, 2**DEPTH - 1, 2**31, 12345, 12344, 12346, *rng.sample(range(2**20), 20)]:
        nodes = puncture(nodes, leaf)
        destroyed.add(leaf)
        assert len(nodes) <= 1 + DEPTH * len(destroyed)
    for leaf in destroyed:
        assert leaf_key(nodes, leaf) is None
        assert not any(n.covers(leaf) for n in nodes)
    for leaf in [3, 12343, 12347, 2**DEPTH - 2, 2**31 + 1, *rng.sample(range(2**32), 50)]:
        if leaf not in destroyed:
            assert leaf_key(nodes, leaf) == by_definition(root, leaf)
    # the stored nodes cover disjoint ranges: no leaf under two of them
    for leaf in rng.sample(range(2**32), 200):
        assert sum(n.covers(leaf) for n in nodes) == (0 if leaf in destroyed else 1)
    assert puncture(nodes, 0) == nodes  # destroyed before: nothing changes
    assert decode(encode(nodes)) == nodes


def test_key_ids_name_their_tree_and_leaf_as_version_8_uuids() -> None:
    tree = new_tree_id()
    for leaf in (0, 1, 2**DEPTH - 1):
        found = key_id(tree, leaf)
        parsed = uuid.UUID(found)
        assert (parsed.version, parsed.variant) == (8, uuid.RFC_4122)
        assert parse_key_id(found) == (tree, leaf)
    assert key_id(tree, 0) == tree and new_tree_id() != tree
    assert parse_key_id(str(uuid.uuid4())) is None  # a single data key of before
    assert parse_key_id("not-a-uuid") is None


def test_a_batchs_key_ids_are_the_uuids_of_their_tree_and_leaf() -> None:
    tree = new_tree_id()
    ids = key_ids(tree)
    rng = random.Random(11)
    for leaf in [0, 1, 2**16, 2**DEPTH - 2, 2**DEPTH - 1, *rng.sample(range(2**32), 200)]:
        # written directly, not through uuid.UUID: the same text as the UUID's own
        expected = uuid.UUID(int=(uuid.UUID(tree).int & ~(2**32 - 1)) | leaf)
        assert ids(leaf) == str(expected) == key_id(tree, leaf)
        assert parse_key_id(ids(leaf)) == (tree, leaf)


@pytest.mark.parametrize("leaf", [0, 5, 2**DEPTH - 1])
def test_a_leaf_is_derived_from_any_node_above_it(leaf: int) -> None:
    root = new_root()
    nodes = puncture([Node(0, 0, root)], leaf ^ 1)  # its sibling gone: a deep node covers it
    assert leaf_key(nodes, leaf) == by_definition(root, leaf)


def test_leaf_keys_derives_a_batch_as_leaf_key_does_one() -> None:
    root = new_root()
    nodes = puncture(puncture([Node(0, 0, root)], 7), 2**DEPTH - 1)
    leaves = [*range(20), 2**DEPTH - 1, 2**DEPTH - 2, 2**31, 99_999]
    assert leaf_keys(nodes, leaves) == {leaf: leaf_key(nodes, leaf) for leaf in leaves}
    assert leaf_keys(nodes, [7, 8])[7] is None
    assert leaf_keys(nodes, [8])[8] == by_definition(root, 8)
    assert leaf_keys([], [1]) == {1: None}
