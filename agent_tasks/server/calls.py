"""What every route of the HTTP API shares: the caller (its API key and its project's client),
the path's task names, and the errors the routes answer with (for the OpenAPI schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from agent_tasks.server.apikeys import ApiKey
from agent_tasks.server.auth import authenticate
from agent_tasks.server.errors import ErrorResponse
from agent_tasks.server.grants import Grant
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.tasks import TaskManager

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": about}
    for status, about in {
        401: "no API key, or one that is not valid (or the page's session ended)",
        403: "another project in the path, or a page request without its CSRF token",
        404: "no such task in the project",
        409: "refused by the task's state",
        422: "an argument of the wrong shape, or a refused value",
        503: "Temporal, a worker or Neo4j did not answer: retry with the same request id",
    }.items()
}


@dataclass
class Caller:
    """The request's key and the client of its project."""

    key: ApiKey
    history: ConversationHistory
    request: Request
    grant: Grant
    """What the request showed (its streams check it again while they are open)."""

    @property
    def tasks(self) -> TaskManager:
        """The Tasks API over the project."""
        return TaskManager(self.history)


async def caller(request: Request) -> Caller:
    """The dependency of every route but ``/health``: authenticate, and the project's client
    (its writes authored by the key's person, ``ApiKey.author``)."""
    state = request.app.state.api
    key = await authenticate(request, state.keys, state.sessions)
    history = ConversationHistory(
        state.services.client,
        key.project_id,
        key.author,
        task_queue=state.settings.temporal_task_queue,
        graph=state.services.graph,
        broker=state.services.broker,
    )
    return Caller(key, history, request, Grant.of(request, key))


Call = Annotated[Caller, Depends(caller)]
TaskName = Annotated[str, "a task name; '/' in it escaped as %2F"]


def name_of(segment: str) -> str:
    """The task name of a path segment (``app.NamesInPath`` left ``%2F`` and ``%25``)."""
    return segment.replace("%2F", "/").replace("%25", "%")
