"""The HTTP API's live streams: a task's events, or a session's, as Server-Sent Events
(``server.streams``), each stream holding one of its key's slots while it is open and
ending when its key's right to read ends (``server.grants``)."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent, format_sse_event
from fastapi.types import DecoratedCallable
from starlette.background import BackgroundTask

from agent_tasks.contract import EventKind
from agent_tasks.server.calls import ERRORS, Call, Caller, TaskName, name_of
from agent_tasks.server.errors import ApiError
from agent_tasks.server.grants import Gate, guarded
from agent_tasks.server.sessions import SessionStream, parse_cursor
from agent_tasks.server.streams import StreamFilter, task_stream

router = APIRouter()


def stream_filter(
    kinds: Annotated[
        str | None,
        Query(description="event kinds to send as `update`, comma-separated (default: all)"),
    ] = None,
    tokens: Annotated[bool, Query(description="send `token` events")] = True,
) -> StreamFilter:
    """The filter of a stream's query.

    Raises:
        ApiError: 422 ``invalid_argument`` for an unknown kind.
    """
    if kinds is None:
        return StreamFilter(tokens=tokens)
    wanted = {k.strip() for k in kinds.split(",") if k.strip()}
    unknown = sorted(wanted - {k.value for k in EventKind})
    if unknown:
        raise ApiError(422, "invalid_argument", f"kinds: no event kind {', '.join(unknown)}")
    return StreamFilter(kinds=frozenset(EventKind(k) for k in wanted), tokens=tokens)


Filter = Annotated[StreamFilter, Depends(stream_filter)]
STREAM_DOC: dict[str, Any] = {
    "description": "Server-Sent Events: `update`, `token`, and `done`, `failed` or `cancelled`",
    "content": {
        "text/event-stream": {
            "schema": {
                "type": "string",
                "description": "lines of `event:`, `data:` (JSON), `id:`; see docs/http.md",
            }
        }
    },
}


def stream_route(
    on: APIRouter, path: str, *tags: str
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """The ``GET`` route ``path`` of ``on`` answered by an SSE stream (``sse``)."""
    return on.get(
        path, responses={200: STREAM_DOC, **ERRORS}, response_class=Response, tags=[*tags]
    )


async def _encoded(
    events: AsyncIterator[ServerSentEvent], release: BackgroundTask
) -> AsyncIterator[bytes]:
    """The SSE wire format of ``events``; the stream's slot is given back when it ends."""
    try:
        async for item in events:
            yield format_sse_event(
                data_str=item.raw_data,
                event=item.event,
                id=item.id,
                comment=item.comment,
            )
    finally:
        await release()


def sse(
    call: Caller, stream: Callable[[Gate], AsyncGenerator[ServerSentEvent, None]]
) -> EventSourceResponse:
    """An SSE response of the events ``stream`` makes, holding one of the key's stream slots
    while it is open; it ends when the key's grant ends or the server shuts down
    (``grants.guarded``).

    Raises:
        ApiError: 429 ``too_many_streams``.
    """
    state = call.request.app.state.api
    state.slots.take(call.key.key_id)
    given_back = False

    async def give_back() -> None:
        nonlocal given_back
        if not given_back:
            given_back = True
            state.slots.give_back(call.key.key_id)

    release = BackgroundTask(give_back)
    gate = Gate(state.grants, call.grant, state.subscriber, state.grant_check_s)
    events = guarded(stream(gate), gate, state.closing)
    return EventSourceResponse(
        _encoded(events, release),
        background=release,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


_SEQ = re.compile(r"[0-9]{1,18}")
"""A task stream's ``Last-Event-ID``: a seq, ASCII digits (at most 18: it fits a signed 64-bit
integer)."""


@stream_route(router, "/tasks/{task_id}/stream", "streams")
async def stream_task(
    call: Call,
    task_id: TaskName,
    flt: Filter,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """The task's events as SSE from after ``after_seq`` (or ``Last-Event-ID``, which wins):
    ``update`` (seq as id), ``token``, then ``done``, ``failed`` or ``cancelled``."""
    name = name_of(task_id)
    if last_event_id:  # an empty one is none (as a browser never sends it)
        if _SEQ.fullmatch(last_event_id) is None:
            raise ApiError(
                422, "invalid_argument", "Last-Event-ID: a seq (the last update's id, digits)"
            )
        after_seq = int(last_event_id)
    if not (await call.history.get_task(name)).found:
        raise ApiError.task_not_found()
    state = call.request.app.state.api
    return sse(
        call,
        lambda gate: task_stream(
            state.feeds, call.history, name, after_seq, flt, state.keepalive_s, gate
        ),
    )


@stream_route(router, "/sessions/{session_id}/stream", "streams")
async def stream_session(
    call: Call,
    session_id: str,
    flt: Filter,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Every task of the session as SSE: the tasks open now from now on, the ones that
    start later from their first event; ``update`` ids are a cursor (``Last-Event-ID``
    resumes each task), each task's end is its ``done``, ``failed`` or ``cancelled``."""
    cursor = None
    if last_event_id:  # an empty one is none (as a browser never sends it)
        cursor = parse_cursor(last_event_id)
        if cursor is None:
            raise ApiError(422, "invalid_argument", "Last-Event-ID: not a session stream's id")
    state = call.request.app.state.api
    return sse(
        call,
        lambda gate: SessionStream(
            state.feeds,
            call.history,
            state.subscriber,
            session_id,
            cursor,
            flt,
            state.keepalive_s,
            gate,
        ).events(),
    )
