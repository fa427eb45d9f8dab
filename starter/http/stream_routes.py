"""The HTTP API's live streams: a task's events, or a session's, as Server-Sent Events
(``starter.http.streams``), each stream holding one of its key's slots while it is open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent, format_sse_event
from starlette.background import BackgroundTask

from starter.http.calls import ERRORS, Call, Caller, TaskName, name_of
from starter.http.errors import ApiError
from starter.http.sessions import SessionStream, parse_cursor
from starter.http.streams import StreamFilter, task_stream
from workflows.models import EventKind

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


def sse(call: Caller, events: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    """An SSE response of ``events`` holding one of the key's stream slots while it is open."""
    state = call.request.app.state.api
    state.slots.take(call.key.key_id)
    given_back = False

    async def give_back() -> None:
        nonlocal given_back
        if not given_back:
            given_back = True
            state.slots.give_back(call.key.key_id)

    release = BackgroundTask(give_back)
    return EventSourceResponse(
        _encoded(events, release),
        background=release,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/tasks/{task_id}/stream",
    responses={200: STREAM_DOC, **ERRORS},
    response_class=Response,
    tags=["streams"],
)
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
    if last_event_id is not None:
        if not last_event_id.isdigit():
            raise ApiError(422, "invalid_argument", "Last-Event-ID: a seq (the last update's id)")
        after_seq = int(last_event_id)
    if not (await call.history.get_task(name)).found:
        raise ApiError.task_not_found()
    state = call.request.app.state.api
    events = task_stream(state.feeds, call.history, name, after_seq, flt, state.keepalive_s)
    return sse(call, events)


@router.get(
    "/sessions/{session_id}/stream",
    responses={200: STREAM_DOC, **ERRORS},
    response_class=Response,
    tags=["streams"],
)
async def stream_session(
    call: Call,
    session_id: str,
    flt: Filter,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Every task of the session as SSE: the tasks open now from now on, the ones that
    start later from their first event; ``update`` ids are a cursor (``Last-Event-ID``
    resumes each task), each task's end is its ``done``, ``failed`` or ``cancelled``."""
    cursor: dict[str, int] = {}
    if last_event_id is not None:
        parsed = parse_cursor(last_event_id)
        if parsed is None:
            raise ApiError(422, "invalid_argument", "Last-Event-ID: not a session stream's id")
        cursor = parsed
    state = call.request.app.state.api
    stream = SessionStream(
        state.feeds, call.history, state.subscriber, session_id, cursor, flt, state.keepalive_s
    )
    return sse(call, stream.events())
