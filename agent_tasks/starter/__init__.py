"""The one way in: everything an app, an agent author and an operator's script use.

>>> client = await starter.connect()  # or Client.connect(..., plugins=[AgentTasksPlugin()])
>>> history = starter.ConversationHistory(client, project_id="demo", agent_id="agent-1")
>>> await history.create_task("fix-bug-42", "Fix the failing test")

- Clients: ``ConversationHistory`` (tasks, events, steps, input, decisions, reads),
  ``HistoryRetention`` (redaction, deletion), ``connect`` and ``Settings``, the Temporal
  plugins (``AgentTasksPlugin`` for a client, ``AgentTasksWorkerPlugin`` for a worker) and
  ``DATA_CONVERTER``; the worker's bootstrap (``build_worker``, ``open_graph``,
  ``open_services``, ``open_broker``); the graph store's factory (``build_graph_store``:
  Neo4j or FalkorDB).
- Results and rows: ``WriteResult`` and the other ``*Result`` types, ``TaskView``, ``Event``,
  ``StepView``, the Neo4j rows (``TaskRow``, ``EventRow``, ``StepRow``, ``DecisionRow``,
  ``TreeRow``, ``ToolFailures``).
- Enums and inputs: ``EventKind``, ``Role``, ``StepKind``, ``StepState``, ``TaskStatus``,
  ``ResultValidity``, ``ErrorCode``, ``EventInput``, ``StepWrite``.
- Agent code: ``agent``, ``AgentContext``, ``AgentSpec``, ``ModelSpec``, ``Budgets``,
  ``StepOutcome``, ``ChildOutcome``; tools: ``tool``, ``Tool``, ``ToolContext``, an HTTP
  call with the step's idempotency key ``http_call`` (docs/agent-tasks.md), an MCP
  server as a tool source ``McpServer`` (docs/mcp.md); scripted
  models: ``ScriptedModel``, ``Script``, ``ModelTurn``, ``ToolCall``, ``TokenUsage``.
- Errors: every one an ``AgentTasksError`` (families ``ServiceUnavailable``,
  ``ConfigurationError``, ``GraphError``, ``AgentError``; docs/codes.md draws the tree):
  ``TaskServiceUnavailable``, ``GraphNotConfigured``, ``GraphIncomplete``,
  ``Neo4jPasswordMissing``; the graph store's (either store's: ``GraphError``,
  ``GraphUnavailable``, ``GraphAuthError``, ``GraphDataError``); in agent code
  ``BudgetExceeded``, ``InputTimeout``, ``SpawnRefused``, ``ChildFailed``.

Importing ``starter`` (or ``starter.client``) loads the client SDK alone: no workflow,
activity, worker, server or graph driver module. The agent API (``agent``, ``AgentContext`` and
the agent code's errors), the tools and scripted models, and the worker's bootstrap
(``build_worker``, ``build_graph_store``, ``open_graph``, ``open_services``,
``AgentTasksWorkerPlugin``, which load the driver, and ``open_broker``) are served from their
own modules when first used (``_SERVED``); the reads that need the graph store take a
``taskgraph.port.GraphStore`` (``build_graph_store`` or ``open_graph`` makes one, loading its
store's driver then).
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
"""The faces served when first used, by name -> the module that defines it: the agent API
(``workflows.agents``), tools and scripted models (``activities``) and the worker's bootstrap
(``worker``, which loads the graph store's driver). An app that uses the client SDK alone
loads none of them."""


def __getattr__(name: str) -> Any:
    """``starter.AgentContext``, ``starter.build_worker`` and the other names of ``_SERVED``,
    from the module that defines them (imported then).

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
