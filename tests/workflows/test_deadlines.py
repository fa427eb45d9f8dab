"""A deadline is a deadline (``workflows.inbox.past_deadline``): an answer to a request whose
deadline has passed by the workflow's time is refused ``input_closed`` by update, or recorded
``late`` by signal, whichever the workflow sees first, the answer or the timer. The case that
shows it: no worker runs at the deadline, the answer comes 4 s after it, and then a worker
starts; Temporal hands the workflow the answer before the timer that fired meanwhile (in one
workflow task), so before the fix the answer was taken (the client told ``recorded``) and the
request then closed as well, its ``input_timeout`` after the accepted answer
(tinyhumansai/opencompany#1449: an approval answered after its expiry reported success; here
nothing ran, but the log said the call was approved). Against the local stack, with a worker
the test stops and starts."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue
from temporalio.client import Client
from temporalio.worker import Worker

from agent_tasks.contract import AgentSpec, Event, EventKind, InputRequest, TaskStatus
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import WriteResult
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS
from tests.approval_tools import APPROVAL_SCRIPTS, APPROVAL_TOOLS, approval_spec, effects, goal
from tests.conftest import eventually

PAST_DEADLINE_S = 4.0
"""How long after the deadline the answer is sent (the issue's case)."""


@pytest.fixture
def history(client: Client, graph: TaskGraph, project_id: str) -> ConversationHistory:
    """A client of a fresh project on a task queue of its own (no worker polls it until the
    test starts one); its calls wait up to a minute for a worker."""
    return ConversationHistory(
        client,
        project_id=project_id,
        agent_id="ops",
        task_queue=f"deadline-{uuid.uuid4().hex[:8]}",
        graph=graph,
        timeout_s=60,
    )


def worker(history: ConversationHistory) -> AbstractAsyncContextManager[Worker]:
    """A worker of the history's task queue with the agent and approval tests' tools."""
    assert history.graph is not None
    return build_worker(
        history.client,
        history.graph,
        history.task_queue,
        tools=[*TOOLS, *APPROVAL_TOOLS],
        scripts={**SCRIPTS, **APPROVAL_SCRIPTS},
    )


async def asked(history: ConversationHistory, task: str) -> InputRequest:
    """The task's oldest open request, once it has one."""
    found: list[InputRequest] = []

    async def waiting() -> bool:
        view = (await history.get_task(task)).view
        found[:] = [] if view is None else view.pending_inputs
        return bool(found)

    await eventually(waiting)
    return found[0]


async def past_the_deadline_without_a_worker(
    history: ConversationHistory,
    task: str,
    agent: AgentSpec,
    goal_text: str,
    answer: Callable[[InputRequest], Coroutine[Any, Any, WriteResult]],
) -> tuple[InputRequest, WriteResult]:
    """Create ``task``, wait for its request with a worker, stop the worker (before the
    deadline: checked), wait until ``PAST_DEADLINE_S`` after it, send ``answer(request)``
    (in the background: an update waits for a worker), then start a worker. Returns the
    request and what ``answer`` returned."""
    async with worker(history):
        assert (await history.create_task(task, goal_text, agent=agent)).recorded
        request = await asked(history, task)
    assert request.deadline is not None
    assert datetime.now(UTC) < request.deadline, "the worker stopped after the deadline"
    wait = (request.deadline - datetime.now(UTC)).total_seconds() + PAST_DEADLINE_S
    await asyncio.sleep(wait)
    sent = asyncio.create_task(answer(request))
    await asyncio.sleep(1.0)  # the answer reaches the server before any worker polls
    async with worker(history):
        result = await sent
        final = await history.wait_task(task)
        assert final is not None
    return request, result


async def events_of(history: ConversationHistory, task: str) -> list[Event]:
    return (await history.list_events(task, limit=200)).events


@pytest.fixture
def reboot_log(tmp_path: Path) -> Path:
    return tmp_path / "reboot.log"


def reboot_goal(log: Path) -> str:
    return goal(("reboot", {"log": str(log), "host": "db-1"}))


async def test_an_accept_past_the_expiry_by_update_is_refused_while_no_worker_ran(
    history: ConversationHistory, reboot_log: Path
) -> None:
    """``reboot`` expires after 10 s. The accept sent by update 4 s after the expiry, while
    no worker ran (with the digest the person was shown, as the HTTP API and the page send it:
    ``history.approve`` reads the request first, a query that waits for a worker), is refused
    ``input_closed`` "expired" with nothing recorded: the log holds no answer and no decision,
    only the request's ``input_timeout``; the call never runs and the model reads that the
    request expired."""

    async def accept(request: InputRequest) -> WriteResult:  # as POST /tasks/t/input sends it
        assert request.approval is not None and request.approval.digest is not None
        choice: dict[str, JsonValue] = {"type": "accept", "digest": request.approval.digest}
        return await history.respond("t", choice, input_id=request.input_id)

    request, result = await past_the_deadline_without_a_worker(
        history, "t", approval_spec(), reboot_goal(reboot_log), accept
    )
    assert (result.recorded, result.error) == (False, ErrorCode.INPUT_CLOSED)
    assert result.message == f"input {request.input_id!r} expired"
    events = await events_of(history, "t")
    responses = [e for e in events if e.kind is EventKind.INPUT_RESPONSE]
    assert responses == []
    assert [e for e in events if e.kind is EventKind.DECISION] == []
    timeouts = [
        e.payload for e in events if e.kind is EventKind.ERROR and e.name == "input_timeout"
    ]
    assert timeouts == [request.input_id]
    final = await history.wait_task("t")
    assert final is not None and final.result is not None
    assert "the approval request expired at" in final.result.text
    assert effects(reboot_log) == []


async def test_an_accept_past_the_expiry_by_signal_is_recorded_late(
    history: ConversationHistory, reboot_log: Path
) -> None:
    """The same accept by signal (delivered: ``recorded``) is recorded ``late`` (an
    ``input_response`` named ``late`` saying the request expired), then the request's
    ``input_timeout``; no decision, the call never runs. The history holds the timer's
    ``TIMER_FIRED`` before the signal, yet the handler runs first: the SDK's core moves
    signals and updates before every other job of a workflow task (temporalio/sdk-rust#640
    asked for a flag to keep the history's order, for a handler that looked at an activity
    whose completion came before the signal and found it still running); the rule judges by
    the workflow's time, not by which job ran first."""

    async def accept(request: InputRequest) -> WriteResult:
        assert request.approval is not None and request.approval.digest is not None
        choice: dict[str, JsonValue] = {"type": "accept", "digest": request.approval.digest}
        return await history.submit_input("t", choice, input_id=request.input_id)

    request, result = await past_the_deadline_without_a_worker(
        history, "t", approval_spec(), reboot_goal(reboot_log), accept
    )
    assert result.recorded  # delivered, not taken
    events = await events_of(history, "t")
    answers = [e for e in events if e.kind is EventKind.INPUT_RESPONSE]
    assert [(e.name, e.author) for e in answers] == [("late", "ops")]
    assert json.loads(answers[0].payload)["error"] == f"input {request.input_id!r} expired"
    timeout = next(e for e in events if e.kind is EventKind.ERROR and e.name == "input_timeout")
    assert timeout.payload == request.input_id and timeout.seq > answers[0].seq
    assert [e for e in events if e.kind is EventKind.DECISION] == []
    assert effects(reboot_log) == []


async def test_an_answer_past_an_asks_timeout_is_refused_and_the_default_taken(
    history: ConversationHistory,
) -> None:
    """``ctx.ask`` with a 10 s timeout and a default: an answer by update 4 s past it, while
    no worker ran, is refused ``input_closed`` "timed out"; the agent reads the default (the
    answer is not in the log), then its next question is answered as usual."""

    async def respond(request: InputRequest) -> WriteResult:
        return await history.respond("t", 7, input_id=request.input_id)

    agent = AgentSpec(name="two_questions", input={"timeout_s": 10})
    sent: list[WriteResult] = []

    async def answer_then_next(request: InputRequest) -> WriteResult:
        sent.append(await respond(request))
        second = await asked(history, "t")
        assert second.input_id == "q2"
        return await history.respond("t", 8, input_id="q2")

    request, result = await past_the_deadline_without_a_worker(
        history, "t", agent, "two questions", answer_then_next
    )
    (first,) = sent
    assert (first.recorded, first.error) == (False, ErrorCode.INPUT_CLOSED)
    assert first.message == "input 'q1' timed out"
    assert result.recorded
    final = await history.wait_task("t")
    assert final is not None and final.status is TaskStatus.DONE and final.result is not None
    assert json.loads(final.result.text) == ["default", 8]
    events = await events_of(history, "t")
    q1 = [e.payload for e in events if e.kind is EventKind.INPUT_RESPONSE and e.name == "q1"]
    assert q1 == ['"default"']
    assert request.input_id == "q1"
