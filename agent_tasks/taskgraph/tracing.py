"""The span around one mirror page's write, in either store (OpenTelemetry's database
semantic conventions: ``db.system.name`` the store, ``db.namespace`` its database or graph)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from agent_tasks.contract import TaskView
from agent_tasks.taskgraph.dialect import GraphKind

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


def write_span(
    tracer: Tracer | None,
    system: GraphKind,
    namespace: str,
    view: TaskView,
    seqs: Sequence[int],
    steps: int,
) -> AbstractContextManager[object]:
    """A client span ``<system> write_task`` around one page's write (retries included) with the
    task's workflow id, project id, counts and seq range (``agent_tasks.*``); no tracer: no
    OpenTelemetry."""
    if tracer is None:
        return nullcontext()
    from opentelemetry.trace import SpanKind

    return tracer.start_as_current_span(
        f"{system} write_task",
        kind=SpanKind.CLIENT,
        attributes={
            "db.system.name": system,
            "db.namespace": namespace,
            "db.operation.name": "write_task",
            "agent_tasks.workflow_id": view.workflow_id,
            "agent_tasks.project_id": view.project_id,
            "agent_tasks.events": len(seqs),
            "agent_tasks.steps": steps,
            **(
                {"agent_tasks.seq.first": seqs[0], "agent_tasks.seq.last": seqs[-1]} if seqs else {}
            ),
        },
    )
