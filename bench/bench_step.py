"""What one step of an agent task costs, against a bare activity on the same server
(the local stack, ``agent-tasks dev up``).

- ``step``: agent code running ``--steps`` steps of the ``echo`` tool one after another; each
  step is a ``tool_call`` event and the step ``in_progress`` (ledger writes), the tool's
  activity (which reads its call's arguments back by query), a ``tool_result`` event and the
  step ``completed``; the mirror copies them to Neo4j meanwhile.
- ``bare``: a workflow that runs the same number of activities that return their argument,
  one after another, and nothing else: Temporal's own floor.

Both are timed from the histories (the first step's activity scheduled to the last one's
completion, in workflow time from the server's event times; what a run does once, before its
first step and after its last, is outside) and interleaved in ``--rounds`` rounds; prints the
median time per step, the ratio, and the history events per step.

    python -m bench.bench_step [--steps 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import uuid
from collections import Counter

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.worker import Worker

from agent_tasks.activities.tools import ToolContext, tool
from agent_tasks.contract import AgentSpec
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.worker import build_worker, open_services
from agent_tasks.workflows.agents import AgentContext, agent
from bench.bare import BareSteps, bare_tool


class Text(BaseModel):
    """The echo tool's arguments."""

    text: str


@tool("bench_echo", arguments=Text, idempotent=True)
async def bench_echo(args: Text, context: ToolContext) -> str:
    """Returns its text."""
    return args.text


@agent("bench_steps")
async def bench_steps(ctx: AgentContext) -> str:
    """``input["steps"]`` echo steps, one after another."""
    count = ctx.input["steps"]
    assert isinstance(count, int)
    for i in range(count):
        await ctx.step(f"s{i:04d}", "bench_echo", {"text": f"step {i}"})
    return "done"


async def per_step(client: Client, workflow_id: str, steps: int) -> tuple[float, int]:
    """Seconds per step and history events per step, from the workflow's history: from the
    first scheduling of the step's activity (the type scheduled most often: the tool) to the
    last completion of it, over ``steps``, and the history events in that span over
    ``steps``. What a run does once (its tool lookup before the first step, the mirror's
    last copy after the last) is not a step's cost, so it is outside the span."""
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    kinds = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    tool = Counter(kinds.values()).most_common(1)[0][0]
    scheduled = [e for e in events if kinds.get(e.event_id) == tool]
    completed = [
        e
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
        and kinds[e.activity_task_completed_event_attributes.scheduled_event_id] == tool
    ]
    assert len(scheduled) == len(completed) == steps, (tool, len(scheduled), len(completed))
    start = scheduled[0].event_time.ToDatetime()
    end = completed[-1].event_time.ToDatetime()
    span = completed[-1].event_id - scheduled[0].event_id + 1
    return (end - start).total_seconds() / steps, span // steps


async def one_round(
    client: Client, graph: GraphStore, queue: str, steps: int
) -> dict[str, tuple[float, int]]:
    history = ConversationHistory(
        client, project_id=f"bench-{uuid.uuid4().hex[:8]}", agent_id="bench", task_queue=queue
    )
    spec = AgentSpec(name="bench_steps", tools=["bench_echo"], input={"steps": steps})
    await history.create_task("t", "steps", agent=spec)
    await history.wait_task("t")
    ours = await per_step(client, history.workflow_id("t"), steps)
    bare_id = f"bare-{uuid.uuid4().hex[:8]}"
    await client.execute_workflow(BareSteps.run, steps, id=bare_id, task_queue=queue + "-bare")
    bare = await per_step(client, bare_id, steps)
    await graph.wipe_project(history.project_id)
    return {"step": ours, "bare": bare}


async def main(steps: int, rounds: int) -> None:
    async with open_services(schema=True) as services:
        assert services.graph is not None
        queue = f"bench-step-{uuid.uuid4().hex[:6]}"
        worker = build_worker(services.client, services.graph, queue, tools=[bench_echo])
        bare = Worker(
            services.client,
            task_queue=queue + "-bare",
            workflows=[BareSteps],
            activities=[bare_tool],
        )
        results: dict[str, list[tuple[float, int]]] = {"step": [], "bare": []}
        async with worker, bare:
            for _ in range(rounds):
                measured = await one_round(services.client, services.graph, queue, steps)
                for name, value in measured.items():
                    results[name].append(value)
    for name, rows in results.items():
        times = [r[0] * 1000 for r in rows]
        print(
            f"{name:5s} per step median {statistics.median(times):7.1f} ms "
            f"(rounds {', '.join(f'{t:.1f}' for t in times)}), history events per step "
            f"{rows[0][1]}"
        )
    ratio = statistics.median(r[0] for r in results["step"]) / statistics.median(
        r[0] for r in results["bare"]
    )
    print(f"step / bare activity: {ratio:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.steps, arguments.rounds))
