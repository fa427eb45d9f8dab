"""The graph store's part of redaction and deletion (``starter.retention.HistoryRetention``):
the results of the port's ``RetentionStore`` (``taskgraph.port``), which each adapter implements
(Neo4j: ``taskgraph.neo4j_retention``; FalkorDB: ``taskgraph.falkor``).

- ``redact``: in one transaction that first locks the task node (so no mirror write of the
  same task interleaves: ``TaskGraph.write_task``), empties the event's payload (its seq,
  length and hash stay), destroys its data key (its key tree's leaf punctured; a single key of
  before loses its bytes, its ``DataKey`` node kept as a tombstone) and returns the decisions
  that cite it.
- ``tombstone``: a ``TaskTombstone`` node keeps a deleted task's name taken for ever; written
  before anything is deleted, and locking the task node, so from then on the mirror refuses
  to write the task (``TaskIncarnationError``) and a new task of that name is refused.
- ``delete_task_nodes``: the task's decisions (deleted, or kept and detached), events, steps,
  key trees (and single data keys of before) and node, in transactions of at most
  ``DELETE_BATCH`` nodes (a large task in one transaction outgrows Neo4j's transaction
  memory).
"""

from __future__ import annotations

from pydantic import BaseModel

DELETE_BATCH = 5_000
"""Nodes deleted per transaction (or per statement, in a store without transactions)."""


class EventLocation(BaseModel):
    """Where an event id points: its task and seq, and whether its text can be redacted."""

    task_key: str
    """The task's workflow id."""
    task_name: str
    """The task's name."""
    seq: int
    """The event's seq."""
    key_id: str | None
    """Its data key (None: a plain-text event)."""
    redacted: bool
    """True when it was redacted already."""


class NameState(BaseModel):
    """What the graph store knows of a task name (``name_state``)."""

    deleted: bool
    """A task of that name was deleted (``TaskTombstone``)."""
    mirrored: bool
    """A task of that name is in the graph store."""


class GraphDeletion(BaseModel):
    """What ``delete_task_nodes`` removed."""

    events: int = 0
    """Event nodes deleted (decisions deleted with them included)."""
    steps: int = 0
    """Step nodes deleted."""
    keys: int = 0
    """Key store nodes destroyed (key trees, and single data keys of before)."""
    decisions: list[str] = []
    """Ids of the task's decisions (deleted, or kept and detached)."""
