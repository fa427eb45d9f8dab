"""Tools: activities an agent's steps run, registered by name with pydantic argument and result
models (``workflows.agents.registry.ToolSpec`` is what the workflow schedules by).

A tool is an async ``(args, context) -> result`` function, run as the activity ``tool.{name}``: it
validates the call's arguments with the argument model (a failure fails the step at once, never
retried), calls the function and returns the result as JSON text bounded like an event payload
(``output``). The context gives the step's idempotency key and ``heartbeat()``; a tool with a
heartbeat timeout is heartbeated for and sees a cancel as ``asyncio.CancelledError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from agent_tasks.activities.heartbeat import CANCEL_BEAT_S, heartbeating
from agent_tasks.contract import Event, StepsQuery, ToolInput, ToolOutput, bound_text
from agent_tasks.contract.errors import failure_text
from agent_tasks.tasklog.reader import QUERY_TIMEOUT, TaskReader
from agent_tasks.workflows.agents.approvals import APPROVAL_ACTIVITY, ApprovalCheck, call_digest
from agent_tasks.workflows.agents.registry import (
    TOOL_ACTIVITY_PREFIX,
    TOOL_ARGUMENTS_INVALID,
    TOOL_SPECS_ACTIVITY,
    ToolSpec,
    ToolSpecs,
)
from agent_tasks.workflows.agents.runner import READ_EVENT_ACTIVITY
from agent_tasks.workflows.task import TaskWorkflow

if TYPE_CHECKING:  # the driver is loaded by whoever makes the graph (agent code imports tool)
    from agent_tasks.taskgraph.port import GraphStore

TOOL_RESULT_INVALID = "ToolResultInvalid"
"""ApplicationError type of a tool result that cannot be serialized (not retried)."""


def invalid_arguments(tool_name: str, err: ValidationError) -> ApplicationError:
    """The failure of arguments a tool's model refuses (``ToolArgumentsInvalid``, never retried),
    raised by the tool and by the approval check alike, so the model reads one text."""
    return ApplicationError(
        f"arguments of {tool_name} are invalid: {err}",
        type=TOOL_ARGUMENTS_INVALID,
        non_retryable=True,
    )


@dataclass(frozen=True)
class ToolContext:
    """What a tool gets besides its arguments."""

    workflow_id: str
    """The task's workflow id."""
    step_name: str
    """The step running the call."""
    idempotency_key: str
    """``{workflow id}/{step}/{attempt}``: the same on every retry of this attempt."""

    def heartbeat(self, *details: Any) -> None:
        """Tell the server the tool is alive (optionally with progress details)."""
        activity.heartbeat(*details)


ToolFunction = Callable[[Any, ToolContext], Awaitable[BaseModel | str]]
"""A tool's implementation: ``(arguments, context) -> result``."""


Approval = bool | Callable[[Any], bool]
"""When a person approves a call: ``True``, ``False``, or a predicate on the arguments (True
asks)."""
Description = str | Callable[[Any], str]
"""The Markdown a person reads when asked about a call: text, or made from the arguments."""


@dataclass(frozen=True)
class Tool:
    """A tool: its spec, argument model and function, and its approval rule and description."""

    spec: ToolSpec
    arguments: type[BaseModel]
    function: ToolFunction
    approval: Approval = False
    description: Description = ""

    def check(self, text: str) -> ApprovalCheck:
        """The approval check of a call whose arguments are ``text`` (JSON): invalid arguments, or a
        predicate or description that raises, are its ``error`` (the step fails, nobody is asked);
        else whether to ask and the description."""
        try:
            arguments = self.arguments.model_validate_json(text or "{}")
        except ValidationError as err:
            return ApprovalCheck(error=failure_text(invalid_arguments(self.spec.name, err)))
        try:
            needed = self.approval if isinstance(self.approval, bool) else self.approval(arguments)
            description = self.description
            markdown = description if isinstance(description, str) else description(arguments)
        except Exception as err:  # the tool author's code: its failure is the answer
            return ApprovalCheck(
                error=f"the approval check of {self.spec.name} failed: {type(err).__name__}: {err}"
            )
        return ApprovalCheck(needed=bool(needed), description=markdown or self.spec.description)


def tool(
    name: str,
    *,
    arguments: type[BaseModel],
    idempotent: bool,
    description: str = "",
    start_to_close_s: float = 60.0,
    heartbeat_s: float | None = None,
    max_attempts: int = 3,
    approval: Approval = False,
    approval_description: Description = "",
    approval_expires_after: timedelta | None = None,
    approvers: int = 1,
) -> Callable[[ToolFunction], Tool]:
    """Make a function a tool (decorator); pass it to ``build_worker(tools=...)``.

    Args:
        name: the tool's name (``[A-Za-z0-9_.-]``, at most 64); its activity is ``tool.{name}``.
        arguments: the pydantic model of its arguments (its JSON Schema is shown to models).
        idempotent: retried by its policy under the same key; False: at most once (a dead
            worker leaves the step ``unknown``).
        description: for the model.
        start_to_close_s: longest run of one attempt (seconds).
        heartbeat_s: heartbeat timeout (seconds); None: no heartbeats.
        max_attempts: attempts of an idempotent tool.
        approval: ``True``, or a predicate on the arguments run by the worker
            (``workflows.agents.approvals``).
        approval_description: Markdown the person reads (default: ``description``), or a
            function of the arguments.
        approval_expires_after: how long an approval request stays open before it closes
            ``expired``; None: no expiry.
        approvers: distinct people who accept a call before it runs (1 to 10).
    """

    def make(function: ToolFunction) -> Tool:
        spec = ToolSpec(
            name=name,
            description=description,
            parameters=arguments.model_json_schema(),
            idempotent=idempotent,
            start_to_close_s=start_to_close_s,
            heartbeat_s=heartbeat_s,
            max_attempts=max_attempts,
            approval=approval is not False,
            approval_expires_s=None
            if approval_expires_after is None
            else approval_expires_after.total_seconds(),
            approvers=approvers,
        )
        return Tool(spec, arguments, function, approval, approval_description)

    return make


def output(value: BaseModel | str) -> ToolOutput:
    """A tool's result as bounded text: a string as it is, a model as its JSON.

    Raises:
        ApplicationError: ``ToolResultInvalid`` (not retried) when it cannot be serialized.
    """
    try:
        text = value if isinstance(value, str) else value.model_dump_json()
    except (PydanticSerializationError, ValueError, TypeError) as err:
        raise ApplicationError(
            f"the tool's result cannot be serialized: {err}",
            type=TOOL_RESULT_INVALID,
            non_retryable=True,
        ) from err
    bounded = bound_text(text)
    return ToolOutput(
        text=bounded.text, full_length=bounded.full_length, full_sha256=bounded.full_sha256
    )


class ToolActivities:
    """The activities of agent tasks' steps: one per tool, and the read of a recorded result.

    Args:
        client: to read call arguments back from the task.
        graph: the graph store, for events of earlier runs.
        tools: the tools this worker runs.
    """

    def __init__(self, client: Client, graph: GraphStore, tools: Sequence[Tool]) -> None:
        self.client = client
        self.graph = graph
        self.tools = list(tools)

    def activities(self) -> list[Callable[..., Any]]:
        """The activity functions to register on the worker."""
        own: list[Callable[..., Any]] = [self.read_event, self.tool_specs, self.tool_approval]
        return [self._activity(t) for t in self.tools] + own

    async def arguments(self, input: ToolInput) -> str:
        """The call's arguments: from the input, or read back by seq for an older input."""
        return await self._event_text(input) if input.arguments is None else input.arguments

    async def _event(self, input: ToolInput) -> Event:
        """The task's event ``call_seq``."""
        (event,) = await TaskReader(self.client, self.graph).task_events(
            input.workflow_id,
            input.run_id,
            input.call_seq - 1,
            input.call_seq,
        )
        return event

    async def _event_text(self, input: ToolInput) -> str:
        return (await self._event(input)).payload

    def _activity(self, tool: Tool) -> Callable[[ToolInput], Awaitable[ToolOutput]]:
        async def call(input: ToolInput) -> ToolOutput:
            text = await self.arguments(input)
            try:
                arguments = tool.arguments.model_validate_json(text or "{}")
            except ValidationError as err:
                raise invalid_arguments(tool.spec.name, err) from err
            context = ToolContext(input.workflow_id, input.step_name, input.idempotency_key)
            return output(await tool.function(arguments, context))

        async def run(input: ToolInput) -> ToolOutput:
            # the heartbeats cover the read of the arguments too: on a loaded machine that
            # read (a query, which a cold worker answers by replaying the task) took longer
            # than a short heartbeat timeout, and an idempotent tool then ran once per
            # attempt the server started meanwhile; a tool with a heartbeat timeout beats
            # every CANCEL_BEAT_S so that a cancel reaches it soon whatever its timeout
            beat = CANCEL_BEAT_S if activity.info().heartbeat_timeout else None
            return await heartbeating(call(input), every_s=beat)

        run.__name__ = run.__qualname__ = f"tool_{tool.spec.name}"
        return activity.defn(name=TOOL_ACTIVITY_PREFIX + tool.spec.name)(run)

    @activity.defn(name=TOOL_SPECS_ACTIVITY)
    async def tool_specs(self, names: list[str]) -> ToolSpecs:
        """The specs of the named tools this worker runs (recorded in the history)."""
        mine = {t.spec.name: t.spec for t in self.tools}
        return ToolSpecs(specs={name: mine[name] for name in names if name in mine})

    @activity.defn(name=APPROVAL_ACTIVITY)
    async def tool_approval(self, input: ToolInput) -> ApprovalCheck:
        """The approval check of the call recorded as ``call_seq`` (``Tool.check``) with its digest
        (``call_digest``), recorded in the history."""
        call = await self._event(input)
        if input.mcp is not None:  # an MCP server's tool: its server's rule asked for this
            server = input.mcp.server
            description = f"`{input.mcp.tool}` of the MCP server `{server.name}`"
            check = ApprovalCheck(needed=True, description=description)
        else:
            found = next((t for t in self.tools if t.spec.name == call.name), None)
            if found is None:
                return ApprovalCheck(error=f"no tool {call.name!r} on this worker")
            check = found.check(call.payload)
        # the call a person is shown, bound to its key (workflows.agents.approvals.call_digest)
        check.digest = call_digest(call.name or "", call.payload, input.idempotency_key)
        return check

    @activity.defn(name=READ_EVENT_ACTIVITY)
    async def read_event(self, input: ToolInput) -> ToolOutput:
        """The payload of event ``call_seq``, or with ``call_seq`` 0 the result of step
        ``step_name``: from the earlier runs the graph store lacks, else the store."""
        if not input.call_seq:
            seq = await self._result_seq(input.workflow_id, input.run_id, input.step_name)
            input = input.model_copy(update={"call_seq": seq})
        return output(await self._event_text(input))

    async def _result_seq(self, workflow_id: str, run_id: str, name: str) -> int:
        run = self.client.get_workflow_handle(workflow_id, run_id=run_id)
        view = await run.query(TaskWorkflow.view, rpc_timeout=QUERY_TIMEOUT)
        for earlier in reversed(view.mirror_backlog):
            handle = self.client.get_workflow_handle(workflow_id, run_id=earlier.run_id)
            query = StepsQuery(changed_after_write=earlier.after_write, step_name=name, limit=1)
            page = await handle.query(TaskWorkflow.steps, query, rpc_timeout=QUERY_TIMEOUT)
            if page.steps and page.steps[0].result_event_seq:
                return page.steps[0].result_event_seq
        step = await self.graph.reads.step(view.project_id, workflow_id, name)
        if step is None or not step.result_event_seq:
            raise ApplicationError(f"{workflow_id}: no result of step {name!r} is found")
        return step.result_event_seq
