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


class _Approvals:
    def __init__(self) -> None:
        self.pending: dict[str, Any] | None = None
        self.answers = 0

    async def run(self, agent: Agent, goal: str) -> str:
        result = await Runner.run(agent, goal)
        while result.interruptions:
            item = result.interruptions[0]
            self.pending = {"args": json.loads(item.arguments or "{}")}
            await workflow.wait_condition(lambda: self.answers > 0)
            self.answers -= 1
            self.pending = None
            state = result.to_state()
            for interruption in result.interruptions:
                state.approve(interruption)
            result = await Runner.run(agent, state)
        return str(result.final_output)


@workflow.defn(name="BenchAgent")
class BenchAgent:
    def __init__(self) -> None:
        self.approvals = _Approvals()

    @workflow.run
    async def run(self, goal: str) -> str:
        return await self.approvals.run(make_agent(lookup), goal)

    @workflow.signal
    def approve(self) -> None:
        self.approvals.answers += 1

    @workflow.query
    def pending_approval(self) -> dict[str, Any] | None:
        return self.approvals.pending


@workflow.defn(name="BenchAgent")
class ChangedBenchAgent(BenchAgent):
    @workflow.run
    async def run(self, goal: str) -> str:
        return await self.approvals.run(make_agent(find_item), goal)


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
