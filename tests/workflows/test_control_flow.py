"""Control flow that agent code must not catch: an agent's ``except Exception`` around ``ask``,
``step``, ``spawn`` and ``wait_children`` passes on a park (the task continues as new), a cancel
and a continue-as-new, as Temporal's ``ContinueAsNewError`` and DBOS's must-not-catch errors do
(they derive from ``BaseException``). Before, ``AgentParked`` derived from ``Exception``: the
agents below returned ``swallowed AgentParked`` and their tasks ended ``done`` half way."""

from __future__ import annotations

import asyncio
import json
import uuid
from functools import partial
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from agent_tasks.contract import AgentSpec, TaskStatus
from agent_tasks.contract.errors import AgentTasksControlFlow, AgentTasksError
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import build_worker
from agent_tasks.workflows.agents import AgentContext, AgentParked, agent
from tests.agent_tools import SCRIPTS, TOOLS
from tests.conftest import eventually
from tests.workflows.test_answers import asking
from tests.workflows.test_children import spawned, view_of


@agent("swallowing_asks")
async def swallowing_asks(ctx: AgentContext) -> str:
    """``ask_loop`` without its checkpoint (a park comes inside ``ask``), each question inside
    ``except Exception``."""
    count = ctx.input["questions"]
    assert isinstance(count, int)
    answers = ctx.state.setdefault("answers", [])
    assert isinstance(answers, list)
    while len(answers) < count:
        await ctx.step(f"before-q{len(answers):03d}", "echo", {"text": str(len(answers))})
        try:
            answers.append(await ctx.ask(f"q{len(answers):03d}", f"Question {len(answers)}?"))
        except Exception as err:
            return f"swallowed {type(err).__name__}"
    return json.dumps(answers)


@agent("swallowing_waits")
async def swallowing_waits(ctx: AgentContext) -> str:
    """``fanout`` with its wait for the children inside ``except Exception``."""
    count = ctx.input["children"]
    assert isinstance(count, int)
    for i in range(count):
        await ctx.spawn(f"c{i}", f"child {i}", mode="collect")
    await ctx.checkpoint()
    try:
        outcomes = await ctx.wait_children()
    except Exception as err:
        return f"swallowed {type(err).__name__}"
    return ",".join(f"{o.key}={o.status.value}" for o in outcomes)


@agent("swallowing_cancels")
async def swallowing_cancels(ctx: AgentContext) -> str:
    """Waits inside ``except Exception``: for an answer (``input["at"] == "ask"``), for a
    long step that heartbeats (``"step"``), or for a step that does not (a cancel does not
    reach it) and then a spawn (``"spawn"``)."""
    at = ctx.input["at"]
    try:
        if at == "ask":
            await ctx.ask("q", "Go on?")
        elif at == "step":
            await ctx.step("slow", "sync_data", {"log": str(ctx.input["log"]), "seconds": 60})
        else:
            await ctx.step("gated", "gated", {"path": str(ctx.input["gate"])})
            await ctx.spawn("late", "a child after the cancel")
    except Exception as err:
        return f"swallowed {type(err).__name__}"
    return "finished"


def test_the_tree_has_one_base_for_errors_and_one_for_control_flow() -> None:
    assert issubclass(AgentParked, AgentTasksControlFlow)
    assert not issubclass(AgentParked, Exception)
    assert issubclass(AgentTasksError, Exception)


async def test_a_park_inside_an_asks_except_exception_is_not_swallowed(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """40 questions on a server that suggests continue-as-new at 60 events, each answered once
    it is asked: a wait parks (the task continues as new) through the agent's ``except
    Exception``, and every answer comes back in the result."""
    client = low_limit_env.client
    queue = f"swallow-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    count = 40
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        spec = AgentSpec(name="swallowing_asks", tools=["echo"], input={"questions": count})
        assert (await history.create_task("t", "loop", agent=spec)).recorded
        for i in range(count):
            await asking(history, f"q{i:03d}")
            assert (await history.submit_input("t", i * 3, input_id=f"q{i:03d}")).recorded
        view = await asyncio.wait_for(history.wait_task("t"), 180)
    assert view is not None and view.status is TaskStatus.DONE, view
    assert view.runs >= 2
    assert view.result is not None and json.loads(view.result.text) == [3 * i for i in range(40)]


async def test_a_park_inside_a_wait_for_children_is_not_swallowed(
    low_limit_env: WorkflowEnvironment, graph: TaskGraph, project_id: str
) -> None:
    """12 children on a server that suggests continue-as-new at 60 events: the parent's wait
    parks through its ``except Exception`` and collects every child's end in a later run."""
    client = low_limit_env.client
    queue = f"swallow-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
        spec = AgentSpec(name="swallowing_waits", input={"children": 12})
        assert (await history.create_task("t", "twelve", agent=spec)).recorded
        await spawned(history, 12)

        async def continued() -> bool:
            return (await view_of(history)).runs >= 2

        await eventually(continued, within=60)
        ends = [history.finish_task(f"t/c{i}", "done") for i in range(12)]
        assert all(r.recorded for r in await asyncio.gather(*ends))
        done = await asyncio.wait_for(history.wait_task("t"), 120)
    assert done is not None and done.status is TaskStatus.DONE and done.result is not None
    assert done.result.text == ",".join(f"c{i}=done" for i in range(12))


async def test_a_cancel_inside_an_agents_except_exception_cancels_the_task(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """A cancel while the agent waits for an answer, for a long step, or for a step a cancel
    does not reach and then spawns (each inside ``except Exception``): the task ends
    ``cancelled``, never ``done`` with the agent's "swallowed" result, and the spawn after the
    cancel starts no child."""
    log, gate = tmp_path / "log", tmp_path / "gate"
    for at in ("ask", "step", "spawn"):
        name = f"t-{at}"
        spec = AgentSpec(
            name="swallowing_cancels",
            tools=["sync_data", "gated"],
            input={"at": at, "log": str(log), "gate": str(gate)},
        )
        assert (await agents.create_task(name, "wait", agent=spec)).recorded
        if at == "ask":
            await asking(agents, "q", name)
        else:
            started = log if at == "step" else Path(f"{gate}.waiting")
            await eventually(partial(asyncio.to_thread, started.exists), within=60)
        assert (await agents.cancel_task(name)).recorded
        if at == "spawn":
            await asyncio.to_thread(gate.write_text, "open", encoding="utf-8")
        view = await asyncio.wait_for(agents.wait_task(name), 120)
        assert view is not None and view.status is TaskStatus.CANCELLED, (at, view)
        assert view.result is None, at
        assert view.children == {}, at
