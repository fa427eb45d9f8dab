"""Sealing event text: one AES-GCM data key per event, so that destroying the key removes the
text from everywhere the ciphertext went (crypto-shredding).

A history cannot be edited, so the text of an event reaches Temporal only sealed: the client
cleans and cuts the text as any payload (``bound_text``: the cut, the length and the SHA-256 are
of the plain text), seals the cut text with a fresh 256-bit key (AES-GCM from the
``cryptography`` library, a random 96-bit nonce, the key id as associated data), stores the
key in the key store (``DataKey`` nodes in Neo4j: ``taskgraph.keys``) and sends only the
ciphertext (``EventInput.sealed``, its own field, never cut). The mirror and the readers open
it with the key; ``HistoryRetention.redact_event`` destroys the key, after which the
ciphertext in the history, in the worker's cache and in every copy of the history is noise.

No Neo4j driver here (the key store is passed in, ``taskgraph.keys.KeyStore``): the client
imports this module.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from taskgraph.keys import KeyStore
from workflows.errors import GraphIncomplete, GraphNotConfigured
from workflows.models import Event, EventInput

KEY_BYTES = 32
"""AES-256: a 32-byte key per event."""
NONCE_BYTES = 12
"""The 96-bit nonce GCM is specified for (NIST SP 800-38D); each key seals one text only."""


class SealedEvent(NamedTuple):
    """An event input ready to send, and the data key that opens it."""

    input: EventInput
    """The input with ``sealed`` and ``key_id`` set and an empty payload."""
    key: bytes
    """The data key (``KEY_BYTES``), to store under ``input.key_id`` before the input is sent."""


def seal(event: EventInput) -> SealedEvent:
    """Seal an event input's (already cleaned and cut) payload under a new data key.

    Returns:
        the sealed input (its ``full_length`` and ``full_sha256`` are those of the plain text,
        as validation set them) and the key.
    """
    key_id = str(uuid.uuid4())
    key = AESGCM.generate_key(bit_length=8 * KEY_BYTES)
    nonce = os.urandom(NONCE_BYTES)
    ciphertext = AESGCM(key).encrypt(nonce, event.payload.encode("utf-8"), key_id.encode())
    sealed = event.model_copy(
        update={
            "payload": "",
            "sealed": base64.b64encode(nonce + ciphertext).decode("ascii"),
            "key_id": key_id,
        }
    )
    return SealedEvent(sealed, key)


def open_text(sealed: str, key: bytes, key_id: str) -> str:
    """The plain text of ``sealed`` (``seal``), opened with its key.

    Raises:
        cryptography.exceptions.InvalidTag: the key, the key id or the ciphertext is not the
            one sealed (AES-GCM authenticates all three).
    """
    blob = base64.b64decode(sealed)
    plain = AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], key_id.encode())
    return plain.decode("utf-8")


def unseal(events: Sequence[Event], keys: Mapping[str, bytes | None]) -> list[Event]:
    """``events`` as readers see them: each sealed one opened with its key from ``keys``
    (key id -> key, None for a key destroyed by a redaction), or, when its key was destroyed,
    redacted (empty payload, ``redacted`` True; length and hash kept). Plain events pass as
    they are.

    Raises:
        GraphIncomplete: a sealed event's key is not in ``keys`` at all (the key store lost
            it: restore Neo4j from a backup; the text cannot be recovered otherwise).
    """
    out = []
    for event in events:
        if event.sealed is None or event.key_id is None:
            out.append(event)
            continue
        if event.key_id not in keys:
            raise GraphIncomplete(
                f"the data key {event.key_id} of event seq {event.seq} is not in the key store "
                "(Neo4j): restore it from a backup"
            )
        key = keys[event.key_id]
        update: dict[str, object] = {"sealed": None, "payload": "", "redacted": True}
        if key is not None:
            update = {"sealed": None, "payload": open_text(event.sealed, key, event.key_id)}
        out.append(event.model_copy(update=update))
    return out


async def seal_events(
    graph: KeyStore, project_id: str, workflow_id: str, events: Sequence[EventInput]
) -> list[EventInput]:
    """Seal each plain event of ``events`` under a new data key and store the keys (one
    Neo4j transaction), before anything is sent; events sealed already pass as they are.

    Raises:
        neo4j.exceptions.Neo4jError, neo4j.exceptions.DriverError: the key store refused or
            did not answer (nothing was sent).
    """
    sealed = [seal(e) if e.sealed is None else None for e in events]
    keys = {s.input.key_id: s.key for s in sealed if s is not None and s.input.key_id}
    if keys:
        await graph.put_keys(project_id, workflow_id, keys)
    return [e if s is None else s.input for e, s in zip(events, sealed, strict=True)]


async def open_events(graph: KeyStore | None, project_id: str, events: list[Event]) -> list[Event]:
    """``events`` with their sealed text opened (``unseal``: a destroyed key leaves the event
    redacted), for every reader of events from a workflow (the client, the activities).

    Raises:
        GraphNotConfigured: an event is sealed and no graph (the key store) was given.
        GraphIncomplete: a sealed event's key is missing from the key store.
    """
    ids = [e.key_id for e in events if e.sealed is not None and e.key_id is not None]
    if not ids:
        return events
    if graph is None:
        raise GraphNotConfigured("sealed events are opened with the key store: pass graph=")
    return unseal(events, await graph.get_keys(project_id, ids))
