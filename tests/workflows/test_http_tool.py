"""An HTTP API's effect happens once per step (``activities.http_tool``): the tools of
``tests.http_tools`` call a real HTTP server of the test's own (``EffectServer``, uvicorn on a
socket) that counts requests and effects by their ``Idempotency-Key``. Against the local
stack's Temporal and Neo4j, with the worker in a subprocess where it is killed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import (
    AgentSpec,
    Budgets,
    EventKind,
    ModelSpec,
    ModelTurn,
    StepState,
    TaskStatus,
)
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS, answer, calls
from tests.conftest import eventually
from tests.http_tools import HTTP_TOOLS, EffectServer, Mode
from tests.servers import served
from tests.workflows.conftest import script, worker_process


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


async def killed_after_the_effect(queue: str, api: EffectServer, start: Awaitable[None]) -> None:
    """Run a worker (``tests.agent_worker``) on ``queue`` in a process of its own, await
    ``start`` (a task's creation), wait until ``api`` performed one effect, then kill the worker
    with SIGKILL (no shutdown of any kind): the effect happened, its answer never comes back."""
    process = await worker_process(queue)
    try:
        await start

        async def charged() -> bool:
            return sum(api.effects.values()) == 1

        await eventually(charged, within=60)
    finally:
        process.kill()
        await process.wait()


def charging_loop(url: str, *turns: ModelTurn, rounds: int | None = None) -> tuple[str, AgentSpec]:
    """The goal (scripted turns: ``turns`` after a call of ``http_charge`` of 42 held by the API)
    and the spec of a tool loop calling the API at ``url`` (``rounds``: its round budget)."""
    charge = {"url": f"{url}/charge", "amount": 42, "mode": "hold"}
    goal = script(calls(("http_charge", charge)), *turns)
    model = ModelSpec(provider="scripted", model="from-goal")
    return goal, AgentSpec(tools=["http_charge"], model=model, budgets=Budgets(max_rounds=rounds))


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
        agent = http_once("http_charge", url, "hold")
        await killed_after_the_effect(queue, api, created(history, "charge once", agent))
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


async def created(history: ConversationHistory, goal: str, agent: AgentSpec) -> None:
    """Create task ``t`` of ``agent`` with ``goal``."""
    assert (await history.create_task("t", goal, agent=agent)).recorded


async def one_effect_after_continue(history: ConversationHistory, api: EffectServer) -> None:
    """Continue task ``t`` (cancelled after its charge's effect, the charge ``unknown``) to
    its end and check that the model's same call again ran as the unknown step, under its key:
    the API took the key twice and performed one effect; one step, ``completed``; a decision
    cites it; the answer is the first charge's."""
    assert (await ended(history)).status is TaskStatus.CANCELLED
    api.released.set()  # the held answer is no one's now; a new request is answered at once
    (unknown,) = await all_steps(history, "t")
    assert unknown.state is StepState.UNKNOWN
    key = unknown.idempotency_key
    assert key == f"{history.workflow_id('t')}/r00001.0:http_charge/1"
    assert await history.has_interrupted_turn("t")
    assert (await history.continue_task("t")).recorded
    done = await ended(history)
    steps = await all_steps(history, "t")
    events = await all_events(history, "t")
    assert done.status is TaskStatus.DONE and done.result is not None
    assert done.result.text == "paid"
    assert [(s.step_name, s.state, s.idempotency_key) for s in steps] == [
        (unknown.step_name, StepState.COMPLETED, key)
    ]
    assert (api.requests, api.effects) == ({key: 2}, {key: 1})
    assert sum(e.kind is EventKind.TOOL_CALL for e in events) == 2
    (decision,) = [e for e in events if e.kind is EventKind.DECISION]
    assert "again with the same arguments" in decision.payload
    results = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert f'"key":"{key}"' in results[-1].payload


async def test_a_continue_runs_the_same_call_again_under_the_unknown_steps_key(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """The loop's charge is cancelled after the server performed it and before the answer came
    back (the step ends ``unknown``, the turn interrupted after its tools ran). ``continue``
    asks the model again, which makes the same call (same tool, same arguments): it runs as a
    retry of the unknown step under its key (``SAME_CALL_SAME_KEY``), so the API, which
    deduplicates by key, performs the charge once and answers the first charge again."""
    history = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url, http_worker(client, graph, history.task_queue):
        charge = {"url": f"{url}/charge", "amount": 42, "mode": "hold"}
        goal, loop = charging_loop(url, calls(("http_charge", charge)), answer("paid"))
        await created(history, goal, loop)

        async def charged() -> bool:
            return sum(api.effects.values()) == 1

        await eventually(charged, within=60)
        assert (await history.cancel_task("t")).recorded
        await one_effect_after_continue(history, api)


async def test_a_worker_killed_then_a_continue_performs_the_effect_once(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """The worker running the loop's charge is killed (SIGKILL) after the API performed it; the
    task is cancelled while no worker runs (the charge's activity ends by its heartbeat timeout:
    ``unknown``); ``continue``, on a new worker, makes the same call again: it runs under the
    unknown step's key, and the API performs the charge once."""
    history = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url:
        charge = {"url": f"{url}/charge", "amount": 42, "mode": "hold"}
        goal, loop = charging_loop(url, calls(("http_charge", charge)), answer("paid"))
        await killed_after_the_effect(history.task_queue, api, created(history, goal, loop))
        assert (await history.cancel_task("t")).recorded
        async with http_worker(client, graph, history.task_queue):
            await one_effect_after_continue(history, api)


async def test_a_worker_killed_then_a_resume_performs_the_effect_once(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """The worker running the loop's charge is killed (SIGKILL) after the API performed it: the
    step ends ``unknown`` (its heartbeat timeout) and the next model call passes the round
    budget (1): the run fails and is rolled back. ``resume`` asks the model again from the
    turn's start, and its same call runs under the unknown step's key: one effect."""
    history = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url:
        goal, loop = charging_loop(url, answer("paid"), rounds=1)
        await killed_after_the_effect(history.task_queue, api, created(history, goal, loop))
        api.released.set()
        async with http_worker(client, graph, history.task_queue):
            failed = await ended(history)
            assert failed.status is TaskStatus.FAILED
            (unknown,) = await all_steps(history, "t")
            assert unknown.state is StepState.UNKNOWN
            assert (await history.resume_task("t")).recorded
            again = await ended(history)
            steps = await all_steps(history, "t")
    key = f"{history.workflow_id('t')}/r00001.0:http_charge/1"
    assert again.status is TaskStatus.FAILED  # the round budget, after the charge ran
    assert again.error is not None and "max_rounds" in again.error.text
    assert [(s.step_name, s.state, s.idempotency_key) for s in steps] == [
        (unknown.step_name, StepState.COMPLETED, key)
    ]
    assert (api.requests, api.effects) == ({key: 2}, {key: 1})


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
