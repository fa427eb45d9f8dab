"""The Temporal plugins: an app's own ``Client.connect`` and ``Worker`` run a task end to end
with them, a client with ``AgentTasksPlugin`` reads compressed payloads (one without it
cannot), and a worker plugin refuses a client without the payload codec."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import types
import typing
import uuid
from datetime import date, timedelta
from types import MappingProxyType

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from agent_tasks.contract import RecordEventsInput
from agent_tasks.plugin import PASSTHROUGH_MODULES
from agent_tasks.starter import (
    AgentContext,
    AgentSpec,
    AgentTasksPlugin,
    AgentTasksWorkerPlugin,
    ConversationHistory,
    EventKind,
    Settings,
    TaskStatus,
    ToolContext,
    agent,
    tool,
)
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.workflows.spawning import CHILD_ENDED, TASK_WORKFLOW
from agent_tasks.workflows.task import TaskWorkflow


class Text(BaseModel):
    text: str


@tool("plugin_upper", arguments=Text, idempotent=True)
async def upper(args: Text, context: ToolContext) -> str:
    """The text in upper case."""
    return args.text.upper()


@agent("plugin-app")
async def shout(ctx: AgentContext) -> str:
    """One step of ``plugin_upper`` over the agent's input; its result is the answer."""
    text = ctx.input["text"]
    assert isinstance(text, str)
    return (await ctx.step("shout", "plugin_upper", {"text": text})).text


async def connected(settings: Settings, *plugins: AgentTasksPlugin) -> Client:
    """A client the way an app makes its own: ``Client.connect`` with the server's address."""
    return await Client.connect(**settings.temporal.connect_config(), plugins=list(plugins))


async def test_an_apps_own_client_and_worker_run_an_agent_task(
    settings: Settings, graph: TaskGraph, project_id: str
) -> None:
    client = await connected(settings, AgentTasksPlugin())
    queue = f"plugin-{uuid.uuid4().hex[:8]}"
    text = "make it loud " * 200  # 2,600 characters: the step's payloads are compressed
    plugin = AgentTasksWorkerPlugin(graph, tools=[upper])
    async with Worker(client, task_queue=queue, plugins=[plugin]):
        history = ConversationHistory(client, project_id, "app", task_queue=queue, graph=graph)
        spec = AgentSpec(name="plugin-app", tools=["plugin_upper"], input={"text": text})
        assert (await history.create_task("t", "shout", agent=spec)).recorded
        view = await asyncio.wait_for(history.wait_task("t"), 120)
        assert view is not None
        assert view.status is TaskStatus.DONE
        assert view.result is not None and view.result.text == text.upper()
        events = (await history.list_events("t", limit=200)).events
        (result,) = [e for e in events if e.kind is EventKind.TOOL_RESULT]
        assert result.payload == text.upper()


async def test_a_client_with_the_plugin_reads_compressed_payloads(
    settings: Settings, task_queue: str, project_id: str
) -> None:
    text = "a transcript compresses well. " * 200  # 6,000 characters
    client = await connected(settings, AgentTasksPlugin())
    writer = ConversationHistory(client, project_id, "w", task_queue=task_queue)
    await writer.create_task("c", "compressed")
    written = await writer.record_event("c", EventKind.MESSAGE, text, role="user")
    assert written.recorded

    history = await client.get_workflow_handle(writer.workflow_id("c")).fetch_history()
    accepted = [
        event.workflow_execution_update_accepted_event_attributes.accepted_request.input
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    (compressed,) = [
        p for u in accepted for p in u.args.payloads if p.metadata["encoding"] == b"binary/zlib"
    ]  # the event's update input went compressed; the creation's was too small

    reader = ConversationHistory(await connected(settings, AgentTasksPlugin()), project_id, "r")
    (event,) = (await reader.list_events("c")).events
    assert event.payload == text

    (decoded,) = await reader.client.data_converter.decode([compressed], [RecordEventsInput])
    assert decoded.events[0].payload == text
    plain = await connected(settings)  # the SDK's default converter: no payload codec
    with pytest.raises(KeyError, match="Unknown payload encoding binary/zlib"):
        await plain.data_converter.decode([compressed], [RecordEventsInput])


async def test_the_worker_plugin_refuses_a_client_without_the_codec(
    settings: Settings, graph: TaskGraph
) -> None:
    plain = await connected(settings)
    with pytest.raises(ValueError, match="data converter"):
        Worker(plain, task_queue="never-polled", plugins=[AgentTasksWorkerPlugin(graph)])


IMMUTABLE = (
    str,
    int,
    float,
    bool,
    bytes,
    tuple,
    frozenset,
    timedelta,
    date,
    MappingProxyType,
    type(None),
)
"""What a module-level value of a passed-through workflow module may be, besides modules,
functions and classes: values a run cannot change for the next."""


SHARED_WORKFLOW_MODULES = (
    "agent_tasks.workflows.task",
    "agent_tasks.workflows.mirror_calls",
    "agent_tasks.workflows.runs",
    "agent_tasks.contract.search",
    "agent_tasks.workflows.spawning",
    "agent_tasks.workflows.patches",
)
"""The workflow's module and the rooms only it imports: shared by every run, since the
workflow's module is passed through and imports them outside the sandbox."""


@pytest.mark.parametrize("name", SHARED_WORKFLOW_MODULES)
def test_the_passed_through_workflow_modules_hold_no_state_a_run_could_change(name: str) -> None:
    """``workflows.task`` is passed through the sandbox (``PASSTHROUGH_MODULES``), so every
    run shares it and what it imports: each may hold constants, functions and classes only,
    and their classes only methods (a run's state lives in its instances)."""
    module = importlib.import_module(name)
    assert "agent_tasks.workflows.task" in PASSTHROUGH_MODULES
    kinds = (types.ModuleType, types.FunctionType, type, typing._SpecialForm)
    shared = {
        key: value
        for key, value in vars(module).items()
        if not key.startswith("__") and not isinstance(value, kinds)
    }
    mutable = {
        key: type(value).__name__
        for key, value in shared.items()
        if not isinstance(value, IMMUTABLE)
        and not dataclasses.is_dataclass(value)  # RetryPolicy: read, never changed
        and type(value).__name__ not in {"_Feature", "_SearchAttributeKey"}
    }
    assert not mutable, mutable
    classes = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == name
    ]
    attributes = {
        f"{cls.__name__}.{key}"
        for cls in classes
        for key, value in vars(cls).items()
        if not key.startswith("__") and not callable(value)
    }
    assert not attributes, attributes


def test_the_workflow_and_signal_names_the_spawning_room_uses_are_the_workflows_own() -> None:
    """``workflows.spawning`` starts children and signals parents by name (it cannot import
    the class that imports it): the names must be what the class registers."""
    definition = workflow._Definition.must_from_class(TaskWorkflow)
    assert definition.name == TASK_WORKFLOW
    assert definition.signals[CHILD_ENDED].fn is TaskWorkflow.child_ended
