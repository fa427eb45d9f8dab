"""The mirror activity's contract. The activity lives in ``activities``; the workflow calls it
by name, so importing ``workflows`` never loads the Neo4j driver."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_tasks.contract.limits import MAX_PAYLOAD_BYTES, PAGE_LIMIT_MAX
from agent_tasks.contract.views import Event, StepView, TaskView

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
    follow: bool = False
    """The call follows its run (added later, by the ``mirror-follows-run`` patch): having
    copied up to ``up_to_seq`` it goes on copying what each new workflow task of the run
    wrote, until the run has been idle for ``MIRROR_FOLLOW_IDLE``, the call has followed for
    ``MIRROR_FOLLOW_MAX``, or the run ends (``MirrorPage.end``) with everything copied; its
    outcome says how far it got (``MirrorOutcome.up_to_seq``, ``up_to_write``)."""
    history_token: str | None = None
    """Where the run's previous follower stopped reading the run's history (the server's
    continuation token, base64): the next call's long poll starts there instead of reading the
    history from its first event again (added later)."""


class MirrorOutcome(BaseModel):
    """What one mirror call wrote, and how far Neo4j now holds the run (fields added later
    are optional: results of calls recorded before decode)."""

    events: int
    """Events merged."""
    steps: int
    """Steps merged."""
    up_to_seq: int | None = None
    """Events up to this seq are in Neo4j (the last copy's end)."""
    up_to_write: int | None = None
    """Every write up to this write counter is in Neo4j (the last copy's view)."""
    end: bool = False
    """The last copy found the run ending (``MirrorPage.end``)."""
    history_token: str | None = None
    """A follower's position in the run's history (``MirrorInput.history_token``)."""


class MirrorQuery(BaseModel):
    """Query input of ``mirror_page``: the next page of what the mirror copies from a run (one
    query per page, where the view, the steps and the events took one query each)."""

    after_seq: int = 0
    """Events with seq > after_seq ..."""
    up_to_seq: int | None = None
    """... and seq <= up_to_seq (None: the run's newest)."""
    after_write: int = 0
    """Steps changed after this write counter."""
    after_name: str | None = None
    """Of those, the steps whose name sorts after this one (the steps' paging cursor)."""
    with_view: bool = True
    """Include the task view (the first page of a mirror call)."""
    events: int = Field(default=100, ge=1, le=PAGE_LIMIT_MAX)
    """At most this many events."""
    max_bytes: int = Field(default=MAX_PAYLOAD_BYTES, ge=1, le=MAX_PAYLOAD_BYTES)
    """The page stops before its JSON passes this many bytes; a page without the view holds
    at least one step or event while any is left."""


class MirrorPage(BaseModel):
    """Query result of ``mirror_page``: the view (when asked), then steps in name order, then,
    once every changed step is in, events in seq order."""

    view: TaskView | None = None
    """The task view, when ``MirrorQuery.with_view``."""
    steps: list[StepView] = []
    """Steps changed after ``after_write``, in name order after ``after_name``."""
    steps_done: bool = True
    """True when no changed step is left after this page's; events come only then."""
    events: list[Event] = []
    """Events of the asked range, in seq order."""
    end: bool = False
    """The run waits for the mirror's call to end: the task is closed, or the run is to
    continue as new (a follower ends once it has copied everything; added later)."""
