"""What a decision cites: the citations a writer sends and the ones the ledger records.

A decision is an event of kind ``decision`` citing earlier events by seq and steps by name. Each
cited step is recorded with its state and attempt at that moment, so a reader can tell that the step
changed since (every transition changes one of them) and the decision needs review.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from agent_tasks.contract.kinds import StepState
from agent_tasks.contract.limits import MAX_CITATIONS
from agent_tasks.contract.text import StepName


class CitesInput(BaseModel):
    """What a decision cites, as written (``EventInput.cites``)."""

    model_config = ConfigDict(extra="forbid")

    events: list[StrictInt] = Field(default_factory=list, max_length=MAX_CITATIONS)
    """Seqs of earlier events of the task (the client turns cited event ids into seqs)."""
    steps: list[StepName] = Field(default_factory=list, max_length=MAX_CITATIONS)
    """Names of steps of the task."""


class StepCitation(BaseModel):
    """A cited step as it was when the decision was recorded."""

    name: str
    """The step's name."""
    state: StepState
    """Its state then."""
    attempt: int
    """Its attempt then."""


class Citations(BaseModel):
    """What a recorded decision cites (``Event.cites``)."""

    events: list[int] = []
    """Seqs of the cited events, as written."""
    steps: list[StepCitation] = []
    """The cited steps with their state and attempt at the decision."""
