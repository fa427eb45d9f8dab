"""Ours: the ready tool-calling loop (``AgentSpec(name="tool_loop")``) with the ``openai``
provider (``OPENAI_BASE_URL``: the bench's scripted server) and two ``@tool``s; the worker is
``build_worker``, the client ``ConversationHistory``. Runs in the project's environment.

    python -m bench.peers.rt_ours worker|client QUEUE
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel

from agent_tasks.cli.replay_check import replay_histories
from agent_tasks.contract import AgentSpec, ModelSpec, TaskStatus
from agent_tasks.starter import ConversationHistory, ToolContext, tool
from agent_tasks.worker import build_worker, open_services
from bench.peers import protocol
from bench.peers.ledger import record_effect
from bench.peers.script import APPROVAL_AMOUNT, prompt

PROJECT = "bench-peers"


class Item(BaseModel):
    item: int


class Charge(BaseModel):
    order: str
    amount: int


@tool("lookup", arguments=Item, idempotent=True, description="Read an item.")
async def lookup(args: Item, context: ToolContext) -> str:
    await record_effect(context.workflow_id, "lookup", context.idempotency_key, args.model_dump())
    return f"item {args.item}: in stock"


@tool(
    "charge",
    arguments=Charge,
    idempotent=False,
    description="Charge the order.",
    approval=lambda args: args.amount >= APPROVAL_AMOUNT,
)
async def charge(args: Charge, context: ToolContext) -> str:
    await record_effect(args.order, "charge", context.idempotency_key, args.model_dump())
    return f"charged {args.amount} for {args.order}"


async def worker(queue: str) -> None:
    async with open_services() as services:  # the bench made the schema
        assert services.graph is not None
        async with build_worker(services.client, services.graph, queue, tools=[lookup, charge]):
            print("ready", flush=True)
            await asyncio.Event().wait()


def spec() -> AgentSpec:
    return AgentSpec(
        name="tool_loop",
        tools=["lookup", "charge"],
        model=ModelSpec(provider="openai", model="bench"),
    )


# Long: the protocol's operations of one runtime, each a few lines, in one closure
@asynccontextmanager
async def client(queue: str) -> AsyncIterator[dict[str, protocol.Operation]]:
    async with open_services() as services:
        history = ConversationHistory(
            services.client, PROJECT, "bench", task_queue=queue, graph=services.graph
        )
        ended = {TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED}

        class Ops:
            async def start(self, task: str, turns: int, amount: int = 5) -> None:
                done = await history.create_task(task, prompt(task, turns, amount), agent=spec())
                assert done.recorded, done

            async def wait(self, task: str, within_s: float) -> dict[str, Any]:
                try:
                    view = await asyncio.wait_for(history.wait_task(task), within_s)
                except TimeoutError:
                    return {"status": "timeout", "output": ""}
                assert view is not None
                text = view.result or view.error
                return {"status": view.status.value, "output": text.text if text else ""}

            async def pending(self, task: str) -> dict[str, Any] | None:
                view = (await history.get_task(task)).view
                if view is None or view.status in ended:
                    return None
                for request in view.pending_inputs:
                    if request.approval is not None:
                        call = request.approval.call_seq
                        events = await history.list_events(task, after_seq=call - 1, limit=1)
                        return {"args": json.loads(events.events[0].payload or "{}")}
                return None

            async def approve(self, task: str) -> dict[str, Any]:
                view = (await history.get_task(task)).view
                assert view is not None
                request = next(r for r in view.pending_inputs if r.approval is not None)
                digest = request.approval.digest if request.approval else None
                sent = await history.approve(task, request.input_id, "accept", digest=digest)
                return {"sent": True, "recorded": bool(sent.recorded)}

            async def cancel(self, task: str) -> None:
                await history.cancel_task(task)

            async def storage(self, task: str) -> dict[str, Any]:
                handle = services.client.get_workflow_handle(history.workflow_id(task))
                size = rows = 0
                async for event in handle.fetch_history_events():
                    size += event.ByteSize()
                    rows += 1
                return {"bytes": size, "rows": rows, "unit": "history events"}

            async def replay(self, task: str) -> dict[str, Any]:
                handle = services.client.get_workflow_handle(history.workflow_id(task))
                saved = await handle.fetch_history()
                result = (await replay_histories([(task, saved)]))[0]
                detail = (
                    "`agent-tasks replay` (a pre-deploy check) replays it: the loop reads its "
                    "tools' specs from the history, so a renamed tool changes no command"
                    if result.result == "ok"
                    else f"`agent-tasks replay`: {result.result} {result.message}"
                )
                return {"offered": True, "passed": result.result == "ok", "detail": detail}

            async def recover(self, tasks: list[str]) -> None:
                """Nothing to do: Temporal hands the task to the new worker."""

        ops = Ops()
        operations = {
            name: getattr(ops, name)
            for name in ("start", "wait", "pending", "approve", "cancel", "storage", "replay")
        }
        operations["recover"] = ops.recover
        operations["run"] = lambda task, turns: protocol.timed_run(ops, task, turns)
        yield operations


if __name__ == "__main__":
    protocol.main(worker, client)
