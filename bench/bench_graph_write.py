"""The mirror's Neo4j write, against the local stack's Neo4j: ``TaskGraph.write_task`` of
``--pages`` pages of ``--events`` events each (800-character payloads) into one task. Prints
the p50 per page and this process's CPU per page (packing the parameters, building the rows),
and whether the driver's Rust extension is loaded.

    python -m bench.bench_graph_write [--pages 60] [--events 100]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
import uuid
from datetime import UTC, datetime
from importlib.util import find_spec

from worker import open_services
from workflows.models import (
    Event,
    EventKind,
    StepState,
    TaskStatus,
    TaskView,
    event_id,
    task_workflow_id,
)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main(pages: int, per_page: int) -> None:
    async with open_services(with_graph=True, schema=True) as services:
        graph = services.graph
        assert graph is not None
        project, now = f"gw-{uuid.uuid4().hex[:8]}", datetime.now(UTC)
        took, cpu, seq = [], 0.0, 0
        for _ in range(pages):
            events = [
                Event(
                    id=event_id(task_workflow_id(project, "t"), n),
                    seq=n,
                    kind=EventKind.MESSAGE,
                    payload="x" * 800,
                    full_length=800,
                    full_sha256="0" * 64,
                    author="bench",
                    time=now,
                    request_id=f"r{n}",
                )
                for n in range(seq + 1, seq + per_page + 1)
            ]
            seq += per_page
            view = TaskView(
                project_id=project,
                name="t",
                workflow_id=task_workflow_id(project, "t"),
                goal="write",
                agent_id="bench",
                session_id=None,
                parent=None,
                metadata={},
                status=TaskStatus.OPEN,
                result=None,
                error=None,
                step_counts=dict.fromkeys(StepState, 0),
                last_seq=seq,
                mirrored_seq=0,
                unmirrored_writes=0,
                mirror_error=None,
                run_first_seq=1,
                runs=1,
                created_at=now,
                updated_at=now,
            )
            started, spent = time.perf_counter(), _cpu()
            await graph.write_task(view, events, [])
            took.append(time.perf_counter() - started)
            cpu += _cpu() - spent
        rust = find_spec("neo4j._rust") is not None
        print(
            f"neo4j-rust-ext {'loaded' if rust else 'absent'}: pages of {per_page} events, "
            f"p50 {statistics.median(took) * 1000:.1f} ms, CPU {cpu / pages * 1000:.1f} ms per page"
        )
        await graph.wipe_project(project)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--events", type=int, default=100)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.pages, arguments.events))
