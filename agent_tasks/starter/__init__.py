"""The one way in: everything an app, an agent author and an operator's script use.

>>> client = await starter.connect()  # or Client.connect(..., plugins=[AgentTasksPlugin()])
>>> history = starter.ConversationHistory(client, project_id="demo", agent_id="agent-1")
>>> await history.create_task("fix-bug-42", "Fix the failing test")

- Clients: ``ConversationHistory``, ``HistoryRetention``, ``connect``, ``Settings``, the Temporal
  plugins (``AgentTasksPlugin``, ``AgentTasksWorkerPlugin``), ``DATA_CONVERTER``; the worker's
  bootstrap (``build_worker``, ``open_graph``, ``open_services``, ``open_broker``) and the graph
  store's factory (``build_graph_store``).
- Results and rows: the ``*Result`` types, ``TaskView``, ``Event``, ``StepView``, the graph store's
  rows (``TaskRow``, ``EventRow``, ``StepRow``, ``DecisionRow``, ``TreeRow``, ``ToolFailures``);
  enums and inputs (``EventKind``, ``StepState``, ``ErrorCode`` ...).
- Agent code: ``agent``, ``AgentContext``, ``AgentSpec``, ``ModelSpec``, ``Budgets``; tools
  (``tool``, ``http_call``, ``McpServer``) and scripted models (``ScriptedModel``).
- Errors: every one an ``AgentTasksError`` (``docs/codes.md`` draws the tree).

Importing ``starter`` loads the client SDK alone: no workflow, activity, worker, server or graph
driver module; the agent API, tools and the worker's bootstrap are loaded when first used
(``_SERVED``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.config import Neo4jPasswordMissing, Settings, connect
from agent_tasks.contract import (
    AgentSpec,
    Budgets,
    Event,
    EventInput,
    EventKind,
    McpServer,
    ModelSpec,
    ModelTurn,
    ResultValidity,
    Role,
    StepKind,
    StepState,
    StepView,
    StepWrite,
    TaskStatus,
    TaskView,
    TokenUsage,
    ToolCall,
)
from agent_tasks.contract.errors import (
    AgentError,
    AgentTasksControlFlow,
    AgentTasksError,
    ConfigurationError,
    ErrorCode,
    GraphAuthError,
    GraphDataError,
    GraphError,
    GraphIncomplete,
    GraphNotConfigured,
    GraphUnavailable,
    ServiceUnavailable,
    TaskServiceUnavailable,
)
from agent_tasks.plugin import AgentTasksPlugin
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.results import (
    AnswerOutcome,
    DecisionsResult,
    DeleteResult,
    EventsResult,
    GetTaskResult,
    RedactResult,
    StepsResult,
    WriteResult,
)
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.taskgraph.models import (
    DecisionRow,
    EventRow,
    StepRow,
    TaskRow,
    ToolFailures,
    TreeRow,
)

if TYPE_CHECKING:
    from agent_tasks.activities.http_tool import http_call
    from agent_tasks.activities.model import Script, ScriptedModel
    from agent_tasks.activities.tools import Tool, ToolContext, tool
    from agent_tasks.broker import open_broker
    from agent_tasks.worker import (
        AgentTasksWorkerPlugin,
        build_graph_store,
        build_worker,
        open_graph,
        open_services,
    )
    from agent_tasks.workflows.agents import (
        AgentContext,
        BudgetExceeded,
        ChildFailed,
        ChildOutcome,
        InputTimeout,
        SpawnRefused,
        StepOutcome,
        agent,
    )

_SERVED: dict[str, str] = {
    **dict.fromkeys(("Script", "ScriptedModel"), "agent_tasks.activities.model"),
    **dict.fromkeys(("Tool", "ToolContext", "tool"), "agent_tasks.activities.tools"),
    "http_call": "agent_tasks.activities.http_tool",
    "open_broker": "agent_tasks.broker",
    **dict.fromkeys(
        (
            "AgentContext",
            "BudgetExceeded",
            "ChildFailed",
            "ChildOutcome",
            "InputTimeout",
            "SpawnRefused",
            "StepOutcome",
            "agent",
        ),
        "agent_tasks.workflows.agents",
    ),
    **dict.fromkeys(
        (
            "AgentTasksWorkerPlugin",
            "build_graph_store",
            "build_worker",
            "open_graph",
            "open_services",
        ),
        "agent_tasks.worker",
    ),
}
"""The names loaded when first used -> their module: the agent API, tools and scripted models, and
the worker's bootstrap (which loads the graph store's driver)."""


def __getattr__(name: str) -> Any:
    """A name of ``_SERVED`` from the module that defines it (imported then).

    Raises:
        AttributeError: a name ``starter`` does not have.
    """
    if name in _SERVED:
        return getattr(importlib.import_module(_SERVED[name]), name)
    raise AttributeError(f"module 'starter' has no attribute {name!r}")


__all__ = [
    "DATA_CONVERTER",
    "AgentContext",
    "AgentError",
    "AgentSpec",
    "AgentTasksControlFlow",
    "AgentTasksError",
    "AgentTasksPlugin",
    "AgentTasksWorkerPlugin",
    "AnswerOutcome",
    "BudgetExceeded",
    "Budgets",
    "ChildFailed",
    "ChildOutcome",
    "ConfigurationError",
    "ConversationHistory",
    "DecisionRow",
    "DecisionsResult",
    "DeleteResult",
    "ErrorCode",
    "Event",
    "EventInput",
    "EventKind",
    "EventRow",
    "EventsResult",
    "GetTaskResult",
    "GraphAuthError",
    "GraphDataError",
    "GraphError",
    "GraphIncomplete",
    "GraphNotConfigured",
    "GraphUnavailable",
    "HistoryRetention",
    "InputTimeout",
    "McpServer",
    "ModelSpec",
    "ModelTurn",
    "Neo4jPasswordMissing",
    "RedactResult",
    "ResultValidity",
    "Role",
    "Script",
    "ScriptedModel",
    "ServiceUnavailable",
    "Settings",
    "SpawnRefused",
    "StepKind",
    "StepOutcome",
    "StepRow",
    "StepState",
    "StepView",
    "StepWrite",
    "StepsResult",
    "TaskRow",
    "TaskServiceUnavailable",
    "TaskStatus",
    "TaskView",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolFailures",
    "TreeRow",
    "WriteResult",
    "agent",
    "build_graph_store",
    "build_worker",
    "connect",
    "http_call",
    "open_broker",
    "open_graph",
    "open_services",
    "tool",
]
