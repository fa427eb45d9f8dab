"""The client apps import: ``ConversationHistory`` over a client from ``config.connect()``.

Writes never raise for a refusal: they return a ``WriteResult`` whose ``error`` is an
``ErrorCode``. A lost or unreachable server raises ``TaskServiceUnavailable``. Arguments that
are not of the right shape (an unknown kind, an over-long name, a payload that is not text)
raise pydantic's ``ValidationError`` naming the field, before anything is sent.

Deduplication is the workflow's own: each write carries a request id, and the workflow answers a
repeated id (same arguments) with the stored result (``duplicate`` True), in a window of the task's
last ``REQUEST_WINDOW`` writes that survives continue-as-new. Update ids are left to the SDK
(random), since the server's update-id deduplication lasts one run only and ignores the arguments.

``ConversationHistory`` is the facade of four rooms, each one job, each a layer on the one
below: ``starter.transport`` (the calls: retries, the time limit, the ordered lane of writes),
``starter.reads`` (one task through the cross-run reader ``tasklog.reader.TaskReader``, which
the activities share; the Neo4j reads), ``starter.writes`` (events, steps, finish, decisions)
``starter.lifecycle`` (create, cancel, wait, input) and ``starter.turns`` (resume, continue,
retry a step, branch). This module keeps its constructor and its end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.client import Client

from agent_tasks.config import release_runtime
from agent_tasks.contract import ProjectId, ShortText
from agent_tasks.starter.arguments import checked
from agent_tasks.starter.turns import TaskTurns

if TYPE_CHECKING:  # the driver is loaded only by whoever makes the graph
    from agent_tasks.taskgraph.port import GraphStore


class ConversationHistory(TaskTurns):
    """A project's tasks, seen and written as one agent.

    Args:
        client: from ``connect()`` (pydantic data converter).
        project_id: scopes every read and write (1 to 64 of ``[A-Za-z0-9_.-]``); a task of
            another project is ``task_not_found`` / ``found=False`` here.
        agent_id: author of the events and steps this object writes.
        session_id: session new tasks belong to, if any.
        task_queue: the workers' task queue.
        graph: the graph store (``taskgraph.port.GraphStore``); needed to read events of
            earlier runs (``list_events``), tasks whose history passed the namespace's
            retention, decisions, and for the cross-task reads. None: those reads raise
            ``GraphNotConfigured``. With a graph, event text is sealed (one data key per
            event in its key store: ``taskgraph.sealing``) so that ``redact_event`` can remove
            it from the history; without one it is written in plain text.
        timeout_s: seconds one Temporal call may take (a write waits for a worker to run
            it); past that it raises ``TaskServiceUnavailable``.

    Raises:
        ValidationError: a malformed project id, agent id or session id (naming it).
    """

    def __init__(
        self,
        client: Client,
        project_id: str,
        agent_id: str,
        *,
        session_id: str | None = None,
        task_queue: str = "agent-tasks",
        graph: GraphStore | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.client = client
        self.project_id = checked(project_id, ProjectId, "project_id")
        self.agent_id = checked(agent_id, ShortText, "agent_id")
        self.session_id = checked(session_id, ShortText | None, "session_id")
        self.task_queue = task_queue
        self.graph = graph
        self.timeout_s = timeout_s

    async def __aenter__(self) -> ConversationHistory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """End the use of Temporal cleanly before the process exits (``async with
        ConversationHistory(...) as history`` calls it): waits until the Temporal SDK's
        runtime threads have left Python (``config.release_runtime``), without which an app
        that writes and exits can abort in the interpreter's finalization. The client and the
        graph stay open (they belong to the caller); calling it twice is harmless."""
        await release_runtime()
