"""Pure rules of the task model: payload bounding, text cleaning, ids, validation."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from agent_tasks.contract import (
    MAX_PAYLOAD_CHARS,
    EventInput,
    FinishTaskInput,
    ResultValidity,
    StepState,
    StepWrite,
    TaskStart,
    bound_text,
    clean_text,
    task_workflow_id,
    valid_request_id,
)
from agent_tasks.workflows import children, inbox
from agent_tasks.workflows.steps import STEP_TRANSITIONS, result_validity

EMOJI = "\U0001f600"  # 4 bytes in UTF-8
CJK = "\u6f22"  # 3 bytes in UTF-8


@pytest.mark.parametrize("length", [31_999, 32_000, 32_001])
def test_payload_cut_at_32000_characters_with_multibyte_at_the_cut(length: int) -> None:
    # The multi-byte characters sit at positions 31,999 and 32,000 (0-based), across the cut.
    text = ("a" * 31_999 + EMOJI + CJK + "b" * 10)[:length]
    bounded = bound_text(text)
    assert bounded.text == text[:32_000]
    assert len(bounded.text) == min(length, 32_000)
    assert bounded.full_length == length
    assert bounded.full_sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert bounded.truncated is (length > 32_000)
    bounded.text.encode("utf-8")  # a whole character, never half of one
    if length >= 32_000:
        assert bounded.text[-1] == EMOJI


def test_lone_surrogates_become_replacement_characters_and_pairs_are_joined() -> None:
    lone = "x\ud800y\udfffz"
    assert clean_text(lone) == "x\ufffdy\ufffdz"
    pair = "a\ud83d\ude00b"  # an emoji written as two surrogate code points
    assert clean_text(pair) == "a" + EMOJI + "b"
    bounded = bound_text(lone)
    assert bounded.full_sha256 == hashlib.sha256("x\ufffdy\ufffdz".encode()).hexdigest()
    assert bounded.full_length == 5


def test_event_input_bounds_payload_and_keeps_an_earlier_cut() -> None:
    big = "é" * 100_000
    event = EventInput(kind="tool_result", payload=big)
    assert len(event.payload) == MAX_PAYLOAD_CHARS
    assert event.full_length == 100_000
    assert event.full_sha256 == hashlib.sha256(big.encode()).hexdigest()
    again = EventInput.model_validate(event.model_dump())
    assert again == event  # the workflow sees the client's cut with the original hash


def test_event_input_recomputes_a_wrong_hash_of_an_uncut_payload() -> None:
    event = EventInput(kind="message", payload="hi", full_length=2, full_sha256="0" * 64)
    assert event.full_sha256 == hashlib.sha256(b"hi").hexdigest()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"kind": "telepathy"}, "kind"),
        ({"kind": "message", "payload": 42}, "payload"),
        ({"kind": "message", "payload": b"bytes"}, "payload"),
        ({"kind": "message", "role": "robot"}, "role"),
        ({"kind": "tool_call", "name": ""}, "name"),
        ({"kind": "tool_call", "name": "n" * 129}, "name"),
    ],
)
def test_bad_event_fields_are_named(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        EventInput.model_validate(data)
    assert err.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"step_name": "s", "state": "done"}, "state"),
        ({"step_name": "s", "state": "completed", "result_event_seq": "3"}, "result_event_seq"),
        ({"step_name": "s", "state": "completed", "result_event_seq": 1.5}, "result_event_seq"),
        ({"step_name": "", "state": "completed"}, "step_name"),
        ({"step_name": "s", "state": "completed", "kind": "magic"}, "kind"),
    ],
)
def test_bad_step_fields_are_named(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        StepWrite.model_validate(data)
    assert err.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize("name", ["", "x" * 201, "tab\there", "nul\x00"])
def test_bad_task_names_are_refused(name: str) -> None:
    with pytest.raises(ValidationError) as err:
        TaskStart(project_id="p", name=name, goal="g", agent_id="a", request_id="r")
    assert "name" in str(err.value)


@pytest.mark.parametrize("project_id", ["", "a/b", "-x", "x" * 65, "sp ace"])
def test_bad_project_ids_are_refused(project_id: str) -> None:
    with pytest.raises(ValidationError) as err:
        TaskStart(project_id=project_id, name="n", goal="g", agent_id="a", request_id="r")
    assert err.value.errors()[0]["loc"] == ("project_id",)


def test_finish_refuses_open_status() -> None:
    with pytest.raises(ValidationError):
        FinishTaskInput(agent_id="a", status="open", request_id="r")


def test_workflow_ids_do_not_collide() -> None:
    pairs = [("a", "b/c"), ("a.b", "c"), ("a", "b.c"), ("ab", "c"), ("a", "bc")]
    ids = {task_workflow_id(p, n) for p, n in pairs}
    assert len(ids) == len(pairs)
    assert task_workflow_id("proj", "my task") == "agent-task/proj/my task"


def test_a_workflow_id_over_255_characters_is_cut_with_the_names_digest() -> None:
    project = "p" * 64
    fits = "n" * (255 - len("agent-task/") - 65)  # a plain id of exactly 255
    assert task_workflow_id(project, fits) == f"agent-task/{project}/{fits}"
    name = "n" * 150 + EMOJI * 50  # 200 characters, a plain id of 276
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    cut = task_workflow_id(project, name)
    assert cut == f"agent-task/{project}/{'n' * 150}{EMOJI * 12}~{digest}"
    assert len(cut) == 255 and task_workflow_id(project, name) == cut
    assert task_workflow_id(project, name, bounded=False) == f"agent-task/{project}/{name}"
    # names alike up to the cut get distinct ids; a short project keeps more of the name
    assert task_workflow_id(project, name[:-1] + "x") != cut
    assert task_workflow_id("p", name) == f"agent-task/p/{name}"
    assert len(task_workflow_id("p" * 40, name)) == 252  # fits: plain
    assert len(task_workflow_id("p" * 50, name)) == 255


@pytest.mark.parametrize(
    ("request_id", "ok"),
    [("", False), ("r", True), ("x" * 64, True), ("x" * 65, False), (None, False), (7, False)],
)
def test_request_id_rule(request_id: object, ok: bool) -> None:
    assert valid_request_id(request_id) is ok


def test_step_transition_table_is_the_documented_one() -> None:
    s = StepState
    documented = {
        (s.NOT_STARTED, s.IN_PROGRESS),
        (s.NOT_STARTED, s.COMPLETED),
        (s.NOT_STARTED, s.FAILED),
        (s.NOT_STARTED, s.UNKNOWN),
        (s.IN_PROGRESS, s.COMPLETED),
        (s.IN_PROGRESS, s.FAILED),
        (s.IN_PROGRESS, s.UNKNOWN),
        (s.UNKNOWN, s.IN_PROGRESS),
        (s.UNKNOWN, s.COMPLETED),
        (s.UNKNOWN, s.FAILED),
        (s.FAILED, s.IN_PROGRESS),
    }
    allowed = {(a, b) for a, targets in STEP_TRANSITIONS.items() for b in targets}
    assert allowed == documented


@pytest.mark.parametrize(
    ("state", "seq", "validity"),
    [
        (StepState.COMPLETED, 3, ResultValidity.VALID),
        (StepState.COMPLETED, None, ResultValidity.NO_RESULT),
        (StepState.FAILED, 3, ResultValidity.FAILED),
        (StepState.UNKNOWN, None, ResultValidity.UNCERTAIN),
        (StepState.IN_PROGRESS, None, ResultValidity.PENDING),
        (StepState.NOT_STARTED, None, ResultValidity.PENDING),
    ],
)
def test_result_validity(state: StepState, seq: int | None, validity: ResultValidity) -> None:
    assert result_validity(state, seq) is validity


def fill_inputs_and_children(ledger: Any, now: Any) -> None:
    """Fill a ledger's input and child state to its limits through the ledger's own admission
    rules: every question a task may ask answered but the open ones (ids of 100 characters),
    open requests until their bytes refuse one more, answers kept before their requests until
    their bytes reject one more, and every child ended with a result of 32,000 characters."""
    from temporalio.exceptions import ApplicationError

    from agent_tasks.contract import (
        MAX_CHILDREN,
        MAX_INPUTS_PER_TASK,
        MAX_PENDING_INPUTS,
        ChildEnd,
        ChildRecord,
        InputAnswer,
        TaskStatus,
        bound_text,
    )

    def ask(i: int, schema: dict[str, Any]) -> None:
        inbox.open_input(ledger, f"{i:04d}".ljust(100, "i"), "p" * 4_000, schema, None, now)

    schema = {"description": "d" * 2_000}
    for i in range(MAX_INPUTS_PER_TASK - MAX_PENDING_INPUTS):
        ask(i, {})
        inbox.respond(ledger, InputAnswer(answer=i, request_id=f"answer-{i}"), now)
    opened = 0
    with pytest.raises(ApplicationError, match="together"):
        while True:
            ask(MAX_INPUTS_PER_TASK - MAX_PENDING_INPUTS + opened, schema)
            opened += 1
    assert 0 < opened < MAX_PENDING_INPUTS
    kept = len(ledger.state.early_answers)
    for i in range(16):
        early = InputAnswer(answer="e" * 5_000, input_id=f"later-{i}", request_id=f"early-{i}")
        inbox.take_answer(ledger, early, now)
    assert len(ledger.state.early_answers) - kept == 3  # 16 KiB of 5,000-character answers
    for i in range(MAX_CHILDREN):
        name = f"{ledger.state.start.name}/{i:02d}".ljust(200, "c")
        children.add_child(ledger, f"{i:02d}", ChildRecord(name=name, status=TaskStatus.OPEN), now)
        end = ChildEnd(
            child=name,
            status=TaskStatus.DONE,
            result=bound_text("r" * 40_000),
            request_id=f"end-{i}",
        )
        children.child_ended(ledger, end, now)


def test_carried_state_stays_within_the_payload_budget_at_every_limit() -> None:
    """Continue-as-new carries what ``Ledger.carry_over`` gives. At every limit at once (the
    largest task fields, 500 open steps and 9,500 closed ones with 100-character names, 2,000
    remembered requests of 64 characters, input requests and child tasks at their limits:
    ``fill_inputs_and_children``) it stays under the 400 KiB payload budget, and without the
    closed steps under 272 KiB; closed steps cost 10 bytes each (base64: 13.3)."""
    from datetime import UTC, datetime

    from agent_tasks.contract import (
        MAX_GOAL_CHARS,
        MAX_METADATA_ENTRIES,
        MAX_METADATA_VALUE_CHARS,
        MAX_OPEN_STEPS,
        MAX_PAYLOAD_BYTES,
        MAX_STEPS_PER_TASK,
        REQUEST_WINDOW,
        EventInput,
        RecordEventsInput,
        SetStepsInput,
        TaskWorkflowInput,
        model_size,
    )
    from agent_tasks.workflows.ledger import Ledger

    now = datetime.now(UTC)
    start = TaskStart(
        project_id="p" * 64,
        name="n" * 200,
        goal="g" * MAX_GOAL_CHARS,
        agent_id="a" * 128,
        session_id="s" * 128,
        parent="q" * 200,
        metadata={
            f"{i:03d}".ljust(128, "k"): "v" * MAX_METADATA_VALUE_CHARS
            for i in range(MAX_METADATA_ENTRIES)
        },
        request_id="r" * 64,
    )
    ledger = Ledger.new(start, "w" * 280, now)
    ledger.create(start, now)
    note = [EventInput(kind="note", payload="x")]
    ledger.record_events(RecordEventsInput(agent_id="a", events=note, request_id="e"), now)
    names = [f"{i:05d}".ljust(100, "s") for i in range(MAX_STEPS_PER_TASK)]
    for first in range(0, MAX_STEPS_PER_TASK, 200):
        writes = [
            StepWrite(step_name=name, state="in_progress")
            if i < MAX_OPEN_STEPS
            else StepWrite(step_name=name, state="failed", result_event_seq=1)
            for i, name in enumerate(names[first : first + 200], start=first)
        ]
        request = f"steps-{first}".ljust(64, "x")
        ledger.set_steps(SetStepsInput(agent_id="a", steps=writes, request_id=request), now)
    for i in range(REQUEST_WINDOW):
        request = f"request-{i}".ljust(64, "y")
        ledger.record_events(RecordEventsInput(agent_id="a", events=note, request_id=request), now)
    fill_inputs_and_children(ledger, now)
    carried = ledger.carry_over("run-id")
    assert len(carried.steps) == MAX_OPEN_STEPS
    closed = MAX_STEPS_PER_TASK - MAX_OPEN_STEPS
    assert len(carried.closed_steps) == 4 * -(-closed * 10 // 3)  # base64 of 10 bytes each
    assert model_size(TaskWorkflowInput(carried=carried)) < MAX_PAYLOAD_BYTES
    without_closed = carried.model_copy(update={"closed_steps": ""})
    assert model_size(TaskWorkflowInput(carried=without_closed)) < 272 * 1024


def test_the_closed_step_table_round_trips() -> None:
    from agent_tasks.contract import StepKind, StepState
    from agent_tasks.workflows.steps import ClosedStep, pack_closed, step_key, unpack_closed

    table = {
        step_key(f"s{i}"): ClosedStep(
            StepState.FAILED if i % 2 else StepState.COMPLETED, list(StepKind)[i % 6], i
        )
        for i in range(256)
    }
    text = pack_closed(table)
    assert len(text) == 4 * -(-256 * 10 // 3)
    assert unpack_closed(text) == table
    assert pack_closed(unpack_closed(text)) == text
    assert step_key("s1") == hashlib.sha256(b"s1").digest()[:8]


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [
        (1, 2),
        (2, 4),
        (3, 8),
        (4, 16),
        (5, 30),
        (6, 30),
        (20, 30),
        (21, 300),
        (47, 300),
        (10**6, 300),
    ],
)
def test_the_mirror_pause_doubles_to_30_s_then_5_min_and_never_overflows(
    failures: int, seconds: int
) -> None:
    from datetime import timedelta

    from agent_tasks.workflows.mirroring import mirror_pause

    assert mirror_pause(failures) == timedelta(seconds=seconds)
