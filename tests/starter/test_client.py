"""The task ledger end to end, against the real Temporal dev server of the local stack."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client

from agent_tasks.config import connect
from agent_tasks.contract import (
    MAX_STEPS_PER_TASK,
    EventInput,
    StepState,
    StepWrite,
    TaskStatus,
    TaskView,
)
from agent_tasks.contract.errors import ErrorCode, TaskServiceUnavailable
from agent_tasks.devstack import free_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.conftest import mirrored


async def history_length(client: Client, history: ConversationHistory, task: str) -> int:
    handle = client.get_workflow_handle(history.workflow_id(task))
    return len((await handle.fetch_history()).events)


async def test_create_task_semantics(history: ConversationHistory) -> None:
    first = await history.create_task("t", "the goal", request_id="c1")
    assert (first.recorded, first.created, first.error) == (True, True, None)
    again = await history.create_task("t", "the goal", request_id="c1")
    assert again.recorded and again.created and again.duplicate
    other_request = await history.create_task("t", "the goal", request_id="c2")
    assert other_request.recorded and not other_request.created and other_request.duplicate
    # the ledger guide: a repeated create "returns the existing task", whichever request id
    for repeated in (again, other_request):
        assert repeated.task is not None
        assert (repeated.task.name, repeated.task.goal) == ("t", "the goal")
    other_goal = await history.create_task("t", "another goal", request_id="c3")
    assert (other_goal.recorded, other_goal.error) == (False, ErrorCode.TASK_EXISTS)
    view = (await history.get_task("t")).view
    assert view is not None
    assert (view.status, view.goal, view.agent_id, view.last_seq) == (
        TaskStatus.OPEN,
        "the goal",
        "agent-1",
        0,
    )
    assert view.created_at.tzinfo is not None and view.created_at.utcoffset() is not None


async def test_events_get_consecutive_seqs(history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    one = await history.record_event("t", "message", "hello", role="user")
    batch = await history.record_events(
        "t",
        [
            EventInput(kind="tool_call", name="bash", call_id="c1", payload='{"cmd": "ls"}'),
            EventInput(kind="tool_result", name="bash", call_id="c1", payload="a\nb"),
            {"kind": "message", "role": "assistant", "payload": "done"},
        ],
    )
    assert one.seq == 1
    assert batch.seqs == [2, 3, 4]
    page = await history.list_events("t")
    assert [e.seq for e in page.events] == [1, 2, 3, 4]
    assert [e.kind.value for e in page.events] == ["message", "tool_call", "tool_result", "message"]
    assert page.events[1].payload == '{"cmd": "ls"}'
    assert all(e.author == "agent-1" and e.time.utcoffset() is not None for e in page.events)
    assert page.next_after_seq is None
    first_two = await history.list_events("t", after_seq=0, limit=2)
    assert [e.seq for e in first_two.events] == [1, 2] and first_two.next_after_seq == 2
    rest = await history.list_events("t", after_seq=2, limit=2)
    assert [e.seq for e in rest.events] == [3, 4] and rest.next_after_seq is None


async def test_each_refusal_code_and_nothing_is_written(
    client: Client, history: ConversationHistory
) -> None:
    await history.create_task("t", "g")
    await history.record_event("t", "message", "m", request_id="e1")
    await mirrored(history, "t")  # the mirror's own events are in the history before we count
    before = await history_length(client, history, "t")
    view_before = (await history.get_task("t")).view
    cases = [
        (history.record_event("t", "message", "other", request_id="e1"), "request_id_reused"),
        (history.record_event("t", "message", "m", request_id=""), "invalid_request_id"),
        (history.record_event("t", "message", "m", request_id="x" * 65), "invalid_request_id"),
        (history.set_step("t", "s", "completed", result_event_seq=2), "event_not_found"),
        (history.record_event("missing", "message", "m"), "task_not_found"),
    ]
    for call, code in cases:
        result = await call
        assert (result.recorded, result.error) == (False, ErrorCode(code)), code
    assert await history_length(client, history, "t") == before
    assert (await history.get_task("t")).view == view_before


async def test_step_transitions_kinds_and_attempts(
    client: Client, history: ConversationHistory
) -> None:
    await history.create_task("t", "g")
    seq = (await history.record_event("t", "tool_result", "out")).seq
    assert (await history.set_step("t", "s", "in_progress", kind="write")).recorded
    refused = await history.set_step("t", "s", "in_progress")
    assert refused.error is ErrorCode.INVALID_TRANSITION
    kind = await history.set_step("t", "s", "failed", kind="read")
    assert kind.error is ErrorCode.STEP_KIND_CHANGED
    assert (await history.set_step("t", "s", "unknown")).recorded
    assert (await history.set_step("t", "s", "in_progress")).recorded  # a retry after unknown
    retried = (await history.list_steps("t")).steps[0]
    assert (retried.attempt, retried.idempotency_key) == (1, f"{history.workflow_id('t')}/s/1")
    assert (await history.set_step("t", "s", "failed")).recorded
    assert (await history.set_step("t", "s", "in_progress")).recorded  # after a known failure
    assert (await history.set_step("t", "s", "completed", result_event_seq=seq)).recorded
    final = await history.set_step("t", "s", "in_progress")
    assert final.error is ErrorCode.INVALID_TRANSITION
    steps = (await history.list_steps("t")).steps
    assert len(steps) == 1
    step = steps[0]
    assert (step.state, step.kind.value, step.attempt, step.result_event_seq) == (
        StepState.COMPLETED,
        "write",
        2,
        seq,
    )
    assert step.result_validity.value == "valid"
    assert step.idempotency_key == f"{history.workflow_id('t')}/s/2"
    new_step = await history.set_step("t", "n", "unknown")
    assert new_step.recorded
    unknown = (await history.list_steps("t", state="unknown")).steps
    assert [(s.step_name, s.kind.value, s.result_validity.value) for s in unknown] == [
        ("n", "tool", "uncertain")
    ]
    counts = (await history.get_task("t")).view.step_counts  # type: ignore[union-attr]
    assert counts == {
        StepState.NOT_STARTED: 0,
        StepState.IN_PROGRESS: 0,
        StepState.COMPLETED: 1,
        StepState.FAILED: 0,
        StepState.UNKNOWN: 1,
    }


async def test_step_batches_are_all_or_nothing(history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    result = await history.set_steps(
        "t",
        [
            StepWrite(step_name="a", state=StepState.COMPLETED),
            StepWrite(step_name="a", state=StepState.FAILED),
        ],
    )
    assert result.error is ErrorCode.INVALID_TRANSITION
    assert (await history.list_steps("t")).steps == []


async def test_step_limits(history: ConversationHistory) -> None:
    """At most 500 open steps at once (each is carried in full across continue-as-new); closed
    steps count towards the 10,000 only; a list over 10,000 is refused before it is sent."""
    await history.create_task("t", "g")
    planned = [StepWrite(step_name=f"s{i}", state=StepState.NOT_STARTED) for i in range(500)]
    assert (await history.set_steps("t", planned)).recorded
    over = await history.set_step("t", "one-more", "not_started")
    assert over.error is ErrorCode.STEP_LIMIT_REACHED and "open steps" in (over.message or "")
    assert (await history.set_step("t", "closed-one", "completed")).recorded
    assert (await history.set_step("t", "s0", "completed")).recorded  # one open step fewer
    assert (await history.set_step("t", "one-more", "not_started")).recorded
    view = (await history.get_task("t")).view
    assert view is not None
    assert (view.step_counts[StepState.NOT_STARTED], view.step_counts[StepState.COMPLETED]) == (
        500,
        2,
    )
    await history.create_task("u", "g")
    too_many = [
        StepWrite(step_name=f"s{i}", state=StepState.COMPLETED)
        for i in range(MAX_STEPS_PER_TASK + 1)
    ]
    refused = await history.set_steps("u", too_many)
    assert refused.error is ErrorCode.STEP_LIMIT_REACHED
    assert (await history.list_steps("u")).steps == []  # refused whole, nothing stored


async def test_finish_closes_the_task(history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    done = await history.finish_task("t", "done", result="ok", request_id="f1")
    assert done.recorded
    late = await history.record_event("t", "message", "late")
    assert late.error is ErrorCode.TASK_CLOSED
    again = await history.finish_task("t", "done", result="ok", request_id="f1")
    assert again.recorded and again.duplicate
    view = (await history.get_task("t")).view
    assert view is not None and view.status is TaskStatus.DONE and view.result is not None
    assert view.result.text == "ok"
    handle = history.client.get_workflow_handle(history.workflow_id("t"), result_type=TaskView)
    assert (await handle.result()).status is TaskStatus.DONE  # the workflow completed
    reopened = await history.create_task("t", "another goal")
    assert reopened.error is ErrorCode.TASK_EXISTS
    same = await history.create_task("t", "g")
    assert same.recorded and not same.created


async def test_retried_request_id_writes_once(history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    first = await history.record_event("t", "message", "once", request_id="same")
    second = await history.record_event("t", "message", "once", request_id="same")
    assert (first.seq, second.seq, second.duplicate) == (1, 1, True)
    results = await asyncio.gather(
        *(history.record_event("t", "message", "many", request_id="conc") for _ in range(20))
    )
    assert {r.seq for r in results} == {2}
    assert sum(not r.duplicate for r in results) == 1
    view = (await history.get_task("t")).view
    assert view is not None and view.last_seq == 2


async def test_distinct_concurrent_writes_get_distinct_seqs(history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    results = await asyncio.gather(
        *(history.record_event("t", "message", f"m{i}", request_id=f"r{i}") for i in range(20))
    )
    assert sorted(r.seq for r in results) == list(range(1, 21))  # type: ignore[type-var]
    page = await history.list_events("t", limit=50)
    by_seq = {e.seq: e.payload for e in page.events}
    assert {by_seq[r.seq] for r in results} == {f"m{i}" for i in range(20)}  # type: ignore[index]


async def test_several_mib_payload_is_cut_before_temporal(history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    huge = "\u00e9" * (3 * 1024 * 1024)  # 6 MiB as UTF-8
    result = await history.record_event("t", "tool_result", huge)
    assert result.recorded
    event = (await history.list_events("t")).events[0]
    assert len(event.payload) == 32_000
    assert event.full_length == len(huge)
    assert event.full_sha256 == hashlib.sha256(huge.encode()).hexdigest()
    assert event.truncated
    many = await history.record_events("t", [EventInput(kind="note", payload=huge)] * 60)
    assert many.seqs == list(range(2, 62))  # split across updates, each far under 2 MiB
    after = await history.record_event("t", "message", "still answering")
    assert after.seq == 62


@pytest.mark.parametrize("length", [31_999, 32_000, 32_001])
async def test_payload_boundaries_through_the_workflow(
    history: ConversationHistory, length: int
) -> None:
    await history.create_task("t", "g")
    text = ("a" * 31_999 + "\U0001f600\u6f22")[:length]
    await history.record_event("t", "message", text)
    event = (await history.list_events("t")).events[0]
    assert event.payload == text[:32_000]
    assert event.full_length == length
    assert event.full_sha256 == hashlib.sha256(text.encode()).hexdigest()


async def test_lone_surrogates_follow_the_replacement_rule(history: ConversationHistory) -> None:
    await history.create_task("t", "g")
    await history.record_event("t", "message", "bad \udc80 text")
    event = (await history.list_events("t")).events[0]
    assert event.payload == "bad \ufffd text"
    assert event.full_sha256 == hashlib.sha256("bad \ufffd text".encode()).hexdigest()


async def test_bad_arguments_raise_naming_the_field_and_store_nothing(
    history: ConversationHistory,
) -> None:
    await history.create_task("t", "g")
    with pytest.raises(ValidationError, match="kind"):
        await history.record_event("t", "nonsense", "x")
    with pytest.raises(ValidationError, match="payload"):
        await history.record_event("t", "message", 12)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="result_event_seq"):
        await history.set_step("t", "s", "completed", result_event_seq="1")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="state"):
        await history.set_step("t", "s", "finished")
    with pytest.raises(ValidationError, match="name"):
        await history.create_task("", "g")
    with pytest.raises(ValidationError, match="name"):
        await history.create_task("x" * 201, "g")
    with pytest.raises(ValidationError, match="events"):
        await history.record_events("t", [])
    view = (await history.get_task("t")).view
    assert view is not None and view.last_seq == 0
    assert sum(view.step_counts.values()) == 0


@pytest.mark.parametrize("bad", ["a\ud800", "\udc00", "a\x00b", "", "x" * 201, 7])
async def test_a_task_name_is_checked_by_one_rule_in_every_call(
    history: ConversationHistory, bad: Any
) -> None:
    """The name ``create_task`` refuses is refused by every call that names a task, with a
    ``ValidationError`` naming the argument and its value, before anything is sent (a lone
    surrogate used to escape ``record_event`` as a raw ``UnicodeEncodeError``)."""
    await history.create_task("t", "g")
    calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("name", lambda: history.create_task(bad, "g")),
        ("parent", lambda: history.create_task("child", "g", parent=bad)),
        ("source", lambda: history.branch_from(bad, 1, "b")),
        ("task", lambda: history.record_event(bad, "message", "x")),
        ("task", lambda: history.set_step(bad, "s", "completed")),
        ("task", lambda: history.get_task(bad)),
        ("task", lambda: history.cancel_task(bad)),
        ("task", lambda: history.respond(bad, 1)),
        ("task", lambda: history.wait_task(bad)),
    ]
    for field, call in calls:
        with pytest.raises(ValidationError) as raised:
            await call()
        (error,) = raised.value.errors()
        assert (error["loc"][0], error["input"]) == (field, bad)
    view = (await history.get_task("t")).view
    assert view is not None and view.last_seq == 0
    assert not (await history.get_task("child")).found


async def test_wait_task_until_a_status(history: ConversationHistory) -> None:
    """``wait_task(until=...)`` returns once the task has the status, or once it has ended
    (the status it ended with); a value that is not a status is refused naming ``until``."""
    await history.create_task("t", "g")
    waiting = asyncio.ensure_future(history.wait_task("t", until="in_progress"))
    await asyncio.sleep(1.0)
    assert not waiting.done()  # open: not yet
    assert (await history.set_status("t", "in_progress")).recorded
    view = await asyncio.wait_for(waiting, 30)
    assert view is not None and view.status is TaskStatus.IN_PROGRESS
    never = asyncio.ensure_future(history.wait_task("t", until=TaskStatus.AWAITING_CHILDREN))
    assert (await history.finish_task("t", "failed", error="boom")).recorded
    ended = await asyncio.wait_for(never, 30)
    assert ended is not None and ended.status is TaskStatus.FAILED
    assert await history.wait_task("missing", until="done") is None
    with pytest.raises(ValidationError) as raised:
        await history.wait_task("t", until="finished")
    assert raised.value.errors()[0]["loc"] == ("until",)


async def test_project_scoping(
    client: Client, graph: TaskGraph, task_queue: str, history: ConversationHistory
) -> None:
    await history.create_task("shared-name", "g")
    await history.record_event("shared-name", "message", "secret")
    other = ConversationHistory(
        client, project_id=f"o-{uuid.uuid4().hex[:8]}", agent_id="b", task_queue=task_queue
    )
    assert not (await other.get_task("shared-name")).found
    assert not (await other.list_events("shared-name")).found
    refused = await other.record_event("shared-name", "message", "x")
    assert refused.error is ErrorCode.TASK_NOT_FOUND
    assert "shared-name" not in await other.list_tasks()


async def test_visibility_lists_tasks_by_status(history: ConversationHistory) -> None:
    for name in ("a", "b", "c"):
        await history.create_task(name, "g")
    await history.finish_task("b", "failed", error="boom")

    async def listed() -> tuple[set[str], set[str]]:
        return set(await history.list_tasks(status="open")), set(
            await history.list_tasks(status="failed")
        )

    for _ in range(100):
        if await listed() == ({"a", "c"}, {"b"}):
            break
        await asyncio.sleep(0.1)
    assert await listed() == ({"a", "c"}, {"b"})


async def test_worker_restart_between_writes(
    client: Client, graph: TaskGraph, project_id: str
) -> None:

    queue = f"restart-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(client, project_id=project_id, agent_id="a", task_queue=queue)
    async with build_worker(client, graph, queue):
        await history.create_task("t", "g")
        await history.record_event("t", "message", "before")
    async with build_worker(client, graph, queue):
        after = await history.record_event("t", "message", "after")
        events = (await history.list_events("t")).events
    assert after.seq == 2
    assert [e.payload for e in events] == ["before", "after"]


async def test_a_read_with_no_worker_names_the_task_queue_the_task_runs_on(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """A task that runs on a task queue of its own (as ``run --with-worker`` starts one),
    read or written by a client whose default is another queue once that worker is gone: the
    error names the task's queue, not the client's."""
    own = f"own-{uuid.uuid4().hex[:8]}"
    writer = ConversationHistory(client, project_id, "a", task_queue=own, timeout_s=3)
    async with build_worker(client, graph, own):
        assert (await writer.create_task("t", "g")).recorded
    reader = ConversationHistory(client, project_id, "a", task_queue="elsewhere", timeout_s=3)
    with pytest.raises(TaskServiceUnavailable) as raised:
        await reader.get_task("t")
    assert f"task queue {own!r}" in str(raised.value) and "elsewhere" not in str(raised.value)
    # a write, as an answer from `agent-tasks input` is, names it too (a newcomer's answer to
    # a task of `run --with-worker` named the CLI's default queue, where nothing ran)
    with pytest.raises(TaskServiceUnavailable) as raised:
        await reader.record_event("t", "message", "late")
    assert f"task queue {own!r}" in str(raised.value) and "elsewhere" not in str(raised.value)
    await client.get_workflow_handle(reader.workflow_id("t")).terminate("test cleanup")


async def test_no_worker_and_no_server_raise_a_clear_exception(
    client: Client, project_id: str
) -> None:
    lonely = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue="nobody-polls", timeout_s=2
    )
    with pytest.raises(TaskServiceUnavailable, match="worker polling task queue 'nobody-polls'"):
        await lonely.create_task("t", "g")
    await client.get_workflow_handle(lonely.workflow_id("t")).terminate("test cleanup")
    with pytest.raises(TaskServiceUnavailable, match="cannot reach Temporal"):
        await connect(address=f"127.0.0.1:{free_port()}")
