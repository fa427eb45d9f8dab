"""The OpenAI Agents SDK on Temporal (``temporalio.openai_agents``' ``OpenAIAgentsPlugin``):
the model call is the plugin's activity, the tools are activities made tools with
``activity_as_tool``; ``charge`` of ``APPROVAL_AMOUNT`` or more needs approval
(``needs_approval``): the run stops with ``interruptions``, the workflow waits for the
``approve`` signal, approves them on the run's state and runs it on (the SDK's documented
human-in-the-loop).

    python -m bench.peers.rt_openai_temporal worker|client QUEUE
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.openai_agents import OpenAIAgentsPlugin
from temporalio.openai_agents import workflow as agents_workflow
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():  # the bench's own and the SDK's, no state
    import json
    import os

    from agents import Agent, Runner, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider

    from bench.peers import protocol, temporal_client
    from bench.peers.ledger import record_effect
    from bench.peers.script import APPROVAL_AMOUNT

set_tracing_disabled(True)  # the SDK sends traces to OpenAI by default: loopback only here

TOOL_TIMEOUT = timedelta(seconds=60)
"""The tools' start-to-close timeout: the plugin's model activity default, for both."""


def _key() -> str:
    info = activity.info()
    return f"{info.workflow_id}/{info.activity_id}"


@activity.defn
async def lookup(item: int) -> str:
    """Read an item."""
    await record_effect(activity.info().workflow_id, "lookup", _key(), {"item": item})
    return f"item {item}: in stock"


@activity.defn(name="find_item")
async def find_item(item: int) -> str:
    """Read an item (the read tool renamed: the changed code of the replay)."""
    return await lookup(item)


@activity.defn
async def charge(order: str, amount: int) -> str:
    """Charge the order."""
    await record_effect(order, "charge", _key(), {"order": order, "amount": amount})
    return f"charged {amount} for {order}"


async def _needs_approval(context: Any, arguments: dict[str, Any], call_id: str) -> bool:
    return int(arguments.get("amount", 0)) >= APPROVAL_AMOUNT


def make_agent(read: Any) -> Agent:
    charging = agents_workflow.activity_as_tool(charge, start_to_close_timeout=TOOL_TIMEOUT)
    charging.needs_approval = _needs_approval
    return Agent(
        name="bench_agent",
        instructions="Pay the order.",
        model="bench",
        tools=[
            agents_workflow.activity_as_tool(read, start_to_close_timeout=TOOL_TIMEOUT),
            charging,
        ],
    )


async def run_agent(agent: Agent, approvals: temporal_client.Approvals, goal: str) -> str:
    """Run the agent; while it stops on approvals, wait for one, approve and run on."""
    result = await Runner.run(agent, goal)
    while result.interruptions:
        await approvals.wait({"args": json.loads(result.interruptions[0].arguments or "{}")})
        state = result.to_state()
        for interruption in result.interruptions:
            state.approve(interruption)
        result = await Runner.run(agent, state)
    return str(result.final_output)


@workflow.defn(name="BenchAgent")
class BenchAgent(temporal_client.ApprovingWorkflow):
    @workflow.run
    async def run(self, goal: str) -> str:
        return await run_agent(make_agent(lookup), self.approvals, goal)


@workflow.defn(name="BenchAgent")
class ChangedBenchAgent(temporal_client.ApprovingWorkflow):
    """The same workflow with the read tool renamed: the changed code of the replay."""

    @workflow.run
    async def run(self, goal: str) -> str:
        return await run_agent(make_agent(find_item), self.approvals, goal)


def _plugin() -> OpenAIAgentsPlugin:
    return OpenAIAgentsPlugin(model_provider=OpenAIProvider(use_responses=False))


async def worker(queue: str) -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[_plugin()])
    async with Worker(
        client, task_queue=queue, workflows=[BenchAgent], activities=[lookup, charge]
    ):
        print("ready", flush=True)
        await asyncio.Event().wait()


@asynccontextmanager
async def client(queue: str) -> AsyncIterator[dict[str, protocol.Operation]]:
    connected = await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[_plugin()])
    yield temporal_client.operations(connected, queue, BenchAgent, ChangedBenchAgent, [_plugin()])


if __name__ == "__main__":
    protocol.main(worker, client)
