"""The published Tasks API (``starter.tasks``), its page's code blocks run as written with the
imports and the client's construction swapped, against the real stack: statuses and fields as
the page gives them, and the lifecycle of input and child tasks (``workflows.lifecycle``)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator

import pytest
from pydantic import JsonValue, ValidationError

from agent_tasks.broker import Broker, Subscriber, TokenMessage, task_channel
from agent_tasks.contract import EventKind, task_workflow_id
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.tasks import TaskEmitter, TaskManager, TaskRefused, TaskStatus, new_task_id
from agent_tasks.worker import Services
from tests.conftest import eventually, mirrored
from tests.stream_agents import TALKER

ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


@pytest.fixture(scope="session")
async def broker(services) -> AsyncIterator[Broker]:
    assert services.broker is not None, "the tests need AGENT_TASKS_BROKER_URL (dev up)"
    yield services.broker


def test_new_task_ids_are_ulids_in_time_order() -> None:
    first = new_task_id()
    ids = [new_task_id() for _ in range(50)]
    assert all(ULID.match(i) for i in [first, *ids])
    assert len(set(ids)) == 50
    assert first[:10] <= min(i[:10] for i in ids)  # the time part sorts


async def test_creating_tasks(history: ConversationHistory) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)

    # Create a task linked to a session
    task = await task_manager.create_task(
        session_id="session_123",
        message="What is Redis?",
    )
    print(task.task_id)  # "01HXYZ..."
    print(task.status)  # TaskStatus.QUEUED
    print(task.metadata["message"])  # "What is Redis?"

    assert ULID.match(task.task_id)
    assert task.status is TaskStatus.QUEUED
    assert task.metadata["message"] == "What is Redis?"
    assert task.session_id == "session_123"
    assert (task.parent_id, task.spawn_key, task.child_ids, task.pending_children, task.depth) == (
        None,
        None,
        [],
        0,
        0,
    )
    assert task.created_at == task.updated_at
    view = (await client.get_task(task.task_id)).view
    assert view is not None and view.workflow_id == task_workflow_id(
        client.project_id, task.task_id
    )


async def test_updating_tasks(history: ConversationHistory) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)
    task = await task_manager.create_task(session_id="s", message="What is Redis?")

    # Start processing with a message
    await task_manager.update(task.task_id, status="in_progress", message="Starting...")

    # Add progress updates
    await task_manager.update(task.task_id, message="Found 5 documents")
    await task_manager.update(task.task_id, message="Calling API", update_type="tool_call")

    # Complete with result
    await task_manager.update(task.task_id, status="done", result={"answer": "Redis is..."})

    done = await task_manager.get_task(task.task_id)
    assert done is not None
    assert done.status is TaskStatus.DONE
    assert done.result == {"answer": "Redis is..."}
    assert [(u.message, u.update_type.value) for u in done.updates] == [
        ("Starting...", "info"),
        ("Found 5 documents", "info"),
        ("Calling API", "tool_call"),
    ]
    # the ledger holds them as events: each update a note, each status change a status note
    page = await client.list_events(task.task_id)
    assert [(e.kind, e.name) for e in page.events] == [
        (EventKind.NOTE, "update"),
        (EventKind.NOTE, "status"),
        (EventKind.NOTE, "update"),
        (EventKind.NOTE, "update"),
    ]
    assert page.events[1].payload == "in_progress"
    assert json.loads(page.events[2].payload) == {
        "message": "Found 5 documents",
        "update_type": "info",
        "metadata": {},
    }

    # Or fail with error (another task: a finished one takes no more writes)
    other = await task_manager.create_task(session_id="s", message="What is Redis?")
    await task_manager.update(other.task_id, status="failed", error="API timeout")
    failed = await task_manager.get_task(other.task_id)
    assert failed is not None and failed.status is TaskStatus.FAILED
    assert failed.error_message == "API timeout" and failed.result is None

    with pytest.raises(TaskRefused) as refused:
        await task_manager.update(task.task_id, status="failed", error="API timeout")
    assert refused.value.code is ErrorCode.TASK_CLOSED


async def test_the_convenience_methods(history: ConversationHistory) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)
    task = await task_manager.create_task(session_id="s", message="m")

    await task_manager.update_status(task.task_id, TaskStatus.IN_PROGRESS)
    await task_manager.add_update(task.task_id, "Processing...")
    await task_manager.set_result(task.task_id, {"answer": "..."})

    got = await task_manager.get_task(task.task_id)
    assert got is not None and got.status is TaskStatus.DONE and got.result == {"answer": "..."}
    assert [u.message for u in got.updates] == ["Processing..."]

    other = await task_manager.create_task(session_id="s", message="m")
    await task_manager.set_error(other.task_id, "Something went wrong")
    failed = await task_manager.get_task(other.task_id)
    assert failed is not None and failed.status is TaskStatus.FAILED
    assert failed.error_message == "Something went wrong"


async def test_retrieving_tasks(history: ConversationHistory) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)
    session_id = f"session-{uuid.uuid4().hex[:6]}"
    running = await task_manager.create_task(session_id=session_id, message="first")
    queued = await task_manager.create_task(session_id=session_id, message="second")
    elsewhere = await task_manager.create_task(session_id="another", message="third")
    await task_manager.update_status(running.task_id, TaskStatus.IN_PROGRESS)
    task_id = running.task_id

    # Get a single task
    task = await task_manager.get_task(task_id)
    assert task is not None
    print(task.status, task.result, task.updates)
    assert task.status is TaskStatus.IN_PROGRESS and task.result is None and task.updates == []

    # List tasks by status
    async def listed() -> bool:
        tasks = await task_manager.list_tasks(status=TaskStatus.IN_PROGRESS)
        for t in tasks:
            print(f"{t.task_id}: {t.metadata.get('message')}")
        return [t.task_id for t in tasks] == [running.task_id]

    await eventually(listed)

    async def queued_listed() -> bool:  # a task nobody moved yet is open, and reads as queued
        tasks = await task_manager.list_tasks(status=TaskStatus.QUEUED)
        return {t.task_id for t in tasks} == {queued.task_id, elsewhere.task_id}

    await eventually(queued_listed)

    # List tasks for a session (from Neo4j: once mirrored), newest first
    for name in (running.task_id, queued.task_id):
        await mirrored(client, name)
    tasks = await task_manager.list_tasks(session_id=session_id)
    assert [t.task_id for t in tasks] == [queued.task_id, running.task_id]
    assert await task_manager.get_task("no-such-task") is None


async def test_task_emitter(history: ConversationHistory, broker: Broker) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client, broker=broker)
    task = await task_manager.create_task(session_id="s", message="m")
    subscriber = Subscriber(broker)
    reader = asyncio.create_task(subscriber.run())
    tokens: list[TokenMessage] = []
    channel = task_channel(client.workflow_id(task.task_id))
    await subscriber.add(
        channel, lambda m: tokens.append(m) if isinstance(m, TokenMessage) else None
    )
    try:
        emitter = TaskEmitter(task_manager, task.task_id)

        # Fire-and-forget
        emitter.emit_nowait("Processing query...")

        # Awaitable
        await emitter.emit("Analysis complete", metadata={"tokens": 150})

        # Stream a single LLM token (ephemeral, not persisted)
        await emitter.emit_token("Hello")

        await eventually(lambda: _true(len(tokens) == 1), within=10)
    finally:
        reader.cancel()
        await subscriber.close()
    assert tokens[0].text == "Hello" and tokens[0].task == task.task_id and tokens[0].index == 0
    got = await task_manager.get_task(task.task_id)
    assert got is not None
    assert [(u.message, u.metadata) for u in got.updates] == [
        ("Processing query...", {}),
        ("Analysis complete", {"tokens": 150}),
    ]
    page = await client.list_events(task.task_id)
    assert all("Hello" not in e.payload for e in page.events)  # the token is not in the ledger


async def _true(value: bool) -> bool:
    return value


async def test_deleting_tasks_and_a_custom_prefix(history: ConversationHistory) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)
    task = await task_manager.create_task(session_id="s", message="m")
    task_id = task.task_id
    await task_manager.delete_task(task_id)
    assert await task_manager.get_task(task_id) is None

    task_manager = TaskManager(client, prefix="myapp")
    # Keys: myapp:task:{id}, myapp:tasks:status:{status}
    mine = await task_manager.create_task(session_id="s", message="m")
    assert task_manager.history.workflow_id(mine.task_id) == f"agent-task/myapp/{mine.task_id}"
    assert await TaskManager(client).get_task(mine.task_id) is None  # another project's
    assert await task_manager.delete_task(mine.task_id)


async def test_awaiting_input_goes_back_to_queued_after_the_answer(
    history: ConversationHistory,
) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)
    task = await task_manager.create_task(session_id="s", message="deploy")
    await task_manager.update_status(task.task_id, TaskStatus.IN_PROGRESS)
    schema: dict[str, JsonValue] = {"type": "integer", "minimum": 1}
    asked = await task_manager.request_input(task.task_id, "How many replicas?", schema)
    assert asked.status is TaskStatus.AWAITING_INPUT
    assert asked.input_request is not None and asked.input_request.prompt == "How many replicas?"
    assert asked.input_request.json_schema == schema

    with pytest.raises(TaskRefused) as refused:  # validated on arrival, nothing recorded
        await task_manager.submit_input(task.task_id, 0)
    assert refused.value.code is ErrorCode.INPUT_INVALID
    assert "minimum" in refused.value.message
    still = await task_manager.get_task(task.task_id)
    assert still is not None and still.status is TaskStatus.AWAITING_INPUT
    assert still.input_response is None

    answered = await task_manager.submit_input(task.task_id, 3)
    assert answered.status is TaskStatus.QUEUED
    assert answered.input_request is None and answered.input_response == {"value": 3}
    view = (await client.get_task(task.task_id)).view
    assert view is not None and view.status is TaskStatus.QUEUED and not view.pending_inputs

    async def visible() -> bool:
        listed = await client.list_tasks(TaskStatus.QUEUED)
        return task.task_id in listed  # the search attribute says so too

    await eventually(visible)
    with pytest.raises(TaskRefused) as again:
        await task_manager.submit_input(task.task_id, 4)
    assert again.value.code is ErrorCode.INPUT_NOT_REQUESTED


async def test_awaiting_children_goes_back_to_queued_after_the_last_child_ends(
    history: ConversationHistory,
) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)
    parent = await task_manager.create_task(session_id="s", message="release")
    await task_manager.update_status(parent.task_id, TaskStatus.IN_PROGRESS)
    eu = await task_manager.create_task(
        session_id="s", message="deploy eu", parent_id=parent.task_id, spawn_key="eu"
    )
    us = await task_manager.create_task(
        session_id="s", message="deploy us", parent_id=parent.task_id, spawn_key="us"
    )
    assert (eu.parent_id, eu.spawn_key, eu.depth, eu.status) == (
        parent.task_id,
        "eu",
        1,
        TaskStatus.QUEUED,
    )
    waiting = await task_manager.update_status(parent.task_id, TaskStatus.AWAITING_CHILDREN)
    assert waiting.status is TaskStatus.AWAITING_CHILDREN
    assert waiting.child_ids == [eu.task_id, us.task_id] and waiting.pending_children == 2

    await task_manager.set_result(eu.task_id, {"region": "eu"})

    async def one_left() -> bool:
        got = await task_manager.get_task(parent.task_id)
        return got is not None and got.pending_children == 1

    await eventually(one_left)
    got = await task_manager.get_task(parent.task_id)
    assert got is not None and got.status is TaskStatus.AWAITING_CHILDREN

    await task_manager.set_error(us.task_id, "quota")

    async def queued() -> bool:
        got = await task_manager.get_task(parent.task_id)
        return got is not None and got.status is TaskStatus.QUEUED

    await eventually(queued)
    got = await task_manager.get_task(parent.task_id)
    assert got is not None and got.pending_children == 0
    results = [e for e in (await client.list_events(parent.task_id)).events]
    ends = [json.loads(e.payload) for e in results if e.kind is EventKind.CHILD_RESULT]
    assert sorted((end["child"], end["status"]) for end in ends) == sorted(
        [(eu.task_id, "done"), (us.task_id, "failed")]
    )
    # waiting again with no child running is queued at once
    again = await task_manager.update_status(parent.task_id, TaskStatus.AWAITING_CHILDREN)
    assert again.status is TaskStatus.QUEUED


async def test_lifecycle_writes_refuse_with_codes_and_store_nothing(
    history: ConversationHistory, services: Services
) -> None:
    client = history  # the page's client: redis.from_url(...) there
    task_manager = TaskManager(client)
    task = await task_manager.create_task(session_id="s", message="m")
    handle = services.client.get_workflow_handle(client.workflow_id(task.task_id))
    await mirrored(client, task.task_id)  # quiet: no activity left to add to the history
    length = (await handle.describe()).history_length

    with pytest.raises(ValidationError, match="finish_task"):
        await client.set_status(task.task_id, "done")
    with pytest.raises(ValidationError, match="spawn_key"):
        await client.spawn_child(task.task_id, "a/b", "child", "g")
    with pytest.raises(ValueError, match="request_input"):
        await task_manager.update(task.task_id, status="awaiting_input")
    backreference = {"type": "string", "pattern": "(a)\\1"}
    refusals = [
        (await client.request_input(task.task_id, "x", "?", backreference), "schema_invalid"),
        (
            await client.request_input(task.task_id, "x", "?", {"$ref": "http://elsewhere/s"}),
            "schema_invalid",
        ),
        (await client.set_status("no-such-task", "queued"), "task_not_found"),
        (await client.spawn_child("no-such-task", "k", "child", "g"), "task_not_found"),
    ]
    assert [(r.recorded, r.error) for r, _ in refusals] == [(False, c) for _, c in refusals]
    assert (await handle.describe()).history_length == length  # refused: nothing written

    assert (await client.request_input(task.task_id, "x", "?", request_id="ask-x")).recorded
    assert (await client.request_input(task.task_id, "x", "?", request_id="ask-x")).duplicate
    again = await client.request_input(task.task_id, "x", "other?")
    assert again.error is ErrorCode.INPUT_EXISTS
    reused = await client.request_input(task.task_id, "y", "?", request_id="ask-x")
    assert reused.error is ErrorCode.REQUEST_ID_REUSED
    assert (await client.spawn_child(task.task_id, "k", f"{task.task_id}-k", "child")).recorded
    same_key = await client.spawn_child(task.task_id, "k", f"{task.task_id}-k2", "child")
    assert same_key.error is ErrorCode.TASK_EXISTS
    view = (await client.get_task(task.task_id)).view
    assert view is not None and [r.input_id for r in view.pending_inputs] == ["x"]
    assert list(view.children) == ["k"]

    await client.create_task("agentic", "g", agent=TALKER)  # its agent waits for "go"
    for refused in (
        await client.set_status("agentic", "queued"),
        await client.request_input("agentic", "x", "?"),
        await client.spawn_child("agentic", "k", "agentic-k", "child"),
    ):
        assert refused.error is ErrorCode.RUN_BY_AGENT
    await client.cancel_task("agentic")
