"""Redaction, deletion, decisions and retention against the real Temporal and Neo4j: the text
of a redacted event is gone from the reads, from Neo4j and (its key destroyed) from the raw
workflow history; a deleted task of several runs leaves no run, no node and a name that stays
taken; a task whose history Temporal deleted reads back from Neo4j, and Neo4j never merges a
task created again into the old one's node."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.contract import StepState, sha256_hex
from agent_tasks.devstack import free_port
from agent_tasks.sealing.seal import open_text
from agent_tasks.starter import ConversationHistory, ErrorCode, HistoryRetention
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.conftest import eventually, mirrored, payload_texts
from tests.workflows.test_durability import dev_server

ROOT = Path(__file__).resolve().parents[2]


async def raw_history(client: Client, workflow_id: str) -> str:
    return (await client.get_workflow_handle(workflow_id).fetch_history()).to_json()


def sealed_inputs(history_json: str) -> dict[str, str]:
    """key id -> sealed text of every sealed event input in a raw history."""
    out = {}
    for text in payload_texts(history_json).splitlines():
        if text.startswith("{") and '"sealed"' in text:
            for event in json.loads(text).get("events", []):
                if event.get("sealed"):
                    out[event["key_id"]] = event["sealed"]
    return out


async def project_strings(graph: TaskGraph, project_id: str) -> str:
    """Every property of every node and relationship of the project in Neo4j, as text."""
    rows = await graph.runner.read(
        """
        MATCH (n {project_id: $p})
        OPTIONAL MATCH (n)-[r]-()
        RETURN properties(n) AS n, collect(properties(r)) AS r
        """,
        p=project_id,
    )
    return json.dumps(rows, default=str)


def retention_of(history: ConversationHistory) -> HistoryRetention:
    return HistoryRetention(
        history.client,
        history.project_id,
        "admin",
        graph=history.graph,
        task_queue=history.task_queue,
    )


async def test_a_redacted_event_is_gone_from_reads_neo4j_and_the_raw_history(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    leak_text = f"the key is {secret}"
    await history.create_task("t", "g")
    await history.record_event("t", "message", "read the env", role="user")
    leak = await history.record_event("t", "tool_result", leak_text, name="env")
    assert leak.event is not None and leak.event.key_id is not None
    await history.set_step("t", "read-env", "completed", kind="read", result_event_seq=leak.seq)
    decision = await history.record_decision(
        "t", "deploy with the env key", cites_events=[leak.event.id], cites_steps=["read-env"]
    )
    assert decision.event is not None
    await mirrored(history, "t")
    workflow_id = history.workflow_id("t")

    # Before: the history has the text only sealed, and the stored key opens it.
    before = await raw_history(client, workflow_id)
    assert secret not in before and secret not in payload_texts(before)
    sealed = sealed_inputs(before)[leak.event.key_id]
    key = (await graph.get_keys(history.project_id, [leak.event.key_id]))[leak.event.key_id]
    assert key is not None and open_text(sealed, key, leak.event.key_id) == leak_text
    assert secret in await project_strings(graph, history.project_id)  # the mirror's copy

    retention = retention_of(history)
    done = await retention.redact_event(leak.event.id)
    assert (done.recorded, done.duplicate, done.task, done.seq) == (True, False, "t", leak.seq)
    assert done.affected_decision_ids == [decision.event.id]

    # Reads: the event keeps its place, length and hash, without its text.
    events = (await history.list_events("t")).events
    assert [e.seq for e in events] == [1, 2, 3]
    gone = events[1]
    assert (gone.id, gone.redacted, gone.payload) == (leak.event.id, True, "")
    assert (gone.full_length, gone.full_sha256) == (len(leak_text), sha256_hex(leak_text))
    # Neo4j: no property of the project holds the text or the key any more.
    assert secret not in await project_strings(graph, history.project_id)
    assert await graph.get_keys(history.project_id, [leak.event.key_id]) == {
        leak.event.key_id: None
    }
    (in_neo4j,) = await graph.reads.events(history.project_id, workflow_id, 1, 2, 1)
    assert (in_neo4j.payload, in_neo4j.redacted, in_neo4j.full_length) == ("", True, len(leak_text))
    # Temporal: the raw history still holds the ciphertext, which nothing can open now.
    after = await raw_history(client, workflow_id)
    assert secret not in payload_texts(after)
    assert sealed_inputs(after)[leak.event.key_id] == sealed
    # The decision that cites it needs review.
    (row,) = (await history.list_decisions("t")).decisions
    assert (row.id, row.needs_review, row.redacted_events) == (decision.event.id, True, [2])
    # Again: nothing more to do, the same answer.
    again = await retention.redact_event(leak.event.id)
    assert (again.recorded, again.duplicate) == (True, True)
    assert again.affected_decision_ids == done.affected_decision_ids


async def test_a_finished_tasks_event_is_redacted_and_a_plain_one_is_refused(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    await history.create_task("done", "g")
    kept = await history.record_event("done", "message", "keep me")
    secret = await history.record_event("done", "message", f"secret {uuid.uuid4().hex}")
    await history.finish_task("done", "done", result="ok")
    await client.get_workflow_handle(history.workflow_id("done")).result()
    assert secret.event is not None and kept.event is not None
    retention = retention_of(history)
    assert (await retention.redact_event(secret.event.id)).recorded
    events = (await history.list_events("done")).events  # a query of the closed workflow
    assert [(e.payload, e.redacted) for e in events] == [("keep me", False), ("", True)]

    # A plain-text event (a client without a key store) cannot be removed from the history.
    plain = ConversationHistory(
        client, history.project_id, "no-keys", task_queue=history.task_queue
    )
    await plain.create_task("plain", "g")
    written = await plain.record_event("plain", "message", "in the history for good")
    assert written.event is not None and written.event.key_id is None
    await mirrored(history, "plain")
    before = await project_strings(graph, history.project_id)
    refused = await retention.redact_event(written.event.id)
    assert (refused.recorded, refused.error) == (False, ErrorCode.EVENT_NOT_SEALED)
    assert await project_strings(graph, history.project_id) == before  # nothing changed
    unknown = await retention.redact_event("not-a-uuid")
    assert (unknown.recorded, unknown.error) == (False, ErrorCode.EVENT_NOT_FOUND)


async def test_a_decision_needs_review_when_a_cited_step_changes(
    history: ConversationHistory,
) -> None:
    await history.create_task("t", "g")
    await history.record_event("t", "message", "plan")
    await history.set_step("t", "build", "in_progress", kind="tool")
    made = await history.record_decision("t", "ship it", cites_events=[1], cites_steps=["build"])
    assert made.event is not None and made.event.cites is not None
    assert [(c.name, c.state, c.attempt) for c in made.event.cites.steps] == [
        ("build", StepState.IN_PROGRESS, 1)
    ]
    await mirrored(history, "t")
    assert not (await history.list_decisions("t")).decisions[0].needs_review
    await history.set_step("t", "build", "failed")
    await mirrored(history, "t")
    row = await history.get_decision(made.event.id)
    assert row is not None and row.needs_review
    assert [(c.name, c.state_then, c.state, c.attempt) for c in row.changed_steps] == [
        ("build", StepState.IN_PROGRESS, StepState.FAILED, 1)
    ]
    # Refusals leave nothing: an unknown step, an unknown id, a later seq.
    length = (await history.get_task("t")).view
    assert length is not None
    for kwargs, code in (
        ({"cites_steps": ["nope"]}, ErrorCode.STEP_NOT_FOUND),
        ({"cites_events": [str(uuid.uuid4())]}, ErrorCode.EVENT_NOT_FOUND),
        ({"cites_events": [99]}, ErrorCode.EVENT_NOT_FOUND),
    ):
        result = await history.record_decision("t", "x", **kwargs)
        assert (result.recorded, result.error) == (False, code)
    view = (await history.get_task("t")).view
    assert view is not None and view.last_seq == length.last_seq


# ------------------------------------------------------------------------------- deletion


@pytest.fixture
async def several_runs(tmp_path: Path, graph: TaskGraph) -> AsyncIterator[ConversationHistory]:
    """A private dev server that suggests continue-as-new after 60 history events, with a
    worker (the shared Neo4j), and a client of a fresh project on it. Its history service
    saves its task queues' progress every second instead of 30 s, which is what a deleted
    closed run waits for before it is gone (``HistoryRetention._delete_runs``)."""
    ack_every_second = [
        f'history.{queue}ProcessorUpdateAckInterval="1s"'
        for queue in ("transfer", "timer", "visibility")
    ]
    env = await dev_server(
        free_port(),
        tmp_path / "temporal.db",
        "--dynamic-config-value",
        "limit.historyCount.suggestContinueAsNew=60",
        *(arg for value in ack_every_second for arg in ("--dynamic-config-value", value)),
    )
    queue = f"delete-{uuid.uuid4().hex[:6]}"
    try:
        async with build_worker(env.client, graph, queue):
            yield ConversationHistory(
                env.client, f"d-{uuid.uuid4().hex[:8]}", "a", task_queue=queue, graph=graph
            )
    finally:
        await env.shutdown()


async def write_until_runs(history: ConversationHistory, task: str, runs: int) -> int:
    """One event per write until the task has ``runs`` runs; returns the last seq."""
    seq = 0
    while True:
        seq = (await history.record_event(task, "message", f"m{seq}")).seq or 0
        view = (await history.get_task(task)).view
        assert view is not None
        if view.runs >= runs:
            return seq


@pytest.mark.parametrize("include_decisions", [True, False])
async def test_delete_a_task_of_several_runs(
    several_runs: ConversationHistory, graph: TaskGraph, include_decisions: bool
) -> None:
    history = several_runs
    client = history.client
    await history.create_task("t", "long")
    await history.set_step("t", "s", "completed", kind="tool")
    await write_until_runs(history, "t", 3)
    made = await history.record_decision("t", "done enough", cites_events=[1], cites_steps=["s"])
    assert made.event is not None
    await history.create_task("other", "stays")
    await history.record_event("other", "message", "untouched")
    await mirrored(history, "t")
    await mirrored(history, "other")
    workflow_id = history.workflow_id("t")
    view = (await history.get_task("t")).view
    assert view is not None and view.runs >= 3
    other_before = await graph.reads.events(
        history.project_id, history.workflow_id("other"), 0, 9, 9
    )

    deleted = await retention_of(history).delete_task("t", include_decisions=include_decisions)
    assert deleted.recorded and not deleted.duplicate
    assert len(deleted.runs_deleted) == view.runs  # every run, found from the newest back
    assert deleted.runs_pending == []
    assert deleted.events_deleted == view.last_seq - (0 if include_decisions else 1)
    assert (deleted.steps_deleted, deleted.keys_destroyed) == (1, 1)  # one key tree
    assert deleted.affected_decision_ids == [made.event.id]
    for run_id in deleted.runs_deleted:  # Temporal has no run of it
        with pytest.raises(RPCError) as caught:
            await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        assert caught.value.status == RPCStatusCode.NOT_FOUND
    rows = await graph.runner.read(
        """
        MATCH (n {project_id: $p}) WHERE n.task_key = $key OR n.key = $key
        RETURN labels(n) AS labels, count(*) AS c ORDER BY labels
        """,
        p=history.project_id,
        key=workflow_id,
    )
    kept = [] if include_decisions else [{"labels": ["Decision"], "c": 1}]
    assert rows == [*kept, {"labels": ["TaskTombstone"], "c": 1}]
    assert not (await history.get_task("t")).found
    assert not (await history.list_events("t")).found
    # The tombstone refuses the name, and nothing is started for it.
    again = await history.create_task("t", "long")
    assert (again.recorded, again.error) == (False, ErrorCode.TASK_EXISTS)
    with pytest.raises(RPCError):
        await client.get_workflow_handle(workflow_id).describe()
    # A kept decision reads back detached, and needs review.
    row = await history.get_decision(made.event.id)
    if include_decisions:
        assert row is None
    else:
        assert row is not None and row.detached and row.needs_review
        assert row.statement == "done enough"
        assert (await history.list_decisions("t")).decisions == [row]
    # The other task is untouched; deleting again changes nothing.
    assert (
        await graph.reads.events(history.project_id, history.workflow_id("other"), 0, 9, 9)
        == other_before
    )
    repeat = await retention_of(history).delete_task("t", include_decisions=include_decisions)
    assert (repeat.recorded, repeat.duplicate, repeat.runs_deleted) == (True, True, [])
    missing = await retention_of(history).delete_task("never-was")
    assert (missing.recorded, missing.error) == (False, ErrorCode.TASK_NOT_FOUND)
    assert (await history.create_task("never-was", "fine")).created  # no tombstone was left


# ------------------------------------------------------------------------------ retention


async def delete_executions(client: Client, workflow_id: str) -> None:
    """What Temporal does when a closed run's retention passes: the run is deleted."""
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        ),
        retry=True,
    )

    async def gone() -> bool:
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            return err.status == RPCStatusCode.NOT_FOUND
        return False

    await eventually(gone, within=120)  # a closed run goes within about 30 s on a quiet server


async def test_a_task_past_retention_reads_from_neo4j_and_keeps_its_name(
    client: Client, graph: TaskGraph, history: ConversationHistory
) -> None:
    await history.create_task("old", "from last month", metadata={"model": "m"})
    await history.record_events("old", [{"kind": "message", "payload": f"m{i}"} for i in range(3)])
    await history.set_step("old", "s", "completed", kind="tool", result_event_seq=3)
    await history.record_decision("old", "fine", cites_events=[3], cites_steps=["s"])
    await history.finish_task("old", "done", result="all good " * 5000)  # a cut result
    await client.get_workflow_handle(history.workflow_id("old")).result()
    before = (
        (await history.get_task("old")).view,
        (await history.list_events("old")).events,
        (await history.list_steps("old")).steps,
        (await history.list_decisions("old")).decisions,
    )
    counts = await graph.reads.counts(history.project_id)

    await delete_executions(client, history.workflow_id("old"))

    found = await history.get_task("old")
    assert (found.found, found.source) == (True, "neo4j")
    view, old_view = found.view, before[0]
    assert view is not None and old_view is not None
    assert view.model_dump(exclude={"run_first_seq"}) == old_view.model_dump(
        exclude={"run_first_seq"}
    )
    events = await history.list_events("old")
    assert events.found and events.events == before[1]
    page = await history.list_events("old", after_seq=1, limit=2)
    assert [e.seq for e in page.events] == [2, 3] and page.next_after_seq == 3
    steps = await history.list_steps("old")
    assert steps.found and steps.steps == before[2]
    assert (await history.list_decisions("old")).decisions == before[3]
    # The name stays taken, and the refusals change nothing in Neo4j.
    again = await history.create_task("old", "from last month", metadata={"model": "m"})
    assert (again.recorded, again.error) == (False, ErrorCode.TASK_EXISTS)
    late = await history.record_event("old", "message", "late")
    assert (late.recorded, late.error) == (False, ErrorCode.TASK_CLOSED)
    assert await graph.reads.counts(history.project_id) == counts

    # A client without Neo4j cannot see that the name is taken, and Temporal starts a new
    # task; the mirror refuses to write it into the old task's node.
    blind = ConversationHistory(client, history.project_id, "blind", task_queue=history.task_queue)
    reborn = await blind.create_task("old", "another task")
    assert reborn.created

    async def refused_by_the_mirror() -> bool:
        current = (await blind.get_task("old")).view
        return current is not None and current.mirror_error is not None

    await eventually(refused_by_the_mirror)
    error = (await blind.get_task("old")).view
    assert error is not None and error.mirror_error is not None
    assert "Neo4j keeps the earlier one" in error.mirror_error
    # The old task's nodes are untouched; the refusal itself is kept (``graph health``).
    assert await graph.reads.counts(history.project_id) == {**counts, "MirrorRefusal": 1}
    await client.get_workflow_handle(history.workflow_id("old")).terminate("test over")


# ------------------------------------------------------------------------------------ CLI


async def cli(queue: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m agent_tasks.cli task ARGS`` with the test session's task queue."""
    env = {**os.environ, "TEMPORAL_TASK_QUEUE": queue}
    command = [sys.executable, "-m", "agent_tasks.cli", "task", *args]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


async def test_the_cli_redacts_lists_decisions_and_deletes(history: ConversationHistory) -> None:
    project = ("--project", history.project_id, "--json")
    await history.create_task("t", "g")
    secret = await history.record_event("t", "message", "password 1234")
    assert secret.event is not None
    made = await history.record_decision("t", "rotate it", cites_events=[1])
    assert made.event is not None
    await mirrored(history, "t")
    redacted = await cli(history.task_queue, "redact", secret.event.id, *project)
    assert redacted.returncode == 0, redacted.stdout + redacted.stderr
    assert json.loads(redacted.stdout)["affected_decision_ids"] == [made.event.id]
    listed = await cli(history.task_queue, "decisions", "t", *project)
    (row,) = json.loads(listed.stdout)["decisions"]
    assert (row["id"], row["needs_review"], row["redacted_events"]) == (made.event.id, True, [1])
    deleted = await cli(history.task_queue, "delete", "t", "--keep-decisions", *project)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    report = json.loads(deleted.stdout)
    assert (report["decisions_kept"], report["events_deleted"]) == (True, 1)
    again = await cli(history.task_queue, "redact", str(uuid.uuid4()), "--project", "p")
    assert again.returncode == 1 and "event_not_found" in again.stdout
