"""The ledger as a pure object: no Temporal server, no Neo4j. The workflow's handlers call the
same methods, so these are the rules every write follows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from agent_tasks.contract import (
    MIRROR_ERROR_CHARS,
    REQUEST_WINDOW,
    EventInput,
    EventsQuery,
    FinishTaskInput,
    MirrorOutcome,
    MirrorQuery,
    RecordEventsInput,
    RequestLookup,
    SetStepsInput,
    StepsQuery,
    StepState,
    StepWrite,
    TaskStart,
    TaskStatus,
    WriteOutcome,
    args_digest,
    model_size,
)
from agent_tasks.contract.errors import DUPLICATE, ErrorCode
from agent_tasks.workflows import mirroring, pages
from agent_tasks.workflows.ledger import Ledger

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
DONE = MirrorOutcome(events=0, steps=0)
"""A one-shot mirror call's outcome (its target says what it copied)."""
START = TaskStart(project_id="p", name="t", goal="g", agent_id="a", request_id="create")


def new_ledger() -> Ledger:
    ledger = Ledger.new(START, "agent-task/p/t", T0)
    ledger.create(START, T0)
    return ledger


def events(*payloads: str, request_id: str) -> RecordEventsInput:
    return RecordEventsInput(
        agent_id="a",
        events=[EventInput(kind="message", role="user", payload=p) for p in payloads],
        request_id=request_id,
    )


def steps(*writes: tuple[str, str], request_id: str, **extra: object) -> SetStepsInput:
    return SetStepsInput(
        agent_id="a",
        steps=[StepWrite.model_validate({"step_name": n, "state": s, **extra}) for n, s in writes],
        request_id=request_id,
    )


def refused(code: ErrorCode, call: object) -> None:
    assert callable(call)
    with pytest.raises(ApplicationError) as caught:
        call()
    assert caught.value.type == code.value, caught.value


def test_events_get_consecutive_seqs_and_the_write_time() -> None:
    ledger = new_ledger()
    one = ledger.record_events(events("a", request_id="r1"), T0)
    later = T0 + timedelta(seconds=5)
    two = ledger.record_events(events("b", "c", request_id="r2"), later)
    assert (one.first_seq, one.last_seq, two.first_seq, two.last_seq) == (1, 1, 2, 3)
    page = pages.events_page(ledger, EventsQuery(after_seq=0))
    assert [(e.seq, e.payload, e.time, e.request_id) for e in page.events] == [
        (1, "a", T0, "r1"),
        (2, "b", later, "r2"),
        (3, "c", later, "r2"),
    ]
    assert pages.view(ledger).last_seq == 3 and pages.view(ledger).updated_at == later


def test_a_repeated_request_id_is_a_duplicate_and_writes_nothing() -> None:
    ledger = new_ledger()
    first = ledger.record_events(events("a", request_id="r"), T0)
    with pytest.raises(ApplicationError) as caught:
        ledger.record_events(events("a", request_id="r"), T0)
    assert caught.value.type == DUPLICATE
    assert caught.value.details[0] == WriteOutcome(
        first_seq=first.first_seq, last_seq=first.last_seq, duplicate=True
    )
    assert ledger.state.last_seq == 1 and ledger.state.writes == 2  # create + one write
    assert first.writes == 2  # the counter once it was taken: the mirror's page (its result)
    refused(
        ErrorCode.REQUEST_ID_REUSED,
        lambda: ledger.record_events(events("other", request_id="r"), T0),
    )
    unnamed = events("x", request_id="")
    refused(ErrorCode.INVALID_REQUEST_ID, lambda: ledger.check_write("", unnamed))


class Undigestable(RecordEventsInput):
    """A write whose arguments digest cannot be taken: taking it fails the test."""

    def model_dump(self, **_: Any) -> dict[str, Any]:
        raise AssertionError("the arguments digest was computed")


def test_the_digest_of_a_write_is_taken_only_for_a_request_id_seen_before() -> None:
    # a validator checks every write before it is accepted: for a new request id, the
    # common case, the window has nothing to compare, so the digest (about 2 ms for 200
    # events) is not taken; for an id it holds, it is
    ledger = new_ledger()
    ledger.record_events(events("a", request_id="seen"), T0)
    fresh = Undigestable(**events("b", request_id="fresh").model_dump())
    ledger.check_write("fresh", fresh)
    assert ledger.stored("fresh", fresh) is None
    again = Undigestable(**events("a", request_id="seen").model_dump())
    with pytest.raises(AssertionError, match="digest was computed"):
        ledger.check_write("seen", again)


def test_create_rules() -> None:
    ledger = new_ledger()
    with pytest.raises(ApplicationError) as again:
        ledger.check_create(START)
    assert again.value.type == DUPLICATE and again.value.details[0].created
    other_id = START.model_copy(update={"request_id": "create-2"})
    with pytest.raises(ApplicationError) as same_goal:
        ledger.check_create(other_id)
    assert same_goal.value.details[0] == WriteOutcome(duplicate=True)
    refused(
        ErrorCode.TASK_EXISTS,
        lambda: ledger.check_create(START.model_copy(update={"goal": "x", "request_id": "c3"})),
    )


def test_step_attempts_keys_and_validity() -> None:
    ledger = new_ledger()
    ledger.record_events(events("out", request_id="e"), T0)
    ledger.set_steps(steps(("s", "in_progress"), request_id="s1"), T0)
    ledger.set_steps(steps(("s", "failed"), request_id="s2", result_event_seq=1), T0)
    ledger.set_steps(steps(("s", "in_progress"), request_id="s3"), T0)
    (view,) = pages.steps_page(ledger, StepsQuery()).steps
    assert (view.state, view.attempt, view.result_event_seq) == (StepState.IN_PROGRESS, 2, None)
    assert view.idempotency_key == "agent-task/p/t/s/2"
    refused(
        ErrorCode.INVALID_TRANSITION,
        lambda: ledger.set_steps(steps(("s", "in_progress"), request_id="s4"), T0),
    )
    refused(
        ErrorCode.EVENT_NOT_FOUND,
        lambda: ledger.set_steps(
            steps(("s", "completed"), request_id="s5", result_event_seq=2), T0
        ),
    )
    refused(
        ErrorCode.STEP_KIND_CHANGED,
        lambda: ledger.set_steps(steps(("s", "completed"), request_id="s6", kind="read"), T0),
    )
    ledger.set_steps(steps(("s", "completed"), request_id="s7", result_event_seq=1), T0)
    (done,) = pages.steps_page(ledger, StepsQuery()).steps
    assert (done.result_validity.value, done.attempt) == ("valid", 2)
    assert pages.view(ledger).step_counts[StepState.COMPLETED] == 1


def test_a_refused_step_batch_changes_nothing() -> None:
    ledger = new_ledger()
    before = ledger.state.model_copy(deep=True)
    refused(
        ErrorCode.INVALID_TRANSITION,
        lambda: ledger.set_steps(steps(("a", "completed"), ("a", "failed"), request_id="x"), T0),
    )
    assert ledger.state == before


def test_finish_closes_the_task() -> None:
    ledger = new_ledger()
    finish = FinishTaskInput(agent_id="a", status="done", result="ok", request_id="f")
    ledger.finish(finish, T0)
    view = pages.view(ledger)
    assert ledger.closed and view.status is TaskStatus.DONE
    assert view.result is not None and view.result.text == "ok"
    refused(ErrorCode.TASK_CLOSED, lambda: ledger.record_events(events("late", request_id="l"), T0))
    stored = ledger.request_outcome(RequestLookup(request_id="f", digest=args_digest(finish)))
    assert stored == WriteOutcome(duplicate=True)


def test_the_request_window_forgets_the_oldest_first() -> None:
    ledger = new_ledger()
    for i in range(REQUEST_WINDOW):
        ledger.record_events(events(str(i), request_id=f"r{i}"), T0)
    assert len(ledger.state.requests) == REQUEST_WINDOW
    oldest = events("0", request_id="r0")
    # The creating request and r0 were the two oldest; the window dropped the creation only.
    assert ledger.request_outcome(RequestLookup(request_id="r0", digest=args_digest(oldest)))
    ledger.record_events(events("new", request_id="r-new"), T0)
    assert (
        ledger.request_outcome(RequestLookup(request_id="r0", digest=args_digest(oldest))) is None
    )


def test_mirror_watermarks() -> None:
    ledger = new_ledger()
    ledger.record_events(events("a", "b", request_id="r"), T0)
    assert ledger.unmirrored and ledger.unmirrored_events == 2
    target = mirroring.mirror_target(ledger.state, "run-1", max_events=500)
    assert (target.input.run_id, target.input.after_seq, target.input.up_to_seq) == ("run-1", 0, 2)
    mirroring.mirrored(ledger.state, target, MirrorOutcome(events=2, steps=0))
    assert not ledger.unmirrored and pages.view(ledger).unmirrored_writes == 0


def test_a_follower_reports_how_far_it_got() -> None:
    ledger = new_ledger()
    ledger.record_events(events("a", "b", request_id="r"), T0)
    target = mirroring.mirror_target(
        ledger.state, "run-1", max_events=1, follow=True, history_token="dG9r"
    )
    # a follower copies the whole run whatever max_events says, from the last position
    assert (target.input.follow, target.input.up_to_seq, target.input.history_token) == (
        True,
        2,
        "dG9r",
    )
    ledger.record_events(events("c", request_id="r2"), T0)  # taken while it followed
    mirroring.mirrored(
        ledger.state, target, MirrorOutcome(events=3, steps=0, up_to_seq=3, up_to_write=3)
    )
    assert (ledger.state.mirrored_seq, ledger.state.mirrored_write) == (3, 3)
    assert not ledger.unmirrored
    # an outcome that says less than the target (a call recorded before the fields) keeps it
    ledger.record_events(events("d", request_id="r3"), T0)
    target = mirroring.mirror_target(ledger.state, "run-1", max_events=500, follow=True)
    mirroring.mirrored(ledger.state, target, MirrorOutcome(events=1, steps=0))
    assert (ledger.state.mirrored_seq, ledger.state.mirrored_write) == (4, 4)
    # a backlog run (a closed run) is never followed
    ledger.record_events(events("e", request_id="r4"), T0)
    carried = Ledger(ledger.carry_over("run-1"))
    backlog = mirroring.mirror_target(carried.state, "run-2", max_events=500, follow=True)
    assert backlog.from_backlog and not backlog.input.follow


def test_a_run_continues_without_the_mirror_and_the_next_run_copies_its_backlog() -> None:
    ledger = new_ledger()
    ledger.record_events(events("a", "b", "c", request_id="r1"), T0)
    first = mirroring.mirror_target(ledger.state, "run-1", max_events=2)
    mirroring.mirrored(
        ledger.state, first, DONE
    )  # seqs 1..2 in Neo4j, seq 3 and the writes after it not yet
    ledger.set_steps(steps(("s", "in_progress"), request_id="s1"), T0)
    carried = ledger.carry_over("run-1")
    assert carried.runs == 2
    assert [r.model_dump() for r in carried.mirror_backlog] == [
        {"run_id": "run-1", "after_seq": 2, "up_to_seq": 3, "after_write": 0, "up_to_write": 3}
    ]
    # The next run takes writes at once and mirrors run-1's rest before its own.
    nxt = Ledger(carried.model_copy(deep=True))
    nxt.record_events(events("d", request_id="r2"), T0)
    backlog = mirroring.mirror_target(nxt.state, "run-2", max_events=500)
    assert (backlog.input.run_id, backlog.input.after_seq, backlog.input.up_to_seq) == (
        "run-1",
        2,
        3,
    )
    assert backlog.from_backlog and backlog.up_to_write == 3
    mirroring.mirrored(nxt.state, backlog, DONE)
    assert nxt.state.mirror_backlog == [] and nxt.unmirrored
    own = mirroring.mirror_target(nxt.state, "run-2", max_events=500)
    assert (own.input.run_id, own.input.after_seq, own.input.up_to_seq, own.up_to_write) == (
        "run-2",
        3,
        4,
        4,
    )
    mirroring.mirrored(nxt.state, own, DONE)
    assert not nxt.unmirrored
    # A run with nothing unmirrored carries no backlog.
    assert nxt.carry_over("run-2").mirror_backlog == []


def test_mirror_errors_are_bounded() -> None:
    ledger = new_ledger()
    mirroring.mirror_failed(ledger.state, "x" * 100_000)
    assert pages.view(ledger).mirror_error == "x" * MIRROR_ERROR_CHARS


def test_mirror_page_holds_view_steps_then_events_within_its_bytes() -> None:
    ledger = new_ledger()
    ledger.record_events(
        events(*(f"event {n} " + "x" * 1000 for n in range(6)), request_id="e"), T0
    )
    ledger.set_steps(steps(("b", "in_progress"), ("a", "completed"), request_id="s"), T0)
    whole = pages.mirror_page(ledger, MirrorQuery())
    assert whole.view == pages.view(ledger)
    assert [s.step_name for s in whole.steps] == ["a", "b"] and whole.steps_done
    assert [e.seq for e in whole.events] == [1, 2, 3, 4, 5, 6]
    # a budget of the view, both steps and two events: the page stops before the third
    sizes = [model_size(m) for m in (whole.view, *whole.steps, *whole.events)]
    budget = sum(sizes[:5])
    page = pages.mirror_page(ledger, MirrorQuery(max_bytes=budget))
    assert [e.seq for e in page.events] == [1, 2] and page.steps_done
    # too small for the first step: no steps, no events; without the view, one step at least
    tight = pages.mirror_page(ledger, MirrorQuery(max_bytes=sizes[0]))
    assert (tight.steps, tight.steps_done, tight.events) == ([], False, [])
    rest = pages.mirror_page(ledger, MirrorQuery(max_bytes=1, with_view=False))
    assert rest.view is None and [s.step_name for s in rest.steps] == ["a"]
    assert not rest.steps_done and rest.events == []
    last = pages.mirror_page(ledger, MirrorQuery(max_bytes=1, with_view=False, after_name="a"))
    assert [s.step_name for s in last.steps] == ["b"] and last.steps_done and last.events == []
    # once the steps are in (none changed after write 3, the set_steps): one event at least
    events_only = pages.mirror_page(
        ledger, MirrorQuery(max_bytes=1, with_view=False, after_write=3, after_seq=3, up_to_seq=5)
    )
    assert [e.seq for e in events_only.events] == [4]
    capped = pages.mirror_page(
        ledger, MirrorQuery(after_write=3, after_seq=3, up_to_seq=5, events=5)
    )
    assert [e.seq for e in capped.events] == [4, 5]
