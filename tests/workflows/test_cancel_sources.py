"""Cancel claims of docs/agent-tasks.md ("Cancellation: one rule") and
docs/input-and-children.md that the other cancel tests do not reach: ``agent-tasks cancel
NAME [--no-cascade]`` run as a subprocess, the cascade reaching grandchildren, ``temporal
workflow cancel`` of a parent alone, a parent resumed after its own cascade cancel. Against the
real dev server and Neo4j, on the agent worker of ``tests/workflows/conftest.py``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import JsonValue
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from agent_tasks.activities.tools import ToolContext, tool
from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import (
    AgentSpec,
    EventKind,
    ModelSpec,
    StepState,
    TaskStatus,
    TaskView,
)
from agent_tasks.devstack import find_temporal_binary
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from agent_tasks.workflows.agents import AgentContext, ChildFailed, agent
from tests.agent_tools import SCRIPTS, TOOLS, Effect, answer, calls
from tests.conftest import eventually, mirrored, task_started
from tests.model_server import ModelServer, Reply, completion
from tests.workflows.conftest import cli, graph_row, openai_worker, script, spec
from tests.workflows.test_cancel import cancelled_everywhere


async def view_of(history: ConversationHistory, task: str) -> TaskView:
    view = (await history.get_task(task)).view
    assert view is not None, task
    return view


async def waiting_for_children(history: ConversationHistory, task: str = "t") -> None:
    """Wait until the ``fanout`` task is ``awaiting_children``."""

    async def waiting() -> bool:
        return (await view_of(history, task)).status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting, within=60)


async def child_results(history: ConversationHistory, task: str) -> list[tuple[str, str]]:
    """(spawn key, status) of the task's ``child_result`` events, sorted."""
    return sorted(
        (e.name or "", json.loads(e.payload)["status"])
        for e in await all_events(history, task)
        if e.kind is EventKind.CHILD_RESULT
    )


async def after_end_notes(history: ConversationHistory, task: str) -> list[str]:
    """The payloads of the task's ``cancel_after_end`` notes."""
    return [
        e.payload
        for e in await all_events(history, task)
        if e.kind is EventKind.NOTE and e.name == "cancel_after_end"
    ]


async def ended(history: ConversationHistory, task: str) -> TaskStatus:
    """The task's status once its workflow has ended."""
    view = await asyncio.wait_for(history.wait_task(task), 120)
    assert view is not None, task
    return view.status


@pytest.mark.parametrize("cascade", [True, False], ids=["cascade", "no-cascade"])
async def test_agent_tasks_cancel_from_the_cli(agents: ConversationHistory, cascade: bool) -> None:
    """``agent-tasks cancel NAME`` (cli.md, input-and-children.md's ``./run cancel release``)
    cancels the task and its running children, each reporting ``cancelled``; with
    ``--no-cascade`` the children keep running and the parent records no end of theirs."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await waiting_for_children(agents)
    flags = [] if cascade else ["--no-cascade"]
    code, out = await cli("cancel", "t", *flags, "--project", agents.project_id, "--json")
    assert (code, out["recorded"], out["error"]) == (0, True, None)
    assert await ended(agents, "t") is TaskStatus.CANCELLED
    if cascade:
        assert [await ended(agents, f"t/c{i}") for i in range(2)] == [TaskStatus.CANCELLED] * 2
        assert await child_results(agents, "t") == [("c0", "cancelled"), ("c1", "cancelled")]
    else:
        statuses = [(await view_of(agents, f"t/c{i}")).status for i in range(2)]
        assert statuses == [TaskStatus.OPEN] * 2
        assert await child_results(agents, "t") == []
        for i in range(2):
            assert (await agents.cancel_task(f"t/c{i}")).recorded


async def test_agent_tasks_cancel_of_an_unknown_task_is_refused(
    agents: ConversationHistory,
) -> None:
    """The CLI's cancel of a name not in the project: exit 1, ``task_not_found``."""
    code, out = await cli("cancel", "nobody", "--project", agents.project_id, "--json")
    assert (code, out["recorded"], out["error"]) == (1, False, "task_not_found")


async def temporal_cancel(workflow_id: str) -> None:
    """``temporal workflow cancel --workflow-id ID`` against the local dev server."""
    done = await asyncio.to_thread(
        subprocess.run,
        [str(find_temporal_binary()), "workflow", "cancel", "--workflow-id", workflow_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("source", ["cancel_task", "temporal-cli"])
async def test_the_cascade_reaches_grandchildren(
    agents: ConversationHistory, client: Client, source: str
) -> None:
    """A ``fanout`` parent waits for two recorded children; the first has a recorded child
    of its own (``t/c0/g``). A cancel of the parent alone (``cancel_task``, or ``temporal
    workflow cancel`` of its workflow, which cascades once the parent's workflow task runs)
    ends the parent, both children and the grandchild ``cancelled``, each end reported to
    its own parent."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await waiting_for_children(agents)
    assert (await agents.spawn_child("t/c0", "g", "t/c0/g", "grandchild")).recorded
    if source == "cancel_task":
        assert (await agents.cancel_task("t")).recorded
    else:
        await temporal_cancel(agents.workflow_id("t"))
    tree = ["t", "t/c0", "t/c1", "t/c0/g"]
    assert [await ended(agents, name) for name in tree] == [TaskStatus.CANCELLED] * 4
    assert await child_results(agents, "t") == [("c0", "cancelled"), ("c1", "cancelled")]
    assert await child_results(agents, "t/c0") == [("g", "cancelled")]
    for name in tree:
        description = await client.get_workflow_handle(agents.workflow_id(name)).describe()
        assert description.status is not None and description.status.name == "CANCELED", name


async def test_a_parent_resumed_after_its_cascade_cancel_gets_its_children_cancelled(
    agents: ConversationHistory,
) -> None:
    """input-and-children.md: a parent resumed after its own cascade cancel: its children stay
    ``cancelled`` (no new child is started under their keys) and the agent code that waits
    for them gets them ``cancelled``; each end is recorded once."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await waiting_for_children(agents)
    assert (await agents.cancel_task("t")).recorded
    assert await ended(agents, "t") is TaskStatus.CANCELLED
    assert [await ended(agents, f"t/c{i}") for i in range(2)] == [TaskStatus.CANCELLED] * 2
    assert (await agents.resume_task("t")).recorded
    done = await asyncio.wait_for(agents.wait_task("t", until=TaskStatus.DONE), 120)
    assert done is not None and done.status is TaskStatus.DONE
    assert done.result is not None and done.result.text == "c0=cancelled,c1=cancelled"
    assert await child_results(agents, "t") == [("c0", "cancelled"), ("c1", "cancelled")]
    spawned = [e.name for e in await all_events(agents, "t") if e.kind is EventKind.CHILD_TASK]
    assert spawned == ["c0", "c1"]
    assert [(await view_of(agents, f"t/c{i}")).status for i in range(2)] == [
        TaskStatus.CANCELLED
    ] * 2


async def test_terminating_is_the_unclean_path(
    agents: ConversationHistory, client: Client, tmp_path: Path
) -> None:
    """agent-tasks.md: terminating the workflow (instead of a cancel request) runs none of the
    cancellation rule: the step that ran stays ``in_progress`` (not settled ``unknown``), no
    ``status`` note is recorded, and the search attribute and Neo4j keep the task's last
    status, while Temporal says ``TERMINATED``."""
    log = tmp_path / "charge.log"
    goal = script(calls(("charge_card", {"log": str(log), "seconds": 300})), answer("never"))
    assert (await agents.create_task("t", goal, agent=spec())).recorded
    await eventually(lambda: asyncio.to_thread(log.exists), within=60)
    await mirrored(agents, "t")
    before = await graph_row(agents, "t")
    handle = client.get_workflow_handle(agents.workflow_id("t"))
    running = await handle.describe()
    events_before = await all_events(agents, "t")
    await handle.terminate(reason="the unclean path")
    description = await handle.describe()
    assert description.status is WorkflowExecutionStatus.TERMINATED
    assert description.search_attributes["TaskStatus"] == running.search_attributes["TaskStatus"]
    assert running.search_attributes["TaskStatus"] != ["cancelled"]
    after = await graph_row(agents, "t")
    assert (after.status, after.last_seq) == (before.status, before.last_seq)
    assert after.status is not TaskStatus.CANCELLED
    events = await all_events(agents, "t")
    assert [e.seq for e in events] == [e.seq for e in events_before]
    statuses = [e.payload for e in events if e.kind is EventKind.NOTE and e.name == "status"]
    assert "cancelled" not in statuses
    (step,) = await all_steps(agents, "t")
    assert step.state is StepState.IN_PROGRESS


@tool("finish_anyway", arguments=Effect, idempotent=False, heartbeat_s=2, start_to_close_s=600)
async def finish_anyway(args: Effect, context: ToolContext) -> str:
    """Heartbeats (the tool layer beats for it), hears the cancel, and finishes anyway: writes
    ``{log}.cancelled`` and returns a result."""
    await asyncio.to_thread(Path(args.log).write_text, context.idempotency_key)
    try:
        await asyncio.sleep(args.seconds)
    except asyncio.CancelledError:
        await asyncio.to_thread(Path(args.log + ".cancelled").write_text, "heard")
        return "finished after the cancel"
    return "finished"


async def test_a_heartbeating_tool_that_finishes_anyway_is_recorded_completed(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """agent-tasks.md: a tool that heartbeats sees the cancel; if it finishes anyway, its real
    result is recorded ``completed``, the agent does not go on, and the task ends
    ``cancelled``."""
    queue = f"anyway-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    log = tmp_path / "anyway.log"
    turns = [
        calls(("finish_anyway", {"log": str(log), "seconds": 300})),
        calls(("echo", {"text": "no"})),
    ]
    agent = AgentSpec(
        tools=["finish_anyway", "echo"], model=ModelSpec(provider="scripted", model="from-goal")
    )
    async with build_worker(client, graph, queue, tools=[*TOOLS, finish_anyway], scripts=SCRIPTS):
        assert (
            await history.create_task("t", script(*turns, answer("never")), agent=agent)
        ).recorded
        await eventually(lambda: asyncio.to_thread(log.exists), within=60)
        assert (await history.cancel_task("t")).recorded
        assert await ended(history, "t") is TaskStatus.CANCELLED
        (step,) = await all_steps(history, "t")
        events = {e.seq: e for e in await all_events(history, "t")}
    assert (log.parent / (log.name + ".cancelled")).read_text() == "heard"
    assert step.state is StepState.COMPLETED
    assert events[step.result_event_seq or 0].payload == "finished after the cancel"
    assert sum(e.kind is EventKind.TOOL_CALL for e in events.values()) == 1
    last = events[max(events)]
    assert (last.kind, last.name, last.payload) == (EventKind.NOTE, "status", "cancelled")


@agent("waits_for_a_slow_child")
async def waits_for_a_slow_child(ctx: AgentContext) -> str:
    """Spawns ``slow``, a tool-calling loop whose scripted model is ``input["goal"]`` (a call
    of ``plain_wait``, which no cancel reaches), and waits for it."""
    model = ModelSpec(provider="scripted", model="from-goal")
    child = AgentSpec(tools=["plain_wait"], model=model)
    await ctx.spawn("slow", str(ctx.input["goal"]), agent=child)
    (outcome,) = await ctx.wait_children()
    return outcome.text


async def test_a_cascade_waits_for_a_slow_childs_end_bounded_by_one_minute(
    agents: ConversationHistory, client: Client, tmp_path: Path
) -> None:
    """agent-tasks.md and input-and-children.md: the cancelled parent waits for its children's
    ends, at most 1 minute (``CHILD_CANCEL_WAIT``). The child runs a tool that does not
    heartbeat (10 s): it ends ``cancelled`` once the tool has; the parent records that end
    before it ends ``cancelled``, and its history after the cancel request holds the wait's
    1-minute timer, which never fired."""
    log = tmp_path / "wait.log"
    goal = script(calls(("plain_wait", {"log": str(log), "seconds": 10})), answer("never"))
    parent = AgentSpec(name="waits_for_a_slow_child", input={"goal": goal})
    assert (await agents.create_task("t", "wait", agent=parent)).recorded
    await eventually(lambda: asyncio.to_thread(log.exists), within=60)
    assert (await agents.cancel_task("t")).recorded
    assert await ended(agents, "t") is TaskStatus.CANCELLED
    assert await ended(agents, "t/slow") is TaskStatus.CANCELLED
    assert await child_results(agents, "t") == [("slow", "cancelled")]
    (step,) = await all_steps(agents, "t/slow")
    assert step.state is StepState.COMPLETED
    after, timers, fired = False, [], 0
    async for event in client.get_workflow_handle(agents.workflow_id("t")).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
            after = True
        elif after and event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            attributes = event.timer_started_event_attributes
            timers.append(attributes.start_to_fire_timeout.ToTimedelta())
        elif after and event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            fired += 1
    assert (timers, fired) == ([timedelta(minutes=1)], 0)


@tool("plain_fail", arguments=Effect, idempotent=False, start_to_close_s=60)
async def plain_fail(args: Effect, context: ToolContext) -> str:
    """No heartbeats (a cancel cannot reach it): logs its run, waits ``seconds``, then
    fails."""
    await asyncio.to_thread(Path(args.log).write_text, context.idempotency_key)
    await asyncio.sleep(args.seconds)
    raise RuntimeError(f"failed after {args.seconds:g} s")


async def test_a_tool_without_heartbeats_that_fails_after_the_cancel_is_recorded_failed(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """agent-tasks.md: a tool that does not heartbeat cannot be told: the task waits for it
    and records its real result, here ``failed`` with its error; the agent does not go on
    (the script's next turn would call ``echo``) and the task ends ``cancelled``."""
    queue = f"plainfail-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    log = tmp_path / "fail.log"
    turns = [
        calls(("plain_fail", {"log": str(log), "seconds": 4})),
        calls(("echo", {"text": "no"})),
        answer("never"),
    ]
    model = ModelSpec(provider="scripted", model="from-goal")
    agent_spec = AgentSpec(tools=["plain_fail", "echo"], model=model)
    async with build_worker(client, graph, queue, tools=[*TOOLS, plain_fail], scripts=SCRIPTS):
        assert (await history.create_task("t", script(*turns), agent=agent_spec)).recorded
        await eventually(lambda: asyncio.to_thread(log.exists), within=60)
        assert (await history.cancel_task("t")).recorded
        await cancelled_everywhere(history, client, graph)
        (step,) = await all_steps(history, "t")
        events = {e.seq: e for e in await all_events(history, "t")}
    assert (step.step_name.endswith(":plain_fail"), step.state) == (True, StepState.FAILED)
    assert "failed after 4 s" in events[step.result_event_seq or 0].payload
    assert sum(e.kind is EventKind.TOOL_CALL for e in events.values()) == 1


@agent("keeps_going_after_cancel")
async def keeps_going_after_cancel(ctx: AgentContext) -> str:
    """Runs ``charge_card`` (``input["log"]``, 300 s), swallows the cancel that ends it, then
    tries every ``AgentContext`` call that records or starts something."""
    args: dict[str, JsonValue] = {"log": str(ctx.input["log"]), "seconds": 300}
    try:
        await ctx.step("long", "charge_card", args)
    except asyncio.CancelledError:
        pass
    attempts = (
        lambda: ctx.emit("after the cancel"),
        lambda: ctx.ask("q", "Still there?"),
        lambda: ctx.spawn("k", "a child after the cancel", mode="collect"),
        lambda: ctx.step("again", "echo", {"text": "after the cancel"}),
        ctx.checkpoint,
        ctx.model_turn,
    )
    for attempt in attempts:
        try:
            await attempt()
        except asyncio.CancelledError:
            continue
    return "went on"


async def test_after_the_cancel_an_agent_that_swallows_it_starts_and_records_nothing(
    agents: ConversationHistory, client: Client, graph: TaskGraph, tmp_path: Path
) -> None:
    """agent-tasks.md: from the cancel's delivery the agent starts nothing: agent code that
    catches the ``CancelledError`` and calls ``emit``, ``ask``, ``spawn``, ``step``,
    ``checkpoint`` and ``model_turn`` records none of them (no note, no input request, no
    child, no second step, no model call) and the task ends ``cancelled``, not ``done``."""
    log = tmp_path / "long.log"
    spec_ = AgentSpec(
        name="keeps_going_after_cancel", tools=["charge_card", "echo"], input={"log": str(log)}
    )
    assert (await agents.create_task("t", "go on", agent=spec_)).recorded
    await eventually(lambda: asyncio.to_thread(log.exists), within=60)
    assert (await agents.cancel_task("t")).recorded
    view = await cancelled_everywhere(agents, client, graph)
    assert view.result is None and view.children == {}
    events = await all_events(agents, "t")
    assert [e for e in events if "after the cancel" in e.payload] == []
    kinds = {e.kind for e in events}
    assert not kinds & {EventKind.INPUT_REQUEST, EventKind.CHILD_TASK}
    assert [(s.step_name, s.state) for s in await all_steps(agents, "t")] == [
        ("long", StepState.UNKNOWN)
    ]


async def test_agent_tasks_cancel_no_cascade_of_a_task_that_ended_leaves_its_children(
    agents: ConversationHistory, client: Client
) -> None:
    """agent-tasks.md: ``--no-cascade`` on a task that ended ``done`` while its children run:
    the ``cancel_after_end`` note is recorded, the children run on and the task still waits
    for their ends (its workflow open), then completes ``done``."""
    assert (await agents.create_task("t", "leave two", agent=AgentSpec(name="leave"))).recorded

    async def done() -> bool:
        return (await view_of(agents, "t")).status is TaskStatus.DONE

    await eventually(done, within=60)
    flags = ("--no-cascade", "--project", agents.project_id, "--json")
    code, out = await cli("cancel", "t", *flags)
    assert (code, out["recorded"]) == (0, True)

    async def noted() -> bool:
        return bool(await after_end_notes(agents, "t"))

    await eventually(noted)
    assert await after_end_notes(agents, "t") == ['{"status": "done"}']
    handle = client.get_workflow_handle(agents.workflow_id("t"))
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    assert [(await view_of(agents, f"t/{k}")).status for k in "ab"] == [TaskStatus.OPEN] * 2
    for key in "ab":
        assert (await agents.finish_task(f"t/{key}", "done")).recorded
    assert await ended(agents, "t") is TaskStatus.DONE
    assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
    assert await child_results(agents, "t") == [("a", "done"), ("b", "done")]


async def test_a_cancel_of_a_recorded_task_that_ended_failed_records_its_note(
    history: ConversationHistory,
) -> None:
    """agent-tasks.md: a task ended ``failed`` while its child runs keeps ``failed`` on a
    cancel, which is recorded as a ``cancel_after_end`` note naming that status; the child is
    cancelled and its end recorded ``cancelled``."""
    assert (await history.create_task("p", "parent")).recorded
    assert (await history.spawn_child("p", "k", "p/k", "child")).recorded
    assert (await history.finish_task("p", "failed", error="gave up")).recorded
    assert (await history.cancel_task("p")).recorded
    assert await ended(history, "p") is TaskStatus.FAILED
    assert await ended(history, "p/k") is TaskStatus.CANCELLED
    assert await after_end_notes(history, "p") == ['{"status": "failed"}']
    assert await child_results(history, "p") == [("k", "cancelled")]


@agent("respawn_after_cancel")
async def respawn_after_cancel(ctx: AgentContext) -> str:
    """Spawns the recorded child ``k0`` (``mode="propagate"``) and waits for it; when it did
    not end ``done`` (``ChildFailed``), spawns ``k1`` and waits for that one."""
    await ctx.spawn("k0", "first", mode="propagate")
    try:
        await ctx.wait_children(["k0"])
    except ChildFailed as failed:
        await ctx.spawn("k1", "second", mode="collect")
        (outcome,) = await ctx.wait_children(["k1"])
        return f"ChildFailed: {failed.outcome.key} {failed.outcome.status.value}; k1 {outcome.text}"
    return "k0 done"


async def test_a_resumed_parent_gets_ChildFailed_for_its_cancelled_child_and_spawns_anew(
    agents: ConversationHistory,
) -> None:
    """input-and-children.md: after its own cascade cancel, a parent resumed gets its child
    ``cancelled`` (``ChildFailed`` in ``propagate`` mode) and a spawn under a new key starts a
    new child, whose end it then takes."""
    spec_ = AgentSpec(name="respawn_after_cancel")
    assert (await agents.create_task("t", "respawn", agent=spec_)).recorded
    await waiting_for_children(agents)
    assert (await agents.cancel_task("t")).recorded
    assert await ended(agents, "t") is TaskStatus.CANCELLED
    assert await ended(agents, "t/k0") is TaskStatus.CANCELLED
    assert (await agents.resume_task("t")).recorded

    await task_started(agents, "t/k1")
    assert (await agents.finish_task("t/k1", "done", result="one")).recorded
    done = await asyncio.wait_for(agents.wait_task("t", until=TaskStatus.DONE), 120)
    assert done is not None and done.status is TaskStatus.DONE
    assert done.result is not None
    assert done.result.text == "ChildFailed: k0 cancelled; k1 one"
    assert await child_results(agents, "t") == [("k0", "cancelled"), ("k1", "done")]
    assert (await view_of(agents, "t/k0")).status is TaskStatus.CANCELLED


async def test_a_cancelled_model_call_is_waited_for_and_records_no_error(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """agent-tasks.md, during the model call: the server holds the call open; on the cancel
    the activity closes its HTTP request, the task waits for the activity's cancellation
    (``ACTIVITY_TASK_CANCELED`` of ``model_turn`` before the workflow's ``CANCELED``), records
    no ``error`` event and no answer, and ends ``cancelled``."""
    queue = f"model-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    server = ModelServer([Reply(body=completion("late"), delay_s=60)])
    with server.running():
        worker = await openai_worker(queue, server.url)
        try:
            model = ModelSpec(provider="openai", model="test-model")
            assert (await history.create_task("t", "hi", agent=AgentSpec(model=model))).recorded
            await eventually(lambda: asyncio.sleep(0, bool(server.requests)), within=60)
            assert (await history.cancel_task("t")).recorded
            await cancelled_everywhere(history, client, graph)
            events = await all_events(history, "t")
            await eventually(lambda: asyncio.sleep(0, server.exchanges[0].closed_early))
        finally:
            worker.kill()
            await worker.wait()
    assert [e for e in events if e.kind is EventKind.ERROR] == []
    assert [e.payload for e in events if e.kind is EventKind.MESSAGE] == ["hi"]
    assert len(server.requests) == 1
    order = []
    handle = client.get_workflow_handle(history.workflow_id("t"))
    async for event in handle.fetch_history_events():
        if event.event_type in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        ):
            order.append(EventType.Name(event.event_type))
    assert order == ["EVENT_TYPE_ACTIVITY_TASK_CANCELED", "EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED"]


async def test_a_cancel_before_the_agent_started_records_nothing_of_the_agent(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """agent-tasks.md, before the agent started: the task is created on a queue no worker
    polls yet, cancelled, then a worker starts; its first workflow task holds the start and
    the cancel request: nothing of the agent is recorded (no message, no call, no agent run),
    the one event is the ``status`` note, and the task is ``cancelled`` everywhere."""
    queue = f"before-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    goal = script(calls(("echo", {"text": "x"})), answer("never"))
    create = asyncio.create_task(history.create_task("t", goal, agent=spec()))
    handle = client.get_workflow_handle(history.workflow_id("t"))

    async def started() -> bool:
        try:
            await handle.describe()
        except RPCError:
            return False
        return True

    await eventually(started, within=30)
    assert (await history.cancel_task("t")).recorded
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        assert (await asyncio.wait_for(create, 60)).recorded
        view = await cancelled_everywhere(history, client, graph)
        events = await all_events(history, "t")
    assert view.agent_run is None
    assert [(e.kind, e.name, e.payload) for e in events] == [
        (EventKind.NOTE, "status", "cancelled")
    ]
