"""The production shape: a Temporal cluster on PostgreSQL with SQL visibility
(``devstack.cluster``), three worker processes on one task queue.

- the README's app flow and an agent task with steps, their values read back;
- kill -9 of the worker running a step: another worker finishes the task by the step rules;
- the Temporal server restarted during a write storm: no acknowledged write lost or doubled;
- every search-attribute query the CLI and the client make, answered by SQL visibility."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.service import RPCError

from agent_tasks.contract import TaskStatus
from agent_tasks.contract.errors import TaskServiceUnavailable
from agent_tasks.devstack.cluster import Cluster
from agent_tasks.starter import EventKind, StepState
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.importer import all_events, all_steps
from agent_tasks.starter.replay import task_query
from agent_tasks.worker import Services
from agent_tasks.workflows.agents.registry import TOOL_ACTIVITY_PREFIX
from tests.agent_tools import answer, calls
from tests.conftest import eventually
from tests.production.conftest import Workers
from tests.workflows.conftest import script, spec


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


@pytest.mark.xfail(
    strict=True,
    raises=TaskServiceUnavailable,
    reason="known: PostgreSQL's schema keeps workflow ids in VARCHAR(255) (current_executions), "
    "the server answers UNAVAILABLE and the client retries until its time limit",
)
async def test_the_longest_task_id_is_taken(services: Services, workers: Workers) -> None:
    """A project id of 64 and a name of 200 characters: a workflow id of 276. The dev server
    (SQLite) takes it; the PostgreSQL cluster refuses it (the schema's 255), found here and
    left open (docs/configuration-and-deploy.md): this test passes once it is taken."""
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
    assert len(history.workflow_id(name)) == 276
    assert (await history.create_task(name, "g")).recorded
    assert (await history.record_event(name, "message", "long")).recorded
    assert (await history.finish_task(name, "done")).recorded
    view = await asyncio.wait_for(history.wait_task(name), 60)
    assert view is not None and (view.name, view.last_seq) == (name, 1)


@pytest.mark.xfail(
    raises=RPCError,
    strict=False,
    reason="open: after the restart a write sometimes fails FAILED_PRECONDITION 'unexpected "
    "workflow task failure' (WorkflowNotReadyFailure), which the client does not resend "
    "(2 runs of 5); a lost or doubled write fails this test either way",
)
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
