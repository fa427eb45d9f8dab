"""The mirror activity's contract. The activity lives in ``activities``; the workflow calls it
by name, so importing ``workflows`` never loads the Neo4j driver."""

from __future__ import annotations

from pydantic import BaseModel

MIRROR_ACTIVITY = "mirror_task"
"""Activity name of the Neo4j mirror."""
MIRROR_BATCH_EVENTS = 100
"""Runs recorded before the ``mirror-without-debounce-timer`` patch: the mirror ran once this
many events were waiting..."""
MIRROR_DEBOUNCE_MS = 200
"""...or this many milliseconds (workflow time) after the first waiting write."""
MIRROR_MAX_EVENTS = 500
"""Events one mirror activity call covers at most (it reads them in query pages)."""


class MirrorInput(BaseModel):
    """Input of the mirror activity: references only, never event bodies (the activity reads
    those back from the workflow by query)."""

    workflow_id: str
    """The task's workflow id."""
    run_id: str
    """The run whose state holds the events."""
    after_seq: int
    """Events with seq > after_seq ..."""
    up_to_seq: int
    """... and seq <= up_to_seq are mirrored."""
    after_write: int
    """Steps changed after this write counter are mirrored, with the task node."""


class MirrorOutcome(BaseModel):
    """What one mirror call wrote."""

    events: int
    """Events merged."""
    steps: int
    """Steps merged."""
