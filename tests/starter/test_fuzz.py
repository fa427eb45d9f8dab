"""The public calls fuzzed with bad and edge values, against the real stack: every call gives
back a result (a refusal carries an ``ErrorCode``; the Tasks API raises ``TaskRefused`` with
one) or raises pydantic's ``ValidationError`` naming an argument, nothing else (no
``UnicodeEncodeError`` from a lone surrogate, no ``TypeError`` from a wrong type); and
afterwards each task's log holds exactly the events the calls said they recorded, gapless,
with the payloads sent (cleaned and cut by the one rule), besides the ``status`` notes the
task records of its own when a call moved it.

The values come from a seeded generator (``SEED``; ``FUZZ_SEED`` in the environment picks
another), so a failure is reproduced by running the test again.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from agent_tasks.contract import MAX_PAYLOAD_CHARS, EventKind, bound_text
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.arguments import TITLE
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import WriteResult
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.starter.tasks import TaskManager, TaskRefused
from tests.conftest import mirrored

SEED = 25
CALLS = 2_000
"""Calls in one run (about 40 s on the local stack)."""
TASKS = 5
"""Tasks the calls write to (besides names that exist nowhere and tasks created on the way)."""

BAD_TEXT: list[Any] = ["\ud800", "a\udc00b", 5, 1.5, None, b"bytes", ["list"], {"d": 1}]
"""Values that are not text: lone surrogates (no UTF-8 form), other types."""
BAD_NAMES: list[Any] = [*BAD_TEXT, "", "x" * 201, "a\x00b", "tab\tname", "\x7f"]
"""Not task names: the values above, empty, too long, control characters."""
EDGE_TEXT: list[Any] = [
    "",
    "plain",
    "a\ud83d\ude00b",  # a surrogate pair as two code points: joined into one character
    "\ud800 alone",  # a lone surrogate in a payload: cleaned to U+FFFD, never refused
    "ctrl\x00\x1f",
    "x" * (MAX_PAYLOAD_CHARS + 5_000),
    "é" * 100,
]
"""Payload text: valid, unusual, or past the cut (the rule cleans and cuts, never refuses)."""
BAD_INTS: list[Any] = [-1, 2**63, 2**64, "1", 1.5, True, None, math.nan]
REQUEST_IDS: list[Any] = [None, None, None, "r-fixed", "", "r" * 65, "\ud800", 7]
"""Request ids: new ones, a reused one (duplicates, ``request_id_reused``), bad ones."""
MISSING = "no-such-task"


@dataclass
class Fuzz:
    """The generator, the tasks, and what the calls said they recorded."""

    history: ConversationHistory
    rng: random.Random
    names: list[str]
    recorded: dict[str, dict[int, tuple[EventKind, str | None]]] = field(default_factory=dict)
    """Per task, seq -> (kind, payload as recorded, or None when not compared)."""
    outcomes: dict[str, int] = field(default_factory=dict)
    escaped: list[str] = field(default_factory=list)

    def pick(self, good: Callable[[], Any], bad: list[Any], bad_share: float = 0.15) -> Any:
        return self.rng.choice(bad) if self.rng.random() < bad_share else good()

    def task(self) -> Any:
        return self.pick(lambda: self.rng.choice([*self.names, MISSING]), BAD_NAMES, 0.2)

    def text(self) -> Any:
        return self.pick(lambda: self.rng.choice(EDGE_TEXT), BAD_TEXT)

    def kind(self) -> Any:
        return self.pick(
            lambda: self.rng.choice(["message", "tool_call", "note", EventKind.TOOL_RESULT]),
            ["nope", "MESSAGE", 3, None],
        )

    def short(self) -> Any:
        return self.pick(lambda: self.rng.choice([None, "bash", "c1"]), [*BAD_TEXT, "", "n" * 129])

    def seq(self) -> Any:
        return self.pick(lambda: self.rng.randint(0, 12), BAD_INTS)

    def request_id(self) -> Any:
        return self.rng.choice(REQUEST_IDS)

    def step(self) -> Any:
        return self.pick(lambda: self.rng.choice(["s1", "s2"]), [*BAD_NAMES, "a/b"])

    def state(self) -> Any:
        return self.pick(
            lambda: self.rng.choice(["in_progress", "completed", "failed", "unknown"]),
            ["done", 1, None, "\ud800"],
        )

    def note(self, task: Any, result: WriteResult, events: list[tuple[EventKind, str | None]]):
        """Remember the seqs a result says it recorded, with what they hold."""
        if result.first_seq is None or result.duplicate or not isinstance(task, str):
            return
        seqs = range(result.first_seq, (result.last_seq or result.first_seq) + 1)
        assert len(seqs) <= len(events), (result, events)
        for seq, event in zip(seqs, events, strict=False):
            assert seq not in self.recorded.setdefault(task, {}), (task, seq, result)
            self.recorded[task][seq] = event


def as_recorded(kind: Any, payload: str) -> tuple[EventKind, str | None]:
    return EventKind(kind), bound_text(payload).text


Call = tuple[Callable[[], Awaitable[Any]], Any, list[tuple[EventKind, str | None]]]
"""A call to make, the task it writes, and the events it records if it is recorded."""


def event_call(f: Fuzz) -> Call:
    h, task, kind, payload = f.history, f.task(), f.kind(), f.text()
    role = f.pick(lambda: "assistant" if kind == "message" else None, ["robot", 1])
    name, call_id, request_id = f.short(), f.short(), f.request_id()
    events = (
        [as_recorded(kind, payload)] if kind in list(EventKind) and isinstance(payload, str) else []
    )
    return (
        lambda: h.record_event(
            task, kind, payload, role=role, name=name, call_id=call_id, request_id=request_id
        ),
        task,
        events,
    )


def batch_call(f: Fuzz) -> Call:
    good = lambda: {"kind": "message", "payload": f.rng.choice(EDGE_TEXT)}  # noqa: E731
    batch = [f.pick(good, [{"k": 1}, 5, "message"]) for _ in range(f.rng.randint(0, 4))]
    if f.rng.random() < 0.05:
        batch = "not a list"  # type: ignore[assignment]
    events = []
    if isinstance(batch, list) and all(isinstance(e, dict) and "kind" in e for e in batch):
        events = [as_recorded(e["kind"], e["payload"]) for e in batch]
    task, request_id = f.task(), f.request_id()
    return lambda: f.history.record_events(task, batch, request_id=request_id), task, events


def step_call(f: Fuzz) -> Call:
    task, step, state, request_id = f.task(), f.step(), f.state(), f.request_id()
    seq = None if f.rng.random() < 0.5 else f.seq()
    kind = None if f.rng.random() < 0.8 else f.pick(lambda: "read", ["reading", 2])
    return (
        lambda: f.history.set_step(
            task, step, state, kind=kind, result_event_seq=seq, request_id=request_id
        ),
        task,
        [],
    )


def create_call(f: Fuzz) -> Call:
    task, request_id = f.task(), f.request_id()
    goal = f.pick(lambda: f.rng.choice(["the goal", "another"]), [*BAD_TEXT, "g" * 4_001])
    meta = f.pick(lambda: {"k": "v"}, [{"k": 5}, {"": "v"}, {"k": "\ud800"}, "m", {"k": "v" * 501}])
    parent = None if f.rng.random() < 0.8 else f.task()
    if task == MISSING:  # a new task, written to from then on
        task = f"fz-new-{len(f.names)}"
        f.names.append(task)
    return (
        lambda: f.history.create_task(
            task, goal, metadata=meta, parent=parent, request_id=request_id
        ),
        None,
        [],
    )


def decision_call(f: Fuzz) -> Call:
    task, statement = f.task(), f.text()
    cited = f.pick(lambda: [1], [[1.5], ["\ud800"], "abc", [None], 5, ["no-such-id"]])
    steps = f.pick(lambda: [], [["a/b"], [5], "s1", ["s1"]])
    events = [as_recorded(EventKind.DECISION, statement)] if isinstance(statement, str) else []
    return (
        lambda: f.history.record_decision(task, statement, cites_events=cited, cites_steps=steps),
        task,
        events,
    )


def status_call(f: Fuzz) -> Call:
    task = f.task()
    status = f.pick(lambda: f.rng.choice(["queued", "in_progress"]), ["done", "x", 2, None])
    events: list[tuple[EventKind, str | None]] = []
    if isinstance(status, str):
        events.append((EventKind.NOTE, None))
    return lambda: f.history.set_status(task, status), task, events


def input_call(f: Fuzz) -> Call:
    """Answers: by update to whatever is open (or nothing), by signal only when the client
    refuses it before sending (a signal records its outcome later, unreported)."""
    task, h = f.task(), f.history
    answer = f.pick(lambda: 3, [math.nan, math.inf, "a" * 40_000, {1, 2}, object()], 0.3)
    input_id = f.pick(lambda: None, ["", "a/b", 5, "\ud800"])
    if f.rng.random() < 0.3:
        prompt = f.pick(lambda: "How many?", [*BAD_TEXT, "p" * 4_001])
        schema = f.pick(lambda: {"type": "integer"}, [5, "x", {"type": "nope"}, {"$ref": "#/x"}])
        ask_id = f.pick(lambda: f"q{f.rng.randint(0, 3)}", ["", "a/b", 5])
        return (
            lambda: h.request_input(task, ask_id, prompt, schema),
            task,
            [(EventKind.INPUT_REQUEST, None)],
        )
    if f.rng.random() < 0.5 and not isinstance(answer, int):
        return lambda: h.submit_input(task, answer, input_id=input_id), None, []
    return (
        lambda: h.respond(task, answer, input_id=input_id),
        task,
        [(EventKind.INPUT_RESPONSE, None)],
    )


def read_call(f: Fuzz) -> Call:
    task, h, which = f.task(), f.history, f.rng.randrange(5)
    if which == 0:
        limit = f.pick(lambda: f.rng.randint(1, 200), [0, 201, *BAD_INTS])
        return lambda: h.list_events(task, after_seq=f.seq(), limit=limit), None, []
    if which == 1:
        state = None if f.rng.random() < 0.5 else f.state()
        after_name = None if f.rng.random() < 0.7 else f.step()
        return lambda: h.list_steps(task, state, after_name=after_name), None, []
    if which == 2:
        depth = f.pick(lambda: f.rng.randint(0, 3), [-1, 21, "2", None, 1.5])
        return lambda: h.task_tree(task, depth), None, []
    if which == 3:
        return lambda: h.list_decisions(task, after_seq=f.seq()), None, []
    return lambda: h.get_task(task), None, []


def find_call(f: Fuzz) -> Call:
    h, kind = f.history, None if f.rng.random() < 0.5 else f.kind()
    since = f.pick(
        lambda: None, [datetime(2026, 1, 1), "yesterday", 5, datetime(2026, 1, 1, tzinfo=UTC)]
    )
    parent, agent_id = (f.task() if f.rng.random() < 0.3 else None), f.short()
    status = None if f.rng.random() < 0.7 else f.pick(lambda: "open", ["opened", 1])
    if f.rng.random() < 0.5:
        return lambda: h.find_events(kind=kind, name=agent_id, since=since), None, []
    if f.rng.random() < 0.3:
        return lambda: h.list_tasks(status=status, limit=f.seq()), None, []
    return lambda: h.find_tasks(parent=parent, agent_id=agent_id, status=status), None, []


def turn_call(f: Fuzz) -> Call:
    """Running an agent again, branching, cancelling: refusals for recorded tasks, or
    validation; a branch of a fuzzed task is a new task (its log is not checked)."""
    h, task, which = f.history, f.task(), f.rng.randrange(6)
    retry = f.pick(lambda: [], [[5], "s1", [{"step_name": "a/b"}]])
    if which == 0:
        return lambda: h.resume_task(task, retry=retry), None, []
    if which == 1:
        return lambda: h.continue_task(task), None, []
    if which == 2:
        reason = f.pick(lambda: "again", ["", *BAD_TEXT])
        return lambda: h.retry_step(task, f.step(), reason=reason), None, []
    if which == 3:
        seq, name = f.seq(), f.pick(lambda: f"fz-branch-{f.rng.randrange(10**6)}", BAD_NAMES)
        return lambda: h.branch_from(task, seq, name), None, []
    if which == 4:
        return lambda: h.cancel_task(task if task not in f.names else MISSING), None, []
    return lambda: h.wait_task(task if task not in f.names else MISSING), None, []


def retention_call(f: Fuzz) -> Call:
    retention = HistoryRetention(
        f.history.client, f.history.project_id, "fz", graph=f.history.graph
    )
    if f.rng.random() < 0.5:
        return lambda: retention.redact_event(f.text()), None, []
    if f.rng.random() < 0.5:
        return lambda: f.history.get_decision(f.text()), None, []
    task = f.task()  # never a task of the log check
    return lambda: retention.delete_task(task if task not in f.names else MISSING), None, []


def tasks_api_call(f: Fuzz) -> Call:
    """The Tasks API (``TaskManager``) on tasks of its own or missing ones."""
    manager, which = TaskManager(f.history), f.rng.randrange(5)
    task = f.pick(lambda: MISSING, BAD_NAMES, 0.5)
    if which == 0:
        meta = f.pick(lambda: {"k": "v"}, [{"k": 5}, "m", 3])
        message = f.pick(lambda: "hi", BAD_TEXT)
        return lambda: manager.create_task("s1", message, metadata=meta), None, []
    if which == 1:
        status = f.pick(lambda: "in_progress", ["awaiting_input", "open", "nope", 4])
        result = f.pick(lambda: None, [{"a": math.nan}, "r", 5, {"a": object()}])
        return lambda: manager.update(task, status=status, result=result), None, []
    if which == 2:
        kind = f.pick(lambda: "info", ["nope", 5])
        return lambda: manager.add_update(task, "hi", kind, metadata=f.pick(dict, [5])), None, []
    if which == 3:
        return lambda: manager.list_tasks(status=f.pick(lambda: None, ["x", 5])), None, []
    return lambda: manager.get_task(task), None, []


MAKERS = [event_call] * 4 + [batch_call, step_call, step_call, create_call, decision_call]
MAKERS += [status_call, input_call, read_call, read_call, find_call, turn_call]
MAKERS += [retention_call, tasks_api_call]


async def one_call(f: Fuzz) -> None:
    """One public call with generated arguments; its outcome checked and counted."""
    make = f.rng.choice(MAKERS)
    call, task, events = make(f)
    try:
        out = await call()
    except ValidationError as err:
        # the client's own check names the argument (TITLE), a model's names its field
        assert err.errors() and err.errors()[0]["loc"], err
        assert err.title == TITLE or err.title[:1].isupper(), err.title
        label = "ValidationError"
    except TaskRefused as err:
        assert isinstance(err.code, ErrorCode)
        label = err.code.value
    except Exception as err:  # the defect this test is for
        f.escaped.append(f"{make.__name__}: {type(err).__name__}: {err}")
        return
    else:
        label = "read"
        if isinstance(out, WriteResult):
            assert out.recorded or isinstance(out.error, ErrorCode), out
            label = "recorded" if out.recorded else out.error.value  # type: ignore[union-attr]
            if task is not None and (out.recorded or out.first_seq is not None):
                f.note(task, out, events)
        elif out is not None and not isinstance(out, BaseModel | list):
            f.escaped.append(f"{make.__name__}: returned {out!r}")
    f.outcomes[label] = f.outcomes.get(label, 0) + 1


async def test_fuzzed_public_calls_return_a_result_a_code_or_a_validation_error(
    history: ConversationHistory,
) -> None:
    rng = random.Random(int(os.environ.get("FUZZ_SEED", SEED)))
    names = [f"fz-{i}" for i in range(TASKS)]
    for name in names:
        assert (await history.create_task(name, "the goal")).recorded
    fuzz = Fuzz(history, rng, names)
    for _ in range(CALLS):
        await one_call(fuzz)
    assert fuzz.escaped == [], "\n".join(fuzz.escaped[:20])
    # every kind of outcome was reached, so the run exercised each path
    for outcome in ("ValidationError", "recorded", "read"):
        assert fuzz.outcomes.get(outcome, 0) > CALLS // 20, fuzz.outcomes
    expected_codes = {"task_not_found", "request_id_reused", "invalid_request_id", "task_exists"}
    assert expected_codes | {"not_resumable", "input_not_requested"} <= set(fuzz.outcomes)

    # the log holds exactly what the calls said they recorded: gapless, same kinds and text,
    # and the status notes the task records when it moves (an answer that leaves no request
    # open makes an awaiting task queued)
    for name in fuzz.names:
        if not (await history.get_task(name)).found:  # its create_task was refused
            assert name not in fuzz.recorded
            continue
        await mirrored(history, name, within=120)
        events, after = [], 0
        while True:
            page = await history.list_events(name, after_seq=after, limit=200)
            events += page.events
            if page.next_after_seq is None:
                break
            after = page.next_after_seq
        said = fuzz.recorded.get(name, {})
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), name
        own = {e.seq for e in events if e.kind is EventKind.NOTE and e.name == "status"}
        assert set(said) <= {e.seq for e in events}, name
        assert {e.seq for e in events} - set(said) <= own, name
        for event in events:
            if event.seq in said:
                kind, payload = said[event.seq]
                assert event.kind is kind, (name, event.seq)
                assert payload is None or event.payload == payload, (name, event.seq)
