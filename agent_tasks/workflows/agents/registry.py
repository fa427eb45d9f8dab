"""The registries of agent tasks: agent code by name, and the worker's tools by the specs the
workflow schedules them by.

Agent functions register (``agent``) when their modules are imported, on the worker and in a replay;
this package passes through the sandbox, so the workflow finds them by name. Each run asks the
worker for its tools' specs once, by an activity (``agent_tools``), so a replay or a later worker
decides every step as it was decided.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType
from temporalio.workflow import ActivityCancellationType

from agent_tasks.contract import AgentName, AgentSpec, McpCall, McpServer, ToolOffer
from agent_tasks.workflows.patches import MCP_LIST_CANCEL, MCP_OPEN_CANCEL, TOOL_SPECS_BY_ACTIVITY

TOOL_ACTIVITY_PREFIX = "tool."
"""A tool ``name`` runs as the activity ``tool.{name}``."""
MCP_CALL_ACTIVITY = "mcp_call_tool"
"""Activity: a call of an MCP server's tool (``activities.mcp``)."""
MCP_LIST_ACTIVITY = "mcp_list_tools"
"""Activity: the tools an MCP server lists, as specs (``ToolSpecs``), once per agent run."""
MCP_LIST_TIMEOUT = timedelta(seconds=60)
"""Longest listing attempt (it starts a stdio server or opens an HTTP session)."""
MCP_LIST_HEARTBEAT = timedelta(seconds=10)
"""Heartbeat timeout of a listing (``MCP_LIST_CANCEL``): it beats every second, so a cancel reaches
it at once and a dead worker's listing is retried this soon."""
MCP_LIST_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=["McpServerRefused"])
"""A listing is read-only: retried (an unreachable server fails the agent's start)."""
MCP_OPEN_ACTIVITY = "mcp_open_session"
"""Activity: open a stateful MCP server's session on the worker that takes it; its result is that
worker's session task queue (``McpSessions``)."""
MCP_CLOSE_ACTIVITY = "mcp_close_session"
"""Activity: close the run's session of a stateful MCP server, on its worker's queue."""
MCP_SESSION_LOST = "McpSessionLost"
"""The error of a stateful server's call whose session is gone: the step fails, the next call opens
a new session."""
MCP_SESSION_START = timedelta(seconds=10)
"""Schedule-to-start timeout of a session's activities: a queue nobody polls (the worker died) fails
the listing, call or close this soon."""


class ToolSpec(BaseModel):
    """What the workflow needs to know of a tool to run it as a step (``activities.tools``)."""

    model_config = ConfigDict(frozen=True)

    name: AgentName
    """The tool's name; its activity is ``tool.{name}``."""
    description: str = ""
    """For the model."""
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    """JSON Schema of the arguments (for the model)."""
    idempotent: bool = False
    """True: retried by its policy under the same key; False: runs at most once (a dead worker
    leaves the step ``unknown``)."""
    start_to_close_s: float = Field(default=60.0, gt=0)
    """Longest run of one attempt (seconds)."""
    heartbeat_s: float | None = Field(default=None, gt=0)
    """Heartbeat timeout (seconds); None: the tool does not heartbeat."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts of an idempotent tool (1 s doubling between them)."""
    approval: bool = False
    """True: a person may have to approve each call (the worker's ``tool_approval`` check decides;
    ``workflows.agents.approvals``)."""
    approval_expires_s: float | None = Field(
        default=None, gt=0, exclude_if=lambda value: value is None
    )
    """Seconds an approval request stays open (a timer); then it closes ``expired``. None: for
    ever."""
    approvers: int = Field(default=1, ge=1, le=10, exclude_if=lambda value: value == 1)
    """Distinct people who accept a call before it runs."""
    mcp: McpCall | None = Field(default=None, exclude_if=lambda value: value is None)
    """An MCP server's tool, run by ``mcp_call_tool``; None for the worker's own tools."""

    def activity(self) -> str:
        """The activity that runs a call: ``tool.{name}``, or ``MCP_CALL_ACTIVITY``."""
        return TOOL_ACTIVITY_PREFIX + self.name if self.mcp is None else MCP_CALL_ACTIVITY

    def retry_policy(self) -> RetryPolicy:
        """The activity's retry policy: ``max_attempts`` if idempotent, else one attempt;
        ``ToolArgumentsInvalid`` is never retried."""
        return RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_attempts=self.max_attempts if self.idempotent else 1,
            non_retryable_error_types=[TOOL_ARGUMENTS_INVALID],
        )


OUTCOME_UNKNOWN = "ToolOutcomeUnknown"
"""ApplicationError type of a call sent without a readable answer (``activities.mcp``,
``activities.http_tool``): an idempotent tool retries it under the same key; the last attempt ends
the step ``unknown``."""
TOOL_ARGUMENTS_INVALID = "ToolArgumentsInvalid"
"""ApplicationError type of a tool call whose arguments fail the tool's model."""


AgentFunction = Callable[..., Awaitable[str]]
"""Agent code: gets its ``AgentContext``, returns the final answer (the task ends ``done``)."""
_Agent = TypeVar("_Agent", bound=AgentFunction)
_T = TypeVar("_T")

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


def mcp_offers(tools: Mapping[str, ToolSpec]) -> list[ToolOffer]:
    """The MCP servers' tools among ``tools`` as the model is offered them
    (``ModelInput.mcp_tools``)."""
    return [
        ToolOffer(name=t.name, description=t.description, parameters=t.parameters)
        for t in tools.values()
        if t.mcp is not None
    ]


class McpSessions:
    """The sessions of an agent run's stateful MCP servers, workflow side: the task queue of the
    worker holding each, as ``MCP_OPEN_ACTIVITY`` recorded it."""

    def __init__(self) -> None:
        self.queues: dict[str, str] = {}
        """Task queue of the worker holding each open session, by server name."""
        self._opening = asyncio.Lock()

    async def options(self, server: McpServer) -> dict[str, Any]:
        """The activity options of a listing or call of ``server``: none when stateless; else its
        session worker's ``task_queue`` and ``MCP_SESSION_START``, opening the session first if
        needed.

        Raises:
            ActivityError: the session could not be opened (``McpServerUnavailable``).
        """
        if not server.stateful:
            return {}
        async with self._opening:
            if server.name not in self.queues and workflow.patched(MCP_OPEN_CANCEL):
                opened = workflow.start_activity(
                    MCP_OPEN_ACTIVITY,
                    server,
                    result_type=str,
                    start_to_close_timeout=MCP_LIST_TIMEOUT,
                    heartbeat_timeout=MCP_LIST_HEARTBEAT,
                    retry_policy=MCP_LIST_RETRY,
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
                queue: str = await until_cancelled(opened)
                self.queues[server.name] = queue
            if server.name not in self.queues:
                self.queues[server.name] = await workflow.execute_activity(
                    MCP_OPEN_ACTIVITY,
                    server,
                    result_type=str,
                    start_to_close_timeout=MCP_LIST_TIMEOUT,
                    retry_policy=MCP_LIST_RETRY,
                )
        return {
            "task_queue": self.queues[server.name],
            "schedule_to_start_timeout": MCP_SESSION_START,
        }

    def lost(self, server: McpServer, err: ActivityError) -> bool:
        """Whether ``err`` means ``server``'s session is gone (no worker took the activity in
        ``MCP_SESSION_START``, or ``MCP_SESSION_LOST``); the session is then forgotten."""
        cause = err.cause
        gone = (
            isinstance(cause, TimeoutError) and cause.type is TimeoutType.SCHEDULE_TO_START
        ) or (isinstance(cause, ApplicationError) and cause.type == MCP_SESSION_LOST)
        if gone and server.stateful:
            self.queues.pop(server.name, None)
        return gone and server.stateful

    async def close(self) -> None:
        """Close every open session on its worker's queue; a gone worker's failure is dropped."""
        for name, queue in sorted(self.queues.items()):
            with contextlib.suppress(ActivityError):
                await workflow.execute_activity(
                    MCP_CLOSE_ACTIVITY,
                    name,
                    task_queue=queue,
                    schedule_to_start_timeout=MCP_SESSION_START,
                    start_to_close_timeout=timedelta(seconds=10),
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
        self.queues.clear()


async def agent_tools(spec: AgentSpec, sessions: McpSessions) -> dict[str, ToolSpec]:
    """The worker's specs of the agent's tools by an activity (``TOOL_SPECS_BY_ACTIVITY``), and each
    MCP server's tools by ``MCP_LIST_ACTIVITY`` (a stateful one on its session's queue). A tool the
    worker lacks is missing: its steps fail saying so."""
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
    specs = dict(answer.specs)
    for server in spec.mcp_servers:  # runs recorded before mcp_servers have none
        options = await sessions.options(server)
        if workflow.patched(MCP_LIST_CANCEL):
            specs.update((await _listed(server, options)).specs)
            continue
        listed: ToolSpecs = await workflow.execute_activity(
            MCP_LIST_ACTIVITY,
            server,
            result_type=ToolSpecs,
            start_to_close_timeout=MCP_LIST_TIMEOUT,
            retry_policy=MCP_LIST_RETRY,
            **options,
        )
        specs.update(listed.specs)
    return specs


async def _listed(server: McpServer, options: Mapping[str, Any]) -> ToolSpecs:
    """The listing of ``server`` (``MCP_LIST_CANCEL``): it heartbeats, and a cancel of the task
    cancels it (``until_cancelled``).

    Raises:
        ActivityError: the listing failed (its last attempt's error) or was cancelled.
    """
    handle = workflow.start_activity(
        MCP_LIST_ACTIVITY,
        server,
        result_type=ToolSpecs,
        start_to_close_timeout=MCP_LIST_TIMEOUT,
        heartbeat_timeout=MCP_LIST_HEARTBEAT,
        retry_policy=MCP_LIST_RETRY,
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        **options,
    )
    listed: ToolSpecs = await until_cancelled(handle)
    return listed


async def until_cancelled(handle: workflow.ActivityHandle[_T]) -> _T:
    """The result of ``handle`` (a heartbeating activity with ``WAIT_CANCELLATION_COMPLETED``), or
    its cancelled end when the task's cancel request comes first.

    Raises:
        ActivityError: the activity failed (its last attempt's error) or was cancelled.
    """
    try:
        await workflow.wait_condition(
            lambda: handle.done() or workflow.cancellation_reason() is not None
        )
    except asyncio.CancelledError:  # the SDK's wait raises it when a cancel request arrives
        if workflow.cancellation_reason() is None:
            raise  # the worker evicts the run from its cache: nothing to cancel or record
    if not handle.done():
        handle.cancel()
    return await handle
