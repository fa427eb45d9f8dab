"""Agent tasks: agent code and the context it runs with.

An agent task is a ``TaskWorkflow`` started with an ``AgentSpec``; its agent runs inside the
workflow, so agent code is deterministic workflow code and touches the world only through its
``AgentContext``. Rooms: ``registry`` (agents and tool specs), ``runner`` (cancellation, waits, a
step's writes), ``approvals``, ``steps`` (tool calls and model turns), ``context`` and ``loop`` (the
ready ``tool_loop``).
"""

from agent_tasks.workflows.agents.context import (
    AgentContext,
    ChildFailed,
    ChildOutcome,
    InputTimeout,
    SpawnRefused,
)
from agent_tasks.workflows.agents.loop import tool_loop
from agent_tasks.workflows.agents.registry import AgentFunction, ToolSpec, agent
from agent_tasks.workflows.agents.runner import AgentParked, BudgetExceeded, StepOutcome

__all__ = [
    "AgentContext",
    "AgentFunction",
    "AgentParked",
    "BudgetExceeded",
    "ChildFailed",
    "ChildOutcome",
    "InputTimeout",
    "SpawnRefused",
    "StepOutcome",
    "ToolSpec",
    "agent",
    "tool_loop",
]
