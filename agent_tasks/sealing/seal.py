"""Sealing event text: a data key per event, so that destroying the key removes the text from
everywhere the ciphertext went (crypto-shredding).

A history cannot be edited, so the text of an event reaches Temporal only sealed: the client
cleans and cuts the text as any payload (``bound_text``: the cut, the length and the SHA-256 are
of the plain text), seals the cut text with the event's own 256-bit key (AES-GCM from the
``cryptography`` library, a random 96-bit nonce, the key id as associated data) and sends only
the ciphertext (``EventInput.sealed``, its own field, never cut). The mirror and the readers
open it with the key; ``HistoryRetention.redact_event`` destroys the key, after which the
ciphertext in the history, in the worker's cache and in every copy of the history is noise.

The keys are the leaves of a key tree (``sealing.keytree``): one per process and task, its
root stored in the key store (``taskgraph.neo4j.keys``) before the first event it seals is sent,
once; every later event is sealed with the next leaf, with no round trip to the key store.
So a process that has written to a task goes on writing to it sealed through a Neo4j outage
of any length, and a write never waits on Neo4j for longer than ``KEY_STORE_WAIT_S`` (a first
write to a task whose tree could not be stored in that time is refused
``key_store_unavailable``: never plain text in its place). A process keeps the trees of its
``KEY_TREES_HELD`` most recently written tasks; an older one's next write stores a new tree.

No Neo4j driver here (the key store is passed in, ``taskgraph.neo4j.keys.KeyStore``): the client
imports this module.
"""

from __future__ import annotations

import asyncio
import base64
import os
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agent_tasks.contract import Event, EventInput
from agent_tasks.contract.errors import GraphIncomplete, GraphNotConfigured, ServiceUnavailable
from agent_tasks.sealing.keys import KeyStore
from agent_tasks.sealing.keytree import (
    PAGE_LEAF,
    SECRET_BYTES,
    Frontier,
    key_id,
    key_ids,
    new_root,
    new_tree_id,
)

KEY_BYTES = SECRET_BYTES
"""AES-256: a 32-byte key per event (a key tree's leaf)."""
NONCE_BYTES = 12
"""The 96-bit nonce GCM is specified for (NIST SP 800-38D); each key seals one text only."""
KEY_STORE_WAIT_S = 2.0
"""The longest a write waits for the key store to store a task's new key tree (seconds); a
write past it, or while an earlier attempt has been waiting longer, is refused
``key_store_unavailable`` (the attempt goes on: once it is stored, writes go on)."""
KEY_TREES_HELD = 4_096
"""Tasks whose key tree a process keeps (about 5 KB each, the least recently written left
first)."""


class KeyStoreUnavailable(ServiceUnavailable):
    """The key store did not store a task's key tree within ``KEY_STORE_WAIT_S``, or refused
    it: the write that needed it sends nothing (``ErrorCode.KEY_STORE_UNAVAILABLE``)."""


def seal(event: EventInput, key: bytes, key_id: str) -> EventInput:
    """Seal an event input's (already cleaned and cut) payload under ``key`` (``KEY_BYTES``)
    named ``key_id``.

    Returns:
        the sealed input: empty payload, ``sealed`` and ``key_id`` set, its ``full_length``
        and ``full_sha256`` those of the plain text, as validation set them.
    """
    nonce = os.urandom(NONCE_BYTES)
    ciphertext = AESGCM(key).encrypt(nonce, event.payload.encode("utf-8"), key_id.encode())
    return event.model_copy(
        update={
            "payload": "",
            "sealed": base64.b64encode(nonce + ciphertext).decode("ascii"),
            "key_id": key_id,
        }
    )


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


class _Trees:
    """The key trees a process seals with through one key store: per task (workflow id), the
    tree's id and its writer's ``Frontier``, and the storing of a new one."""

    def __init__(self) -> None:
        self.held: OrderedDict[str, tuple[str, Frontier]] = OrderedDict()
        self.storing: dict[str, tuple[float, asyncio.Future[tuple[str, Frontier]]]] = {}


_TREES: weakref.WeakKeyDictionary[KeyStore, _Trees] = weakref.WeakKeyDictionary()
"""Per key store (a ``TaskGraph``): the trees this process seals with."""


async def _store(store: KeyStore, project_id: str, workflow_id: str) -> tuple[str, Frontier]:
    tree_id, root = new_tree_id(), new_root()
    await store.put_tree(project_id, workflow_id, tree_id, root)
    return tree_id, Frontier(root)


async def _tree(store: KeyStore, project_id: str, workflow_id: str) -> tuple[str, Frontier]:
    """The task's key tree: held, or stored now (one transaction, waited for at most
    ``KEY_STORE_WAIT_S`` counted from the attempt's start, shared by concurrent writes).

    Raises:
        KeyStoreUnavailable: not stored in time, or refused.
    """
    trees = _TREES.setdefault(store, _Trees())
    held = trees.held.get(workflow_id)
    if held is not None:
        trees.held.move_to_end(workflow_id)
        return held
    loop = asyncio.get_running_loop()
    began, storing = trees.storing.get(workflow_id, (0.0, None))
    if storing is None or (storing.done() and storing.exception() is not None):
        began = loop.time()
        storing = asyncio.ensure_future(_store(store, project_id, workflow_id))
        storing.add_done_callback(lambda done: done.cancelled() or done.exception())
        trees.storing[workflow_id] = (began, storing)
    try:
        wait = max(began + KEY_STORE_WAIT_S - loop.time(), 0.0)
        held = await asyncio.wait_for(asyncio.shield(storing), wait)
    except TimeoutError as err:
        raise KeyStoreUnavailable(
            f"the key store (Neo4j) did not store the key tree of {workflow_id} within "
            f"{KEY_STORE_WAIT_S:g} s"
        ) from err
    except Exception as err:  # the driver's errors: this module loads no driver
        raise KeyStoreUnavailable(f"the key store (Neo4j) refused a key tree: {err}") from err
    trees.storing.pop(workflow_id, None)
    trees.held[workflow_id] = held
    while len(trees.held) > KEY_TREES_HELD:
        trees.held.popitem(last=False)
    return held


async def seal_events(
    store: KeyStore, project_id: str, workflow_id: str, events: Sequence[EventInput]
) -> list[EventInput]:
    """Seal each plain event of ``events`` with the next leaf of the task's key tree (stored
    first when this process has none: ``_tree``); events sealed already pass as they are.
    Needs the key store at most once per process and task.

    Raises:
        KeyStoreUnavailable: the task's tree was needed and not stored (nothing was sent).
    """
    if all(e.sealed is not None for e in events):
        return list(events)
    tree_id, frontier = await _tree(store, project_id, workflow_id)
    ids = key_ids(tree_id)
    sealed = []
    for event in events:
        if event.sealed is None:
            leaf, key = frontier.take()
            event = seal(event, key, ids(leaf))
        sealed.append(event)
    return sealed


def page_signer(store: KeyStore, workflow_id: str) -> tuple[str, bytes] | None:
    """The key this process signs its published pages of a task with (``PAGE_LEAF`` of the
    task's key tree it holds: its key id and key), or None when it holds no tree of the task
    (it has sealed nothing for it through ``store``, or has let the tree go)."""
    trees = _TREES.get(store)
    held = None if trees is None else trees.held.get(workflow_id)
    if held is None:
        return None
    tree_id, frontier = held
    return key_id(tree_id, PAGE_LEAF), frontier.page_key


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
