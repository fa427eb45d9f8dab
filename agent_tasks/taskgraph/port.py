"""The graph store's port: what the product needs of a graph store, as Protocols, whichever store is
behind it (``taskgraph.neo4j.graph.TaskGraph``, ``taskgraph.falkordb.graph.FalkorGraph``);
``taskgraph.store.build_graph_store`` picks the adapter.

- ``MirrorStore``: the mirror's writes (a write applies only if newer) and the rebuild's clean-ups.
- ``TaskReads`` (``store.reads``): one task's mirrored state and the cross-task reads.
- ``KeyStore`` (``sealing.keys``): opaque key material of sealed text.
- ``RetentionStore`` (``store.retention``): finding an event, tombstones, deletion; the redaction is
  the adapter's (``GraphStore.redact``).
- ``RecordStore``: the HTTP API's one-statement records (``server.apikeys``,
  ``server.pagesessions``).
- ``GraphStore``: all of these, with ``connect()``, ``ping()`` and ``close()``.

The key trees, API keys, page sessions and tombstones cannot be rebuilt from the histories, so a
store must keep them durable (FalkorDB: ``appendfsync always``). Every method raises the port's
errors (``contract.errors``), never a driver's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from agent_tasks.contract import Event, StepState, StepView, TaskView
from agent_tasks.sealing.keys import KeyStore
from agent_tasks.taskgraph.dialect import GraphKind, Statement, spelled
from agent_tasks.taskgraph.models import (
    DecisionRow,
    EventFilter,
    EventRow,
    StepFilter,
    StepRow,
    TaskFilter,
    TaskRow,
    ToolFailures,
    TreeRead,
    TreeRow,
)
from agent_tasks.taskgraph.retention import EventLocation, GraphDeletion, NameState

__all__ = [
    "GraphKind",
    "GraphStore",
    "KeyStore",
    "MirrorStore",
    "RecordStore",
    "RetentionStore",
    "Statement",
    "TaskReads",
    "spelled",
]


class MirrorStore(Protocol):
    """The mirror's writes (``activities.mirror``, ``activities.rebuild``)."""

    async def ensure_schema(self) -> None:
        """Create the store's constraints and indexes once per store object (idempotent)."""
        ...

    async def ensure_ready(self) -> None:
        """Ready the store for the mirror's writes, once (the schema, and any warm-up)."""
        ...

    async def write_task(
        self,
        view: TaskView,
        events: Sequence[Event],
        steps: Sequence[StepView],
        *,
        mark: str | None = None,
        mirrored_write: int | None = None,
    ) -> None:
        """Merge the task node, ``events`` and ``steps`` of one page, atomically and idempotently;
        the task's properties apply only when ``view.writes`` is not older than the node's, a step's
        when its ``changed_write`` is not. ``mark`` is stamped on the nodes (``drop_unmarked``);
        ``mirrored_write`` raises the node's.

        Raises:
            TaskIncarnationError: the node belongs to another task of this workflow id, or the id
                was deleted (nothing is written).
            GraphIncomplete: a sealed event's key is not in the key store.
        """
        ...

    async def wipe_project(self, project_id: str) -> int:
        """Delete the project's nodes but the key store and the tombstones; returns nodes
        deleted."""
        ...

    async def drop_unmarked(
        self,
        project_id: str,
        workflow_id: str,
        mark: str,
        *,
        up_to_seq: int | None,
        as_of: datetime | None,
    ) -> int:
        """Delete the task's event and step nodes a rebuild (``mark``) did not write, within
        what it covered; returns nodes deleted."""
        ...


class TaskReads(Protocol):
    """One task's mirrored state and the cross-task reads, each filtered by project."""

    async def mirrored_write(self, project_id: str, workflow_id: str) -> int:
        """The write counter up to which the store holds every write of the task; 0 before."""
        ...

    async def task_view(self, project_id: str, workflow_id: str) -> TaskView | None:
        """The task's view as the store holds it; None when it has no such task."""
        ...

    async def events(
        self, project_id: str, workflow_id: str, after_seq: int, up_to_seq: int, limit: int
    ) -> list[Event]:
        """The task's events with ``after_seq < seq <= up_to_seq``, in seq order."""
        ...

    async def steps(
        self,
        project_id: str,
        workflow_id: str,
        *,
        state: StepState | None,
        after_name: str | None,
        limit: int,
        up_to_write: int,
    ) -> list[StepView]:
        """The task's steps changed at or before write ``up_to_write``, in name order."""
        ...

    async def step(self, project_id: str, workflow_id: str, name: str) -> StepView | None:
        """The task's step ``name``; None when the store has no such step."""
        ...

    async def decisions(
        self,
        project_id: str,
        *,
        workflow_id: str | None = None,
        decision_id: str | None = None,
        after_seq: int = 0,
        limit: int = ...,
    ) -> list[DecisionRow]:
        """Decisions in seq order after ``after_seq``, with what changed since they cited."""
        ...

    async def find_tasks(self, project_id: str, where: TaskFilter) -> list[TaskRow]:
        """Tasks in name order after ``where.after_name``, filtered by ``where``."""
        ...

    async def task_tree(self, project_id: str, where: TreeRead) -> list[TreeRow]:
        """A task and its descendants, by depth then name."""
        ...

    async def find_events(self, project_id: str, where: EventFilter) -> list[EventRow]:
        """Events across tasks, oldest first."""
        ...

    async def find_steps(self, project_id: str, where: StepFilter) -> list[StepRow]:
        """Steps across tasks, by task then step name."""
        ...

    async def failed_tool_calls(self, project_id: str) -> list[ToolFailures]:
        """Failed tool calls by tool name, most failures first."""
        ...

    async def counts(self, project_id: str) -> dict[str, int]:
        """Nodes by label and relationships by type of the project (the key store left out)."""
        ...


class RetentionStore(Protocol):
    """Finding an event, tombstones and deletion; the redaction is ``GraphStore.redact``."""

    async def find_event(self, project_id: str, event_id: str) -> EventLocation | None:
        """Where the event ``event_id`` is; None when the store has no such event."""
        ...

    async def name_state(self, project_id: str, workflow_id: str) -> NameState:
        """Whether a task of this workflow id was deleted, or is in the store."""
        ...

    async def tombstone(self, project_id: str, workflow_id: str, name: str, agent_id: str) -> bool:
        """Keep a deleted task's name taken for ever; False when it was tombstoned before."""
        ...

    async def delete_task_nodes(
        self, project_id: str, workflow_id: str, *, include_decisions: bool
    ) -> GraphDeletion:
        """Delete a tombstoned task's nodes (its decisions kept and detached when
        ``include_decisions`` is False)."""
        ...


class RecordStore(Protocol):
    """One-statement reads and writes of records (API keys, page sessions)."""

    kind: GraphKind
    """The store's dialect (``spelled``)."""

    async def records(
        self, statement: Statement, *, write: bool, **params: Any
    ) -> list[dict[str, Any]]:
        """The rows of one statement (spelled for this store), a node as its properties; times as
        the store keeps them (``taskgraph.models.as_datetime`` reads either)."""
        ...


class GraphStore(MirrorStore, KeyStore, RecordStore, Protocol):
    """A whole graph store, as ``build_graph_store`` gives it."""

    @property
    def reads(self) -> TaskReads:
        """One task's mirrored state and the cross-task reads."""
        ...

    @property
    def retention(self) -> RetentionStore:
        """Finding an event, tombstones and deletion."""
        ...

    async def redact(self, project_id: str, location: EventLocation, agent_id: str) -> list[str]:
        """Empty the event's text and destroy its data key, atomically with respect to the
        mirror's writes of the task; returns the ids of the decisions it affects."""
        ...

    async def connect(self) -> None:
        """Check that the store answers, and create its schema (idempotent).

        Raises:
            GraphUnavailable: the store cannot be reached.
            GraphAuthError: it refused the credentials.
        """
        ...

    async def ping(self) -> None:
        """Check that the store answers: one connection, no retries, no schema.

        Raises:
            GraphUnavailable: the store cannot be reached.
            GraphAuthError: it refused the credentials.
        """
        ...

    async def close(self) -> None:
        """Close the store's connections (the object cannot be used after)."""
        ...
