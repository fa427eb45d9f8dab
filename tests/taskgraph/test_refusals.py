"""A mirror page a graph store refuses for its data never keeps a finished task open: the task
closes with the refusal in its view, the refusal is kept in the store (and shown: ``agent-tasks
graph health``, ``GET /graph/health``), and a worker retries the task from its history until
the store takes it (``activities.refusals``). Against both stores; the refusal is a real one:
a node of another key holding the event's id, which the unique constraint on ``Event.id``
refuses (as a store of other data, or an operator's hand, could), removed later so that the
store would take the page.

Before: the workflow paused and called the mirror again for ever, and the finished task stayed
RUNNING (the NUL goal of the issue, on FalkorDB, was one such page)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from agent_tasks.activities.mirror import REFUSED_METRIC
from agent_tasks.activities.refusals import RefusalRetries
from agent_tasks.config import Settings, connect
from agent_tasks.contract import EventInput, TaskStatus, event_id, task_workflow_id
from agent_tasks.devstack import free_port
from agent_tasks.devstack.falkordb_server import FalkorDBServer
from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.falkordb.graph import FalkorGraph
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.taskgraph.refusals import Refusals
from agent_tasks.worker import Services, build_worker
from tests.conftest import eventually
from tests.servers import served

_BLOCK = """
CREATE (:Event {key: $key + '#blocker', id: $id, project_id: $p, seq: -1, kind: 'note'})
"""
_UNBLOCK = "MATCH (e:Event {key: $key + '#blocker'}) DELETE e"
_DUE_NOW = "MATCH (r:MirrorRefusal {key: $key}) SET r.retry_at = $past"


async def _blocked(store: GraphStore, history: ConversationHistory, task: str) -> str:
    """Make the store refuse event 1 of ``task`` (module docstring); returns its workflow id."""
    workflow_id = task_workflow_id(history.project_id, task)
    block = {"key": workflow_id, "id": event_id(workflow_id, 1), "p": history.project_id}
    await store.records(_BLOCK, write=True, **block)
    return workflow_id


async def _refused_task(store: GraphStore, history: ConversationHistory, task: str) -> str:
    """A task whose first event the store refuses, finished; returns its workflow id once its
    workflow completed."""
    assert (await history.create_task(task, "goal")).recorded
    workflow_id = await _blocked(store, history, task)
    item = EventInput(kind="message", role="user", payload="refused by the store")
    assert (await history.record_events(task, [item])).recorded
    assert (await history.finish_task(task, "done", result="ok")).recorded
    async with asyncio.timeout(90):
        final = await history.wait_task(task)
    assert final is not None and final.status is TaskStatus.DONE
    assert final.mirror_error is not None and "MirrorRefused" in final.mirror_error
    assert final.unmirrored_writes > 0
    return workflow_id


async def test_a_refused_page_closes_the_task_and_is_retried_once_the_store_takes_it(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    history = store_history
    workflow_id = await _refused_task(store, history, "refused")
    described = await history.client.get_workflow_handle(workflow_id).describe()
    assert described.status is WorkflowExecutionStatus.COMPLETED
    refusals = Refusals(store)
    (kept,) = await refusals.of_project(history.project_id, 10)
    assert kept.workflow_id == workflow_id and "Event" in kept.error, kept.error
    assert kept.retry_at > datetime.now(UTC)
    assert await store.reads.events(history.project_id, workflow_id, 0, 1, 10) == []

    retries = RefusalRetries(history.client, store)
    past = datetime.now(UTC) - timedelta(seconds=1)
    await store.records(_DUE_NOW, write=True, key=workflow_id, past=past)
    outcome = (await retries.retry_due()).get(workflow_id, "claimed")  # or a worker's sweep
    assert outcome in ("refused", "claimed")

    async def refused_again() -> bool:
        (again,) = await refusals.of_project(history.project_id, 10)
        return again.attempts > kept.attempts and again.retry_at > datetime.now(UTC)

    await eventually(refused_again, within=60)

    await store.records(_UNBLOCK, write=True, key=workflow_id)
    await store.records(_DUE_NOW, write=True, key=workflow_id, past=past)
    assert (await retries.retry_due()).get(workflow_id, "mirrored") == "mirrored"

    async def cleared() -> bool:
        return await refusals.of_project(history.project_id, 10) == []

    await eventually(cleared, within=60)
    (event,) = await store.reads.events(history.project_id, workflow_id, 0, 1, 10)
    assert event.payload == "refused by the store"
    view = (await history.get_task("refused")).view
    assert view is not None
    assert await store.reads.mirrored_write(history.project_id, workflow_id) == view.writes
    held = await store.reads.task_view(history.project_id, workflow_id)
    assert held is not None and held.status is TaskStatus.DONE


async def test_a_cancelled_task_whose_page_is_refused_closes_cancelled(
    store: GraphStore, store_history: ConversationHistory
) -> None:
    """The cancel's own final mirror (``final``) takes the same way out; while the store
    holds the refusal, the closed task is read from Temporal, not from the store's older view
    (``tasklog.reader``: a cancelled run's view is otherwise the store's), and from the store
    again once a retry brought it up to date."""
    history = store_history
    assert (await history.create_task("cancelled", "goal")).recorded
    workflow_id = await _blocked(store, history, "cancelled")
    item = EventInput(kind="message", role="user", payload="refused")
    assert (await history.record_events("cancelled", [item])).recorded
    assert (await history.cancel_task("cancelled")).recorded
    async with asyncio.timeout(90):
        final = await history.wait_task("cancelled")
    assert final is not None and final.status is TaskStatus.CANCELLED
    described = await history.client.get_workflow_handle(workflow_id).describe()
    assert described.status is WorkflowExecutionStatus.CANCELED
    refusals = Refusals(store)
    assert [r.workflow_id for r in await refusals.of_project(history.project_id, 10)] == [
        workflow_id
    ]
    read = await history.get_task("cancelled")  # the store's view is behind: Temporal's
    assert read.view is not None and read.view.status is TaskStatus.CANCELLED
    assert read.source == "temporal"

    await store.records(_UNBLOCK, write=True, key=workflow_id)
    past = datetime.now(UTC) - timedelta(seconds=1)
    await store.records(_DUE_NOW, write=True, key=workflow_id, past=past)
    await RefusalRetries(history.client, store).retry_due()

    async def cleared() -> bool:
        return await refusals.of_project(history.project_id, 10) == []

    await eventually(cleared, within=60)
    read = await history.get_task("cancelled")  # the store caught up: read from it again
    assert read.view is not None and read.view.status is TaskStatus.CANCELLED
    assert read.source == "neo4j" and read.view.last_seq == final.last_seq


async def test_the_refusal_is_shown_by_the_cli_and_the_http_api(
    client: Client,
    store: GraphStore,
    store_history: ConversationHistory,
    services: Services,
    falkordb_server: FalkorDBServer,
) -> None:
    history = store_history
    workflow_id = await _refused_task(store, history, "shown")
    try:
        app = create_app(Services(services.settings, client, store, None))
        _, key = await ApiKeyStore(store).create(history.project_id, "health")
        async with served(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            answer = await http.get("/graph/health", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["store"], body["reachable"]) == (store.kind, True)
        assert (body["refused_tasks"], body["refused_everywhere"]) == (1, None)
        assert [r["workflow_id"] for r in body["refused"]] == [workflow_id]

        env = {"COLUMNS": "400"}
        if isinstance(store, FalkorGraph):
            env |= {
                "AGENT_TASKS_GRAPH": "falkordb",
                "AGENT_TASKS_FALKORDB_URL": falkordb_server.url,
                "AGENT_TASKS_FALKORDB_GRAPH": store.graph_name,
            }
        args = ["graph", "health", "--project", history.project_id, "--json"]
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "agent_tasks.cli", *args],
            capture_output=True, text=True, env={**os.environ, **env}, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        said = json.loads(done.stdout)
        assert [r["workflow_id"] for r in said["refused"]] == [workflow_id]
        assert said["refused_tasks"] == 1 and said["refused_everywhere"] >= 1
    finally:
        await store.records(_UNBLOCK, write=True, key=workflow_id)


async def test_a_kept_refusal_counts_in_the_metric(
    graph: TaskGraph, project_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agent_tasks_mirror_refused`` on the worker's Prometheus endpoint (the SDK's metrics,
    ``OTEL_METRICS_EXPORTER=prometheus``) counts the refusal the mirror kept."""
    port = free_port()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    metered = await connect(Settings())
    queue = f"metric-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(metered, project_id, "agent-1", task_queue=queue, graph=graph)
    async with build_worker(metered, graph, queue):
        workflow_id = await _refused_task(graph, history, "counted")
    await graph.records(_UNBLOCK, write=True, key=workflow_id)

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return str(reply.read().decode())

    text = await asyncio.to_thread(scrape)
    counted = [line for line in text.splitlines() if line.startswith(REFUSED_METRIC)]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) >= 1, text[-2000:]
