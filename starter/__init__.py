"""What apps import: the client API of durable-agent-tasks.

>>> client = await starter.connect()
>>> history = starter.ConversationHistory(client, project_id="demo", agent_id="agent-1")
>>> await history.create_task("fix-bug-42", "Fix the failing test")
>>> retention = starter.HistoryRetention(client, "demo", "agent-1", graph=graph)

Importing ``starter`` does not load the Neo4j driver: reads that need Neo4j take a
``taskgraph.graph.TaskGraph`` (``worker.open_services`` makes one).
"""

from config import Settings, connect
from starter.client import ConversationHistory
from starter.results import (
    DecisionsResult,
    DeleteResult,
    EventsResult,
    GetTaskResult,
    RedactResult,
    StepsResult,
    WriteResult,
)
from starter.retention import HistoryRetention
from taskgraph.models import DecisionRow, EventRow, StepRow, TaskRow, ToolFailures, TreeRow
from workflows.errors import (
    ErrorCode,
    GraphIncomplete,
    GraphNotConfigured,
    TaskServiceUnavailable,
)
from workflows.models import (
    EventInput,
    EventKind,
    ResultValidity,
    Role,
    StepKind,
    StepState,
    StepWrite,
    TaskStatus,
)

__all__ = [
    "ConversationHistory",
    "DecisionRow",
    "DecisionsResult",
    "DeleteResult",
    "ErrorCode",
    "EventInput",
    "EventKind",
    "EventRow",
    "EventsResult",
    "GetTaskResult",
    "GraphIncomplete",
    "GraphNotConfigured",
    "HistoryRetention",
    "RedactResult",
    "ResultValidity",
    "Role",
    "Settings",
    "StepKind",
    "StepRow",
    "StepState",
    "StepWrite",
    "StepsResult",
    "TaskRow",
    "TaskServiceUnavailable",
    "TaskStatus",
    "ToolFailures",
    "TreeRow",
    "WriteResult",
    "connect",
]
