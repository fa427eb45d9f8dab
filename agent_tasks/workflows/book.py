"""What the rooms of a task's ledger see of it (``Book``): the carried state, this run's part of the
log, and the write primitives; ``workflows.ledger.Ledger`` implements it, so the rooms import
nothing of the ledger."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel

from agent_tasks.contract import Event, EventInput, StepRecord, TaskState, WriteOutcome
from agent_tasks.workflows.steps import ClosedStep


class Book(Protocol):
    """A task's ledger as its rooms use it."""

    state: TaskState
    """The task's state, carried across continue-as-new."""
    run_events: list[Event]
    """This run's events: seqs ``run_first_seq`` to ``state.last_seq``."""
    run_first_seq: int
    """The first seq this run holds."""
    run_first_write: int
    """The write counter when this run started."""
    earlier_steps: dict[bytes, ClosedStep]
    """Steps closed in earlier runs, by ``step_key``."""

    def step(self, name: str) -> StepRecord | None:
        """The record of step ``name``, None when the task has no such step."""
        ...

    def check_write(self, request_id: str, input: BaseModel) -> None:
        """The state rules of every write but ``create`` (raises the refusal)."""
        ...

    def stored(self, request_id: str, input: BaseModel) -> WriteOutcome | None:
        """The stored outcome of ``request_id`` if ``input``'s digest matches, None if it is new."""
        ...

    def accept(
        self, request_id: str, digest: str, first_seq: int, last_seq: int, now: datetime
    ) -> None:
        """Count an accepted write and remember its request id."""
        ...

    def add_events(
        self, events: Sequence[EventInput], author: str, request_id: str, now: datetime
    ) -> WriteOutcome:
        """Append events with consecutive seqs (no checks, no request window)."""
        ...

    def append(self, events: Sequence[EventInput], key: str, now: datetime) -> WriteOutcome:
        """Record events written by the task's own workflow code under ``key``."""
        ...
