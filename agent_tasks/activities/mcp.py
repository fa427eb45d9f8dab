"""MCP servers as an agent's tool sources: the listing of a server's tools and the call of one, each
an activity (``AgentSpec.mcp_servers``; ``docs/mcp.md`` has the failures, cancels and sessions for
users).

- **Listing** (``MCP_LIST_ACTIVITY``, once per agent run): the tools as specs (``ToolSpec``) named
  ``{server}_{tool}``, recorded in the history so a replay decides every step as it was decided;
  tools whose prefixed name is no ``AgentName``, or past ``MAX_LISTED_CHARS``, are left out. A
  failed listing is ``McpServerUnavailable``, retried; its last attempt fails the run.
- **Call** (``MCP_CALL_ACTIVITY``): a step like any tool's, the step's idempotency key in the
  request's ``_meta`` (``IDEMPOTENCY_META``) and, over HTTP, the ``Idempotency-Key`` header. The
  result is the server's blocks as text (``result_text``); ``isError`` fails the step
  (``McpToolError``, not retried). Once sent, only the server's own answer (a result or its JSON-RPC
  error) counts; any other end (lost connection, unparsable answer, ``SDK_STAND_INS``, ``_Faults``)
  is ``ToolOutcomeUnknown`` (``registry.OUTCOME_UNKNOWN``).
- **Cancel**: the call and listing heartbeat every ``CANCEL_BEAT_S``; a cancel cancels the SDK's
  request, which sends the server ``notifications/cancelled``.
- **Sessions**: stateless by default (a session per listing and call). A ``stateful`` server has one
  session per agent run, opened by ``MCP_OPEN_ACTIVITY`` on the worker that takes it, held by
  (workflow run, server name), and used through that worker's ``session_queue``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_tasks.activities.heartbeat import CANCEL_BEAT_S, heartbeating
from agent_tasks.activities.http_tool import IDEMPOTENCY_HEADER
from agent_tasks.activities.tools import output
from agent_tasks.contract import McpCall, McpServer, ToolInput, ToolOutput, bound_text
from agent_tasks.contract.errors import AgentTasksError
from agent_tasks.workflows.agents.registry import (
    MCP_CALL_ACTIVITY,
    MCP_CLOSE_ACTIVITY,
    MCP_LIST_ACTIVITY,
    MCP_OPEN_ACTIVITY,
    MCP_SESSION_LOST,
    OUTCOME_UNKNOWN,
    TOOL_ARGUMENTS_INVALID,
    ToolSpec,
    ToolSpecs,
)

if TYPE_CHECKING:  # the SDK (and the OpenTelemetry it loads) is imported by the calls only
    import httpx2
    from mcp import Client
    from mcp.types import CallToolResult, RequestParamsMeta, Tool

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

IDEMPOTENCY_META = "idempotency_key"
"""The ``_meta`` key carrying the step's idempotency key: ``{"_meta": {"idempotency_key":
...}}``."""
MCP_TOOL_ERROR = "McpToolError"
"""ApplicationError type of a call the server answered as an error (``isError`` or a JSON-RPC
error): not retried; the model reads the text."""
MCP_SERVER_REFUSED = "McpServerRefused"
"""ApplicationError type of a server this worker cannot use as named (header set not configured):
not retried."""
MCP_SERVER_UNAVAILABLE = "McpServerUnavailable"
"""ApplicationError type of a failed listing (server not started, unreachable, closed, or an error
answer): retried by ``registry.MCP_LIST_RETRY``; the last attempt ends the agent's run."""
MAX_LISTED_CHARS = 64_000
"""Characters of one server's listed specs (JSON) a run keeps: they are recorded in the history and
carried by every model call's input."""


def tool_spec(server: McpServer, tool: Tool) -> ToolSpec:
    """The spec of a server's tool: named ``{server}_{tool}``, idempotent by the server's rule or
    the tool's ``idempotentHint``/``readOnlyHint``, asked about by the server's ``approval`` rule.

    Raises:
        ValidationError: the prefixed name is not a tool name.
    """
    hints = tool.annotations
    hinted = hints is not None and bool(hints.idempotent_hint or hints.read_only_hint)
    return ToolSpec(
        name=f"{server.name}_{tool.name}",
        description=tool.description or "",
        parameters=tool.input_schema,
        idempotent=server.named(server.idempotent, tool.name) or hinted,
        start_to_close_s=server.start_to_close_s,
        heartbeat_s=server.heartbeat_s,
        max_attempts=server.max_attempts,
        approval=server.named(server.approval, tool.name),
        mcp=McpCall(server=server, tool=tool.name),
    )


def result_text(result: CallToolResult) -> str:
    """A call's result as text the model reads, a line per block (bounded by
    ``activities.tools.output``): text as it is; an embedded text resource as ``[resource URI]`` and
    its text; binary data by type, URI, MIME type and size, never its bytes; a link as ``[resource
    URI]``. With no content, the structured content as JSON."""
    from mcp.types import TextResourceContents

    parts: list[str] = []
    for block in result.content:
        if block.type == "text":
            parts.append(block.text)
        elif block.type == "resource_link":
            parts.append(f"[resource {block.uri}]")
        elif block.type == "resource":
            embedded = block.resource
            if isinstance(embedded, TextResourceContents):
                parts.append(f"[resource {embedded.uri}]\n{embedded.text}")
            else:
                parts.append(_binary(f"resource {embedded.uri}", embedded.mime_type, embedded.blob))
        elif block.type in ("image", "audio"):
            parts.append(_binary(block.type, block.mime_type, block.data))
        else:
            parts.append(f"[{block.type}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


def _binary(what: str, mime_type: str | None, data: str) -> str:
    return f"[{what} {mime_type or 'of no type'}, {len(data)} base64 characters]"


def _leaves(err: BaseException) -> list[BaseException]:
    """The exceptions inside ``err``'s nested exception groups (``err`` when it is none)."""
    if isinstance(err, BaseExceptionGroup):
        return [leaf for inner in err.exceptions for leaf in _leaves(inner)]
    return [err]


SDK_STAND_INS: tuple[tuple[int, str], ...] = (
    (-32700, "Failed to parse JSON response"),  # PARSE_ERROR: a body the SDK could not parse
    (-32700, "Failed to parse SSE message"),  # and an event of a stream
    (-32603, "Server returned an error response"),  # INTERNAL_ERROR: a status >= 400
    (-32600, "Session terminated"),  # INVALID_REQUEST: 404 for the session's id
    (-32601, "Not Found"),  # METHOD_NOT_FOUND: 404 before a session
    (-32600, "server answered a request with 202 Accepted"),
    (-32600, "Unexpected content type"),  # neither JSON nor an event stream
    (-32600, "Redirect to "),  # a redirect the SDK does not follow
    (-32001, "Request "),  # REQUEST_TIMEOUT: the client's own read timeout
)
"""The JSON-RPC errors (code, message start) the MCP SDK makes up over HTTP for a request that got
no JSON-RPC answer of the server's own; every ``CONNECTION_CLOSED`` error counts too. A call that
met one after it was sent has an unknown outcome."""
CONNECTION_CLOSED = -32000
"""``mcp.types.CONNECTION_CLOSED``."""


def _servers_answer(err: Exception) -> bool:
    """Whether the SDK's ``MCPError`` ``err`` is the server's own answer (not ``CONNECTION_CLOSED``
    nor one of ``SDK_STAND_INS``)."""
    code, message = getattr(err, "code", None), getattr(err, "message", None)
    if code == CONNECTION_CLOSED or not isinstance(message, str):
        return False
    return not any(code == made and message.startswith(start) for made, start in SDK_STAND_INS)


def _unknown(name: str, err: BaseException, after: str = "") -> ApplicationError:
    """The ``ToolOutcomeUnknown`` of a call of ``name`` sent and never answered by the server
    (``err``: what came instead), ``after`` said last."""
    return ApplicationError(
        f"{name} got no answer of the server's own after the call was sent "
        f"({_cause(err)}){after}: the server may have performed the call",
        type=OUTCOME_UNKNOWN,
    )


def _cause(err: BaseException) -> str:
    """What ended a call, for its text: each exception of ``err``'s groups, an ``MCPError`` by code
    and message, at most 1,000 characters."""
    parts = []
    for leaf in _leaves(err):
        code, message = getattr(leaf, "code", None), getattr(leaf, "message", None)
        if isinstance(code, int) and isinstance(message, str):
            parts.append(f"{type(leaf).__name__} {code}: {message}")
        else:
            parts.append(str(leaf) if isinstance(leaf, _Unreadable) else repr(leaf))
    return "; ".join(parts)[:1_000]


class _Unreadable(AgentTasksError):
    """A transport fault that arrived while a call waited (``_Faults.watch``)."""

    def __init__(self, fault: Exception) -> None:
        super().__init__(f"an answer the MCP client could not read: {fault!r}"[:1_000])


class _Faults:
    """The lines of a stdio server its SDK could not parse (the SDK drops them, so a call whose
    answer it was would wait for its timeout). ``watch`` ends a call once such a line reads as a
    JSON-RPC answer (``_an_answer``); others (log lines) are ignored. A stateful session's calls
    share one."""

    def __init__(self) -> None:
        self._waiting: set[asyncio.Future[Exception]] = set()

    async def __call__(self, message: object) -> None:
        if isinstance(message, Exception) and _an_answer(message):
            for waiter in self._waiting:
                if not waiter.done():
                    waiter.set_result(message)

    async def watch(self, call: Awaitable[_T]) -> _T:
        """``call``'s result.

        Raises:
            _Unreadable: a fault arrived first (``call`` is cancelled).
        """
        fault: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
        running = asyncio.ensure_future(call)
        self._waiting.add(fault)
        try:
            either: list[asyncio.Future[Any]] = [running, fault]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiting.discard(fault)
            if not running.done():
                running.cancel()
                await asyncio.wait([running])
        if running.cancelled() and fault.done():
            raise _Unreadable(fault.result())
        return running.result()


def _an_answer(fault: Exception) -> bool:
    """Whether the unparsed line (``fault``, a ``ValidationError`` holding it) reads as a JSON-RPC
    answer; a fault without the line counts as one."""
    errors = getattr(fault, "errors", None)
    try:
        line = errors()[0].get("input") if callable(errors) else None
    except (IndexError, TypeError, AttributeError):
        line = None
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    if not isinstance(line, str):
        return True
    return '"jsonrpc"' in line and ('"result"' in line or '"error"' in line)


async def _key_header(request: httpx2.Request) -> None:
    """The HTTP request hook: a request whose params carry ``_meta`` ``IDEMPOTENCY_META`` also gets
    it as ``Idempotency-Key``, read from each request's body so a shared session sends each call's
    own."""
    try:
        message = json.loads(request.content) if request.method == "POST" else None
    except ValueError:  # not a JSON-RPC message: nothing to carry
        return
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    key = meta.get(IDEMPOTENCY_META) if isinstance(meta, dict) else None
    if isinstance(key, str):
        request.headers[IDEMPOTENCY_HEADER] = key


async def _beating(work: Awaitable[_T]) -> _T:
    """``work``, beating every ``CANCEL_BEAT_S`` when the activity has a heartbeat timeout."""
    every_s = CANCEL_BEAT_S if activity.info().heartbeat_timeout else None
    return await heartbeating(work, every_s=every_s)


def _run_key(server_name: str) -> tuple[str, str]:
    """The key of a session: the activity's workflow run id and the server's name."""
    return activity.info().workflow_run_id or "", server_name


class _Held:
    """A stateful server's session, held open by a task of its own (the SDK's client is entered and
    left in one task) until ``closing`` is set or the session ends."""

    def __init__(self) -> None:
        self.client: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.closing = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class McpActivities:
    """The activities of MCP servers' tools: the listing and the call.

    Args:
        arguments: reads a call's arguments (``ToolActivities.arguments``).
        headers: the worker's header sets by name (``McpServer.headers``), e.g.
            ``{"billing": {"Authorization": "Bearer ..."}}``; never in a history.
    """

    def __init__(
        self,
        arguments: Callable[[ToolInput], Awaitable[str]],
        headers: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.arguments = arguments
        self.headers = {name: dict(values) for name, values in (headers or {}).items()}
        self.session_queue = f"mcp-sessions@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4()}"
        """This worker's own task queue for stateful sessions, polled by ``session_activities``."""
        self._held: dict[tuple[str, str], _Held] = {}
        """Open stateful sessions by (workflow run id, server name)."""
        self._faults: dict[int, _Faults] = {}
        """The unparsed lines of each open stdio client, by its ``id``."""

    def activities(self) -> list[Callable[..., Any]]:
        """The activity functions to register on the worker's task queue."""
        return [self.list_tools, self.call_tool, self.open_session]

    def session_activities(self) -> list[Callable[..., Any]]:
        """The activity functions to register on ``session_queue``."""
        return [self.list_tools, self.call_tool, self.close_session]

    @activity.defn(name=MCP_OPEN_ACTIVITY)
    async def open_session(self, server: McpServer) -> str:
        """Open ``server``'s session for the activity's workflow run (kept if held already) and
        return ``session_queue``, where its listing, calls and close are scheduled.

        Raises:
            ApplicationError: ``McpServerUnavailable`` (retried), ``McpServerRefused``.
            asyncio.CancelledError: the activity was cancelled (``MCP_OPEN_CANCEL``); the opening
                session is closed first.
        """
        key = _run_key(server.name)
        if key not in self._held:
            held = self._held[key] = _Held()
            held.task = asyncio.create_task(self._hold(key, held, server))
        bound = activity.info().start_to_close_timeout
        within_s = bound.total_seconds() if bound else None
        try:
            async with asyncio.timeout(within_s):
                await _beating(asyncio.shield(self._held[key].client))
        except ApplicationError:
            raise
        except asyncio.CancelledError:  # the task's cancel (``MCP_OPEN_CANCEL``): stop opening
            await self._close(key)
            raise
        except Exception as err:
            await self._close(key)
            causes = "; ".join(repr(leaf) for leaf in _leaves(err))
            raise ApplicationError(
                f"MCP server {server.name!r} cannot open a session: {causes[:1_000]}",
                type=MCP_SERVER_UNAVAILABLE,
            ) from err
        return self.session_queue

    async def _hold(self, key: tuple[str, str], held: _Held, server: McpServer) -> None:
        try:
            async with self.session(server) as client:
                held.client.set_result(client)
                await held.closing.wait()
        except BaseException as err:
            if not held.client.done() and isinstance(err, Exception):
                held.client.set_exception(err)
            if not isinstance(err, Exception):
                held.client.cancel()  # cancelled while it opened: nobody waits for it now
                raise
            _log.warning("MCP session %r ended: %r", key, err)
        finally:
            if self._held.get(key) is held:
                del self._held[key]

    @activity.defn(name=MCP_CLOSE_ACTIVITY)
    async def close_session(self, server_name: str) -> None:
        """Close this workflow run's session of ``server_name``, if open."""
        await self._close(_run_key(server_name))

    async def _close(self, key: tuple[str, str]) -> None:
        """Close the session ``key``: an open one by its holder, one still opening by cancelling
        it."""
        held = self._held.pop(key, None)
        if held is not None and held.task is not None:
            held.closing.set()
            if not held.client.done():
                held.task.cancel()
            await asyncio.wait([held.task])

    async def close_sessions(self) -> None:
        """Close every session this worker holds (when it stops)."""
        for key in list(self._held):
            await self._close(key)

    @asynccontextmanager
    async def client(self, server: McpServer) -> AsyncIterator[Client]:
        """The client of a listing or call of ``server``: a new ``session``, or a stateful server's
        held one.

        Raises:
            ApplicationError: ``McpSessionLost`` (not retried): no session held for the run.
        """
        if not server.stateful:
            async with self.session(server) as client:
                yield client
            return
        held = self._held.get(_run_key(server.name))
        opened = None if held is None else held.client
        if opened is None or not opened.done() or opened.cancelled() or opened.exception():
            raise ApplicationError(
                f"this worker holds no session of MCP server {server.name!r} for the run",
                type=MCP_SESSION_LOST,
                non_retryable=True,
            )
        yield opened.result()

    @asynccontextmanager
    async def session(self, server: McpServer) -> AsyncIterator[Client]:
        """A connected client of ``server``: a started stdio program (unparsed lines watched:
        ``_Faults``), or an HTTP session with the named header set and each call's key
        (``_key_header``).

        Raises:
            ApplicationError: ``McpServerRefused``: the header set is not configured here.
        """
        from mcp import Client, StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        if server.command is not None:
            params = StdioServerParameters(
                command=server.command, args=server.args, env=server.env or None
            )
            faults = _Faults()
            async with Client(params, cache=None, message_handler=faults) as client:
                self._faults[id(client)] = faults
                try:
                    yield client
                finally:
                    del self._faults[id(client)]
            return
        assert server.url is not None  # the spec's validator: one of command and url
        headers: dict[str, str] = {}
        if server.headers is not None:
            if server.headers not in self.headers:
                raise ApplicationError(
                    f"MCP server {server.name!r}: no header set {server.headers!r} in this "
                    "worker's configuration",
                    type=MCP_SERVER_REFUSED,
                    non_retryable=True,
                )
            headers.update(self.headers[server.headers])
        http_client = create_mcp_http_client(headers=headers)
        http_client.event_hooks["request"].append(_key_header)
        async with (
            http_client as http,
            Client(streamable_http_client(server.url, http_client=http), cache=None) as client,
        ):
            yield client

    @activity.defn(name=MCP_LIST_ACTIVITY)
    async def list_tools(self, server: McpServer) -> ToolSpecs:
        """The specs of the tools ``server`` lists (all pages; only ``McpServer.tools`` when set),
        named ``{server}_{tool}`` (``tool_spec``).

        Raises:
            ApplicationError: ``McpServerUnavailable`` (retried: not started, unreachable, an error
                answer, or no answer within the attempt, which bounds it here too),
                ``McpServerRefused`` (not retried).
            asyncio.CancelledError: the activity was cancelled (``MCP_LIST_CANCEL``); the program is
                stopped or the session closed first.
        """
        bound = activity.info().start_to_close_timeout
        within_s = bound.total_seconds() if bound else None
        try:
            async with asyncio.timeout(within_s):
                listed = await _beating(self._listing(server))
        except ApplicationError:
            raise
        except TimeoutError as err:  # the SDK's own bounds wait longer (or never end)
            raise ApplicationError(
                f"MCP server {server.name!r} cannot list its tools: no answer within "
                f"{within_s:g} s (the attempt's start-to-close timeout)",
                type=MCP_SERVER_UNAVAILABLE,
            ) from err
        except Exception as err:  # the SDK's task groups wrap what happened in groups
            causes = "; ".join(repr(leaf) for leaf in _leaves(err))
            raise ApplicationError(
                f"MCP server {server.name!r} cannot list its tools: {causes[:1_000]}",
                type=MCP_SERVER_UNAVAILABLE,
            ) from err
        specs: dict[str, ToolSpec] = {}
        size = 0
        for tool in listed:
            if server.tools is not None and tool.name not in server.tools:
                continue
            try:
                spec = tool_spec(server, tool)
            except ValidationError as err:
                activity.logger.warning("MCP tool %r left out: %s", tool.name, err)
                continue
            size += len(spec.model_dump_json())
            if size > MAX_LISTED_CHARS:
                activity.logger.warning(
                    "MCP server %r: tools from %r on left out (over %d characters)",
                    server.name,
                    tool.name,
                    MAX_LISTED_CHARS,
                )
                break
            specs[spec.name] = spec
        return ToolSpecs(specs=specs)

    async def _listing(self, server: McpServer) -> list[Tool]:
        """Every page of the tools ``server`` lists."""
        listed: list[Tool] = []
        async with self.client(server) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                listed += page.tools
                cursor = page.next_cursor
                if not cursor:
                    return listed

    @activity.defn(name=MCP_CALL_ACTIVITY)
    async def call_tool(self, input: ToolInput) -> ToolOutput:
        """Call the MCP tool ``input.mcp`` with the call's arguments and the step's idempotency key,
        heartbeating every ``CANCEL_BEAT_S`` so a cancel reaches it.

        Raises:
            ApplicationError: ``ToolArgumentsInvalid`` (not a JSON object), ``McpToolError`` (the
                server's error answer), ``McpServerRefused``; ``ToolOutcomeUnknown`` (sent, no
                answer of the server's own).
        """
        return await _beating(self._call(input))

    # Long: the call in its order: arguments, the request with its key, then each way it can
    # end (the server's error, not reached, no answer of the server's, a stdio program ended)
    async def _call(self, input: ToolInput) -> ToolOutput:
        call = input.mcp
        if call is None:
            raise ApplicationError("the input names no MCP tool", non_retryable=True)
        text = await self.arguments(input)
        try:
            arguments = json.loads(text or "{}")
        except ValueError as err:
            arguments = err
        if not isinstance(arguments, dict):
            raise ApplicationError(
                f"arguments of {call.server.name}_{call.tool} are invalid: not a JSON object",
                type=TOOL_ARGUMENTS_INVALID,
                non_retryable=True,
            )
        from mcp import MCPError

        name = f"{call.tool!r} of MCP server {call.server.name!r}"
        sent = False
        try:
            async with self.client(call.server) as client:
                sent = True
                request = client.call_tool(
                    call.tool,
                    arguments,
                    meta=cast("RequestParamsMeta", {IDEMPOTENCY_META: input.idempotency_key}),
                )
                faults = self._faults.get(id(client))
                result = await (request if faults is None else faults.watch(request))
        except ApplicationError:
            raise
        except Exception as err:  # the SDK's task groups wrap what happened in groups
            answers = [e for e in _leaves(err) if isinstance(e, MCPError)]
            answer = next((e for e in answers if _servers_answer(e)), None)
            if answer is not None:  # the server answered the request with a JSON-RPC error
                raise ApplicationError(
                    f"{name} answered the call with an error (JSON-RPC {answer.code}): "
                    f"{bound_text(answer.message).text}",
                    type=MCP_TOOL_ERROR,
                    non_retryable=True,
                ) from err
            if not sent:
                raise  # the server was not reached: the retry policy decides
            if call.server.command is None or any(
                isinstance(leaf, _Unreadable) for leaf in _leaves(err)
            ):
                raise _unknown(name, err) from err
            if not call.server.stateful:
                ended = "; the server's program ended before it answered"
                raise _unknown(name, err, ended) from err
            # a stateful stdio session's pipe broke: its program ended; the session is gone
            await self._close(_run_key(call.server.name))
            ended = (
                f"; the server's program ended, and with it the session and its state: the "
                f"next call fails {MCP_SESSION_LOST} without running, the one after it opens a "
                "new session"
            )
            raise _unknown(name, err, ended) from err
        if result.is_error:
            raise ApplicationError(
                f"{name} answered with an error: {bound_text(result_text(result)).text}",
                type=MCP_TOOL_ERROR,
                non_retryable=True,
            )
        return output(result_text(result))
