"""Decisions in the ledger: checking and recording what a decision cites (``contract.decisions``).

The update's validator refuses a citation of an event that does not precede the decision
(``event_not_found``) or of a step the task lacks (``step_not_found``), so a refused decision leaves
nothing in the history; the handler records each cited step's state and attempt.
"""

from __future__ import annotations

from collections.abc import Callable

from agent_tasks.contract import (
    Citations,
    CitesInput,
    RecordEventsInput,
    StepCitation,
    StepRecord,
)
from agent_tasks.contract.errors import ErrorCode, refusal

StepLookup = Callable[[str], StepRecord | None]
"""The ledger's step record by name (``Ledger.step``), None for a step the task lacks."""


def cite(step: StepLookup, cites: CitesInput, seq: int) -> Citations:
    """The citations of the decision recorded as event ``seq``: each cited seq from 1 to ``seq -
    1``, each cited step with its current state and attempt.

    Raises:
        ApplicationError: refusal ``event_not_found`` or ``step_not_found``.
    """
    for cited in cites.events:
        if not 1 <= cited < seq:
            raise refusal(
                ErrorCode.EVENT_NOT_FOUND,
                f"a decision recorded as seq {seq} cites seq {cited}: it cites earlier events",
            )
    steps = []
    for name in cites.steps:
        record = step(name)
        if record is None:
            raise refusal(ErrorCode.STEP_NOT_FOUND, f"the task has no step {name!r}")
        steps.append(StepCitation(name=name, state=record.state, attempt=record.attempt))
    return Citations(events=list(cites.events), steps=steps)


def check_citations(step: StepLookup, input: RecordEventsInput, last_seq: int) -> None:
    """Check every decision's citations in a write that would follow seq ``last_seq``.

    Raises:
        ApplicationError: as ``cite``.
    """
    for offset, event in enumerate(input.events):
        if event.cites is not None:
            cite(step, event.cites, last_seq + 1 + offset)
