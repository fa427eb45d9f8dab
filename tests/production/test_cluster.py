"""The production shape: a Temporal cluster on PostgreSQL with SQL visibility
(``tools.cluster``), three worker processes on one task queue.

- the README's app flow and an agent task with steps, their values read back;
- the README's agent code (a step, a question, two children) continuing as new, its own and
  its children's workflow ids cut to 255 characters;
- kill -9 of the worker running a step: another worker finishes the task by the step rules;
- the Temporal server restarted during a write storm: no acknowledged write lost or doubled;
- a rolling restart of the workers while tasks wait for input: every answer taken once;
- Neo4j restarted while writes arrive: the mirror catches up, seq for seq;
- every search-attribute query the CLI and the client make, answered by SQL visibility."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import SecretStr
from temporalio.client import Client

from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.cli.replay_check import task_query
from agent_tasks.config import Settings
from agent_tasks.contract import AgentSpec, TaskStatus
from agent_tasks.contract.errors import ErrorCode, TaskServiceUnavailable
from agent_tasks.devstack.neo4j_server import Neo4jServer
from agent_tasks.devstack.process import free_port
from agent_tasks.starter import EventKind, StepState
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import Services, open_graph
from agent_tasks.workflows.agents.registry import TOOL_ACTIVITY_PREFIX
from tests.agent_tools import answer, calls
from tests.conftest import eventually
from tests.production.conftest import Workers, worker_processes
from tests.workflows.conftest import script, spec
from tools.cluster import Cluster


async def test_the_readme_app_flow_and_an_agent_task_on_three_workers(
    history: ConversationHistory,
) -> None:
    assert (await history.create_task("fix-42", "Make the failing test pass")).recorded
    await history.record_event("fix-42", EventKind.TOOL_CALL, "pytest", name="bash")
    out = await history.record_event("fix-42", EventKind.TOOL_RESULT, "1 failed", name="bash")
    assert out.seq == 2
    await history.set_step("fix-42", "run-tests", StepState.FAILED, result_event_seq=out.seq)
    page = await history.list_events("fix-42", after_seq=0, limit=50)
    assert [(e.seq, e.kind, e.payload) for e in page.events] == [
        (1, EventKind.TOOL_CALL, "pytest"),
        (2, EventKind.TOOL_RESULT, "1 failed"),
    ]
    assert (await history.finish_task("fix-42", "done", result="fixed in abc123")).recorded
    view = await asyncio.wait_for(history.wait_task("fix-42"), 60)
    assert view is not None and view.result is not None
    assert (view.status, view.result.text) == (TaskStatus.DONE, "fixed in abc123")
    assert view.step_counts[StepState.FAILED] == 1

    goal = script(
        calls(("echo", {"text": "one"})), calls(("echo", {"text": "two"})), answer("both")
    )
    assert (await history.create_task("agent-1", goal, agent=spec())).recorded
    done = await asyncio.wait_for(history.wait_task("agent-1"), 120)
    assert done is not None and done.result is not None
    assert (done.status, done.result.text) == (TaskStatus.DONE, "both")
    steps = await all_steps(history, "agent-1")
    assert [s.state for s in steps] == [StepState.COMPLETED, StepState.COMPLETED]
    results = [
        e.payload for e in await all_events(history, "agent-1") if e.kind.value == "tool_result"
    ]
    assert results == ["one", "two"]


async def test_an_agent_task_with_steps_input_children_and_continue_as_new(
    services: Services, continuing: tuple[Client, Workers]
) -> None:
    """The README's agent code (``release``: a step, a question, two recorded child tasks
    ended from outside) on three workers, in a namespace whose runs Temporal suggests to
    continue as new at 25 events, in a project whose id has 64 characters under a name of
    180: its own and its children's plain workflow ids pass 255 characters, so they are cut
    (``task_workflow_id``, and the ``bounded-workflow-ids`` patch in the parent's commands).
    The task ends with both children's ends, its step, its answer, over more than one run."""
    client, workers = continuing
    assert services.graph is not None
    history = ConversationHistory(
        client,
        "p" * 52 + uuid.uuid4().hex[:12],
        "tests",
        task_queue=workers.queue,
        graph=services.graph,
    )
    name = "r" * 180
    children = [f"{name}/eu", f"{name}/us"]
    assert [len(history.workflow_id(t)) for t in [name, *children]] == [255, 255, 255]
    agent = AgentSpec(name="release", tools=["echo"])
    assert (await history.create_task(name, "release", agent=agent)).recorded

    async def asked() -> bool:
        view = (await history.get_task(name)).view
        return view is not None and [r.input_id for r in view.pending_inputs] == ["replicas"]

    await eventually(asked, within=60)
    assert (await history.respond(name, 3, input_id="replicas")).recorded

    async def spawned() -> bool:
        return all([(await history.get_task(child)).view is not None for child in children])

    await eventually(spawned, within=60)
    for child in children:
        assert (await history.finish_task(child, "done", result=f"{child[-2:]} up")).recorded
    view = await asyncio.wait_for(history.wait_task(name), 120)
    assert view is not None and view.result is not None
    assert (view.status, view.result.text) == (TaskStatus.DONE, "eu: done, us: done")
    assert [(s.step_name, s.state) for s in await all_steps(history, name)] == [
        ("build", StepState.COMPLETED)
    ]
    events = await all_events(history, name)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    answers = [
        (e.name, json.loads(e.payload)) for e in events if e.kind is EventKind.INPUT_RESPONSE
    ]
    assert answers == [("replicas", 3)]
    ends = [e for e in events if e.kind is EventKind.CHILD_RESULT]
    assert len(ends) == 2
    handle = client.get_workflow_handle(history.workflow_id(name))
    described = await handle.describe()
    first_run = described.raw_description.workflow_execution_info.first_run_id
    assert first_run != described.run_id  # it continued as new at least once
    for child in children:
        done = (await history.get_task(child)).view
        assert done is not None and done.status is TaskStatus.DONE


async def test_kill_9_of_the_worker_running_a_step_another_finishes(
    history: ConversationHistory, workers: Workers, tmp_path: Path
) -> None:
    """An idempotent step (``sync_data``): the worker running it is killed; another of the
    three runs it again under the same key after the heartbeat timeout and the task ends."""
    log = str(tmp_path / "effect.log")
    goal = script(calls(("sync_data", {"log": log, "seconds": 120})), answer("carried on"))
    assert (await history.create_task("t", goal, agent=spec())).recorded

    async def started() -> bool:
        return await asyncio.to_thread(Path(log).exists)

    await eventually(started, within=60)
    described = await history.client.get_workflow_handle(history.workflow_id("t")).describe()
    (pending,) = [
        a
        for a in described.raw_description.pending_activities
        if a.activity_type.name == TOOL_ACTIVITY_PREFIX + "sync_data"
    ]
    pid = int(pending.last_worker_identity.split("@")[0])
    killed = workers.by_pid(pid)
    killed.kill()  # SIGKILL
    await killed.wait()
    view = await asyncio.wait_for(history.wait_task("t"), 180)
    assert view is not None and view.result is not None
    assert (view.status, view.result.text) == (TaskStatus.DONE, "carried on")
    (step,) = await all_steps(history, "t")
    key = f"{history.workflow_id('t')}/{step.step_name}/1"
    assert (step.state, step.attempt, step.idempotency_key) == (StepState.COMPLETED, 1, key)
    ran = (await asyncio.to_thread(Path(log).read_text)).splitlines()
    assert ran == [key] * len(ran) and len(ran) >= 2


async def test_a_rolling_restart_of_the_workers_with_tasks_waiting_for_input(
    history: ConversationHistory, workers: Workers
) -> None:
    """Three agent tasks (``two_questions``) wait for their first answer; the three workers
    are restarted one at a time (SIGTERM, then a new process). The first answers are sent
    while the second worker is down, the second answers after the last restart: each is
    accepted once, and each task ends with its two answers."""
    tasks = [f"ask-{i}" for i in range(3)]
    for task in tasks:
        agent = AgentSpec(name="two_questions")
        assert (await history.create_task(task, "two questions", agent=agent)).recorded

    def asking(input_id: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            views = [(await history.get_task(task)).view for task in tasks]
            return all(
                v is not None and [r.input_id for r in v.pending_inputs] == [input_id]
                for v in views
            )

        return check

    await eventually(asking("q1"), within=60)
    await workers.stop(0)
    await workers.start(0)
    await workers.stop(1)
    for task in tasks:
        assert (await history.respond(task, f"{task} first", input_id="q1")).recorded
    await workers.start(1)
    await eventually(asking("q2"), within=60)
    await workers.stop(2)
    await workers.start(2)
    for task in tasks:
        assert (await history.respond(task, f"{task} second", input_id="q2")).recorded
    for task in tasks:
        view = await asyncio.wait_for(history.wait_task(task), 120)
        assert view is not None and view.result is not None
        assert (view.status, json.loads(view.result.text)) == (
            TaskStatus.DONE,
            [f"{task} first", f"{task} second"],
        )
        responses = [
            (e.name, json.loads(e.payload))
            for e in await all_events(history, task)
            if e.kind is EventKind.INPUT_RESPONSE
        ]
        assert responses == [("q1", f"{task} first"), ("q2", f"{task} second")]


async def test_neo4j_restarted_while_writes_arrive_the_mirror_catches_up(
    services: Services, tmp_path: Path
) -> None:
    """A Neo4j of this test's own (never the local stack's), a worker mirroring into it,
    three writers writing 40 events each, one at a time; Neo4j is stopped (SIGTERM) after
    their tenth and started again after their twentieth, the writes going on meanwhile. The
    graph store then holds each task's events as its workflow's log does: the same seqs,
    1 to 40, with the writer's payloads."""
    password = uuid.uuid4().hex
    neo4j = Neo4jServer(
        tmp_path / "neo4j", free_port(), password=password, heap="512m", pagecache="64m"
    )
    await neo4j.start_ready()
    env = {"NEO4J_URI": neo4j.uri, "NEO4J_PASSWORD": password}
    settings = Settings(neo4j_uri=neo4j.uri, neo4j_password=SecretStr(password))
    try:
        async with open_graph(settings) as graph:
            # a new store's schema (the workers wait for it): longer than open_graph's 10 s
            # on the busy machine, once
            await asyncio.wait_for(graph.ensure_ready(), 120)
            async with worker_processes(env, count=1) as workers:
                await _mirror_through_a_restart(services, graph, workers, neo4j)
    finally:
        await neo4j.stop(timeout_s=1)  # its store is thrown away: no clean shutdown needed


async def _mirror_through_a_restart(
    services: Services, graph: GraphStore, workers: Workers, neo4j: Neo4jServer
) -> None:
    """The writes and the checks of the Neo4j restart test: 3 writers of 40 events."""
    writers, per_writer = 3, 40
    history = ConversationHistory(
        services.client,
        f"prod-{uuid.uuid4().hex[:12]}",
        "tests",
        task_queue=workers.queue,
        graph=graph,
    )
    tasks = [f"w{w}" for w in range(writers)]
    for task in tasks:
        assert (await history.create_task(task, "writes")).recorded
    progress = [0] * writers
    restarted = asyncio.Event()

    async def write(w: int) -> None:
        for n in range(per_writer):
            if n == 20:
                await restarted.wait()
            while True:  # the task's key is stored in Neo4j at its first write (2 s at most)
                done = await history.record_event(
                    tasks[w], "message", f"w{w}-{n}", request_id=f"w{w}-{n}"
                )
                if done.error is not ErrorCode.KEY_STORE_UNAVAILABLE:
                    break
            assert done.recorded and done.seq == n + 1, done
            progress[w] = n + 1

    storm = asyncio.gather(*(write(w) for w in range(writers)))

    async def tenth() -> bool:
        return min(progress) >= 10

    await eventually(tenth, within=60)
    await neo4j.stop()

    async def twentieth() -> bool:
        return min(progress) >= 20

    await eventually(twentieth, within=60)
    await neo4j.start_ready()
    restarted.set()
    await asyncio.wait_for(storm, 120)
    expected = {
        task: [(n + 1, f"w{w}-{n}") for n in range(per_writer)] for w, task in enumerate(tasks)
    }
    for task in tasks:
        logged = [(e.seq, e.payload) for e in await all_events(history, task)]
        assert logged == expected[task]

    async def caught_up() -> bool:
        for task in tasks:
            key = history.workflow_id(task)
            mirrored = await graph.reads.events(history.project_id, key, 0, 10**6, 10**6)
            if [(e.seq, e.payload) for e in mirrored] != expected[task]:
                return False
        return True

    await eventually(caught_up, within=120)
    for task in tasks:
        assert (await history.finish_task(task, "done")).recorded


async def test_every_search_attribute_query_on_sql_visibility(
    history: ConversationHistory,
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    for name in ("a", "b", "c"):
        assert (await history.create_task(name, "g")).recorded
    assert (await history.create_task("a/child", "g", parent="a")).recorded
    assert (await history.finish_task("b", "done")).recorded
    await asyncio.wait_for(history.wait_task("b"), 60)
    project = history.project_id

    async def listed() -> bool:
        return sorted(await history.list_tasks()) == ["a", "a/child", "b", "c"] and (
            await history.list_tasks(status="done")
        ) == ["b"]

    await eventually(listed)
    assert sorted(await history.list_tasks(status="open")) == ["a", "a/child", "c"]
    client = history.client
    assert (await client.count_workflows(task_query(project))).count == 4
    assert (await client.count_workflows(task_query(project, "done", since))).count == 1
    parent = history.workflow_id("a")
    children = [
        w.id
        async for w in client.list_workflows(
            f"ParentWorkflowId = '{parent}' AND ExecutionStatus = 'Running'"
        )
    ]
    assert children == []  # a recorded child is a workflow of its own, not a child workflow
    rebuild = f"WorkflowType = 'TaskWorkflow' AND ProjectId = '{project}'"
    assert len([w async for w in client.list_workflows(rebuild)]) == 4
    for name in ("a/child", "a", "c"):
        assert (await history.finish_task(name, "done")).recorded


async def test_the_longest_task_id_is_taken(services: Services, workers: Workers) -> None:
    """A project id of 64 and a name of 200 characters, whose plain workflow id has 276: the
    dev server (SQLite) took it, PostgreSQL's ``VARCHAR(255)`` refused it (UNAVAILABLE until
    the client's time limit). The id is cut to 255 with the name's digest
    (``task_workflow_id``), and the task works on the cluster under its full name."""
    assert services.graph is not None
    project = "p" * 52 + uuid.uuid4().hex[:12]
    history = ConversationHistory(
        services.client,
        project,
        "tests",
        task_queue=workers.queue,
        graph=services.graph,
        timeout_s=5,
    )
    name = "n" * 200
    assert len(f"agent-task/{project}/{name}") == 276
    assert len(history.workflow_id(name)) == 255
    assert (await history.create_task(name, "g")).recorded
    assert (await history.record_event(name, "message", "long")).recorded
    assert (await history.finish_task(name, "done")).recorded
    view = await asyncio.wait_for(history.wait_task(name), 60)
    assert view is not None and (view.name, view.last_seq) == (name, 1)


async def test_a_server_restart_during_a_write_storm_loses_and_doubles_nothing(
    cluster: Cluster, history: ConversationHistory
) -> None:
    """Ten writers write 30 events each, one at a time, each write with its own request id,
    sent again with the same id while Temporal does not answer; the Temporal server is
    stopped (SIGTERM) and started again in the middle. Every task then holds each of its
    writer's events exactly once, in order."""
    writers, per_writer = 10, 30
    history.timeout_s = 5
    for w in range(writers):
        assert (await history.create_task(f"w{w}", "storm")).recorded
    progress = [0] * writers
    resent = [0] * writers

    async def write(w: int) -> None:
        for n in range(per_writer):
            while True:
                try:
                    done = await history.record_event(
                        f"w{w}", "message", f"w{w}-{n}", request_id=f"w{w}-{n}"
                    )
                except TaskServiceUnavailable:
                    resent[w] += 1
                    await asyncio.sleep(0.5)
                    continue
                assert done.recorded, done
                break
            progress[w] = n + 1

    storm = asyncio.gather(*(write(w) for w in range(writers)))

    async def under_way() -> bool:
        return sum(progress) >= writers * 5

    await eventually(under_way, within=120)
    assert sum(progress) < writers * per_writer  # the restart comes while writes remain
    await cluster.temporal.stop()
    await cluster.temporal.start_ready()
    await asyncio.wait_for(storm, 300)
    print(f"writes sent again after the restart: {sum(resent)}")
    for w in range(writers):
        events = await all_events(history, f"w{w}")
        assert [e.payload for e in events] == [f"w{w}-{n}" for n in range(per_writer)]
        assert (await history.finish_task(f"w{w}", "done")).recorded
