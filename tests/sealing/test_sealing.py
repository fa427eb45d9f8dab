"""Sealing event text (pure: no server): AES-GCM per event, the bounds of a sealed payload, and
what readers see when a key is there, destroyed or missing."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agent_tasks.contract import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_CHARS,
    MAX_SEALED_CHARS,
    Event,
    EventInput,
    EventKind,
    RecordEventsInput,
    args_digest,
    model_size,
    sha256_hex,
)
from agent_tasks.contract.errors import GraphIncomplete
from agent_tasks.sealing.keys import KeyLookup
from agent_tasks.sealing.keytree import (
    Frontier,
    Node,
    encode,
    key_id,
    leaf_keys,
    new_root,
    new_tree_id,
    puncture,
)
from agent_tasks.sealing.seal import KEY_BYTES, NONCE_BYTES, open_text, seal, unseal


def event_of(sealed: EventInput, seq: int = 1) -> Event:
    """The event the ledger records for ``sealed``."""
    assert sealed.full_length is not None and sealed.full_sha256 is not None
    return Event(
        id=f"id-{seq}",
        seq=seq,
        kind=sealed.kind,
        payload=sealed.payload,
        full_length=sealed.full_length,
        full_sha256=sealed.full_sha256,
        author="a",
        time=datetime(2025, 1, 1, tzinfo=UTC),
        request_id="r",
        sealed=sealed.sealed,
        key_id=sealed.key_id,
    )


def sealed_new(event: EventInput) -> tuple[EventInput, bytes]:
    """``event`` sealed under the first leaf of a new key tree, and that leaf's key."""
    leaf, key = Frontier(new_root()).take()
    return seal(event, key, key_id(new_tree_id(), leaf)), key


def test_a_sealed_payload_opens_with_its_key_and_with_nothing_else() -> None:
    text = "the key is sk-\u00e9\U0001f511 " + "x" * 100
    plain = EventInput(kind=EventKind.TOOL_RESULT, payload=text, name="env")
    sealed, key = sealed_new(plain)
    assert sealed.payload == "" and sealed.sealed is not None and sealed.key_id is not None
    assert text not in sealed.model_dump_json()
    # The length and hash are of the plain text, as for any payload.
    assert (sealed.full_length, sealed.full_sha256) == (len(text), sha256_hex(text))
    assert open_text(sealed.sealed, key, sealed.key_id) == text
    # AES-256-GCM with a 96-bit nonce, checked with the library directly.
    blob = base64.b64decode(sealed.sealed)
    assert len(key) == KEY_BYTES == 32
    aad = sealed.key_id.encode()
    assert AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad) == text.encode()
    other, other_key = sealed_new(plain)
    assert other.key_id is not None
    assert other.key_id != sealed.key_id and other.sealed != sealed.sealed
    with pytest.raises(InvalidTag):
        open_text(sealed.sealed, other_key, sealed.key_id)
    with pytest.raises(InvalidTag):  # the key id is authenticated too
        open_text(sealed.sealed, key, other.key_id)


def test_the_cut_applies_to_the_plain_text_and_the_sealed_text_is_never_cut() -> None:
    text = "\U0001f511" * (MAX_PAYLOAD_CHARS + 5)  # 4 bytes each in UTF-8: the largest case
    sealed, key = sealed_new(EventInput(kind=EventKind.MESSAGE, payload=text))
    assert sealed.full_length == MAX_PAYLOAD_CHARS + 5 and sealed.full_sha256 == sha256_hex(text)
    assert sealed.sealed is not None and sealed.key_id is not None
    assert len(sealed.sealed) == MAX_SEALED_CHARS  # the bound is exact for this case
    assert open_text(sealed.sealed, key, sealed.key_id) == text[:MAX_PAYLOAD_CHARS]
    # Decoding it again (as the workflow does) keeps every field: nothing is re-cut or re-hashed.
    again = EventInput.model_validate_json(sealed.model_dump_json())
    assert again == sealed
    assert model_size(sealed) < MAX_PAYLOAD_BYTES // 2
    assert event_of(sealed).truncated is False  # still sealed: unknown until opened
    (opened,) = unseal([event_of(sealed)], {sealed.key_id: key})
    assert opened.truncated and opened.payload == text[:MAX_PAYLOAD_CHARS]


def test_unseal_opens_redacts_or_names_the_missing_key() -> None:
    one, key_one = sealed_new(EventInput(kind=EventKind.MESSAGE, payload="one"))
    two, _ = sealed_new(EventInput(kind=EventKind.MESSAGE, payload="two"))
    plain = event_of(EventInput(kind=EventKind.MESSAGE, payload="plain"), seq=3)
    assert one.key_id is not None and two.key_id is not None
    events = [event_of(one, 1), event_of(two, 2), plain]
    opened = unseal(events, {one.key_id: key_one, two.key_id: None})
    assert [(e.payload, e.redacted, e.sealed) for e in opened] == [
        ("one", False, None),
        ("", True, None),
        ("plain", False, None),
    ]
    assert opened[1].full_sha256 == sha256_hex("two") and opened[1].full_length == 3
    with pytest.raises(GraphIncomplete, match=two.key_id):
        unseal(events, {one.key_id: key_one})


@pytest.mark.parametrize(
    "fields",
    [
        {"payload": "text too"},  # a sealed event carries no plain payload
        {"key_id": None},
        {"full_sha256": None},
        {"sealed": "not base64!"},
        {"key_id": "not-a-uuid"},
    ],
)
def test_a_malformed_sealed_event_is_refused_by_validation(fields: dict[str, object]) -> None:
    sealed, _ = sealed_new(EventInput(kind=EventKind.MESSAGE, payload="x"))
    with pytest.raises(ValueError):
        EventInput.model_validate(sealed.model_dump() | fields)


def test_sealing_again_keeps_the_write_digest_and_old_digests_stay() -> None:
    events = [EventInput(kind=EventKind.MESSAGE, payload="same text")]
    first = RecordEventsInput(agent_id="a", request_id="r", events=[sealed_new(events[0])[0]])
    retry = RecordEventsInput(agent_id="a", request_id="r", events=[sealed_new(events[0])[0]])
    assert first != retry and args_digest(first) == args_digest(retry)
    other = RecordEventsInput(
        agent_id="a",
        request_id="r",
        events=[sealed_new(EventInput(kind=EventKind.MESSAGE, payload="other text"))[0]],
    )
    assert args_digest(other) != args_digest(first)
    # The digest of a plain write is the one the code before sealing computed (so a retry
    # of a write stored before the change is still a duplicate, not request_id_reused).
    old = RecordEventsInput.model_validate(
        {
            "agent_id": "a",
            "request_id": "r",
            "events": [
                {"kind": "message", "role": "user", "payload": "hello"},
                {"kind": "tool_call", "name": "bash", "call_id": "c1", "payload": '{"cmd": "ls"}'},
            ],
        }
    )
    assert args_digest(old) == "e30da223e67c"


def test_a_punctured_tree_opens_every_event_but_the_redacted_one() -> None:
    root, tree = new_root(), new_tree_id()
    frontier = Frontier(root)
    sealed = []
    for i in range(3):
        leaf, key = frontier.take()
        sealed.append(
            seal(EventInput(kind=EventKind.MESSAGE, payload=f"text {i}"), key, key_id(tree, leaf))
        )
    stored = puncture([Node(0, 0, root)], 1)  # the key store after redacting the second
    keys = leaf_keys(stored, [0, 1, 2])
    assert keys[1] is None
    events = [event_of(s, seq) for seq, s in enumerate(sealed, start=1)]
    by_id = {s.key_id: keys[i] for i, s in enumerate(sealed) if s.key_id is not None}
    opened = unseal(events, by_id)
    assert [(e.payload, e.redacted) for e in opened] == [
        ("text 0", False),
        ("", True),
        ("text 2", False),
    ]
    # the stored nodes derive no key of leaf 1: every key they give opens nothing of it
    middle = sealed[1]
    assert middle.sealed is not None and middle.key_id is not None
    for node in stored:
        for guess in leaf_keys([node], [node.position << (32 - node.depth)]).values():
            assert guess is not None
            with pytest.raises(InvalidTag):
                open_text(middle.sealed, guess, middle.key_id)


def test_a_key_lookup_reads_each_tree_once_and_gives_the_writers_keys() -> None:
    roots = {new_tree_id(): new_root() for _ in range(2)}
    by_tree: dict[str, dict[str, bytes]] = {}  # key id -> the key its writer sealed with
    for tree, root in roots.items():
        frontier = Frontier(root)
        by_tree[tree] = {}
        for _ in range(3):
            leaf, key = frontier.take()
            by_tree[tree][key_id(tree, leaf)] = key
    taken = {k: v for keys in by_tree.values() for k, v in keys.items()}
    single = "0b6f2f4e-8c0e-4d6a-9c1a-3f1e2d4c5b6a"  # a version-4 id: a single key of before
    first, second = sorted(roots)
    redacted = key_id(second, 1)
    lookup = KeyLookup([*taken, single, *taken])
    assert lookup.parameters() == {"trees": [first, second], "singles": [single]}
    stored = [
        {"id": first, "nodes": encode([Node(0, 0, roots[first])])},
        {"id": second, "nodes": encode(puncture([Node(0, 0, roots[second])], 1))},
    ]
    keys = lookup.keys(stored, [{"id": single, "key": b"k" * KEY_BYTES}])
    assert keys == {**taken, redacted: None, single: b"k" * KEY_BYTES}
    assert lookup.keys(stored[:1], []) == by_tree[first]  # a tree not stored gives none
