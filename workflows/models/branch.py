"""The branch activity's contract (``branch_from``): a new task whose log starts as a copy of
another task's events up to a seq, copied by its own workflow in pages, each page read (and
sealed text sealed again under the branch's own keys) by the ``branch_events`` activity."""

from __future__ import annotations

from pydantic import BaseModel, Field

from workflows.models.inputs import EventInput
from workflows.models.text import ShortText

BRANCH_ACTIVITY = "branch_events"
"""Activity name of the read of one page of a branch's source events."""
BRANCH_PAGE_EVENTS = 200
"""Events copied per page at most (and at most ``MAX_PAYLOAD_BYTES`` of JSON)."""


class BranchQuery(BaseModel):
    """Input of ``branch_events``: references only."""

    source_workflow_id: str
    """The source task's workflow id."""
    target_workflow_id: str
    """The branch's workflow id (its sealed text is sealed under keys stored for it)."""
    after_seq: int
    """The page starts after this seq..."""
    up_to_seq: int
    """...and ends at this one at most (the branch point)."""


class BranchedEvent(BaseModel):
    """One copied event: who wrote it, and the event as the branch records it."""

    author: ShortText
    """The source event's author."""
    event: EventInput
    """Its kind, role, name, call id and text (its full length and SHA-256 kept; sealed text
    sealed again under a key of the branch; a decision's event citations kept, its step
    citations dropped: a branch has no steps)."""


class BranchPage(BaseModel):
    """Result of ``branch_events``: the next events of the source, in seq order."""

    events: list[BranchedEvent] = Field(default_factory=list)
    """At least one while any is left."""
