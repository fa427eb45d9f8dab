"""LangGraph: the prebuilt tool-calling agent (``create_react_agent``) with an
``AsyncPostgresSaver`` checkpointer, run by the app in its own process (LangGraph has no worker
apart). ``charge`` of ``APPROVAL_AMOUNT`` or more calls ``interrupt`` before its effect
(LangGraph's documented human-in-the-loop): the run stops, and ``Command(resume=...)`` runs the
tool again from its start with the answer. No key is handed to a tool (a checkpoint names no
step attempt), so the ledger records none.

    python -m bench.peers.rt_langgraph client QUEUE   # the app: it is also the worker
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command, interrupt

from bench.peers import protocol
from bench.peers.ledger import record_effect
from bench.peers.script import APPROVAL_AMOUNT, prompt


@tool
async def lookup(item: int) -> str:
    """Read an item."""
    await record_effect("-", "lookup", None, {"item": item})
    return f"item {item}: in stock"


@tool
async def charge(order: str, amount: int) -> str:
    """Charge the order."""
    if amount >= APPROVAL_AMOUNT:
        interrupt({"args": {"order": order, "amount": amount}})
    await record_effect(order, "charge", None, {"order": order, "amount": amount})
    return f"charged {amount} for {order}"


async def worker(queue: str) -> None:
    raise SystemExit("LangGraph runs the agent in the app's process: start the client")


# Long: the protocol's operations of one runtime, each a few lines, in one closure
@asynccontextmanager
async def client(queue: str) -> AsyncIterator[dict[str, protocol.Operation]]:
    async with AsyncPostgresSaver.from_conn_string(os.environ["BENCH_PG"]) as saver:
        await saver.setup()
        graph = create_react_agent(
            ChatOpenAI(model="bench", max_retries=0), [lookup, charge], checkpointer=saver
        )
        runs: dict[str, asyncio.Task[Any]] = {}

        def config(task: str) -> Any:
            return {"configurable": {"thread_id": task}}

        def launch(task: str, given: Any) -> None:
            runs[task] = asyncio.create_task(graph.ainvoke(given, config(task)))

        class Ops:
            async def start(self, task: str, turns: int, amount: int = 5) -> None:
                launch(task, {"messages": [("user", prompt(task, turns, amount))]})

            async def wait(self, task: str, within_s: float) -> dict[str, Any]:
                end = asyncio.get_running_loop().time() + within_s
                while asyncio.get_running_loop().time() < end:
                    run = runs.get(task)
                    if run is not None and run.done():
                        if run.cancelled():
                            return {"status": "cancelled", "output": ""}
                        if run.exception() is not None:
                            return {"status": "failed", "output": str(run.exception())}
                    if run is None or run.done():  # a thread of an app before a crash too
                        state = await graph.aget_state(config(task))
                        messages = state.values.get("messages", [])
                        if messages and not state.next:
                            return {"status": "done", "output": str(messages[-1].content)}
                    await asyncio.sleep(0.1)
                return {"status": "timeout", "output": ""}

            async def pending(self, task: str) -> dict[str, Any] | None:
                state = await graph.aget_state(config(task))
                if state.interrupts:
                    found: dict[str, Any] = state.interrupts[0].value
                    return found
                return None

            async def approve(self, task: str) -> dict[str, Any]:
                launch(task, Command(resume=True))
                return {"sent": True}

            async def cancel(self, task: str) -> None:
                runs[task].cancel()

            async def storage(self, task: str) -> dict[str, Any]:
                total = rows = 0
                async with saver.conn.cursor() as cursor:
                    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                        await cursor.execute(
                            f"select count(*) as n, coalesce(sum(pg_column_size(t.*)), 0) as b "
                            f"from {table} t where thread_id = %s",
                            (task,),
                        )
                        found = await cursor.fetchone()
                        assert found is not None
                        rows += int(found["n"])
                        total += int(found["b"])
                return {"bytes": total, "rows": rows, "unit": "rows"}

            async def recover(self, tasks: list[str]) -> None:
                """What the app must do itself after a crash: run each unfinished thread on
                from its last checkpoint (LangGraph does not know a run was cut)."""
                for task in tasks:
                    state = await graph.aget_state(config(task))
                    if state.next and not state.interrupts:
                        launch(task, None)

            async def replay(self, task: str) -> dict[str, Any]:
                return {
                    "offered": False,
                    "passed": None,
                    "detail": "a thread resumes from its last checkpoint with whatever graph "
                    "the app runs now; LangGraph has no replay of a saved run against new code",
                }

        ops = Ops()
        names = ("start", "wait", "pending", "approve", "cancel", "storage", "recover", "replay")
        out: dict[str, protocol.Operation] = {name: getattr(ops, name) for name in names}
        out["run"] = lambda task, turns: protocol.timed_run(ops, task, turns)
        yield out


if __name__ == "__main__":
    protocol.main(worker, client)
