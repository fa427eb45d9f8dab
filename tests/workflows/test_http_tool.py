"""An HTTP API's effect happens once per step (``activities.http_tool``): the tools of
``tests.http_tools`` call a real HTTP server of the test's own (``EffectServer``, uvicorn on a
socket) that counts requests and effects by their ``Idempotency-Key``. Against the local
stack's Temporal and Neo4j, with the worker in a subprocess where it is killed."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agent_tasks.contract import AgentSpec, EventKind, ModelSpec, StepState, TaskStatus
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.importer import all_events, all_steps
from agent_tasks.taskgraph.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS, answer, calls
from tests.conftest import eventually
from tests.http_tools import HTTP_TOOLS, EffectServer, Mode
from tests.servers import served
from tests.workflows.conftest import ROOT, script


def http_once(tool: str, url: str, mode: Mode) -> AgentSpec:
    """The agent ``http_once`` running one call of ``tool`` on the server at ``url``."""
    args: dict[str, Any] = {"url": f"{url}/charge", "amount": 42, "mode": mode}
    return AgentSpec(name="http_once", tools=[tool], input={"tool": tool, "args": args})


def http_worker(client: Client, graph: TaskGraph, queue: str) -> Any:
    """An in-process worker with the agent tests' tools and the HTTP ones (as
    ``tests.agent_worker`` runs them)."""
    return build_worker(client, graph, queue, tools=[*TOOLS, *HTTP_TOOLS], scripts=SCRIPTS)


def history_of(client: Client, graph: TaskGraph, project_id: str) -> ConversationHistory:
    queue = f"http-{uuid.uuid4().hex[:8]}"
    return ConversationHistory(
        client, project_id=project_id, agent_id="ops", task_queue=queue, graph=graph
    )


async def ended(history: ConversationHistory) -> Any:
    view = await asyncio.wait_for(history.wait_task("t"), 120)
    assert view is not None
    return view


async def test_a_call_killed_after_the_server_took_it_is_unknown_and_a_retry_sends_its_key(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """The worker is killed (SIGKILL) after the server performed the charge and before the
    answer came back: the step (a tool not idempotent) ends ``unknown`` and the task fails; a
    ``resume`` sends nothing; a person's ``retry_step`` sends the same key, so the server
    answers the first charge again and performs it once."""
    history = history_of(client, graph, project_id)
    queue = history.task_queue
    api = EffectServer()
    async with served(api.app) as url:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.agent_worker",
            queue,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            agent = http_once("http_charge", url, "hold")
            assert (await history.create_task("t", "charge once", agent=agent)).recorded

            async def charged() -> bool:
                return sum(api.effects.values()) == 1

            await eventually(charged, within=60)
        finally:
            process.kill()  # SIGKILL: no shutdown of any kind
            await process.wait()
        key = f"{history.workflow_id('t')}/charge/1"
        async with http_worker(client, graph, queue):
            failed = await ended(history)
            assert failed.status is TaskStatus.FAILED
            assert failed.error is not None and "the charge is unknown" in failed.error.text
            assert (await history.resume_task("t")).recorded
            assert (await ended(history)).status is TaskStatus.FAILED
            assert api.requests == {key: 1}  # resumed: the unknown call is not sent again
            retried = await history.retry_step("t", "charge", reason="the API dedupes by key")
            assert retried.recorded
            done = await ended(history)
            steps = {s.step_name: s for s in await all_steps(history, "t")}
        api.released.set()
    assert done.status is TaskStatus.DONE
    assert done.result is not None and f'"key":"{key}"' in done.result.text
    assert (api.requests, api.effects) == ({key: 2}, {key: 1})
    assert (steps["charge"].state, steps["charge"].idempotency_key) == (StepState.COMPLETED, key)


async def test_a_continue_never_sends_the_interrupted_call_and_a_call_made_again_has_a_new_key(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """The loop's charge is cancelled after the server performed it and before the answer came
    back (the step ends ``unknown``, the turn interrupted after its tools ran). ``continue``
    asks the model again with that call closed and never sends it again: its key reaches the
    server once. A model that makes the same call again makes a new call, a new step with its
    own key (``continue_task``: the model decides), so an API that deduplicates by key performs
    it a second time; only ``retry`` sends the unknown call's key again (the test above)."""
    history = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url, http_worker(client, graph, history.task_queue):
        charge = {"url": f"{url}/charge", "amount": 42, "mode": "hold"}
        turns = [calls(("http_charge", charge)), calls(("http_charge", charge)), answer("paid")]
        loop = AgentSpec(
            tools=["http_charge"], model=ModelSpec(provider="scripted", model="from-goal")
        )
        assert (await history.create_task("t", script(*turns), agent=loop)).recorded

        async def charged() -> bool:
            return sum(api.effects.values()) == 1

        await eventually(charged, within=60)
        assert (await history.cancel_task("t")).recorded
        assert (await ended(history)).status is TaskStatus.CANCELLED
        api.released.set()  # the held answer is no one's now; a new request is answered at once
        assert await history.has_interrupted_turn("t")
        assert (await history.continue_task("t")).recorded
        done = await ended(history)
        steps = await all_steps(history, "t")
        events = await all_events(history, "t")
    assert done.status is TaskStatus.DONE and done.result is not None
    assert done.result.text == "paid"
    by_state = {s.state: s for s in steps}
    assert len(steps) == 2 and set(by_state) == {StepState.UNKNOWN, StepState.COMPLETED}
    first, again = by_state[StepState.UNKNOWN], by_state[StepState.COMPLETED]
    assert first.idempotency_key != again.idempotency_key
    assert first.idempotency_key.startswith(history.workflow_id("t") + "/")
    assert sum(e.kind is EventKind.TOOL_CALL for e in events) == 2
    assert api.requests == {first.idempotency_key: 1, again.idempotency_key: 1}
    assert api.effects == {first.idempotency_key: 1, again.idempotency_key: 1}


async def test_a_503_is_retried_after_its_retry_after_with_the_same_key(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """The API answers the key's first request 503 with ``Retry-After: 1``: the activity's
    second attempt comes after the server's delay (the failure's ``next_retry_delay``, as
    the history records it) and sends the same key; the charge happens once."""
    agents = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url, http_worker(client, graph, agents.task_queue):
        agent = http_once("http_charge_retried", url, "busy_once")
        assert (await agents.create_task("t", "charge", agent=agent)).recorded
        done = await ended(agents)
    key = f"{agents.workflow_id('t')}/charge/1"
    assert done.status is TaskStatus.DONE
    assert (api.requests, api.effects) == ({key: 2}, {key: 1})
    retried = [
        e.activity_task_started_event_attributes
        async for e in client.get_workflow_handle(agents.workflow_id("t")).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt == 2
    ]
    (started,) = retried
    failure = started.last_failure
    assert "answered HTTP 503: busy" in failure.message
    assert failure.application_failure_info.next_retry_delay.ToTimedelta() == timedelta(seconds=1)


async def test_a_client_error_fails_the_step_at_once_with_its_status_and_a_bounded_body(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """A 422 is not retried (the tool is idempotent, with three attempts): the step fails
    with the status and the body cut to ``ERROR_BODY_CHARS``; the API took one request."""
    agents = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url, http_worker(client, graph, agents.task_queue):
        agent = http_once("http_charge_retried", url, "reject")
        assert (await agents.create_task("t", "charge", agent=agent)).recorded
        failed = await ended(agents)
    key = f"{agents.workflow_id('t')}/charge/1"
    assert failed.status is TaskStatus.FAILED and api.requests == {key: 1} and not api.effects
    (step,) = await all_steps(agents, "t")
    assert step.state is StepState.FAILED
    assert failed.error is not None and "answered HTTP 422: " + "x" * 100 in failed.error.text
    assert "x" * 1_001 not in failed.error.text
