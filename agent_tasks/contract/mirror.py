"""The mirror activity's contract; the workflow calls the activity by name, so importing
``workflows`` never loads a graph store's driver."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_tasks.contract.limits import MAX_PAYLOAD_BYTES, PAGE_LIMIT_MAX
from agent_tasks.contract.views import Event, StepView, TaskView

MIRROR_ACTIVITY = "mirror_task"
"""Activity name of the graph-store mirror."""
MIRROR_BATCH_EVENTS = 100
"""Before the ``mirror-without-debounce-timer`` patch the mirror ran once this many events were
waiting..."""
MIRROR_DEBOUNCE_MS = 200
"""...or this many milliseconds (workflow time) after the first waiting write."""
MIRROR_MAX_EVENTS = 500
"""Events one mirror activity call covers at most (it reads them in query pages)."""


class MirrorInput(BaseModel):
    """Input of the mirror activity: references only; the activity reads event bodies back by
    query."""

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
    """The call follows its run (``mirror-follows-run`` patch): after ``up_to_seq`` it copies what
    each new workflow task writes, until the run is idle for ``MIRROR_FOLLOW_IDLE``, has been
    followed for ``MIRROR_FOLLOW_MAX``, or ends with everything copied (``MirrorPage.end``)."""
    history_token: str | None = None
    """The server's continuation token (base64) where the run's previous follower stopped reading
    its history: the next long poll starts there."""


class MirrorOutcome(BaseModel):
    """What one mirror call wrote, and how far the graph store now holds the run (later fields are
    optional, so recorded results decode)."""

    events: int
    """Events merged."""
    steps: int
    """Steps merged."""
    up_to_seq: int | None = None
    """Events up to this seq are in the graph store."""
    up_to_write: int | None = None
    """Every write up to this write counter is in the graph store."""
    end: bool = False
    """The last copy found the run ending (``MirrorPage.end``)."""
    history_token: str | None = None
    """A follower's position in the run's history (``MirrorInput.history_token``)."""


class MirrorQuery(BaseModel):
    """Query input of ``mirror_page``: the next page of what the mirror copies from a run."""

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
    """The page stops before its JSON passes this many bytes; a page without the view holds at least
    one step or event while any is left."""


class MirrorPage(BaseModel):
    """Query result of ``mirror_page``: the view (when asked), steps in name order, then (once every
    changed step is in) events in seq order."""

    view: TaskView | None = None
    """The task view, when ``MirrorQuery.with_view``."""
    steps: list[StepView] = []
    """Steps changed after ``after_write``, in name order after ``after_name``."""
    steps_done: bool = True
    """True when no changed step is left after this page's; events come only then."""
    events: list[Event] = []
    """Events of the asked range, in seq order."""
    end: bool = False
    """The run waits for the mirror call to end: the task is closed or about to continue as new."""
