"""The registries of agent tasks: agent code by name, and the worker's tools by the specs the
workflow schedules them by.

Agent functions are registered (``agent``) when their modules are imported on the worker, and
by whatever replays their histories; this package is passed through the workflow sandbox, so
the workflow finds them by name. Tools are the worker's (``activities.tools``): each run of an
agent asks the worker for the specs of its tools once, by a local activity (``agent_tools``),
so the history records them and a replay, or a worker deployed later with other tools, decides
every step as it was decided.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy

from agent_tasks.contract import AgentName, AgentSpec
from agent_tasks.workflows.patches import TOOL_SPECS_BY_ACTIVITY

TOOL_ACTIVITY_PREFIX = "tool."
"""A tool ``name`` runs as the activity ``tool.{name}``."""


class ToolSpec(BaseModel):
    """What the workflow needs to know of a tool to run it as a step (the implementation is
    registered on the worker: ``activities.tools``)."""

    model_config = ConfigDict(frozen=True)

    name: AgentName
    """The tool's name; its activity is ``tool.{name}``."""
    description: str = ""
    """For the model."""
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    """JSON Schema of the arguments (for the model)."""
    idempotent: bool = False
    """True: the tool is retried by its retry policy (with the same idempotency key). False:
    it runs at most once; a worker that dies during it leaves the step ``unknown``."""
    start_to_close_s: float = Field(default=60.0, gt=0)
    """Longest run of one attempt (seconds)."""
    heartbeat_s: float | None = Field(default=None, gt=0)
    """Heartbeat timeout (seconds): a tool that heartbeats is noticed dead this soon (and sees
    its cancellation); None: it does not heartbeat."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts of an idempotent tool (1 s doubling between them)."""
    approval: bool = False
    """True: a person may have to approve each call before it runs (always, or as the tool's
    predicate on the call's arguments says: the worker's ``tool_approval`` check decides;
    ``workflows.agents.approvals``). Added later: old specs decode without it."""

    def retry_policy(self) -> RetryPolicy:
        """The activity's retry policy: ``max_attempts`` if idempotent, else one attempt.
        ``ToolArgumentsInvalid`` is never retried."""
        return RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_attempts=self.max_attempts if self.idempotent else 1,
            non_retryable_error_types=[TOOL_ARGUMENTS_INVALID],
        )


TOOL_ARGUMENTS_INVALID = "ToolArgumentsInvalid"
"""ApplicationError type of a tool call whose arguments fail the tool's model."""


AgentFunction = Callable[..., Awaitable[str]]
"""Agent code: gets its ``AgentContext``, returns the final answer (the task ends ``done``
with it)."""
_Agent = TypeVar("_Agent", bound=AgentFunction)

_AGENTS: dict[str, AgentFunction] = {}

TOOL_SPECS_ACTIVITY = "tool_specs"
"""Activity: the worker's specs of the tools an agent may call (``ToolSpecs``)."""


class ToolSpecs(BaseModel):
    """The specs of an agent's tools, as the worker has them (absent: no such tool)."""

    specs: dict[str, ToolSpec] = Field(default_factory=dict)


def agent(name: str) -> Callable[[_Agent], _Agent]:
    """Register agent code under ``name`` (decorator). Import the module on the worker."""

    def register(function: _Agent) -> _Agent:
        _AGENTS[name] = function
        return function

    return register


def agent_function(name: str) -> AgentFunction | None:
    """The agent code registered as ``name``, None when there is none."""
    return _AGENTS.get(name)


async def agent_tools(spec: AgentSpec) -> dict[str, ToolSpec]:
    """The worker's specs of the agent's tools, by an activity (recorded in the history: a
    replay, or a worker deployed later with other tools, gets the same answer; runs recorded
    before ``TOOL_SPECS_BY_ACTIVITY`` used a local activity). A tool the worker lacks is
    missing (its steps fail with that as their result)."""
    timeout = timedelta(seconds=10)
    answer: ToolSpecs
    if workflow.patched(TOOL_SPECS_BY_ACTIVITY):
        answer = await workflow.execute_activity(
            TOOL_SPECS_ACTIVITY, spec.tools, result_type=ToolSpecs, start_to_close_timeout=timeout
        )
    else:
        answer = await workflow.execute_local_activity(
            TOOL_SPECS_ACTIVITY, spec.tools, result_type=ToolSpecs, start_to_close_timeout=timeout
        )
    return answer.specs
