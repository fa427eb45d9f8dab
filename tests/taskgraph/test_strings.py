"""Every string a history can hold reads back equal from either graph store, or is refused before
it is recorded (``tests/strings.py`` generates them; ``STRINGS_SEED`` runs a failure's seed
again). Expected values are the strings the test wrote.

The kind: FalkorDB's client inlines parameters into the query text and escapes only the
backslash and the quote, and the server reads the query as a C string, so a goal holding a
NUL character was refused ("Invalid input at end of input", as in getzep/graphiti#1525), and
a task whose mirror never caught up stayed RUNNING for ever."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import httpx
import pydantic
import pytest
from temporalio.client import Client

from agent_tasks.contract import (
    MAX_GOAL_CHARS,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_VALUE_CHARS,
    MAX_PAYLOAD_CHARS,
    MAX_TOKEN_COUNT,
    Event,
    EventInput,
    EventKind,
    ResultValidity,
    Role,
    StepKind,
    StepState,
    StepView,
    TaskStatus,
    TaskView,
    TokenUsage,
    bound_text,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.falkordb.text import TEXT_ESCAPE, read_text, stored_text
from agent_tasks.taskgraph.models import TaskFilter
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.seeds import seed_view
from agent_tasks.worker import Services
from tests.servers import served
from tests.strings import EDGES, Strings

TASKS = 24
"""Tasks of generated strings each store gets (six events and three steps each)."""
SHORT = 128
"""The bound of an agent id, a session id, a tool name, a call id (``ShortText``)."""


def test_the_stored_form_reverses_and_keeps_what_indexes_need() -> None:
    """FalkorDB's stored form (``taskgraph.falkordb.text``) reads back as it was, holds no
    U+0000, no U+0001 and no whitespace at either end, keeps the order of names (no control
    characters), and a key a statement joins from stored parts reads back as the joined
    key."""
    strings = Strings()
    samples = [*EDGES, *(strings.text(200) for _ in range(2_000))]
    for text in samples:
        held = stored_text(text)
        assert read_text(held) == text
        assert "\x00" not in held and "\x01" not in held
        assert held == held.strip(" \t\n\r\x0b\x0c")
    for a, b in itertools.pairwise(samples):
        assert read_text(stored_text(a) + "#" + stored_text(b)) == a + "#" + b
    names = sorted({strings.text(60, names=True) for _ in range(2_000)} | {"a", "a ", " a", "a b"})
    assert sorted(names, key=stored_text) == names
    assert stored_text("plain text") == "plain text"
    assert read_text(TEXT_ESCAPE + "x") == TEXT_ESCAPE + "x"


def _task(
    strings: Strings, project_id: str, number: int
) -> tuple[TaskView, list[Event], list[StepView]]:
    """A task of generated strings in every text field, as the ledger would hold it."""
    now = datetime(2026, 12, 7, 12, 0, number, tzinfo=UTC)
    edge = EDGES[number % len(EDGES)]
    name = f"{number}-" + strings.text(180, names=True)
    view = seed_view(project_id, name, last_seq=6, now=now, status=TaskStatus.DONE)
    metadata = {
        strings.text(SHORT, least=1): strings.text(MAX_METADATA_VALUE_CHARS)
        for _ in range(strings.rng.randint(0, MAX_METADATA_ENTRIES))
    }
    view = view.model_copy(
        update={
            "goal": edge + strings.text(MAX_GOAL_CHARS - len(edge)),
            "agent_id": strings.pick([edge or "x"], lambda: strings.text(SHORT, least=1)),
            "session_id": strings.text(SHORT, least=1) if number % 2 else None,
            "metadata": metadata,
            "result": bound_text(strings.pick(EDGES, lambda: strings.text(MAX_PAYLOAD_CHARS))),
            "error": bound_text(strings.text(MAX_PAYLOAD_CHARS)) if number % 3 else None,
            "writes": 7,
        }
    )
    events = []
    for seq in range(1, 7):
        payload = strings.pick(EDGES, lambda: strings.text(MAX_PAYLOAD_CHARS))
        item = EventInput(
            kind=EventKind.TOOL_RESULT if seq % 2 else EventKind.MESSAGE,
            role=None if seq % 2 else Role.ASSISTANT,
            name=strings.text(SHORT, least=1) if seq % 2 else None,
            call_id=strings.text(SHORT, least=1) if seq % 2 else None,
            payload=payload,
        )
        author = strings.pick([view.agent_id], lambda: strings.text(SHORT, least=1))
        events.append(
            Event.recorded(
                item,
                workflow_id=view.workflow_id,
                seq=seq,
                author=author,
                time=now + timedelta(milliseconds=seq),
                request_id=strings.text(64, least=1),
            )
        )
    steps = []
    step_names = {strings.text(100, least=1, names=True).replace("/", "|") for _ in range(3)}
    for step_name in sorted(step_names):
        steps.append(
            StepView(
                step_name=step_name,
                state=StepState.COMPLETED,
                kind=StepKind.TOOL,
                result_event_seq=1,
                attempt=1,
                updated_at=now,
                result_validity=ResultValidity.VALID,
                idempotency_key=f"{view.workflow_id}/{step_name}/1",
                changed_write=7,
            )
        )
    return view, events, steps


async def test_any_string_a_history_holds_reads_back_equal(
    store: GraphStore, project_id: str
) -> None:
    """Generated strings in every text field of a task, its events and its steps (names,
    goal, metadata, agent and session ids, payloads, tool names, call ids, authors, request
    ids, result and error), written through the port and read back through it."""
    strings = Strings()
    for number in range(TASKS):
        view, events, steps = _task(strings, project_id, number)
        where = f"seed {strings.seed}, task {number}"
        await store.write_task(view, events, steps, mirrored_write=view.writes)
        held = await store.reads.task_view(project_id, view.workflow_id)
        assert held is not None, where
        for field in ("name", "goal", "agent_id", "session_id", "metadata", "result", "error"):
            assert getattr(held, field) == getattr(view, field), f"{where}: {field}"
        back = await store.reads.events(project_id, view.workflow_id, 0, 6, 10)
        for field in ("payload", "name", "call_id", "author", "request_id", "full_sha256"):
            got = [getattr(e, field) for e in back]
            assert got == [getattr(e, field) for e in events], f"{where}: event {field}"
        for step in steps:
            held_step = await store.reads.step(project_id, view.workflow_id, step.step_name)
            assert held_step == step, where
        where_task = TaskFilter(name_contains=view.name, agent_id=view.agent_id, limit=5)
        found = await store.reads.find_tasks(project_id, where_task)
        assert view.name in [row.name for row in found], where
        assert await store.reads.mirrored_write(project_id, view.workflow_id) == view.writes, where


async def test_a_goal_holding_nul_is_mirrored_and_the_task_closes(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """The issue's case through Temporal and the mirror: before the stored form, FalkorDB
    refused every page of the task and its workflow never completed."""
    history = store_history
    goal = "find\x00the file"
    assert (await history.create_task("nul", goal, metadata={"k\x00": "v\x00"})).recorded
    record = [EventInput(kind="message", role="user", payload="a\x00b" + TEXT_ESCAPE + "0")]
    assert (await history.record_events("nul", record)).recorded
    assert (await history.finish_task("nul", "done", result="ok\x00")).recorded
    async with asyncio.timeout(60):
        final = await history.wait_task("nul")
    assert final is not None and final.mirror_error is None
    held = await store.reads.task_view(history.project_id, final.workflow_id)
    assert held is not None
    assert (held.goal, held.metadata, held.status) == (goal, {"k\x00": "v\x00"}, TaskStatus.DONE)
    assert held.result is not None and held.result.text == "ok\x00"
    (event,) = await store.reads.events(history.project_id, final.workflow_id, 0, 1, 10)
    assert event.payload == "a\x00b" + TEXT_ESCAPE + "0"


async def test_generated_tasks_through_temporal_read_back_as_temporal_holds_them(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """Generated goals, metadata, payloads and results through the client, the workflow and
    the mirror: each task completes, and the store's view and events equal Temporal's."""
    history = store_history
    strings = Strings(seed=Strings().seed + 1)
    for number in range(3):
        name = f"gen-{number}"
        goal = EDGES[number] + strings.text(MAX_GOAL_CHARS - len(EDGES[number]))
        metadata = {strings.text(SHORT, least=1): strings.text(MAX_METADATA_VALUE_CHARS)}
        assert (await history.create_task(name, goal, metadata=metadata)).recorded
        payloads = [strings.pick(EDGES, lambda: strings.text(MAX_PAYLOAD_CHARS)) for _ in range(4)]
        items = [EventInput(kind="message", role="user", payload=p) for p in payloads]
        assert (await history.record_events(name, items)).recorded
        result = strings.text(MAX_PAYLOAD_CHARS)
        assert (await history.finish_task(name, "done", result=result)).recorded
        async with asyncio.timeout(60):
            final = await history.wait_task(name)
        assert final is not None and final.mirror_error is None, f"seed {strings.seed}"
        held = await store.reads.task_view(history.project_id, final.workflow_id)
        assert held is not None
        assert (held.goal, held.metadata, held.result) == (goal, metadata, final.result)
        key = final.workflow_id
        events = await store.reads.events(history.project_id, key, 0, final.last_seq, 10)
        assert [e.payload for e in events][:4] == [bound_text(p).text for p in payloads]


async def test_a_lone_surrogate_is_refused_or_cleaned_before_anything_is_sent(
    history: ConversationHistory,
) -> None:
    """A history cannot hold a lone surrogate (it has no UTF-8 form): a goal or metadata
    holding one is refused by the client before it sends anything (pydantic's
    ``string_unicode``), and a payload's is cleaned to U+FFFD (``contract.clean_text``)."""
    with pytest.raises(pydantic.ValidationError, match="unicode"):
        await history.create_task("surrogate", "a\ud800b")
    with pytest.raises(pydantic.ValidationError, match="unicode"):
        await history.create_task("surrogate", "goal", metadata={"k": "\udfff"})
    assert not (await history.get_task("surrogate")).found
    assert (await history.create_task("surrogate", "goal")).recorded
    item = EventInput(kind="message", role="user", payload="a\ud83cb")
    assert (await history.record_events("surrogate", [item])).recorded
    (event,) = (await history.list_events("surrogate")).events
    assert event.payload == "a\ufffdb"


async def test_names_and_ids_with_surrounding_whitespace_leave_falkordb_up(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """A task name, a step name, an agent id and a session id that start or end with
    whitespace, or hold U+0001: FalkorDB 4.16 enforcing a unique constraint over such a key
    crashed (signal 11 in ``EnforceUniqueEntity``, as FalkorDB/FalkorDB#1340 reports), on
    every retry of the page. Each reads back equal, and the store still answers."""
    history = store_history
    history.agent_id, history.session_id = "bot\n", " session\x01 "
    assert (await history.create_task("report ", "goal")).recorded
    assert (await history.set_step("report ", "look ", StepState.COMPLETED)).recorded
    item = EventInput(kind="message", role="user", payload=" x ")
    assert (await history.record_events("report ", [item])).recorded
    decided = await history.record_decision(
        "report ", "done ", cites_events=[1], cites_steps=["look "]
    )
    assert decided.recorded
    assert (await history.finish_task("report ", "done")).recorded
    async with asyncio.timeout(60):
        final = await history.wait_task("report ")
    assert final is not None and final.mirror_error is None
    await store.ping()
    held = await store.reads.task_view(history.project_id, final.workflow_id)
    assert held is not None
    assert (held.name, held.agent_id, held.session_id) == ("report ", "bot\n", " session\x01 ")
    step = await store.reads.step(history.project_id, final.workflow_id, "look ")
    assert step is not None and step.state is StepState.COMPLETED
    found = await store.reads.find_tasks(history.project_id, TaskFilter(session_id=" session\x01 "))
    assert [row.name for row in found] == ["report "]
    (decision,) = await store.reads.decisions(history.project_id, workflow_id=final.workflow_id)
    assert decision.cites.events == [1] and [s.name for s in decision.cites.steps] == ["look "]
    assert decision.changed_steps == [] and decision.statement == "done "
    counts = await store.reads.counts(history.project_id)
    assert (counts["Task"], counts["Step"], counts["NEXT"], counts["CITES"]) == (1, 1, 1, 2)


async def test_a_token_count_no_store_holds_is_refused_before_it_is_recorded(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """An event's token usage over 2**53 (the kind of neo4j/neo4j-python-driver#922:
    ``OverflowError: Integer ... out of range`` for a parameter past 64 bits): Neo4j's driver
    refused it ("Python int too large to convert to C long") and the task's mirror never
    caught up, and FalkorDB kept 9223372036854775807 in its place. Now it is refused
    ``number_out_of_range`` and nothing is recorded; the bound itself reads back equal from
    both stores."""
    history = store_history
    assert (await history.create_task("usage", "goal")).recorded
    big = TokenUsage(input_tokens=2**64, output_tokens=1)
    item = EventInput(kind="message", role="assistant", payload="x", usage=big)
    refused = await history.record_events("usage", [item])
    assert (refused.recorded, refused.error) == (False, ErrorCode.NUMBER_OUT_OF_RANGE)
    bound = TokenUsage(input_tokens=MAX_TOKEN_COUNT, output_tokens=MAX_TOKEN_COUNT - 1)
    kept = EventInput(kind="message", role="assistant", payload="y", usage=bound)
    assert (await history.record_events("usage", [kept])).recorded
    assert (await history.finish_task("usage", "done")).recorded
    async with asyncio.timeout(60):
        final = await history.wait_task("usage")
    assert final is not None and final.last_seq == 1 and final.mirror_error is None
    (event,) = await store.reads.events(history.project_id, final.workflow_id, 0, 1, 10)
    assert event.usage == bound


async def test_over_http_a_lone_surrogate_is_refused_or_cleaned_and_nul_is_kept(
    client: Client, graph: TaskGraph, services: Services, project_id: str, task_queue: str
) -> None:
    """The HTTP API's JSON may spell a lone surrogate (``"\\ud800"``, which Python's JSON
    reader takes): a goal or metadata value holding one is refused ``invalid_argument``
    (422, ``string_unicode``) before anything is recorded, a payload's is cleaned to U+FFFD,
    and a NUL is kept as it is."""
    settings = services.settings.model_copy(update={"temporal_task_queue": task_queue})
    app = create_app(Services(settings, client, graph, None))
    _, key = await ApiKeyStore(graph).create(project_id, "strings")
    head = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with served(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        for body in (
            b'{"name": "s1", "goal": "a\\ud800b"}',
            b'{"name": "s1", "goal": "ok", "metadata": {"k": "\\udfff"}}',
        ):
            refused = await http.post("/tasks", content=body, headers=head)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["details"][0]["type"] == "string_unicode"
        assert (await http.get("/tasks/s1", headers=head)).status_code == 404
        created = await http.post("/tasks", json={"name": "s1", "goal": "ok"}, headers=head)
        assert created.is_success
        body = b'{"events": [{"kind": "message", "role": "user", "payload": "x\\ud800\\u0000"}]}'
        assert (await http.post("/tasks/s1/events", content=body, headers=head)).is_success
        events = (await http.get("/tasks/s1/events", headers=head)).json()["events"]
    assert [e["payload"] for e in events] == ["x\ufffd\x00"]
