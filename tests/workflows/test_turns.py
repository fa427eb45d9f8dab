"""The agent's turn, as the runtime we learn from keeps it (docs/agent-tasks.md, "Turns"):
an ``unknown`` step stays unknown (nothing runs it again unless someone asks), a turn
interrupted after its tools ran is continued (never replayed), a failed run is rolled back
and its turn resumes, and the transcript the model sees holds the whole story. Against the
real dev server and Neo4j; the ``openai`` provider talks to an OpenAI-compatible server of the
test's own, which keeps every request (the messages the model was shown)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.activities.chat_protocol import fallback_call_id
from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import (
    AgentSpec,
    Event,
    EventKind,
    ModelSpec,
    Role,
    StepState,
    TaskStatus,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS, answer, calls
from tests.conftest import eventually, task_started
from tests.model_server import ModelServer, Reply, completion, error
from tests.workflows.conftest import openai_worker, script, spec, worker_process

OPENAI = AgentSpec(tools=["echo"], model=ModelSpec(provider="openai", model="test-model"))


def notes(events: list[Event], name: str) -> list[dict[str, Any]]:
    """The payloads of the task's ``note`` events named ``name``."""
    return [json.loads(e.payload) for e in events if e.kind is EventKind.NOTE and e.name == name]


async def ended(history: ConversationHistory, task: str = "t") -> Any:
    view = await asyncio.wait_for(history.wait_task(task), 120)
    assert view is not None
    return view


async def test_an_unknown_step_stays_unknown_across_continue_as_new_and_resume(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """The worker is killed (SIGKILL) while a charge that is not idempotent runs: the step
    ends ``unknown``. The agent code, memoized by step name, starts over from the top after
    each continue-as-new (the server suggests it at 60 events) and after a ``resume``: the
    charge ran once all the same. Only ``retry_step`` runs it again, under the same key,
    recorded as a decision by who asked."""
    client = low_limit_env.client
    queue = f"unknown-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="ops", task_queue=queue, graph=graph
    )
    log = str(tmp_path / "charge.log")
    agent = AgentSpec(
        name="charge_once",
        tools=["charge_card", "echo"],
        input={"log": log, "seconds": 120, "rounds": 12},
    )
    address = client.service_client.config.target_host
    process = await worker_process(queue, {"TEMPORAL_ADDRESS": address})
    try:
        assert (await history.create_task("t", "charge once", agent=agent)).recorded
        await eventually(lambda: asyncio.to_thread(Path(log).exists), within=60)
    finally:
        process.kill()  # SIGKILL: no shutdown of any kind
        await process.wait()
    key = f"{history.workflow_id('t')}/charge/1"

    async def runs() -> list[str]:
        return (await asyncio.to_thread(Path(log).read_text)).splitlines()

    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        failed = await ended(history)
        assert failed.status is TaskStatus.FAILED and failed.runs >= 2
        assert failed.error is not None and "the charge is unknown" in failed.error.text
        assert await runs() == [key]
        assert (await history.resume_task("t")).recorded
        failed = await ended(history)
        assert failed.status is TaskStatus.FAILED
        assert await runs() == [key]  # resumed: still once
        retried = await history.retry_step("t", "charge", reason="the bank says it never came")
        assert retried.recorded
        done = await ended(history)
        events = await all_events(history, "t")
        steps = {s.step_name: s for s in await all_steps(history, "t")}
    assert done.status is TaskStatus.DONE and await runs() == [key, key]
    assert (steps["charge"].state, steps["charge"].idempotency_key) == (StepState.COMPLETED, key)
    (decision,) = [e for e in events if e.kind is EventKind.DECISION]
    assert decision.author == "ops" and "the bank says it never came" in decision.payload
    assert decision.cites is not None and [s.name for s in decision.cites.steps] == ["charge"]


async def test_an_interrupted_turn_is_continued_never_replayed(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """The loop's charge is cancelled while it runs (its step ends ``unknown``): the turn was
    interrupted after its tools ran, so ``resume_task`` is refused and ``continue_task`` asks
    the model again with the closed call, without a new user message and without running the
    charge again."""
    log = str(tmp_path / "charge.log")
    turns = [calls(("charge_card", {"log": log, "seconds": 300})), answer("not charging again")]
    assert (await agents.create_task("t", script(*turns), agent=spec())).recorded
    await eventually(lambda: asyncio.to_thread(Path(log).exists))
    assert (await agents.cancel_task("t")).recorded
    assert (await ended(agents)).status is TaskStatus.CANCELLED
    assert await agents.has_interrupted_turn("t")
    refused = await agents.resume_task("t")
    assert (refused.recorded, refused.error) == (False, ErrorCode.NO_RESUMABLE_TURN)
    assert (await agents.continue_task("t")).recorded
    done = await ended(agents)
    assert (done.status, done.result and done.result.text) == (
        TaskStatus.DONE,
        "not charging again",
    )
    assert not await agents.has_interrupted_turn("t")
    events = await all_events(agents, "t")
    assert [n["start"] for n in notes(events, "run_started")] == ["turn", "continuation"]
    assert [e.role for e in events if e.kind is EventKind.MESSAGE].count(Role.USER) == 1
    assert sum(e.kind is EventKind.TOOL_CALL for e in events) == 1
    assert len((await asyncio.to_thread(Path(log).read_text)).splitlines()) == 1
    refused = await agents.continue_task("t")
    assert (refused.recorded, refused.error) == (False, ErrorCode.NOT_RESUMABLE)


@pytest.fixture
async def model(request: pytest.FixtureRequest) -> AsyncIterator[ModelServer]:
    """The test's OpenAI-compatible server with the replies the test names (``indirect``)."""
    server = ModelServer(request.param)
    with server.running():
        yield server


async def openai_history(
    client: Client, graph: TaskGraph, project_id: str
) -> tuple[ConversationHistory, str]:
    queue = f"openai-{uuid.uuid4().hex[:8]}"
    return (
        ConversationHistory(
            client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
        ),
        queue,
    )


def echo_call(call_id: str | None, text: str) -> dict[str, Any]:
    call: dict[str, Any] = {
        "type": "function",
        "function": {"name": "echo", "arguments": json.dumps({"text": text})},
    }
    if call_id is not None:
        call["id"] = call_id
    return call


@pytest.mark.parametrize(
    "model",
    [
        [
            Reply(body=completion("", [echo_call("e1", "first")])),
            error(400, "This model's maximum context length is 8192 tokens"),
            Reply(body=completion("the answer")),
        ]
    ],
    indirect=True,
)
async def test_a_failed_run_is_rolled_back_and_its_turn_resumes(
    client: Client, graph: TaskGraph, project_id: str, model: ModelServer
) -> None:
    """The run's second model call is refused (HTTP 400): the run fails and is rolled back (a
    ``rolled_back`` note over its events; seqs and hashes unchanged). Resumed, the model is
    shown the turn as it was before the run, the goal alone: never the rolled-back call."""
    history, queue = await openai_history(client, graph, project_id)
    worker = await openai_worker(queue, model.url)
    try:
        assert (await history.create_task("t", "what is it?", agent=OPENAI)).recorded
        failed = await ended(history)
        assert failed.status is TaskStatus.FAILED
        before = await all_events(history, "t")
        assert (await history.resume_task("t")).recorded
        done = await ended(history)
        events = await all_events(history, "t")
    finally:
        worker.kill()
        await worker.wait()
    assert (done.status, done.result and done.result.text) == (TaskStatus.DONE, "the answer")
    (span,) = notes(events, "rolled_back")
    calls_ = [e for e in before if e.kind is EventKind.TOOL_CALL]
    assert span["from_seq"] <= calls_[0].seq <= span["to_seq"]
    assert [(e.seq, e.full_sha256) for e in events[: len(before)]] == [
        (e.seq, e.full_sha256) for e in before
    ]
    assert [len(r["messages"]) for r in model.requests] == [1, 3, 1]
    assert model.requests[2]["messages"] == [{"role": "user", "content": "what is it?"}]
    assert [n["start"] for n in notes(events, "run_started")] == ["turn", "resume"]
    assert len(notes(events, "run_failed")) == 1 and len(notes(events, "run_finished")) == 1


BIG = "z" * 40_000


@pytest.mark.parametrize(
    "model",
    [
        [
            Reply(
                body=completion(
                    "",
                    [
                        echo_call(None, "no id"),
                        {"id": "", "type": "function", "function": {"name": "", "arguments": "{}"}},
                        echo_call("p2", "parallel"),
                        echo_call("p3", BIG),
                    ],
                )
            ),
            Reply(body=completion("done")),
        ]
    ],
    indirect=True,
)
async def test_the_quirks_of_real_tool_calls(
    client: Client, graph: TaskGraph, project_id: str, model: ModelServer
) -> None:
    """One turn of four parallel calls: one without an id, one with an empty id and name, one
    plain, one whose arguments pass the 32,000-character bound. The next request shows them
    as one assistant message whose calls each have an id its result answers; the nameless one
    failed and says so, the oversized one was refused with the limit, never run cut."""
    history, queue = await openai_history(client, graph, project_id)
    worker = await openai_worker(queue, model.url)
    try:
        assert (await history.create_task("t", "go", agent=OPENAI)).recorded
        done = await ended(history)
        steps = await all_steps(history, "t")
    finally:
        worker.kill()
        await worker.wait()
    assert done.status is TaskStatus.DONE
    assert [s.state for s in steps] == [
        StepState.COMPLETED,
        StepState.FAILED,
        StepState.COMPLETED,
        StepState.FAILED,
    ]
    shown = model.requests[1]["messages"]
    assert [m["role"] for m in shown] == ["user", "assistant", "tool", "tool", "tool", "tool"]
    ids = [c["id"] for c in shown[1]["tool_calls"]]
    given = [fallback_call_id("chatcmpl-test", place) for place in (0, 1)]
    assert ids == [*given, "p2", "p3"]  # an id-less call gets a stable one (chat_protocol)
    assert [m["tool_call_id"] for m in shown[2:]] == ids
    assert shown[1]["tool_calls"][1]["function"]["name"] == "_"
    results = [m["content"] for m in shown[2:]]
    assert results[0] == "no id" and results[2] == "parallel"
    assert "names no tool" in results[1]
    length = len(json.dumps({"text": BIG}))
    assert f"{length:,} characters" in results[3] and "at most 32,000" in results[3]
    assert json.loads(shown[1]["tool_calls"][3]["function"]["arguments"]) == {
        "_truncated": True,
        "full_length": length,
    }


@pytest.mark.parametrize("model", [[Reply(body=completion("eu it is"))]], indirect=True)
async def test_the_model_is_shown_the_answer_and_the_childs_result(
    client: Client, graph: TaskGraph, project_id: str, model: ModelServer
) -> None:
    history, queue = await openai_history(client, graph, project_id)
    worker = await openai_worker(queue, model.url)
    try:
        agent = AgentSpec(name="ask_spawn_model", model=ModelSpec(provider="openai", model="m"))
        assert (await history.create_task("t", "where?", agent=agent)).recorded

        async def asked() -> bool:
            view = (await history.get_task("t")).view
            return view is not None and bool(view.pending_inputs)

        await eventually(asked, within=60)
        assert (await history.respond("t", {"region": "eu"})).recorded

        await task_started(history, "t/c0")
        assert (await history.finish_task("t/c0", "done", result="deployed to eu")).recorded
        done = await ended(history)
    finally:
        worker.kill()
        await worker.wait()
    assert done.result is not None and done.result.text == "eu it is"
    (request,) = model.requests
    assert request["messages"] == [
        {"role": "user", "content": "where?"},
        {"role": "user", "content": "A person was asked (input q): Which region?"},
        {"role": "user", "content": 'The person answered q: {"region": "eu"}'},
        {"role": "user", "content": "Child task t/c0 (spawn key c0) ended done: deployed to eu"},
    ]


async def test_a_branch_copies_the_log_up_to_a_seq_and_leaves_the_source_as_it_was(
    history: ConversationHistory, graph: TaskGraph
) -> None:
    """A recorded task of five events (two of them sealed by this client's key store, one a
    decision citing an earlier event), branched at seq 4: the branch's events 1 to 4 are the
    source's (kind, role, name, author, text, full length and hash; sealed text under new
    keys), the source keeps its five, Neo4j links the branch ``BRANCHED_FROM {seq: 4}``, and
    the branch takes its own writes after the copy (seq 5)."""
    assert (await history.create_task("src", "the source")).recorded
    writes = [
        history.record_event("src", "message", "hello", role="user"),
        history.record_event("src", "tool_call", '{"cmd": "ls"}', name="bash"),
        history.record_event("src", "tool_result", "a b c", name="bash"),
        history.record_decision("src", "go on", cites_events=[3]),
        history.record_event("src", "note", "after the point"),
    ]
    for write in writes:
        assert (await write).recorded
    branched = await history.branch_from("src", 4, "src-b")
    assert branched.recorded and branched.task is not None
    assert branched.task.branched_from is not None and branched.task.branched_from.seq == 4
    assert (await history.record_event("src-b", "note", "the branch's own")).seq == 5
    source = (await history.list_events("src")).events
    copy = (await history.list_events("src-b")).events

    def shape(events: list[Event]) -> list[tuple[Any, ...]]:
        return [
            (e.seq, e.kind, e.role, e.name, e.author, e.payload, e.full_length, e.full_sha256)
            for e in events
        ]

    assert shape(copy[:4]) == shape(source[:4]) and len(source) == 5
    assert copy[4].payload == "the branch's own"
    assert copy[3].cites is not None and copy[3].cites.events == [3]
    sealed = [(s.key_id, c.key_id) for s, c in zip(source[:4], copy[:4], strict=True)]
    assert all(a and b and a != b for a, b in sealed)  # every copy under a key of its own
    await eventually(lambda: _branched_in_neo4j(graph, history))


async def _branched_in_neo4j(graph: TaskGraph, history: ConversationHistory) -> bool:
    rows = await graph.runner.read(
        "MATCH (b:Task {key: $b})-[r:BRANCHED_FROM]->(s:Task {key: $s}) RETURN r.seq AS seq",
        b=history.workflow_id("src-b"),
        s=history.workflow_id("src"),
    )
    return [row["seq"] for row in rows] == [4]


async def test_an_agent_branch_goes_on_from_its_branch_point(agents: ConversationHistory) -> None:
    """A finished tool-loop task branched right after its first tool result: the branch's
    agent asks the model with the copied transcript (a continuation, no new user message) and
    goes on from there, as the source did after that point."""
    turns = [calls(("echo", {"text": "a"})), calls(("echo", {"text": "b"})), answer("end")]
    assert (await agents.create_task("t", script(*turns), agent=spec())).recorded
    assert (await ended(agents)).status is TaskStatus.DONE
    source = await all_events(agents, "t")
    first = next(e for e in source if e.kind is EventKind.TOOL_RESULT)
    assert (await agents.branch_from("t", first.seq, "t-b")).recorded
    done = await ended(agents, "t-b")
    copy = await all_events(agents, "t-b")
    assert done.result is not None and done.result.text == "end"
    after = [e for e in copy if e.seq > first.seq]
    assert [n["start"] for n in notes(after, "run_started")] == ["continuation"]
    assert [json.loads(e.payload) for e in after if e.kind is EventKind.TOOL_CALL] == [
        {"text": "b"}
    ]
    assert [e.role for e in copy if e.kind is EventKind.MESSAGE].count(Role.USER) == 1


async def test_agent_code_retries_an_unknown_step_explicitly_under_its_key(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = str(tmp_path / "once.log")
    spec_ = AgentSpec(name="retry_unknown", tools=["slow_once"], input={"log": log})
    assert (await agents.create_task("t", "retry", agent=spec_)).recorded
    done = await ended(agents)
    assert done.result is not None and done.result.text == "completed: done"
    key = f"{agents.workflow_id('t')}/once/1"
    assert (await asyncio.to_thread(Path(log).read_text)).splitlines() == [key, key]
    (decision,) = [e for e in await all_events(agents, "t") if e.kind is EventKind.DECISION]
    assert "the tool dedupes by key" in decision.payload and decision.author == "agent-1"
