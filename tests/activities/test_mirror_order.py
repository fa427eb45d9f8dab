"""The mirror never goes back in time: a mirror write applies to a node only if it is newer
than what the node holds (the task by its write counter, a step by the write that last
changed it), so an attempt held back until a newer one landed changes nothing when it lands
late. The late attempt is the mirror's own ``copy_run``, writing through a TCP proxy of the
test's own that holds its connection (real Temporal; each graph store, ``store``: real Neo4j
and real FalkorDB)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from agent_tasks.activities.mirror import QueriedRun, copy_run
from agent_tasks.config import Settings
from agent_tasks.contract import StepState, TaskStatus
from agent_tasks.devstack.process import parse_host_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.falkordb.graph import FalkorGraph
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_graph_store
from tests.conftest import eventually, mirrored
from tests.tcp_proxy import TcpProxy
from tests.workflows.conftest import graph_row


def _through(store: GraphStore, port: int, settings: Settings) -> GraphStore:
    """The same store, reached through ``port`` (a proxy's)."""
    if isinstance(store, FalkorGraph):
        graph = settings.model_copy(update={"falkordb_graph": store.graph_name})
        return build_graph_store(f"falkor://127.0.0.1:{port}", settings=graph)
    return build_graph_store(f"bolt://127.0.0.1:{port}", settings=settings)


async def test_a_held_back_mirror_attempt_never_undoes_a_newer_one(
    store: GraphStore, store_history: ConversationHistory, client: Client, settings: Settings
) -> None:
    history = store_history
    assert (await history.create_task("t", "hold the mirror")).recorded
    assert (await history.record_event("t", "note", "one")).recorded
    assert (await history.set_step("t", "s", StepState.IN_PROGRESS)).recorded
    await mirrored(history, "t")
    handle = client.get_workflow_handle(history.workflow_id("t"))
    run_id = (await handle.describe()).run_id
    address = store.address if isinstance(store, FalkorGraph) else settings.neo4j_uri
    host, port = parse_host_port(address, 7687)
    async with TcpProxy(host, port).running() as proxy:
        slow = _through(store, proxy.port, settings)
        try:
            await slow.reads.counts(history.project_id)  # a pooled connection to hold
            proxy.hold()
            late = asyncio.create_task(
                copy_run(QueriedRun(client, handle.id, run_id), slow, "the late attempt")
            )
            await asyncio.sleep(1.0)  # it has read the task as it is now; its write waits
            assert not late.done()
            assert (await history.set_step("t", "s", StepState.COMPLETED)).recorded
            assert (await history.finish_task("t", "done", result="newer")).recorded

            async def newer_landed() -> bool:
                return (await graph_row(history, "t")).status is TaskStatus.DONE

            await eventually(newer_landed)
            proxy.release()
            outcome = await asyncio.wait_for(late, 30)
        finally:
            await slow.close()
    assert outcome.steps == 1  # the late attempt did write, late
    row = await graph_row(history, "t")
    assert (row.status, row.result) == (TaskStatus.DONE, "newer")
    (step,) = await history.find_steps()
    assert step.state is StepState.COMPLETED
