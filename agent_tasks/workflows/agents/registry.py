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
"""Heartbeat timeout of a listing (``MCP_LIST_CANCEL``): it beats every second, so a cancel of
the task reaches it within about a second (a cancel reaches an activity only in a heartbeat's
answer), and a listing whose worker died is retried this long after its last beat, not after
``MCP_LIST_TIMEOUT``."""
MCP_LIST_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=["McpServerRefused"])
"""A listing is read-only: retried (an unreachable server fails the run's start of agent)."""
MCP_OPEN_ACTIVITY = "mcp_open_session"
"""Activity: open a stateful MCP server's session on the worker that takes it (the task's
queue); its result is the task queue of that worker's sessions (``McpSessions``)."""
MCP_CLOSE_ACTIVITY = "mcp_close_session"
"""Activity: close the run's session of a stateful MCP server, on its worker's queue."""
MCP_SESSION_LOST = "McpSessionLost"
"""The error of a stateful server's call whose session is gone (its worker stopped, or the
server ended it): the step fails with it, and the next call opens a new session."""
MCP_SESSION_START = timedelta(seconds=10)
"""Schedule-to-start timeout of a session's activities on its worker's queue: a queue nobody
polls any more (the worker died) fails the listing, the call or the close this soon (a call
that started keeps its own start-to-close and heartbeat timeouts)."""


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
    approval_expires_s: float | None = Field(
        default=None, gt=0, exclude_if=lambda value: value is None
    )
    """Seconds an approval request stays open (a workflow timer); then it closes
    ``expired`` and the call does not run. None: it waits for ever. Added later."""
    approvers: int = Field(default=1, ge=1, le=10, exclude_if=lambda value: value == 1)
    """Distinct people who accept a call before it runs. Added later."""
    mcp: McpCall | None = Field(default=None, exclude_if=lambda value: value is None)
    """An MCP server's tool (``AgentSpec.mcp_servers``): run by the ``mcp_call_tool``
    activity, not ``tool.{name}``. Added later: None for the worker's own tools."""

    def activity(self) -> str:
        """The activity that runs a call: ``tool.{name}``, or ``MCP_CALL_ACTIVITY``."""
        return TOOL_ACTIVITY_PREFIX + self.name if self.mcp is None else MCP_CALL_ACTIVITY

    def retry_policy(self) -> RetryPolicy:
        """The activity's retry policy: ``max_attempts`` if idempotent, else one attempt.
        ``ToolArgumentsInvalid`` is never retried."""
        return RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_attempts=self.max_attempts if self.idempotent else 1,
            non_retryable_error_types=[TOOL_ARGUMENTS_INVALID],
        )


OUTCOME_UNKNOWN = "ToolOutcomeUnknown"
"""ApplicationError type of a call whose effect is unknown (it was sent, and no answer of the
server's own came back or could be read: ``activities.mcp``, ``activities.http_tool``): retried
under the same key by an idempotent tool's policy; the last attempt's ends the step
``unknown``, as a dead worker leaves it."""
TOOL_ARGUMENTS_INVALID = "ToolArgumentsInvalid"
"""ApplicationError type of a tool call whose arguments fail the tool's model."""


AgentFunction = Callable[..., Awaitable[str]]
"""Agent code: gets its ``AgentContext``, returns the final answer (the task ends ``done``
with it)."""
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
    """The MCP servers' tools among ``tools``, as the model is offered them
    (``ModelInput.mcp_tools``: no worker registers their specs)."""
    return [
        ToolOffer(name=t.name, description=t.description, parameters=t.parameters)
        for t in tools.values()
        if t.mcp is not None
    ]


class McpSessions:
    """The sessions of an agent run's stateful MCP servers (``McpServer.stateful``), workflow
    side: the task queue of the worker holding each, by server name, as the result of the
    activity that opened it (``MCP_OPEN_ACTIVITY``) recorded it in the history."""

    def __init__(self) -> None:
        self.queues: dict[str, str] = {}
        """Task queue of the worker holding each open session, by server name."""
        self._opening = asyncio.Lock()

    async def options(self, server: McpServer) -> dict[str, Any]:
        """The activity options of a listing or call of ``server``: none for a stateless
        server; else its session's worker's ``task_queue`` and ``MCP_SESSION_START`` as the
        schedule-to-start timeout, the session opened first when the run has none (steps
        started together wait for one opening).

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
        """Whether ``err`` (of a listing or call of ``server``) means its session is gone: no
        worker took the activity within ``MCP_SESSION_START`` (the queue's worker stopped), or
        the worker had no session for the run (``MCP_SESSION_LOST``). The session is
        forgotten: the next use of the server opens a new one."""
        cause = err.cause
        gone = (
            isinstance(cause, TimeoutError) and cause.type is TimeoutType.SCHEDULE_TO_START
        ) or (isinstance(cause, ApplicationError) and cause.type == MCP_SESSION_LOST)
        if gone and server.stateful:
            self.queues.pop(server.name, None)
        return gone and server.stateful

    async def close(self) -> None:
        """Close every open session (``MCP_CLOSE_ACTIVITY`` on its worker's queue); one whose
        worker is gone is gone with it (the failure is dropped)."""
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
    """The worker's specs of the agent's tools, by an activity (recorded in the history: a
    replay, or a worker deployed later with other tools, gets the same answer; runs recorded
    before ``TOOL_SPECS_BY_ACTIVITY`` used a local activity). A tool the worker lacks is
    missing (its steps fail with that as their result). Each MCP server of the spec is
    listed by an activity too (``MCP_LIST_ACTIVITY``): its tools for this run, as the history
    records them. A stateful server's session is opened first and listed on its worker's
    queue (``sessions``: the run's, ``McpSessions``)."""
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
    """The listing of ``server`` (``MCP_LIST_CANCEL``): it heartbeats (``MCP_LIST_HEARTBEAT``),
    and a cancel request of the task cancels it and waits for it to end (the activity stops
    the server's program or closes its session), so the task's cancel does not wait for a
    slow listing and its retries (``until_cancelled``).

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
    """The result of the activity ``handle`` (one that heartbeats, scheduled with
    ``WAIT_CANCELLATION_COMPLETED``), cancelled when a cancel request of the task comes first,
    after its cancelled end (the activity stops what it started).

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
