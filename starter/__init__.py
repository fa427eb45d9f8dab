"""What apps import: the client API of durable-agent-tasks.

>>> client = await starter.connect()
>>> history = starter.ConversationHistory(client, project_id="demo", agent_id="agent-1")
>>> await history.create_task("fix-bug-42", "Fix the failing test")
"""

from starter.client import (
    ConversationHistory,
    EventsResult,
    GetTaskResult,
    StepsResult,
    TaskServiceUnavailable,
    WriteResult,
    connect,
)
from workflows.models import (
    ErrorCode,
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
    "ErrorCode",
    "EventInput",
    "EventKind",
    "EventsResult",
    "GetTaskResult",
    "ResultValidity",
    "Role",
    "StepKind",
    "StepState",
    "StepWrite",
    "StepsResult",
    "TaskServiceUnavailable",
    "TaskStatus",
    "WriteResult",
    "connect",
]
