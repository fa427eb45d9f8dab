"""Agent tasks: agent code and the context it runs with.

An agent task is a ``TaskWorkflow`` started with an ``AgentSpec``: its agent runs inside the
workflow, so agent code is workflow code. It must be deterministic (no I/O, no clock, no
random): everything that touches the world goes through its ``AgentContext`` (steps run as
activities, the model call, time from the workflow).

The package's rooms: ``registry`` (agent code by name, the worker's tool specs),
``runner`` (what the machinery stands on: the cancellation rule, waits, a step's writes),
``approvals`` (a person's approval of a tool call before it runs), ``steps`` (the step
machinery: a tool call as a step, a model turn), ``context`` (what agent
code runs with: steps, events, checkpoints, input, child tasks) and ``loop`` (the ready
tool-calling loop, registered as ``tool_loop``). The names agent code uses are here (and in
``starter``).
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
