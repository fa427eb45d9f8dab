"""The branch activities' contract (``branch_from``): a new task whose log starts as a copy of
another's events up to a seq, copied in pages by ``branch_events`` (sealed text sealed again under
the branch's keys)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_tasks.contract.human import ChildRecord
from agent_tasks.contract.inputs import EventInput
from agent_tasks.contract.kinds import StepKind, StepState
from agent_tasks.contract.text import ShortText

BRANCH_ACTIVITY = "branch_events"
"""Activity name of the read of one page of a branch's source events."""
BRANCH_PAGE_EVENTS = 200
"""Events copied per page at most (and at most ``MAX_PAYLOAD_BYTES`` of JSON)."""
BRANCH_REUSE_ACTIVITY = "branch_reuse"
"""Activity name of the read of what an agent task's branch reuses: steps settled and questions
answered before the branch point."""
BRANCH_REUSE_PAGE_STEPS = 200
"""Steps read per ``branch_reuse`` call at most (one ``set_steps`` write of the branch)."""


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
    """Its kind, role, name, call id and text (sealed text sealed again under a branch key; a
    decision's step citations dropped: a branch has no steps)."""


class BranchPage(BaseModel):
    """Result of ``branch_events``: the next events of the source, in seq order."""

    events: list[BranchedEvent] = Field(default_factory=list)
    """At least one while any is left."""


class BranchReuseQuery(BaseModel):
    """Input of ``branch_reuse``: references only."""

    source_workflow_id: str
    """The source task's workflow id."""
    up_to_seq: int
    """The branch point: what ended at this seq or before is reused."""
    after_name: str | None = None
    """The page starts after this step name (None: the first page, which also carries the answers
    and rounds)."""


class ReusedStep(BaseModel):
    """A step of the source that ended before the branch point, as the branch records it."""

    step_name: str
    """Its name (agent code's memo key)."""
    state: StepState
    """``completed`` or ``unknown`` (a settled outcome that is never run again on its own)."""
    kind: StepKind
    """What it does."""
    result_event_seq: int
    """Seq of its result event, the same in the branch (a copy up to the point)."""


class BranchReuse(BaseModel):
    """Result of ``branch_reuse``: a page of the source's steps settled before the branch point and,
    on the first page, its answers, rounds and ended children."""

    steps: list[ReusedStep] = Field(default_factory=list)
    """The page's settled steps whose result event is at the branch point or before."""
    next_after_name: str | None = None
    """The cursor of the next page; None at the end."""
    answers: dict[str, int] = Field(default_factory=dict)
    """Input request id -> seq of its accepted answer at the point or before (first page only)."""
    rounds: int = 0
    """The source's model calls (first page only), so a branch's new step never takes a reused
    name."""
    children: dict[str, ChildRecord] = Field(default_factory=dict)
    """Spawn key -> the source's child whose end was recorded by the point (first page only): a
    ``spawn`` of that key in the branch starts nothing and its wait reads that end."""
