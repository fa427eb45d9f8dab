"""pydantic-ai on DBOS: an ``Agent`` with the ``DBOSDurability`` capability (the successor of
``DBOSAgent``) run inside a ``@DBOS.workflow``, enqueued by a ``DBOSClient``; the model calls
are DBOS steps, the tools ``@DBOS.step``s (DBOS's advice for a tool with effects), keyed by
the workflow id and the step id. ``charge`` of ``APPROVAL_AMOUNT`` or more raises
``ApprovalRequired``; the workflow publishes the call (``set_event``) and waits for a message
(``recv``), then runs the agent again with the approval.

    python -m bench.peers.rt_pydantic_dbos worker|client QUEUE
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from dbos import DBOS, DBOSClient, EnqueueOptions
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
)
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from bench.peers import protocol
from bench.peers.ledger import record_effect
from bench.peers.script import APPROVAL_AMOUNT, prompt

WAIT_S = 3600
"""How long the workflow waits for an approval (seconds)."""


def _key() -> str:
    return f"{DBOS.workflow_id}/{DBOS.step_id}"


@DBOS.step()
async def lookup_step(item: int) -> str:
    await record_effect(str(DBOS.workflow_id), "lookup", _key(), {"item": item})
    return f"item {item}: in stock"


@DBOS.step()
async def charge_step(order: str, amount: int) -> str:
    await record_effect(order, "charge", _key(), {"order": order, "amount": amount})
    return f"charged {amount} for {order}"


agent: Agent[None, str | DeferredToolRequests] = Agent(
    OpenAIChatModel("bench", provider=OpenAIProvider()),
    name="bench_agent",
    output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
    capabilities=[DBOSDurability()],
)


@agent.tool
async def lookup(ctx: RunContext[None], item: int) -> str:
    """Read an item."""
    return await lookup_step(item)


@agent.tool
async def charge(ctx: RunContext[None], order: str, amount: int) -> str:
    """Charge the order."""
    if amount >= APPROVAL_AMOUNT and not ctx.tool_call_approved:
        raise ApprovalRequired()
    return await charge_step(order, amount)


@DBOS.workflow(name="bench_agent")
async def bench_agent(goal: str) -> str:
    result = await agent.run(goal)
    while isinstance(result.output, DeferredToolRequests):
        calls = result.output.approvals
        await DBOS.set_event_async("pending", {"args": calls[0].args_as_dict()} if calls else None)
        await DBOS.recv_async("approve", timeout_seconds=WAIT_S)
        await DBOS.set_event_async("pending", None)
        results = DeferredToolResults(approvals={c.tool_call_id: True for c in calls})
        result = await agent.run(
            message_history=result.all_messages(), deferred_tool_results=results
        )
    return str(result.output)


def _config() -> Any:
    return {"name": "bench-peers", "system_database_url": os.environ["BENCH_PG"]}


async def worker(queue: str) -> None:
    DBOS(config=_config())
    DBOS.launch()
    await DBOS.register_queue_async(queue)
    print("ready", flush=True)
    await asyncio.Event().wait()


# Long: the protocol's operations of one runtime, each a few lines, in one closure
@asynccontextmanager
async def client(queue: str) -> AsyncIterator[dict[str, protocol.Operation]]:
    dbos = DBOSClient(system_database_url=os.environ["BENCH_PG"])
    ended = {"SUCCESS": "done", "ERROR": "failed", "CANCELLED": "cancelled"}

    class Ops:
        async def start(self, task: str, turns: int, amount: int = 5) -> None:
            options: EnqueueOptions = {
                "queue_name": queue,
                "workflow_name": "bench_agent",
                "workflow_id": task,
            }
            await dbos.enqueue_async(options, prompt(task, turns, amount))

        async def wait(self, task: str, within_s: float) -> dict[str, Any]:
            end = asyncio.get_running_loop().time() + within_s
            while asyncio.get_running_loop().time() < end:
                handle = await dbos.retrieve_workflow_async(task)
                status = await handle.get_status()
                if status.status in ended:
                    return {"status": ended[status.status], "output": str(status.output)}
                await asyncio.sleep(0.1)
            return {"status": "timeout", "output": ""}

        async def pending(self, task: str) -> dict[str, Any] | None:
            found = await dbos.get_event_async(task, "pending", timeout_seconds=0)
            return found or None

        async def approve(self, task: str) -> dict[str, Any]:
            await dbos.send_async(task, True, "approve")
            return {"sent": True}

        async def cancel(self, task: str) -> None:
            await dbos.cancel_workflow_async(task)

        async def storage(self, task: str) -> dict[str, Any]:
            query = (
                "select count(*), coalesce(sum(pg_column_size(o.*)), 0) "
                "from dbos.operation_outputs o where workflow_uuid = %s union all select count(*), "
                "coalesce(sum(pg_column_size(s.*)), 0) from dbos.workflow_status s "
                "where workflow_uuid = %s union all select count(*), "
                "coalesce(sum(pg_column_size(e.*)), 0) from dbos.workflow_events e "
                "where workflow_uuid = %s"
            )
            async with await psycopg.AsyncConnection.connect(os.environ["BENCH_PG"]) as db:
                rows = await (await db.execute(query, (task, task, task))).fetchall()
            return {
                "bytes": sum(int(r[1]) for r in rows),
                "rows": sum(int(r[0]) for r in rows),
                "unit": "rows",
            }

        async def recover(self, tasks: list[str]) -> None:
            """Nothing to do: a new DBOS process recovers its executor's workflows."""

    ops = Ops()
    names = ("start", "wait", "pending", "approve", "cancel", "storage", "recover")
    out: dict[str, protocol.Operation] = {name: getattr(ops, name) for name in names}
    out["run"] = lambda task, turns: protocol.timed_run(ops, task, turns)

    async def replay(task: str) -> dict[str, Any]:
        return {
            "offered": False,
            "passed": None,
            "detail": "DBOS recovers a run from its recorded step outputs by step number; it "
            "has no replay of a saved run against new code (a run is recovered only by a "
            "process of the same application version)",
        }

    out["replay"] = replay
    try:
        yield out
    finally:
        dbos.destroy()


if __name__ == "__main__":
    protocol.main(worker, client)
