"""pydantic-ai on Temporal: an ``Agent`` with the ``TemporalDurability`` capability (the
successor of ``TemporalAgent``) run in a ``PydanticAIWorkflow``; its tools run as activities.
``charge`` of ``APPROVAL_AMOUNT`` or more raises ``ApprovalRequired``: the run ends with
``DeferredToolRequests``, the workflow waits for the ``approve`` signal and runs the agent again
with the approval (pydantic-ai's documented human-in-the-loop).

    python -m bench.peers.rt_pydantic_temporal worker|client QUEUE
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
)
from pydantic_ai.durable_exec.temporal import (
    PydanticAIPlugin,
    PydanticAIWorkflow,
    TemporalDurability,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():  # the bench's own, no workflow state
    import os

    from bench.peers import protocol, temporal_client
    from bench.peers.ledger import record_effect
    from bench.peers.script import APPROVAL_AMOUNT


def _key() -> str:
    info = activity.info()
    return f"{info.workflow_id}/{info.activity_id}"


def make_agent(read_tool: str) -> Agent[None, str | DeferredToolRequests]:
    """The agent, its read tool named ``read_tool`` (``lookup``; renamed: the changed code)."""
    model = OpenAIChatModel("bench", provider=OpenAIProvider())
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        model,
        name="bench_agent",
        output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
        capabilities=[TemporalDurability()],
    )

    async def lookup(ctx: RunContext[None], item: int) -> str:
        """Read an item."""
        await record_effect(activity.info().workflow_id, "lookup", _key(), {"item": item})
        return f"item {item}: in stock"

    async def charge(ctx: RunContext[None], order: str, amount: int) -> str:
        """Charge the order."""
        if amount >= APPROVAL_AMOUNT and not ctx.tool_call_approved:
            raise ApprovalRequired()
        await record_effect(order, "charge", _key(), {"order": order, "amount": amount})
        return f"charged {amount} for {order}"

    agent.tool(name=read_tool)(lookup)
    agent.tool(charge)
    return agent


agent = make_agent("lookup")
changed_agent = make_agent("find_item")


async def run_agent(
    runner: Agent[None, str | DeferredToolRequests], approvals: temporal_client.Approvals, goal: str
) -> str:
    """Run the agent; while it ends asking for approvals, wait for one and run it on."""
    result = await runner.run(goal)
    while isinstance(result.output, DeferredToolRequests):
        calls = result.output.approvals
        await approvals.wait({"args": calls[0].args_as_dict()} if calls else None)
        results = DeferredToolResults(approvals={c.tool_call_id: True for c in calls})
        result = await runner.run(
            message_history=result.all_messages(), deferred_tool_results=results
        )
    return str(result.output)


@workflow.defn(name="BenchAgent")
class BenchAgent(PydanticAIWorkflow, temporal_client.ApprovingWorkflow):
    __pydantic_ai_agents__ = (agent,)

    @workflow.run
    async def run(self, goal: str) -> str:
        return await run_agent(agent, self.approvals, goal)


@workflow.defn(name="BenchAgent")
class ChangedBenchAgent(PydanticAIWorkflow, temporal_client.ApprovingWorkflow):
    """The same workflow with the read tool renamed: the changed code of the replay."""

    __pydantic_ai_agents__ = (changed_agent,)

    @workflow.run
    async def run(self, goal: str) -> str:
        return await run_agent(changed_agent, self.approvals, goal)


async def _connect() -> Client:
    return await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[PydanticAIPlugin()])


async def worker(queue: str) -> None:
    client = await _connect()
    async with Worker(client, task_queue=queue, workflows=[BenchAgent]):
        print("ready", flush=True)
        await asyncio.Event().wait()


@asynccontextmanager
async def client(queue: str) -> AsyncIterator[dict[str, protocol.Operation]]:
    connected = await _connect()
    yield temporal_client.operations(
        connected, queue, BenchAgent, ChangedBenchAgent, [PydanticAIPlugin()]
    )


if __name__ == "__main__":
    protocol.main(worker, client)
