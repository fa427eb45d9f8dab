"""A branch reuses what happened before its branch point (the fork contract of DBOS's
``fork_workflow`` and LangGraph's checkpoint fork; docs/agent-tasks.md, "Branches"): agent code
run again from the top in the branch reads the results of the steps its source settled before
the point and the answers it took before it, and runs live from the point on. The tools write
one line per run to a log (``tests.agent_tools``), so each test counts the side effects.

Peers' reports this reproduces: czpython/druks#637 (a fork from step 1 re-ran every completed
step and parked for a second approval), DBOS's fork contract (dbos-transact-java#425: completed
step outputs copied so they do not run again), LangGraph's fork at an interrupt (langgraph#7027,
#7038: which resume values a fork keeps)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from temporalio.client import Client
from typer.testing import CliRunner

from agent_tasks.activities.transcript import NO_RESULT
from agent_tasks.cli import app
from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import (
    BRANCH_PAGE_EVENTS,
    AgentSpec,
    Event,
    EventKind,
    StepState,
    TaskStatus,
    TaskView,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from tests.agent_tools import SCRIPTS, TOOLS, answer, calls
from tests.approval_tools import approval_spec, goal
from tests.conftest import eventually
from tests.workflows.conftest import cli, script, spec


async def ended(history: ConversationHistory, task: str) -> TaskView:
    view = await asyncio.wait_for(history.wait_task(task), 120)
    assert view is not None
    return view


async def awaiting(history: ConversationHistory, task: str) -> TaskView:
    """The task's view once it waits for an answer (or has ended)."""
    view = await asyncio.wait_for(history.wait_task(task, until="awaiting_input"), 120)
    assert view is not None
    return view


def runs(log: Path) -> list[str]:
    """The idempotency keys the tool ran under, one line per run."""
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def seq_of(events: list[Event], kind: EventKind, index: int = 0) -> int:
    return [e.seq for e in events if e.kind is kind][index]


async def asked_source(agents: ConversationHistory, log: Path) -> list[Event]:
    """``ask_positive`` run to its end: a step of ``sync_data`` (one line in ``log``), the
    question ``n`` answered 5, a step of ``echo``; returns its events."""
    agent = AgentSpec(name="ask_positive", tools=["sync_data", "echo"], input={"log": str(log)})
    assert (await agents.create_task("src", "ask", agent=agent)).recorded
    assert (await awaiting(agents, "src")).status is TaskStatus.AWAITING_INPUT
    assert (await agents.respond("src", 5, input_id="n")).recorded
    done = await ended(agents, "src")
    assert done.status is TaskStatus.DONE and done.result is not None
    assert done.result.text == "using 5"
    assert runs(log) == [f"{agents.workflow_id('src')}/prepare/1"]
    return await all_events(agents, "src")


async def test_a_branch_after_a_step_reuses_it_and_asks_the_question_after_the_point(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """Branched right after the step's result: the step returns its recorded result (the
    tool does not run: still one line), the question, answered after the point, is asked
    again, and the branch goes on with the branch's answer."""
    log = tmp_path / "prepare.log"
    source = await asked_source(agents, log)
    point = seq_of(source, EventKind.TOOL_RESULT)
    assert (await agents.branch_from("src", point, "b")).recorded
    view = await awaiting(agents, "b")
    assert view.status is TaskStatus.AWAITING_INPUT
    assert [r.input_id for r in view.pending_inputs] == ["n"]
    steps = {s.step_name: s for s in await all_steps(agents, "b")}
    assert steps["prepare"].state is StepState.COMPLETED
    assert steps["prepare"].result_event_seq == point
    assert (await agents.respond("b", 7, input_id="n")).recorded
    done = await ended(agents, "b")
    assert done.result is not None and done.result.text == "using 7"
    assert runs(log) == [f"{agents.workflow_id('src')}/prepare/1"]
    after = [e for e in await all_events(agents, "b") if e.seq > point]
    assert [e.kind for e in after].count(EventKind.TOOL_CALL) == 1  # "use" only
    (reused,) = [e for e in after if e.kind is EventKind.NOTE and e.name == "branch_reused"]
    assert json.loads(reused.payload) == {"steps": 1, "answers": 0}


async def test_a_branch_after_an_answer_takes_the_answer_without_asking(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """Branched right after the answer: nobody is asked again (no ``input_request`` after the
    point, never ``awaiting_input``), the step before it does not run again, the branch ends
    with the source's answer."""
    log = tmp_path / "prepare.log"
    source = await asked_source(agents, log)
    point = seq_of(source, EventKind.INPUT_RESPONSE)
    assert (await agents.branch_from("src", point, "b")).recorded
    done = await ended(agents, "b")
    assert done.status is TaskStatus.DONE and done.result is not None
    assert done.result.text == "using 5"
    assert runs(log) == [f"{agents.workflow_id('src')}/prepare/1"]
    after = [e for e in await all_events(agents, "b") if e.seq > point]
    assert EventKind.INPUT_REQUEST not in [e.kind for e in after]
    statuses = [e.payload for e in after if e.kind is EventKind.NOTE and e.name == "status"]
    assert "awaiting_input" not in statuses


async def test_a_branch_inside_a_step_runs_it_live_under_the_branchs_key(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """Branched between the step's call and its result: the step had not ended at the point,
    so the branch runs it (live from the point on), under the branch's own idempotency key,
    and asks the question."""
    log = tmp_path / "prepare.log"
    source = await asked_source(agents, log)
    point = seq_of(source, EventKind.TOOL_CALL)
    assert seq_of(source, EventKind.TOOL_RESULT) > point
    assert (await agents.branch_from("src", point, "b")).recorded
    assert (await awaiting(agents, "b")).status is TaskStatus.AWAITING_INPUT
    assert runs(log) == [
        f"{agents.workflow_id('src')}/prepare/1",
        f"{agents.workflow_id('b')}/prepare/1",
    ]


async def test_a_branch_of_the_tool_loop_never_runs_a_call_of_the_point_on_its_own(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """The tool loop with a charge (not idempotent), then an answer, branched at each point
    of its turn: after the model's message, between the call and its result, after the
    result. The model is asked again each time (the turn rules' continuation: a call without
    a result in the branch is closed for the model, never run on its own); the charge ran
    once in all."""
    log = tmp_path / "charge.log"
    turns = [calls(("charge_card", {"log": str(log)})), answer("end")]
    assert (await agents.create_task("src", script(*turns), agent=spec())).recorded
    assert (await ended(agents, "src")).status is TaskStatus.DONE
    source = await all_events(agents, "src")
    call = seq_of(source, EventKind.TOOL_CALL)
    points = [call - 1, call, seq_of(source, EventKind.TOOL_RESULT)]
    for i, point in enumerate(points):
        assert (await agents.branch_from("src", point, f"b{i}")).recorded
        done = await ended(agents, f"b{i}")
        assert done.status is TaskStatus.DONE, (point, done)
    assert runs(log) == [f"{agents.workflow_id('src')}/r00001.0:charge_card/1"]


async def test_the_tool_loop_branched_inside_a_turn_shows_the_model_the_call_closed(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """The docs' tool-loop row: branched between a call and its result, the model is asked
    again with the copied transcript, where the call of the point is closed (``NO_RESULT``),
    not run by the branch on its own; this scripted model calls again, so the tool runs
    again live, under a new round's step name and the branch's key."""
    log = tmp_path / "pay.log"
    pay = ("pay", {"log": str(log), "amount": 5})  # under its predicate's bound: never asked
    created = await agents.create_task("src", goal(pay), agent=approval_spec("call-then-show"))
    assert created.recorded
    assert (await ended(agents, "src")).status is TaskStatus.DONE
    point = seq_of(await all_events(agents, "src"), EventKind.TOOL_CALL)
    assert (await agents.branch_from("src", point, "b")).recorded
    done = await ended(agents, "b")
    assert done.result is not None
    messages = json.loads(done.result.text)
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert tools == [NO_RESULT, "paid 5"]
    assert [line.split(" ", 1)[0] for line in runs(log)] == [
        f"{agents.workflow_id('src')}/r00001.0:pay/1",
        f"{agents.workflow_id('b')}/r00003.0:pay/1",  # after the source's two rounds
    ]


async def test_a_branch_of_a_recorded_task_copies_the_log_and_no_steps(
    agents: ConversationHistory,
) -> None:
    """The docs' recorded-task column: the log is copied, the source's steps are not carried
    (its app sets the branch's own)."""
    history = agents
    assert (await history.create_task("rec", "recorded")).recorded
    assert (await history.record_event("rec", "tool_call", "{}", name="bash")).recorded
    result = await history.record_event("rec", "tool_result", "ok", name="bash")
    assert result.recorded and result.seq is not None
    done = await history.set_step("rec", "s1", "completed", result_event_seq=result.seq)
    assert done.recorded
    assert (await history.branch_from("rec", result.seq, "rec-b")).recorded
    assert [e.payload for e in await all_events(history, "rec-b")] == ["{}", "ok"]
    assert await all_steps(history, "rec-b") == []
    assert (await history.set_step("rec-b", "s1", "in_progress")).recorded


async def test_a_step_unknown_before_the_point_stays_unknown_in_the_branch(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """``charge_once`` cancelled during its charge (not idempotent): the step ends
    ``unknown``. Its branch after that result reuses it as ``unknown``: the charge is not run
    again (one line in all), and the agent code reads the unknown outcome (it fails on it, as
    its code says)."""
    log = tmp_path / "charge.log"
    agent = AgentSpec(
        name="charge_once", tools=["charge_card", "echo"],
        input={"log": str(log), "seconds": 300, "rounds": 1},
    )  # fmt: skip
    assert (await agents.create_task("src", "charge", agent=agent)).recorded

    async def charging() -> bool:
        return await asyncio.to_thread(log.exists)

    await eventually(charging, within=60)
    assert (await agents.cancel_task("src")).recorded
    assert (await ended(agents, "src")).status is TaskStatus.CANCELLED
    point = seq_of(await all_events(agents, "src"), EventKind.TOOL_RESULT)
    assert (await agents.branch_from("src", point, "b")).recorded
    done = await ended(agents, "b")
    assert done.status is TaskStatus.FAILED and done.error is not None
    assert "the charge is unknown" in done.error.text
    steps = {s.step_name: s for s in await all_steps(agents, "b")}
    assert steps["charge"].state is StepState.UNKNOWN
    assert runs(log) == [f"{agents.workflow_id('src')}/charge/1"]


async def test_a_branch_after_a_childs_end_reuses_the_child(agents: ConversationHistory) -> None:
    """``fanout`` with one recorded child, finished from outside: the parent ends with its
    outcome. Branched after the child's ``child_result``: the branch's ``spawn`` of that key
    starts no new child task (the DBOS fork keeps its children the same way), its wait reads
    the recorded end, and it ends with the same outcome. Before, the branch started a second
    child (its work done again) and waited for it."""
    agent = AgentSpec(name="fanout", input={"children": 1})
    assert (await agents.create_task("src", "one child", agent=agent)).recorded

    async def spawned() -> bool:
        return (await agents.get_task("src/c0")).view is not None

    await eventually(spawned, within=60)
    assert (await agents.finish_task("src/c0", "done", result="built")).recorded
    done = await ended(agents, "src")
    assert done.result is not None and done.result.text == "c0=done"
    point = seq_of(await all_events(agents, "src"), EventKind.CHILD_RESULT)
    assert (await agents.branch_from("src", point, "b")).recorded
    branch = await ended(agents, "b")
    assert branch.status is TaskStatus.DONE and branch.result is not None
    assert branch.result.text == "c0=done"
    assert (await agents.get_task("b/c0")).view is None
    assert [c.name for c in branch.children.values()] == ["src/c0"]


async def test_the_cli_branches_a_task_at_a_seq_under_a_new_name(
    agents: ConversationHistory,
) -> None:
    """``agent-tasks branch TASK SEQ --name NEW`` (docs/agent-tasks.md, the turn rules' table):
    the new task's log is the source's events 1 to SEQ, it names its branch point, and the
    source is untouched; a SEQ past the source's end is refused with nothing created."""
    history = agents
    assert (await history.create_task("rec", "recorded")).recorded
    for text in ("one", "two", "three"):
        assert (await history.record_event("rec", "message", text, role="user")).recorded
    source = await all_events(history, "rec")
    point = source[1].seq
    flags = ["--project", history.project_id, "--json"]
    queue = {"TEMPORAL_TASK_QUEUE": history.task_queue}  # where this test's worker polls
    code, out = await cli("branch", "rec", str(point), "--name", "rec-b", *flags, env=queue)
    assert code == 0 and out["recorded"] is True, out
    assert out["task"]["name"] == "rec-b"
    assert out["task"]["branched_from"] == {"task": "rec", "seq": point}
    branch = await all_events(history, "rec-b")
    assert [(e.seq, e.payload) for e in branch] == [(e.seq, e.payload) for e in source[:2]]
    assert await all_events(history, "rec") == source
    past = str(source[-1].seq + 1)
    code, out = await cli("branch", "rec", past, "--name", "rec-c", *flags, env=queue)
    assert code == 1 and out["error"] == "event_not_found", out
    assert (await history.get_task("rec-c")).view is None


async def test_a_branch_takes_the_sources_goal_agent_session_and_metadata(
    agents: ConversationHistory,
) -> None:
    """``branch_from`` creates the branch with the source's goal, agent, session and metadata
    (docs/agent-tasks.md, "Branch")."""
    agent = AgentSpec(name="noop", input={"k": 1})
    created = await agents.create_task(
        "src", "do nothing", agent=agent, session_id="sess-1", metadata={"team": "ops"}
    )
    assert created.recorded
    assert (await ended(agents, "src")).status is TaskStatus.DONE
    assert (await agents.branch_from("src", 1, "b")).recorded
    branch = await ended(agents, "b")
    assert branch.status is TaskStatus.DONE
    assert branch.goal == "do nothing"
    assert branch.session_id == "sess-1"
    assert branch.metadata == {"team": "ops"}
    assert branch.agent is not None and branch.agent.name == "noop"
    assert branch.agent.input == {"k": 1}


async def test_a_branch_of_a_recorded_task_carries_no_answers_or_children(
    agents: ConversationHistory,
) -> None:
    """The docs' recorded-task column: a question answered and a child ended before the point
    are copied as events only; the branch has no answer and no child of its own, so the same
    input id may be asked again and the same spawn key used again in it."""
    history = agents
    assert (await history.create_task("rec", "recorded")).recorded
    assert (await history.request_input("rec", "q", "Which?")).recorded
    assert (await history.respond("rec", "this one", input_id="q")).recorded
    assert (await history.spawn_child("rec", "k", "rec-k", "a child")).recorded
    assert (await history.finish_task("rec-k", "done", result="built")).recorded

    async def child_ended() -> bool:
        kinds = [e.kind for e in await all_events(history, "rec")]
        return EventKind.CHILD_RESULT in kinds

    await eventually(child_ended, within=60)
    source = await all_events(history, "rec")
    point = source[-1].seq
    assert (await history.branch_from("rec", point, "rec-b")).recorded
    copied = await all_events(history, "rec-b")
    assert [(e.kind, e.payload) for e in copied] == [(e.kind, e.payload) for e in source]
    view = (await history.get_task("rec-b")).view
    assert view is not None
    assert view.children == {} and view.pending_inputs == [] and view.closed_inputs == {}
    assert (await history.request_input("rec-b", "q", "Which?")).recorded
    assert (await history.spawn_child("rec-b", "k", "rec-b-k", "again")).recorded


async def test_a_branch_before_a_childs_end_spawns_the_child_again_live(
    agents: ConversationHistory,
) -> None:
    """``fanout`` with one recorded child, branched before the child's ``child_result``: the
    child ended after the point, so the branch's agent code spawns it again, a child of the
    branch (``b/c0``), live; the branch waits for that child's end, not the source's."""
    agent = AgentSpec(name="fanout", input={"children": 1})
    assert (await agents.create_task("src", "one child", agent=agent)).recorded

    async def spawned(task: str) -> bool:
        return (await agents.get_task(task)).view is not None

    await eventually(lambda: spawned("src/c0"), within=60)
    assert (await agents.finish_task("src/c0", "done", result="built")).recorded
    done = await ended(agents, "src")
    assert done.result is not None and done.result.text == "c0=done"
    point = seq_of(await all_events(agents, "src"), EventKind.CHILD_RESULT) - 1
    assert (await agents.branch_from("src", point, "b")).recorded
    await eventually(lambda: spawned("b/c0"), within=60)
    child = (await agents.get_task("b/c0")).view
    assert child is not None and child.parent == "b"
    assert (await agents.finish_task("b/c0", "failed", error="broke")).recorded
    branch = await ended(agents, "b")
    assert branch.status is TaskStatus.DONE and branch.result is not None
    assert branch.result.text == "c0=failed"
    assert [c.name for c in branch.children.values()] == ["b/c0"]


async def test_a_branch_copies_a_log_longer_than_a_page_once_and_in_order(
    agents: ConversationHistory,
) -> None:
    """The copy is made in pages of ``BRANCH_PAGE_EVENTS`` (``branch_events``): a source of
    two pages and a half, branched at its last event, gives a branch whose log is every
    source event once, in seq order, with the same kinds, roles, authors, text and hashes."""
    history = agents
    count = 2 * BRANCH_PAGE_EVENTS + BRANCH_PAGE_EVENTS // 2
    assert (await history.create_task("long", "recorded")).recorded
    batch = [{"kind": "message", "role": "user", "payload": f"m{i}"} for i in range(count)]
    assert (await history.record_events("long", batch)).recorded
    source = await all_events(history, "long")
    assert [e.payload for e in source] == [f"m{i}" for i in range(count)]
    assert (await history.branch_from("long", source[-1].seq, "long-b")).recorded
    branch = await all_events(history, "long-b")

    def shape(e: Event) -> tuple[object, ...]:
        return (e.seq, e.kind, e.role, e.author, e.payload, e.full_length, e.full_sha256)

    assert [shape(e) for e in branch] == [shape(e) for e in source]


async def test_the_branch_reused_note_counts_the_answers_taken_over(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """Branched after the answer: the ``branch_reused`` note says one step and one answer were
    taken over from the source (docs/agent-tasks.md: ``{"steps": n, "answers": m}``)."""
    source = await asked_source(agents, tmp_path / "prepare.log")
    point = seq_of(source, EventKind.INPUT_RESPONSE)
    assert (await agents.branch_from("src", point, "b")).recorded
    assert (await ended(agents, "b")).status is TaskStatus.DONE
    after = [e for e in await all_events(agents, "b") if e.seq > point]
    (reused,) = [e for e in after if e.kind is EventKind.NOTE and e.name == "branch_reused"]
    assert json.loads(reused.payload) == {"steps": 1, "answers": 1}


async def test_a_branch_runs_on_its_sources_task_queue_unless_told_another(
    agents: ConversationHistory, client: Client, graph: TaskGraph
) -> None:
    """Issue 32: ``agent-tasks branch`` started the branch on the CLI's own task queue
    (TEMPORAL_TASK_QUEUE), where no worker of the source's agent may poll, so an agent task's
    branch sat ``queued``. Its source runs on a second worker's queue; the CLI's queue is one
    nobody polls: the branch runs on the source's queue and ends ``done``, and
    ``--task-queue`` puts another on the one it names."""
    elsewhere = f"agents-{uuid.uuid4().hex[:8]}"
    source = ConversationHistory(
        client, agents.project_id, "agent-1", task_queue=elsewhere, graph=graph
    )
    nobody = {"TEMPORAL_TASK_QUEUE": f"nobody-{uuid.uuid4().hex[:8]}"}
    flags = ["--project", agents.project_id, "--json"]
    async with build_worker(client, graph, elsewhere, tools=TOOLS, scripts=SCRIPTS):
        assert (await source.create_task("src", "noop", agent=AgentSpec(name="noop"))).recorded
        assert (await ended(source, "src")).status is TaskStatus.DONE
        code, out = await cli("branch", "src", "1", "--name", "b", *flags, env=nobody)
        assert code == 0 and out["recorded"] is True, out
        code, out = await cli(
            "branch", "src", "1", "--name", "c", "--task-queue", agents.task_queue, *flags,
            env=nobody,
        )  # fmt: skip
        assert code == 0 and out["recorded"] is True, out
        for task in ("b", "c"):
            assert (await ended(agents, task)).status is TaskStatus.DONE
    queues = {}
    for task in ("src", "b", "c"):
        handle = client.get_workflow_handle(agents.workflow_id(task))
        queues[task] = (await handle.describe()).task_queue
    assert queues == {"src": elsewhere, "b": elsewhere, "c": agents.task_queue}


async def test_a_branchs_agent_state_starts_empty(agents: ConversationHistory) -> None:
    """docs/agent-tasks.md: the agent's code runs again from the top in the branch, its
    ``state`` empty. ``counter`` (3 rounds, its progress in ``ctx.state["done"]``) branched
    after its first step's result: starting from ``done`` 0, the branch takes ``echo-00``
    over (no tool call of it in the branch) and runs ``echo-01`` and ``echo-02`` live. A
    state carried from the source (``done`` 3 at its end) would run no step at all."""
    agent = AgentSpec(name="counter", tools=["echo"], input={"rounds": 3})
    assert (await agents.create_task("src", "count", agent=agent)).recorded
    assert (await ended(agents, "src")).status is TaskStatus.DONE
    source = await all_events(agents, "src")
    point = seq_of(source, EventKind.TOOL_RESULT, 0)
    assert (await agents.branch_from("src", point, "b")).recorded
    branch = await ended(agents, "b")
    assert branch.status is TaskStatus.DONE and branch.result is not None
    assert branch.result.text == "3 rounds"
    after = [e for e in await all_events(agents, "b") if e.seq > point]
    live = [json.loads(e.payload)["text"] for e in after if e.kind is EventKind.TOOL_CALL]
    assert live == ["round 1", "round 2"]
    (reused,) = [e for e in after if e.kind is EventKind.NOTE and e.name == "branch_reused"]
    assert json.loads(reused.payload)["steps"] == 1


async def test_a_branch_refuses_writes_task_busy_until_its_copy_is_done(
    agents: ConversationHistory, client: Client, graph: TaskGraph
) -> None:
    """docs/agent-tasks.md: a recorded task's branch takes writes once the copy is done
    (``task_busy`` before). The branch runs on a queue whose only worker runs workflows, so
    its copy (the ``branch_events`` activity) waits: ``branch_from`` returns ``task_busy``
    after its timeout, a write to the branch is refused ``task_busy`` with nothing recorded;
    once a worker of activities polls the queue the copy completes and the same write is
    taken after the copied events."""
    assert (await agents.create_task("src", "recorded")).recorded
    for text in ("one", "two"):
        assert (await agents.record_event("src", "message", text, role="user")).recorded
    queue = f"copy-{uuid.uuid4().hex[:8]}"
    brief = ConversationHistory(
        client, agents.project_id, "agent-1", task_queue=queue, graph=graph, timeout_s=3
    )
    async with build_worker(client, graph, queue, activities=False):
        busy = await brief.branch_from("src", 2, "b", task_queue=queue)
        assert not busy.recorded and busy.error is ErrorCode.TASK_BUSY, busy
        write = await brief.record_event("b", "message", "three", role="user", request_id="w1")
        assert not write.recorded and write.error is ErrorCode.TASK_BUSY, write
        view = (await brief.get_task("b")).view
        assert view is not None and view.last_seq == 0
        async with build_worker(client, graph, queue, workflows=False):

            async def copied() -> bool:
                found = (await brief.get_task("b")).view
                return found is not None and found.last_seq == 2

            await eventually(copied)
            taken = await brief.record_event("b", "message", "three", role="user", request_id="w1")
            assert taken.recorded and not taken.duplicate, taken
            events = await all_events(brief, "b")
    assert [(e.seq, e.payload) for e in events] == [(1, "one"), (2, "two"), (3, "three")]


async def test_a_resumed_task_runs_on_the_task_queue_it_ran_on(
    client: Client, graph: TaskGraph, project_id: str, tmp_path: Path
) -> None:
    """The kind of the branch's task queue, for ``resume_task`` (dbos-transact-py PR #316's
    review: a resumed workflow stays where it ran): a task run on a worker's own queue, failed,
    is resumed by a client whose queue nobody polls; its next run goes on the task's queue
    and ends ``done``. Before, it was started on the caller's queue and sat there."""
    elsewhere = f"agents-{uuid.uuid4().hex[:8]}"
    runner = ConversationHistory(client, project_id, "a", task_queue=elsewhere, graph=graph)
    caller = ConversationHistory(
        client, project_id, "b", task_queue=f"nobody-{uuid.uuid4().hex[:8]}", graph=graph
    )
    agent = AgentSpec(
        name="three_steps", tools=["echo", "sync_data", "fail_first"],
        input={"log": str(tmp_path / "steps.log")},
    )  # fmt: skip
    async with build_worker(client, graph, elsewhere, tools=TOOLS, scripts=SCRIPTS):
        assert (await runner.create_task("t", "three", agent=agent)).recorded
        assert (await ended(runner, "t")).status is TaskStatus.FAILED
        assert (await caller.resume_task("t")).recorded
        final = await asyncio.wait_for(runner.wait_task("t", until="done"), 120)
    assert final is not None and final.status is TaskStatus.DONE
    handle = client.get_workflow_handle(runner.workflow_id("t"))
    assert (await handle.describe()).task_queue == elsewhere


async def test_a_branch_of_a_branch_reuses_what_both_settled(agents: ConversationHistory) -> None:
    """A fork of a fork (langgraph's checkpoint of a forked thread, DBOS's fork of a forked
    workflow): ``counter`` (3 rounds) branched after its first step (``b`` runs rounds 1 and 2
    live), then ``b`` branched after its last step: ``c`` takes over all three steps, the
    first from ``b``'s copy of its source, and runs no tool."""
    agent = AgentSpec(name="counter", tools=["echo"], input={"rounds": 3})
    assert (await agents.create_task("src", "count", agent=agent)).recorded
    assert (await ended(agents, "src")).status is TaskStatus.DONE
    first = seq_of(await all_events(agents, "src"), EventKind.TOOL_RESULT, 0)
    assert (await agents.branch_from("src", first, "b")).recorded
    assert (await ended(agents, "b")).status is TaskStatus.DONE
    b_events = await all_events(agents, "b")
    last = seq_of(b_events, EventKind.TOOL_RESULT, 2)
    assert (await agents.branch_from("b", last, "c")).recorded
    c = await ended(agents, "c")
    assert c.status is TaskStatus.DONE and c.result is not None and c.result.text == "3 rounds"
    after = [e for e in await all_events(agents, "c") if e.seq > last]
    assert [e for e in after if e.kind is EventKind.TOOL_CALL] == []
    (reused,) = [e for e in after if e.kind is EventKind.NOTE and e.name == "branch_reused"]
    assert json.loads(reused.payload)["steps"] == 3
    steps = {s.step_name: s.state for s in await all_steps(agents, "c")}
    assert steps == {f"echo-{i:02d}": StepState.COMPLETED for i in range(3)}


async def test_a_branch_between_an_approval_and_its_result_never_runs_the_call_on_its_own(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """docs/agent-tasks.md (the tool loop's turn in a branch): a call of the point without its
    result is closed for the model and never run on its own, even one a person had approved
    before the point (langgraph#7027, #7038: which resume values a fork keeps). Branched right
    after the accept: the mail is not sent again by itself; the model, asked again, calls
    again, that new call is asked about, and only its accept sends it, under the branch's
    key."""
    log = tmp_path / "mail.log"
    call = ("send_mail", {"log": str(log), "to": "ops@example.com", "subject": "deploy"})
    assert (await agents.create_task("src", goal(call), agent=approval_spec())).recorded
    request = await awaiting(agents, "src")
    (asked,) = request.pending_inputs
    assert (await agents.approve("src", asked.input_id, "accept")).recorded
    assert (await ended(agents, "src")).status is TaskStatus.DONE
    assert len(runs(log)) == 1
    point = seq_of(await all_events(agents, "src"), EventKind.INPUT_RESPONSE)
    assert (await agents.branch_from("src", point, "b")).recorded
    view = await awaiting(agents, "b")
    assert view.status is TaskStatus.AWAITING_INPUT and len(runs(log)) == 1
    (again,) = view.pending_inputs
    assert again.approval is not None and again.input_id != asked.input_id
    assert (await agents.approve("b", again.input_id, "accept")).recorded
    done = await ended(agents, "b")
    assert done.status is TaskStatus.DONE
    sent = runs(log)
    assert len(sent) == 2 and sent[1].startswith(agents.workflow_id("b"))


def test_the_cli_refuses_an_empty_task_queue_for_a_branch() -> None:
    """``agent-tasks branch --task-queue ""`` is refused by the CLI (exit 2, naming the
    option) before anything is sent, as the HTTP API refuses an empty ``task_queue`` (422)."""
    result = CliRunner().invoke(app, ["branch", "src", "1", "--name", "b", "--task-queue", " "])
    assert result.exit_code == 2 and "empty task queue" in result.output, result.output


async def test_a_branch_of_a_task_still_waiting_goes_its_own_way(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """A fork of a line that is still running (langgraph#7027, #7038: a fork at a pending
    interrupt): ``ask_positive`` waits for ``n`` when it is branched after its step; the
    branch asks its own ``n``; each line takes its own answer and ends with it, and the step
    ran once (the branch took it over)."""
    log = tmp_path / "prepare.log"
    agent = AgentSpec(name="ask_positive", tools=["sync_data", "echo"], input={"log": str(log)})
    assert (await agents.create_task("src", "ask", agent=agent)).recorded
    assert (await awaiting(agents, "src")).status is TaskStatus.AWAITING_INPUT
    point = seq_of(await all_events(agents, "src"), EventKind.TOOL_RESULT)
    assert (await agents.branch_from("src", point, "b")).recorded
    branch = await awaiting(agents, "b")
    assert [r.input_id for r in branch.pending_inputs] == ["n"]
    assert (await agents.respond("b", 7, input_id="n")).recorded
    assert (await agents.respond("src", 5, input_id="n")).recorded
    results = {}
    for task in ("src", "b"):
        view = await ended(agents, task)
        assert view.status is TaskStatus.DONE and view.result is not None
        results[task] = view.result.text
    assert results == {"src": "using 5", "b": "using 7"}
    assert runs(log) == [f"{agents.workflow_id('src')}/prepare/1"]
