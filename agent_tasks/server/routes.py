"""The HTTP API's routes: the client's calls (``starter.ConversationHistory``) and the Tasks
API's (``starter.tasks``) over HTTP, each scoped to the API key's project. Mounted at ``/``
(the key's project) and at ``/projects/{project_id}`` (the same, named: 403 for another)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Protocol, TypeVar

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse
from fastapi.types import DecoratedCallable
from pydantic import AwareDatetime, BaseModel, Field, JsonValue

from agent_tasks.contract import (
    PAGE_LIMIT_MAX,
    AgentSpec,
    EventInput,
    StepState,
    TaskStatus,
)
from agent_tasks.server.calls import ERRORS, Call, TaskName, name_of
from agent_tasks.server.errors import ApiError, error_response
from agent_tasks.starter.results import (
    DecisionsResult,
    DeleteResult,
    EventsResult,
    GetTaskResult,
    StepsResult,
    WriteResult,
)
from agent_tasks.starter.retention import HistoryRetention
from agent_tasks.starter.tasks import Task, TaskRefused, UpdateType, new_task_id
from agent_tasks.taskgraph.models import TaskRow, TreeRow
from agent_tasks.taskgraph.refusals import GraphHealth, graph_health

API_DESCRIPTION = """Durable tasks for AI agents: every task a Temporal workflow, mirrored to
Neo4j. Authenticate with `Authorization: Bearer <key>` (`agent-tasks keys create --project P`).
Live streams are Server-Sent Events: `update` (an event, its seq the SSE id), `token`, and one
of `done`, `failed`, `cancelled` at the end. See docs/http.md."""

router = APIRouter()

AfterSeq = Annotated[int, Query(ge=0)]
"""A page's ``after_seq`` (0: from the first)."""
PageLimit = Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)]
"""A page's ``limit`` of events or decisions."""


class _Found(Protocol):
    found: bool


Found = TypeVar("Found", bound=_Found)


def found(page: Found) -> Found:
    """``page``, or 404 ``task_not_found`` when its task is not in the project."""
    if not page.found:
        raise ApiError.task_not_found()
    return page


def recorded(result: WriteResult | DeleteResult) -> None:
    """Raise the refusal of a write that was not recorded as its error."""
    if not result.recorded:
        assert result.error is not None
        raise ApiError.refused(result.error, result.message or result.error.value)


def written(result: WriteResult, status: int = 200) -> JSONResponse:
    """A write's answer: the result, or the refusal as an error."""
    recorded(result)
    return JSONResponse(result.model_dump(mode="json", exclude_none=True), status_code=status)


def post_write(
    path: str, status: int = 200, tag: str = "tasks"
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """The route of a ``POST`` answered by ``written`` with ``status``."""
    return router.post(
        path, response_model=WriteResult, status_code=status, responses=ERRORS, tags=[tag]
    )


async def service_error_handler(request: Request, error: Exception) -> JSONResponse:
    """503 ``service_unavailable`` for Temporal, a worker or Neo4j that did not answer."""
    return error_response(ApiError(503, "service_unavailable", str(error)))


# ------------------------------------------------------------------------------ bodies


class CreateTask(BaseModel):
    """``POST /tasks``."""

    name: str | None = None
    """The task's name (its id); default a new ULID."""
    goal: str = ""
    """What it is for."""
    session_id: str | None = None
    """Its session."""
    parent: str | None = None
    """A parent task of the project: linked (``create_task(parent=...)``), or with
    ``spawn_key`` started as the parent's child (a parent its app runs)."""
    spawn_key: str | None = None
    """With ``parent``: the child's label in it (``ConversationHistory.spawn_child``)."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """Free metadata."""
    agent: AgentSpec | None = None
    """An agent that runs the task in the worker (an agent task); None: a recorded task."""
    request_id: str | None = None
    """Request id (1 to 64 characters): a retry with it creates nothing twice."""


class UpdateTask(BaseModel):
    """``PATCH /tasks/{task_id}``: the Tasks API's ``update``."""

    status: TaskStatus | None = None
    message: str | None = None
    result: dict[str, JsonValue] | None = None
    error: str | None = None
    update_type: UpdateType = UpdateType.INFO
    metadata: dict[str, JsonValue] | None = None


class AppendEvents(BaseModel):
    """``POST /tasks/{task_id}/events``."""

    events: list[EventInput] = Field(min_length=1)
    request_id: str | None = None


class AnswerInput(BaseModel):
    """``POST /tasks/{task_id}/input``."""

    answer: JsonValue
    """The answer (JSON), validated against the request's schema."""
    input_id: str | None = None
    """The request answered; None: the oldest open one."""
    request_id: str | None = None


class AskInput(BaseModel):
    """``POST /tasks/{task_id}/input-requests``: a task its app runs asks a person."""

    prompt: str
    json_schema: dict[str, JsonValue] = Field(default_factory=dict)
    input_id: str | None = None


class TasksPage(BaseModel):
    """A page of tasks in name order."""

    tasks: list[TaskRow]
    next_after_name: str | None = None
    """Pass as ``after_name`` for the next page; None at the end."""


class Health(BaseModel):
    """``GET /health``."""

    ok: bool = True


# ------------------------------------------------------------------------------ tasks


@router.get("/health", response_model=Health, tags=["service"])
async def health() -> Health:
    """The server runs (no key needed; it asks nothing of Temporal or Neo4j)."""
    return Health()


@router.get("/graph/health", response_model=GraphHealth, responses=ERRORS, tags=["service"])
async def graph_store_health(call: Call) -> GraphHealth:
    """The graph store's health for the key's project: whether it answers, and the tasks
    whose mirror it refused for their data (``taskgraph.refusals``); 503 without a store."""
    graph = call.history.graph
    if graph is None:
        raise ApiError(503, "service_unavailable", "this server has no graph store")
    return await graph_health(graph, call.history.project_id)


@router.post(
    "/tasks",
    response_model=WriteResult,
    status_code=201,
    responses={200: {"model": WriteResult, "description": "the task existed"}, **ERRORS},
    tags=["tasks"],
)
async def create_task(call: Call, body: CreateTask) -> JSONResponse:
    """Create a recorded task, an agent task (``agent``), or a child of a task its app runs
    (``parent`` and ``spawn_key``): 201 with the task, 200 when it existed with that goal."""
    name = body.name or new_task_id()
    history = call.history
    if body.spawn_key is not None:
        if body.parent is None:
            raise ApiError(422, "invalid_argument", "spawn_key needs parent")
        result = await history.spawn_child(
            body.parent, body.spawn_key, name, body.goal,
            session_id=body.session_id, request_id=body.request_id,
        )  # fmt: skip
        result.task = (await history.get_task(name)).view if result.recorded else None
    else:
        result = await history.create_task(
            name,
            body.goal,
            request_id=body.request_id,
            metadata=body.metadata,
            parent=body.parent,
            session_id=body.session_id,
            agent=body.agent,
        )
    return written(result, 200 if result.duplicate else 201)


@router.get("/tasks", response_model=TasksPage, responses=ERRORS, tags=["tasks"])
async def list_tasks(
    call: Call,
    status: TaskStatus | None = None,
    session_id: str | None = None,
    agent_id: str | None = None,
    parent: str | None = None,
    name: Annotated[str | None, Query(description="a part of the name (any case)")] = None,
    since: Annotated[AwareDatetime | None, Query(description="created at or after")] = None,
    until: Annotated[AwareDatetime | None, Query(description="created before")] = None,
    after_name: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> TasksPage:
    """The project's tasks from Neo4j (as far as the mirror has copied them), in name order
    after ``after_name``, by status, session, agent, parent, a part of the name and the
    creation time."""
    rows = await call.history.find_tasks(
        status=status,
        session_id=session_id,
        agent_id=agent_id,
        parent=parent,
        name_contains=name or None,
        since=since,
        until=until,
        after_name=after_name,
        limit=limit,
    )
    return TasksPage(tasks=rows, next_after_name=rows[-1].name if len(rows) == limit else None)


@router.get("/tasks/{task_id}", response_model=GetTaskResult, responses=ERRORS, tags=["tasks"])
async def get_task(call: Call, task_id: TaskName) -> GetTaskResult:
    """The task's view (status, step counts, last seq, pending input, children...)."""
    return found(await call.history.get_task(name_of(task_id)))


@router.patch("/tasks/{task_id}", response_model=Task, responses=ERRORS, tags=["tasks api"])
async def update_task(call: Call, task_id: TaskName, body: UpdateTask) -> Task:
    """The Tasks API's ``update``: a message, a status, a result or an error in one call, for
    a task its app runs (``starter.tasks``); returns the task with the Tasks API's fields."""
    try:
        return await call.tasks.update(name_of(task_id), **dict(body))
    except TaskRefused as refused:
        raise ApiError.refused(refused.code, refused.message) from None
    except ValueError as err:
        raise ApiError(422, "invalid_argument", str(err)) from None


@router.get("/tasks/{task_id}/summary", response_model=Task, responses=ERRORS, tags=["tasks api"])
async def task_summary(call: Call, task_id: TaskName) -> Task:
    """The task with the Tasks API's fields (``TaskManager.get_task``)."""
    task = await call.tasks.get_task(name_of(task_id))
    if task is None:
        raise ApiError.task_not_found()
    return task


@router.delete("/tasks/{task_id}", response_model=DeleteResult, responses=ERRORS, tags=["tasks"])
async def delete_task(
    call: Call, task_id: TaskName, include_decisions: bool = False
) -> DeleteResult:
    """Delete the task from Temporal and Neo4j (its data keys destroyed); the name is never
    reused."""
    history = call.history
    retention = HistoryRetention(
        history.client,
        history.project_id,
        history.agent_id,
        task_queue=history.task_queue,
        graph=history.graph,
    )
    result = await retention.delete_task(name_of(task_id), include_decisions=include_decisions)
    recorded(result)
    return result


@router.get(
    "/tasks/{task_id}/events", response_model=EventsResult, responses=ERRORS, tags=["tasks"]
)
async def list_events(
    call: Call, task_id: TaskName, after_seq: AfterSeq = 0, limit: PageLimit = 50
) -> EventsResult:
    """Events after ``after_seq`` in seq order (every run of the task)."""
    return found(await call.history.list_events(name_of(task_id), after_seq, limit))


@post_write("/tasks/{task_id}/events")
async def append_events(call: Call, task_id: TaskName, body: AppendEvents) -> JSONResponse:
    """Append events in order (consecutive seqs); the result names their seqs."""
    history = call.history
    name = name_of(task_id)
    return written(await history.record_events(name, body.events, request_id=body.request_id))


@router.get("/tasks/{task_id}/steps", response_model=StepsResult, responses=ERRORS, tags=["tasks"])
async def list_steps(
    call: Call,
    task_id: TaskName,
    state: StepState | None = None,
    after_name: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 200,
) -> StepsResult:
    """Steps in name order after ``after_name``, each with its result validity."""
    return found(
        await call.history.list_steps(name_of(task_id), state, limit, after_name=after_name)
    )


@post_write("/tasks/{task_id}/input")
async def answer_input(call: Call, task_id: TaskName, body: AnswerInput) -> JSONResponse:
    """Answer an input request by update, validated on arrival (``input_not_requested``,
    ``input_invalid`` with the schema's message: nothing recorded)."""
    try:
        result = await call.history.respond(
            name_of(task_id), body.answer, input_id=body.input_id, request_id=body.request_id
        )
    except ValueError as err:
        raise ApiError(422, "input_invalid", str(err)) from None
    return written(result)


@post_write("/tasks/{task_id}/input-requests", 201, "tasks api")
async def ask_input(call: Call, task_id: TaskName, body: AskInput) -> JSONResponse:
    """A task its app runs asks a person (status ``awaiting_input`` until answered, then
    ``queued``)."""
    input_id = body.input_id or f"input-{new_task_id()[-8:].lower()}"
    result = await call.history.request_input(
        name_of(task_id), input_id, body.prompt, body.json_schema
    )
    return written(result, 201)


@post_write("/tasks/{task_id}/cancel", 202)
async def cancel_task(
    call: Call, task_id: TaskName, cascade: Annotated[bool, Body(embed=True)] = True
) -> JSONResponse:
    """Cancel the task (a Temporal cancel request; its children too unless ``cascade`` is
    false); the stream ends ``cancelled`` once it has."""
    return written(await call.history.cancel_task(name_of(task_id), cascade=cascade), 202)


@post_write("/tasks/{task_id}/resume", 202)
async def resume_task(call: Call, task_id: TaskName) -> JSONResponse:
    """Run a failed or cancelled agent task's agent again (``not_resumable`` otherwise)."""
    return written(await call.history.resume_task(name_of(task_id)), 202)


@post_write("/tasks/{task_id}/continue", 202)
async def continue_task(call: Call, task_id: TaskName) -> JSONResponse:
    """Continue a failed or cancelled agent task's interrupted turn in a new run (the model is
    asked again; no interrupted call runs again): ``no_interrupted_turn`` otherwise."""
    return written(await call.history.continue_task(name_of(task_id)), 202)


class Branch(BaseModel):
    """``POST /tasks/{task_id}/branch``."""

    seq: int = Field(ge=1)
    """The last event of the task the branch copies."""
    name: str
    """The branch's task name."""
    request_id: str | None = None


@post_write("/tasks/{task_id}/branch", 201)
async def branch_task(call: Call, task_id: TaskName, body: Branch) -> JSONResponse:
    """A new task whose log starts as a copy of this one's events 1 to ``seq`` (an agent
    task's branch goes on from there, on this task's own task queue); the task itself is
    untouched. No task queue can be named here: an API key is a project's, and which workers
    (with which tools and secrets) serve a queue is the namespace operator's choice; the CLI
    and the Python client (``task_queue=``) name one."""
    result = await call.history.branch_from(
        name_of(task_id), body.seq, body.name, request_id=body.request_id
    )
    return written(result, 201)


@router.get(
    "/tasks/{task_id}/decisions",
    response_model=DecisionsResult,
    responses=ERRORS,
    tags=["tasks"],
)
async def list_decisions(
    call: Call, task_id: TaskName, after_seq: AfterSeq = 0, limit: PageLimit = 50
) -> DecisionsResult:
    """The task's decisions in seq order (from Neo4j), each with ``needs_review``."""
    return found(await call.history.list_decisions(name_of(task_id), after_seq, limit))


@router.get("/tasks/{task_id}/tree", response_model=list[TreeRow], responses=ERRORS, tags=["tasks"])
async def task_tree(
    call: Call, task_id: TaskName, depth: Annotated[int, Query(ge=0, le=20)] = 3
) -> list[TreeRow]:
    """The task and its child tasks down to ``depth`` levels (from Neo4j)."""
    rows = await call.history.task_tree(name_of(task_id), depth)
    if not rows:
        raise ApiError.task_not_found()
    return rows
