"""Input and child tasks tried from outside with what breaks naive waits (found by trying the
product): answers too large to carry or to keep whole, answers to answered requests, schemas
whose check could stall the worker or fetch, spawn keys outside the rule, a child deleted
while its parent waits. Each leaves the task running or ends it with a clear error; none
fails a workflow task. Real Temporal dev server and Neo4j."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client

from agent_tasks.cli.importer import all_events
from agent_tasks.contract import (
    CHILD_RESULT_PREVIEW_CHARS,
    MAX_EARLY_ANSWER_BYTES,
    MAX_EARLY_ANSWERS,
    AgentSpec,
    EventKind,
    InputAnswer,
    TaskStatus,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.workflows.task import TaskWorkflow
from tests.conftest import eventually, mirrored
from tests.workflows.test_children import child_results, spawned, view_of
from tests.workflows.test_input import awaiting, history_length


async def rejections(history: ConversationHistory, task: str = "t") -> list[dict[str, str]]:
    """The payloads of the task's rejected answers (each one whole JSON), in seq order."""
    events = await all_events(history, task)
    return [
        json.loads(e.payload)
        for e in events
        if e.kind is EventKind.INPUT_RESPONSE and e.name == "rejected"
    ]


async def test_answers_too_large_are_refused_by_the_client_and_rejected_by_the_task(
    agents: ConversationHistory, client: Client
) -> None:
    """The client sends no answer over 32,000 characters of JSON or with NaN (``ValueError``,
    nothing in the history). Sent anyway (a raw signal), the task records it rejected. Answers
    kept before their request are bounded in bytes (they are carried across continue-as-new:
    five of 1.5 MB made the carried state too large for the server, and the task never ran
    again): past ``MAX_EARLY_ANSWER_BYTES`` they are rejected, and the task takes writes."""
    assert (await agents.create_task("t", "wait")).recorded
    await mirrored(agents, "t")
    before = await history_length(client, agents)
    with pytest.raises(ValueError, match=r"the answer is 32,001 characters of JSON"):
        await agents.submit_input("t", "x" * 31_999)
    with pytest.raises(ValueError, match=r"the answer: NaN and infinities"):
        await agents.respond("t", float("nan"))
    assert await history_length(client, agents) == before

    handle = client.get_workflow_handle(agents.workflow_id("t"))
    big = InputAnswer(answer="y" * 40_000, request_id="big")
    await handle.signal(TaskWorkflow.submit_input, big)
    assert (MAX_EARLY_ANSWERS, MAX_EARLY_ANSWER_BYTES) == (100, 16_384)  # two of 7,000 fit
    for i in range(3):
        answer = InputAnswer(answer="z" * 7_000, input_id=f"q{i}", request_id=f"early-{i}")
        await handle.signal(TaskWorkflow.submit_input, answer)

    async def both_rejected() -> bool:
        return len(await rejections(agents)) == 2

    await eventually(both_rejected)
    first, last = await rejections(agents)
    assert first["error"] == "the answer is 40,002 characters of JSON; at most 32,000"
    assert (
        first["input_id"] is None
        and first["answer_json"] == json.dumps("y" * 40_000)[: len(first["answer_json"])]
    )
    assert last["input_id"] == "q2" and last["answer"] == "z" * 7_000
    assert last["error"] == (
        "no input is requested, and the answers kept for later requests are at most "
        f"{MAX_EARLY_ANSWERS} and {MAX_EARLY_ANSWER_BYTES} bytes"
    )
    assert (await agents.record_event("t", "note", payload="still writable")).recorded
    view = await view_of(agents)
    assert view.status is TaskStatus.OPEN and view.last_seq == 3


async def test_an_answer_to_a_request_answered_already_is_rejected(
    agents: ConversationHistory,
) -> None:
    """Kept as an early answer it would never be taken and would hold a slot for good."""
    release = AgentSpec(name="release", tools=["echo"])
    assert (await agents.create_task("t", "ship", agent=release)).recorded
    await awaiting(agents)
    assert (await agents.respond("t", 2, input_id="replicas")).recorded
    await spawned(agents, 2)
    assert (await agents.submit_input("t", 3, input_id="replicas", request_id="late")).recorded

    async def rejected() -> bool:
        return len(await rejections(agents)) == 1

    await eventually(rejected)
    (late,) = await rejections(agents)
    assert late == {"input_id": "replicas", "error": "input 'replicas' was answered already"} | {
        "answer": 3
    }


async def test_a_backtracking_pattern_is_checked_without_stalling_the_worker(
    agents: ConversationHistory,
) -> None:
    """``(a+)+$`` against 30 ``a`` and a ``!`` stalled the worker's workflow thread under
    Python's ``re`` (every task on it timed out); RE2 refuses the answer at once."""
    spec = AgentSpec(name="ask_schema", input={"schema": {"type": "string", "pattern": "(a+)+$"}})
    assert (await agents.create_task("t", "ask", agent=spec)).recorded
    await awaiting(agents)
    refused = await agents.respond("t", "a" * 30 + "!")
    assert (refused.recorded, refused.error) == (False, ErrorCode.INPUT_INVALID)
    assert refused.message == f"the answer: {'a' * 30 + '!'!r} does not match '(a+)+$'"
    assert (await agents.respond("t", "aaa")).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.result is not None
    assert (done.status, done.result.text) == (TaskStatus.DONE, '"aaa"')


async def test_a_schema_whose_reference_does_not_resolve_fails_the_task_when_asked(
    agents: ConversationHistory,
) -> None:
    """A remote ``$ref`` made every answer fail inside the workflow (the check tried to fetch
    it); now the question is refused when asked, and the agent fails with the reason."""
    remote = {"$ref": "https://example.com/schema.json"}
    spec = AgentSpec(name="ask_schema", input={"schema": remote})
    assert (await agents.create_task("t", "ask", agent=spec)).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.error is not None
    assert done.status is TaskStatus.FAILED
    assert (
        "/: $ref 'https://example.com/schema.json' does not resolve within the schema"
        in done.error.text
    )
    assert done.pending_inputs == []


async def test_spawn_keys_outside_the_rule_are_refused(agents: ConversationHistory) -> None:
    """An empty key, one with ``/`` (``a/b`` and a grandchild ``b`` of ``a`` would be one
    task), one of 101 characters (its end's event could not be written: the parent failed
    every workflow task) and one with a control character are refused with ``SpawnRefused``;
    a good key after them spawns its child."""
    assert (await agents.create_task("t", "keys", agent=AgentSpec(name="bad_spawns"))).recorded
    await spawned(agents, 1)
    assert (await agents.finish_task("t/good", "done", result="fine")).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.result is not None and done.status is TaskStatus.DONE
    result = json.loads(done.result.text)
    rule = "1 to 100 characters, no '/' and no control characters"
    shown = ["''", "'a/b'", repr("k" * 101), repr("bell\x07")]
    assert result == {
        "refused": [f"spawn key {key}: {rule}" for key in shown],
        "good": ["done", "fine"],
    }


async def test_a_deleted_child_ends_cancelled_for_its_waiting_parent(
    agents: ConversationHistory, client: Client, graph: TaskGraph, agent_queue: str
) -> None:
    """Deleting a running child terminates its workflow before it can tell its parent; the
    deletion tells it instead (``cancelled``), so the parent goes on. A child's result too
    long for one event's JSON is cut so the ``child_result`` event stays whole JSON, and the
    parent's record keeps a preview."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await spawned(agents, 2)
    retention = HistoryRetention(
        client, agents.project_id, "ops", graph=graph, task_queue=agent_queue
    )
    deleted = await retention.delete_task("t/c0")
    assert deleted.recorded and deleted.runs_deleted
    assert (await agents.finish_task("t/c1", "done", result="r" * 40_000)).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.result is not None and done.status is TaskStatus.DONE
    assert done.result.text == "c0=cancelled,c1=done"
    assert sorted(await child_results(agents)) == [("c0", "cancelled"), ("c1", "done")]
    assert done.children["c1"].result == "r" * CHILD_RESULT_PREVIEW_CHARS
    events = await all_events(agents, "t")
    (c1,) = [
        json.loads(e.payload) for e in events if e.name == "c1" and e.kind.value == "child_result"
    ]
    assert c1["text"] == "r" * len(c1["text"]) and len(c1["text"]) > 31_000
