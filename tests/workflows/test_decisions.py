"""Decisions in the ledger (pure: no server): what a decision may cite, what the ledger records
of it, and event ids."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from agent_tasks.contract import (
    Citations,
    CitesInput,
    EventInput,
    EventKind,
    EventsQuery,
    RecordEventsInput,
    StepCitation,
    StepState,
    event_id,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.workflows import pages
from agent_tasks.workflows.decisions import check_citations
from tests.workflows.test_ledger import T0, events, new_ledger, refused, steps


def decision(statement: str, *, cites_events: list[int], cites_steps: list[str]) -> EventInput:
    return EventInput(
        kind=EventKind.DECISION,
        payload=statement,
        cites=CitesInput(events=cites_events, steps=cites_steps),
    )


def write(*inputs: EventInput, request_id: str) -> RecordEventsInput:
    return RecordEventsInput(agent_id="a", events=list(inputs), request_id=request_id)


def test_a_decision_records_its_citations_and_the_cited_steps_as_they_were() -> None:
    ledger = new_ledger()
    ledger.record_events(events("read the config", "it says 42", request_id="e"), T0)
    ledger.set_steps(steps(("read", "in_progress"), request_id="s1"), T0)
    ledger.set_steps(steps(("read", "completed"), request_id="s2", result_event_seq=2), T0)
    ledger.set_steps(steps(("check", "failed"), request_id="s3"), T0)
    first = decision("use 42", cites_events=[1, 2], cites_steps=["read", "check"])
    second = decision("and log it", cites_events=[3], cites_steps=[])
    outcome = ledger.record_events(write(first, second, request_id="d"), T0 + timedelta(1))
    assert (outcome.first_seq, outcome.last_seq, outcome.time) == (3, 4, T0 + timedelta(1))
    recorded = pages.events_page(ledger, EventsQuery(after_seq=2)).events
    assert recorded[0].cites == Citations(
        events=[1, 2],
        steps=[
            StepCitation(name="read", state=StepState.COMPLETED, attempt=1),
            StepCitation(name="check", state=StepState.FAILED, attempt=0),
        ],
    )
    assert recorded[0].payload == "use 42" and recorded[0].kind is EventKind.DECISION
    # A decision may cite an earlier decision of the same write.
    assert recorded[1].cites == Citations(events=[3], steps=[])


def test_a_decision_cites_only_earlier_events_and_existing_steps() -> None:
    ledger = new_ledger()
    ledger.record_events(events("one", request_id="e"), T0)
    ledger.set_steps(steps(("s", "completed"), request_id="s"), T0)
    for cited in (2, 0, -1):  # itself, no seq 0, nothing negative
        bad = write(decision("x", cites_events=[cited], cites_steps=[]), request_id=f"b{cited}")
        refused(ErrorCode.EVENT_NOT_FOUND, lambda bad=bad: check_citations(ledger.step, bad, 1))
        refused(ErrorCode.EVENT_NOT_FOUND, lambda bad=bad: ledger.record_events(bad, T0))
    later = write(
        EventInput(kind=EventKind.NOTE, payload="n"),
        decision("x", cites_events=[2], cites_steps=[]),  # seq 3 cites seq 2 of the same write
        request_id="ok",
    )
    check_citations(ledger.step, later, 1)
    missing = write(decision("x", cites_events=[1], cites_steps=["nope"]), request_id="m")
    refused(ErrorCode.STEP_NOT_FOUND, lambda: check_citations(ledger.step, missing, 1))
    refused(ErrorCode.STEP_NOT_FOUND, lambda: ledger.record_events(missing, T0))
    assert ledger.state.last_seq == 1  # the refused writes added nothing


def test_only_a_decision_cites() -> None:
    with pytest.raises(ValueError, match="only a decision cites"):
        EventInput(kind=EventKind.NOTE, payload="x", cites=CitesInput(events=[1]))
    with pytest.raises(ValueError):  # at most 100 citations of each kind
        CitesInput(events=list(range(1, 102)))


def test_event_ids_are_uuid5_of_the_workflow_id_and_seq() -> None:
    ledger = new_ledger()
    ledger.record_events(events("a", "b", request_id="e"), T0)
    recorded = pages.events_page(ledger, EventsQuery()).events
    namespace = uuid.UUID("e946b89d-87cc-466d-88ba-1bb8a242992c")
    expected = [str(uuid.uuid5(namespace, f"agent-task/p/t#{seq}")) for seq in (1, 2)]
    assert [e.id for e in recorded] == expected == [event_id("agent-task/p/t", s) for s in (1, 2)]
    assert uuid.UUID(expected[0]).version == 5
    assert event_id("agent-task/p/u", 1) != expected[0]
