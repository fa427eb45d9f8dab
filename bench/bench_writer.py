"""The writer's own CPU per event of a batch import, the worker apart: what an app process
spends to write events (validation, sealing, the payload codec, the update calls, the published
pages), with nothing else of ours in the process.

    python -m bench.bench_writer [--events 10000] [--rounds 5] [--no-broker] [--profile FILE]
                                 [--page-events N]

A product worker runs in a process of its own (``bench.rss_worker ours``) on the configured
Temporal server and graph store; each round imports ``--events`` events into a new task
(``record_events``, acknowledged) and prints this process's CPU time per event (user and
system, ``time.process_time``), the rate, and the worker's CPU per event until the graph store
holds the round's events. ``--no-broker`` writes without a broker (no published pages).
``--profile`` writes a ``cProfile`` of the rounds' writes (this process) to FILE.
``--page-events`` sets the most events a published page carries (``starter.pages.PAGE_EVENTS``)
in this process, to measure a threshold against another.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import time
import uuid

import agent_tasks.starter.pages as pages
from agent_tasks.config import Settings
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import open_services
from bench.harness import cpu_seconds, transcript
from bench.rows import worker_process


async def main(events: int, rounds: int, broker: bool, profile: str | None) -> None:
    settings = Settings()
    if not broker:
        settings = settings.model_copy(update={"broker_url": ""})
    batch = transcript(events)
    profiler = cProfile.Profile(time.process_time) if profile else None
    async with open_services(settings, schema=True) as services:
        queue = f"bench-writer-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "AGENT_TASKS_BROKER_URL": settings.broker_url}
        history = ConversationHistory(
            services.client,
            project_id=f"bench-writer-{uuid.uuid4().hex[:8]}",
            agent_id="bench",
            task_queue=queue,
            graph=services.graph,
            timeout_s=300,
            broker=services.broker,
        )
        started = []
        async with worker_process("ours", queue, env) as worker:
            try:
                for number in range(rounds):
                    name = f"w-{number}"
                    assert (await history.create_task(name, "writer")).recorded
                    started.append(history.workflow_id(name))
                    await history.wait_mirrored(name, timeout_s=60)
                    await asyncio.sleep(0.5)
                    cpu = cpu_seconds({"worker": worker.pid})
                    own, began = time.process_time(), time.perf_counter()
                    if profiler is not None:
                        profiler.enable()
                    assert (await history.record_events(name, batch)).recorded
                    if profiler is not None:
                        profiler.disable()
                    took = time.perf_counter() - began
                    spent = time.process_time() - own
                    await history.wait_mirrored(name, timeout_s=300)
                    worker_spent = cpu_seconds({"worker": worker.pid})["worker"] - cpu["worker"]
                    print(
                        f"round {number + 1}: writer {spent * 1e6 / events:.1f} us/event, "
                        f"{events / took:,.0f} events/s; worker {worker_spent * 1e6 / events:.1f}"
                        f" us/event; load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
            finally:
                for workflow_id in started:
                    await services.client.get_workflow_handle(workflow_id).terminate("done")
                assert services.graph is not None
                await services.graph.wipe_project(history.project_id)
    if profiler is not None and profile:
        profiler.dump_stats(profile)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-broker", action="store_true")
    parser.add_argument("--profile")
    parser.add_argument("--page-events", type=int)
    arguments = parser.parse_args()
    if arguments.page_events is not None:
        pages.PAGE_EVENTS = arguments.page_events
    broker = not arguments.no_broker
    asyncio.run(main(arguments.events, arguments.rounds, broker, arguments.profile))
