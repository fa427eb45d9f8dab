"""Continue-as-new is never starved: with Neo4j stalled (a TCP proxy of the test's own holds
every connection to it, the way a hung server looks), a task past the server's
continue-as-new suggestion keeps taking writes and continues as new after at most
``MIRROR_DRAIN_WAIT`` of draining (a mirror call in flight at the switch no longer holds
writes off for its three attempts); once Neo4j answers again the mirror catches up with every
event. Real Temporal (a private dev server that suggests continue-as-new at 60 events) and
real Neo4j."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.cli.importer import all_steps
from agent_tasks.config import Settings
from agent_tasks.contract import AgentSpec, StepState, TaskStatus
from agent_tasks.devstack.process import parse_host_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import WriteResult
from agent_tasks.worker import build_worker, open_graph
from tests.agent_tools import SCRIPTS, TOOLS
from tests.conftest import eventually, mirrored
from tests.tcp_proxy import TcpProxy


@asynccontextmanager
async def through_a_proxy(
    client: Client, settings: Settings, project_id: str
) -> AsyncIterator[tuple[TcpProxy, ConversationHistory, ConversationHistory]]:
    """A worker whose Neo4j is reached through a ``TcpProxy`` the test can hold, as
    ``(proxy, history, writer)``: ``history`` reads Neo4j through the proxy, ``writer`` writes
    in plain text (a sealed write stores its key in Neo4j first, so it would wait for the
    proxy too)."""
    queue = f"stall-{uuid.uuid4().hex[:8]}"
    host, port = parse_host_port(settings.neo4j_uri, 7687)
    async with TcpProxy(host, port).running() as proxy:
        through = settings.model_copy(update={"neo4j_uri": f"bolt://127.0.0.1:{proxy.port}"})
        async with open_graph(through, schema=True) as graph:
            history = ConversationHistory(
                client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
            )
            writer = ConversationHistory(
                client, project_id=project_id, agent_id="a", task_queue=queue
            )
            async with build_worker(client, graph, queue, tools=TOOLS, scripts=SCRIPTS):
                yield proxy, history, writer


async def test_writes_go_on_and_the_task_continues_as_new_while_neo4j_is_stalled(
    low_limit_env: WorkflowEnvironment, settings: Settings, project_id: str
) -> None:
    async with through_a_proxy(low_limit_env.client, settings, project_id) as stack:
        proxy, history, writer = stack
        assert (await writer.create_task("t", "write through a stall")).recorded
        assert (await writer.record_event("t", "note", "before")).recorded
        await mirrored(history, "t")
        proxy.hold(new=True)
        writes: list[WriteResult] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60  # MIRROR_DRAIN_WAIT is 10 s; three attempts ~110 s
        while loop.time() < deadline:
            writes.append(await writer.record_event("t", "note", f"stalled {len(writes)}"))
            view = (await writer.get_task("t")).view
            if view is not None and view.runs >= 2:
                break
            await asyncio.sleep(0.1)
        assert view is not None and view.runs >= 2  # it continued as new meanwhile
        assert [w.error for w in writes if not w.recorded] == []
        assert [w.seq for w in writes] == list(range(2, 2 + len(writes)))
        proxy.release()

        async def caught_up() -> bool:
            found = (await history.get_task("t")).view
            return found is not None and found.mirrored_seq == 1 + len(writes)

        await eventually(caught_up, within=120)
        events = await history.find_events(kind="note", limit=200)
    assert sorted(e.seq for e in events) == list(range(1, 2 + len(writes)))


async def test_an_agent_parks_at_the_suggestion_while_a_mirror_call_is_stalled(
    low_limit_env: WorkflowEnvironment, settings: Settings, project_id: str
) -> None:
    """The ``counter`` agent (40 rounds of one echo step, a checkpoint before each) starts with
    Neo4j stalled, so the run loop sits in its first mirror call for ``MIRROR_DRAIN_WAIT``
    (10 s): the agent parks at its first checkpoint past Temporal's suggestion (60 events)
    all the same, so the first run ends within a round and the drain of the suggestion (a round
    is 6 events: the activity's 3 and a workflow task's 3), not after all 40 rounds (240 and
    more); once Neo4j answers, every round runs once across the runs."""
    client = low_limit_env.client
    async with through_a_proxy(client, settings, project_id) as (proxy, history, writer):
        proxy.hold(new=True)
        counter = AgentSpec(name="counter", tools=["echo"], input={"rounds": 40})
        assert (await writer.create_task("t", "count", agent=counter)).recorded

        async def continued() -> bool:
            view = (await writer.get_task("t")).view
            return view is not None and view.runs >= 2

        await eventually(continued, within=60)
        proxy.release()
        view = await asyncio.wait_for(history.wait_task("t"), 120)
        assert view is not None and view.status is TaskStatus.DONE
        assert view.agent_run is not None and view.agent_run.state == {"done": 40}
        first = await _first_run_length(client, view.workflow_id)
        assert 60 < first < 60 + 30
        steps = await all_steps(history, "t")
        assert [s.step_name for s in steps] == [f"echo-{i:02d}" for i in range(40)]
        assert all(s.state is StepState.COMPLETED and s.attempt == 1 for s in steps)


async def _first_run_length(client: Client, workflow_id: str) -> int:
    """The number of history events of ``workflow_id``'s first run (the earliest started)."""
    runs = [r async for r in client.list_workflows(f'WorkflowId = "{workflow_id}"')]
    first = min(runs, key=lambda r: r.start_time)
    history = await client.get_workflow_handle(workflow_id, run_id=first.run_id).fetch_history()
    return len(history.events)
