"""Agent tasks: steps run as activities, with idempotency keys, crash semantics, budgets,
cancellation and resume, against the real Temporal dev server and Neo4j (a worker in a
subprocess where a crash is needed)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import (
    AgentSpec,
    EventKind,
    ModelSpec,
    Role,
    StepState,
    TaskStatus,
    TaskView,
    TokenUsage,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOL_NAMES, TOOLS, answer, calls
from tests.conftest import eventually, mirrored
from tests.workflows.conftest import cli, script, spec, worker_process


async def run_agent(history: ConversationHistory, goal: str, **budgets: Any) -> TaskView:
    assert (await history.create_task("t", goal, agent=spec(**budgets))).recorded
    view = await asyncio.wait_for(history.wait_task("t"), 120)
    assert view is not None
    return view


async def test_a_tool_that_fails_twice_runs_three_times_under_one_key(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = str(tmp_path / "flaky.log")
    view = await run_agent(agents, script(calls(("flaky", {"log": log})), answer("finished")))
    assert (view.status, view.result and view.result.text) == (TaskStatus.DONE, "finished")
    (step,) = await all_steps(agents, "t")
    key = f"{agents.workflow_id('t')}/{step.step_name}/1"
    assert (await asyncio.to_thread(Path(log).read_text)).splitlines() == [
        key,
        key,
        key,
    ]  # three runs, one key
    assert (step.state, step.attempt, step.idempotency_key) == (StepState.COMPLETED, 1, key)
    events = await all_events(agents, "t")
    results = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert [e.payload for e in results] == ["ok after 3 runs"]
    assert step.result_event_seq == results[0].seq
    calls_ = [e for e in events if e.kind is EventKind.TOOL_CALL]
    assert [(e.name, json.loads(e.payload)) for e in calls_] == [("flaky", {"log": log})]
    assert calls_[0].seq < results[0].seq  # the call is recorded before the result
    await mirrored(agents, "t")  # the model's token usage, per message, in Neo4j too
    usage = TokenUsage(input_tokens=10, output_tokens=10)
    rows = await agents.find_events(kind="message")
    assert [(r.role, r.usage) for r in rows] == [
        (Role.USER, None),
        (Role.ASSISTANT, usage),
        (Role.ASSISTANT, usage),
    ]
    assert view.agent_run is not None and view.agent_run.tokens == 40


async def test_outputs_that_are_too_large_or_not_serializable(
    agents: ConversationHistory,
) -> None:
    """A 5 MB output becomes a 32,000-character result with the full length and hash; a value
    that cannot be serialized fails its step; the task goes on to its answer."""
    view = await run_agent(
        agents,
        script(calls(("huge", {"chars": 5_000_000}), ("opaque", {"chars": 1})), answer("ok")),
    )
    assert view.status is TaskStatus.DONE
    steps = {s.step_name.split(":")[1]: s for s in await all_steps(agents, "t")}
    assert (steps["huge"].state, steps["opaque"].state) == (StepState.COMPLETED, StepState.FAILED)
    events = {e.seq: e for e in await all_events(agents, "t")}
    big = events[steps["huge"].result_event_seq or 0]
    assert (len(big.payload), big.full_length, big.truncated) == (32_000, 5_000_000, True)
    assert big.full_sha256 == __import__("hashlib").sha256(b"x" * 5_000_000).hexdigest()
    bad = events[steps["opaque"].result_event_seq or 0]
    assert "cannot be serialized" in bad.payload


async def test_unknown_tools_and_invalid_arguments_fail_their_step_and_the_loop_goes_on(
    agents: ConversationHistory,
) -> None:
    view = await run_agent(
        agents,
        script(
            calls(("no_such_tool", {}), ("echo", {"wrong": 1})),
            calls(("echo", {"text": "fine"})),
            answer("done anyway"),
        ),
    )
    assert (view.status, view.result and view.result.text) == (TaskStatus.DONE, "done anyway")
    steps = await all_steps(agents, "t")
    assert [(s.step_name, s.state) for s in steps] == [
        ("r00001.0:no_such_tool", StepState.FAILED),
        ("r00001.1:echo", StepState.FAILED),
        ("r00002.0:echo", StepState.COMPLETED),
    ]
    events = {e.seq: e.payload for e in await all_events(agents, "t")}
    assert "no tool 'no_such_tool'" in events[steps[0].result_event_seq or 0]
    assert "arguments of echo are invalid" in events[steps[1].result_event_seq or 0]
    assert "text" in events[steps[1].result_event_seq or 0]  # the validation names the field
    assert events[steps[2].result_event_seq or 0] == "fine"


@pytest.mark.parametrize(
    ("budget", "limit", "turns"),
    [
        ("max_rounds", 2, [calls(("echo", {"text": "a"}))] * 5),
        ("max_tool_calls", 3, [calls(("echo", {"text": "a"}), ("echo", {"text": "b"}))] * 5),
        ("max_tokens", 50, [calls(("echo", {"text": "a"}), tokens=20)] * 5),
    ],
)
async def test_every_budget_ends_the_task_failed_naming_it(
    agents: ConversationHistory, budget: str, limit: int, turns: list[Any]
) -> None:
    view = await run_agent(agents, script(*turns), **{budget: limit})
    assert view.status is TaskStatus.FAILED
    assert view.error is not None and f"budget {budget} reached" in view.error.text
    errors = [e for e in await all_events(agents, "t") if e.kind is EventKind.ERROR]
    assert len(errors) == 1 and budget in errors[0].payload
    run = view.agent_run
    assert run is not None
    used = {"max_rounds": run.rounds, "max_tool_calls": run.tool_calls, "max_tokens": run.tokens}
    assert used[budget] >= limit


async def test_the_time_budget(agents: ConversationHistory, tmp_path: Path) -> None:
    log = str(tmp_path / "slow.log")
    view = await run_agent(
        agents,
        script(*[calls(("sync_data", {"log": log, "seconds": 1.5}))] * 10),
        max_seconds=2,
    )
    assert view.status is TaskStatus.FAILED
    assert view.error is not None and "budget max_seconds reached" in view.error.text


async def test_outside_writes_to_an_agent_task_are_refused(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    log = str(tmp_path / "s.log")
    goal = script(calls(("sync_data", {"log": log, "seconds": 30})), answer("x"))
    assert (await agents.create_task("t", goal, agent=spec())).recorded

    async def running() -> bool:
        return await asyncio.to_thread(Path(log).exists)

    await eventually(running)
    for write in (
        agents.record_event("t", "message", "hi", role="user"),
        agents.set_step("t", "mine", "completed"),
        agents.finish_task("t", "done"),
    ):
        result = await write
        assert (result.recorded, result.error) == (False, ErrorCode.RUN_BY_AGENT)
    assert (await agents.record_event("t", "note", "a note from outside")).recorded
    assert (await agents.cancel_task("t")).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.status is TaskStatus.CANCELLED


async def test_cancel_during_a_heartbeating_step(
    agents: ConversationHistory, graph: TaskGraph, tmp_path: Path, client: Client
) -> None:
    """A cancel request while a long tool runs: the tool sees its cancellation, the step ends
    ``unknown``, the task ``cancelled`` in the view, the search attribute and Neo4j, and the
    workflow closes as cancelled."""
    log = str(tmp_path / "charge.log")
    goal = script(calls(("charge_card", {"log": log, "seconds": 300})), answer("never"))
    assert (await agents.create_task("t", goal, agent=spec())).recorded

    async def charging() -> bool:
        return await asyncio.to_thread(Path(log).exists)

    await eventually(charging)
    assert (await agents.cancel_task("t")).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.status is TaskStatus.CANCELLED
    assert await asyncio.to_thread(Path(log + ".cancelled").exists)  # the tool saw its cancellation
    (step,) = await all_steps(agents, "t")
    assert step.state is StepState.UNKNOWN
    description = await client.get_workflow_handle(agents.workflow_id("t")).describe()
    assert description.status is not None and description.status.name == "CANCELED"
    assert description.search_attributes["TaskStatus"] == ["cancelled"]
    rows = await agents.find_tasks(status="cancelled")
    assert [r.name for r in rows] == ["t"]
    assert (await agents.finish_task("t", "done")).error is ErrorCode.TASK_CLOSED


async def test_temporal_cancel_from_the_cli(agents: ConversationHistory, tmp_path: Path) -> None:
    """``temporal workflow cancel`` (what the Web UI sends too) ends the task the same way."""
    from agent_tasks.devstack import find_temporal_binary

    log = str(tmp_path / "sync.log")
    goal = script(calls(("sync_data", {"log": log, "seconds": 300})), answer("never"))
    assert (await agents.create_task("t", goal, agent=spec())).recorded

    async def syncing() -> bool:
        return await asyncio.to_thread(Path(log).exists)

    await eventually(syncing)
    done = await asyncio.to_thread(
        subprocess.run,
        [
            str(find_temporal_binary()),
            "workflow",
            "cancel",
            "--workflow-id",
            agents.workflow_id("t"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    view = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert view is not None and view.status is TaskStatus.CANCELLED
    assert await asyncio.to_thread(Path(log + ".cancelled").exists)
    await mirrored(agents, "t")


@pytest.mark.parametrize(
    ("tool", "runs", "state"),
    [("charge_card", 1, StepState.UNKNOWN), ("sync_data", 2, StepState.COMPLETED)],
    ids=["not-idempotent", "idempotent"],
)
async def test_kill_9_of_the_worker_during_a_step(
    client: Client,
    graph: TaskGraph,
    project_id: str,
    tmp_path: Path,
    tool: str,
    runs: int,
    state: StepState,
    cpu_burners: None,
) -> None:
    """The worker running a step is killed (SIGKILL), with two CPU burners loading the
    machine. A step declared not idempotent ran once and ends ``unknown`` with a result that
    says so; an idempotent one runs again under the same key and completes once (twice in
    all: under load it once ran 4 times, when the read of its arguments outlasted the
    heartbeat timeout before the first heartbeat). Either way the loop goes on to its
    answer."""
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    log = str(tmp_path / "effect.log")
    goal = script(calls((tool, {"log": log, "seconds": 120})), answer("carried on"))
    process = await worker_process(queue)
    try:
        assert (await history.create_task("t", goal, agent=spec())).recorded

        async def started() -> bool:
            return await asyncio.to_thread(Path(log).exists)

        await eventually(started, within=60)
    finally:
        process.kill()  # SIGKILL: no shutdown of any kind
        await process.wait()
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        view = await asyncio.wait_for(history.wait_task("t"), 120)
        steps = await all_steps(history, "t")
        events = await all_events(history, "t")
    assert view is not None
    assert (view.status, view.result and view.result.text) == (TaskStatus.DONE, "carried on")
    (step,) = steps
    key = f"{history.workflow_id('t')}/{step.step_name}/1"
    assert (await asyncio.to_thread(Path(log).read_text)).splitlines() == [key] * runs
    assert (step.state, step.attempt, step.idempotency_key) == (state, 1, key)
    results = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert len(results) == 1 and results[0].seq == step.result_event_seq
    if state is StepState.UNKNOWN:
        assert "effect is unknown" in results[0].payload and "not run again" in results[0].payload
        assert step.result_validity.value == "uncertain"


async def test_agent_code_fails_and_resume_runs_only_what_did_not_complete(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """Agent code whose third step fails: the task ends ``failed``. ``resume`` runs the agent
    again in a new run of the task: the two completed steps return their recorded results
    without running (their effects stay once), the failed one runs under a new key, and the
    task ends ``done``."""
    log = str(tmp_path / "effects.log")
    agent_spec = AgentSpec(name="three_steps", tools=TOOL_NAMES, input={"log": log})
    assert (await agents.create_task("t", "three steps", agent=agent_spec)).recorded
    failed = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert failed is not None and failed.status is TaskStatus.FAILED
    assert failed.error is not None and "step three failed" in failed.error.text
    not_now = await agents.resume_task("nope")
    assert not_now.error is ErrorCode.TASK_NOT_FOUND
    assert (await agents.resume_task("t")).recorded
    done = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert done is not None and done.status is TaskStatus.DONE
    assert done.result is not None and done.result.text == "first, done, third"
    assert (await agents.resume_task("t")).error is ErrorCode.NOT_RESUMABLE
    wid = agents.workflow_id("t")
    assert (await asyncio.to_thread(Path(log).read_text)).splitlines() == [f"{wid}/two/1"]
    third = (await asyncio.to_thread(Path(log + ".3").read_text)).splitlines()
    assert third == [f"{wid}/three/1", f"{wid}/three/2"]  # a known failure: a new key
    steps = {s.step_name: s for s in await all_steps(agents, "t")}
    assert {n: (s.state, s.attempt) for n, s in steps.items()} == {
        "one": (StepState.COMPLETED, 1),
        "two": (StepState.COMPLETED, 1),
        "three": (StepState.COMPLETED, 2),
    }
    events = await all_events(agents, "t")
    notes = [e.payload for e in events if e.kind is EventKind.NOTE]
    assert notes.count("all three done") == 1
    statuses = [e.payload for e in events if e.kind is EventKind.NOTE and e.name == "status"]
    assert statuses == ["in_progress", "failed", "in_progress", "done"]
    runs = [e.name for e in events if e.name and e.name.startswith("run_")]
    assert runs == ["run_started", "run_failed", "run_started", "run_finished"]


async def test_an_agent_survives_continue_as_new(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """Agent code that checkpoints each round, on a server that suggests continue-as-new at 60
    events: the task continues-as-new several times while its agent runs, the agent picks up
    from its kept state each time, and every round runs once."""
    client = low_limit_env.client
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue="can", graph=graph
    )
    async with build_worker(client, graph, "can", tools=TOOLS, scripts=SCRIPTS):
        counter = AgentSpec(name="counter", tools=["echo"])
        assert (await history.create_task("t", "count", agent=counter)).recorded
        view = await asyncio.wait_for(history.wait_task("t"), 120)
        assert view is not None and view.status is TaskStatus.DONE
        assert view.runs > 2 and view.agent_run is not None
        assert view.agent_run.state == {"done": 30}
        steps = await all_steps(history, "t")
        assert [s.step_name for s in steps] == [f"echo-{i:02d}" for i in range(30)]
        assert all(s.state is StepState.COMPLETED and s.attempt == 1 for s in steps)
        results = [
            e.payload for e in await all_events(history, "t") if e.kind is EventKind.TOOL_RESULT
        ]
        assert results == [f"round {i}" for i in range(30)]


async def test_history_grows_linearly_with_the_turns(
    agents: ConversationHistory, client: Client
) -> None:
    """50 turns, each adding 20,000 characters to the transcript twice (the call's arguments
    and the echo): the model activity's input is a reference, so each turn adds about the same
    to the history, and no turn carries the conversation (a model input that did would add
    the whole transcript each turn: 50 turns of 40 KB would then grow the history by ~50 MB)."""
    echo = AgentSpec(tools=["echo"], model=ModelSpec(provider="scripted", model="echo-20k"))
    assert (await agents.create_task("t", "echo", agent=echo)).recorded
    view = await asyncio.wait_for(agents.wait_task("t"), 300)
    assert view is not None and view.status is TaskStatus.DONE and view.runs == 1
    handle = client.get_workflow_handle(agents.workflow_id("t"))
    events = (await handle.fetch_history()).events
    sizes = [
        e.workflow_task_started_event_attributes.history_size_bytes
        for e in events
        if e.HasField("workflow_task_started_event_attributes")
    ]
    per_turn = (sizes[-1] - sizes[0]) / 50
    assert per_turn < 3 * 40_000  # each turn adds about its own 40 KB, never the transcript
    assert sizes[-1] < 50 * 3 * 40_000


def _files(root: Path) -> None:
    (root / "b").mkdir()
    (root / "a.txt").write_text("alpha\nneedle here\n", encoding="utf-8")
    (root / "b" / "c.txt").write_text("needle\nno\nNEEDLE again\n", encoding="utf-8")
    (root / "d.bin").write_bytes(b"\x00\x01needle")


async def test_the_demo_agent_from_python(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """The README's dozen lines: a worker whose file tools read a folder, the demo agent
    (the tool-calling loop with the scripted model), its answer and steps."""
    from agent_tasks.activities.files import file_tools
    from agent_tasks.cli.agents import demo_spec

    await asyncio.to_thread(_files, tmp_path)
    queue = f"demo-{uuid.uuid4().hex[:6]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="me", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue, tools=file_tools(tmp_path)):
        await history.create_task("find", 'Which files mention "needle"?', agent=demo_spec())
        view = await asyncio.wait_for(history.wait_task("find"), 60)
        steps = await all_steps(history, "find")
    assert view is not None and view.status is TaskStatus.DONE and view.result is not None
    # two text files (the binary one is skipped); three lines in two files mention it
    assert view.result.text == (
        "2 files; 3 lines mention 'needle' in 2 files; the first is a.txt line 2: needle here"
    )
    assert [(s.step_name, s.state) for s in steps] == [
        ("r00001.0:list_files", StepState.COMPLETED),
        ("r00002.0:search_text", StepState.COMPLETED),
        ("r00003.0:read_file", StepState.COMPLETED),
    ]


async def test_the_demo_agent_from_the_cli(tmp_path: Path) -> None:
    """``agent-tasks run demo GOAL --path DIR`` (the README's command) prints the answer."""
    await asyncio.to_thread(_files, tmp_path)
    code, result = await cli(
        "run",
        "demo",
        'Which files mention "needle"?',
        "--path",
        str(tmp_path),
        "--project",
        f"cli-{uuid.uuid4().hex[:8]}",
        "--json",
        env={"TEMPORAL_TASK_QUEUE": f"q-{uuid.uuid4().hex[:6]}"},
    )
    assert code == 0
    assert result["view"]["status"] == "done"
    assert result["view"]["result"]["text"].startswith("2 files; 3 lines mention 'needle'")
    assert [s["state"] for s in result["steps"]] == ["completed"] * 3
