"""The HTTP API's routes for people: the project's inbox (``server.inbox``) and its
live stream, and who is calling (what the page shows of its session)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import BaseModel

from agent_tasks.server.calls import ERRORS, Call, TaskName, name_of
from agent_tasks.server.inbox import Inbox, InboxStream, inbox_items, task_items
from agent_tasks.server.stream_routes import sse, stream_route

router = APIRouter()


class Caller(BaseModel):
    """``GET /me``: the key a request is made with, and where its tasks' workflows are."""

    project_id: str
    key_id: str
    key_name: str
    person: str
    """Who the key's holder is: the author of what the request writes and the approver of
    what it accepts (``ApiKey.author``: one person however many keys they hold)."""
    temporal_ui: str
    """The Temporal Web UI's base URL (``AGENT_TASKS_TEMPORAL_UI_URL``)."""
    namespace: str
    """The tasks' Temporal namespace."""
    command: str = "agent-tasks"
    """How a person runs the CLI where the server runs (``./run`` in a checkout): the page's
    commands to copy begin with it."""


@router.get("/me", response_model=Caller, responses=ERRORS, tags=["people"])
async def me(call: Call) -> Caller:
    """The calling key's project, id and person (never the key), and the Temporal Web UI."""
    settings = call.request.app.state.api.settings
    return Caller(
        project_id=call.key.project_id,
        key_id=call.key.key_id,
        key_name=call.key.name,
        person=call.key.author,
        temporal_ui=settings.temporal_ui,
        namespace=settings.temporal.namespace,
        command=call.request.app.state.api.command,
    )


@router.get("/inbox", response_model=Inbox, responses=ERRORS, tags=["people"])
async def inbox(call: Call) -> Inbox:
    """Every open input request and approval of the project's tasks, newest first: the task,
    the prompt or the call (tool, arguments, Markdown description, the key it runs with),
    when it was asked, its deadline and its answer's JSON Schema."""
    return Inbox(items=await inbox_items(call.history))


@router.get("/tasks/{task_id}/inputs", response_model=Inbox, responses=ERRORS, tags=["people"])
async def task_inputs(call: Call, task_id: TaskName) -> Inbox:
    """The task's open input requests and approvals, as the inbox shows them."""
    return Inbox(items=await task_items(call.history, name_of(task_id)))


@stream_route(router, "/inbox/stream", "people", "streams")
async def inbox_stream(call: Call) -> Response:
    """The inbox as SSE: ``ask`` (an item) for each open request, ``ready``, then ``ask`` for
    each new one and ``closed`` (``{"task", "input_id"}``) for each answered or closed one."""
    state = call.request.app.state.api
    return sse(
        call,
        lambda gate: InboxStream(
            call.history, state.subscriber, state.keepalive_s, state.feeds.poll_s, gate
        ).events(),
    )
