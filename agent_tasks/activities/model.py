"""The model call of the tool-calling loop (``model_turn``): read the transcript by reference, ask
the model, return its turn (text, tool calls, token usage).

Providers: ``scripted``, a deterministic script registered on the worker (turn ``n`` answers the
task's ``n``-th call, or a function of the transcript does); ``openai``, an OpenAI-compatible chat
completions API (the ``openai`` extra, configured by ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``),
streamed with ``ModelSpec.stream``. HTTP 408, 409, 429 and 5xx are retried after the server's
``retry-after`` (``activities.retry_after``); others are not. Every turn, the scripted one's too,
passes ``chat_protocol.bounded_answer``.

Tokens go to the broker only (``activities.tokens``), marked with the call's attempt. A cancel
arrives in a heartbeat's answer (``CANCEL_BEAT_S``), leaves the response's ``async with`` and so
closes the HTTP connection; the workflow waits for that (``MODEL_CALL_CANCEL``), so no token is
published after the task's end.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from agent_tasks.activities.chat_protocol import (
    SseDecoder,
    StreamAssembler,
    bounded_answer,
    completion_turn,
)
from agent_tasks.activities.heartbeat import CANCEL_BEAT_S, heartbeating
from agent_tasks.activities.retry_after import asked_wait_s, retry_delay, too_long
from agent_tasks.activities.tokens import TokenPublisher, TokenStream, split_tokens
from agent_tasks.activities.transcript import chat_messages, shown
from agent_tasks.broker import Broker
from agent_tasks.contract import (
    Event,
    EventKind,
    ModelInput,
    ModelTurn,
    Role,
    ToolCall,
)
from agent_tasks.tasklog.reader import TaskReader
from agent_tasks.workflows.agents.registry import ToolSpec
from agent_tasks.workflows.agents.steps import MODEL_ACTIVITY

if TYPE_CHECKING:  # the driver is loaded by whoever makes the graph (an app's scripts import this)
    from agent_tasks.taskgraph.port import GraphStore

RETRYABLE_HTTP = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses of a model API that trying again can help."""

Script = Callable[[Sequence[Event]], ModelTurn]
"""A scripted model: the transcript -> the next turn (deterministic)."""


class ScriptedModel:
    """A script of turns: the task's ``n``-th model call gets ``turns[n]`` (past the end, the
    last)."""

    def __init__(self, turns: Sequence[ModelTurn]) -> None:
        self.turns = list(turns)

    def __call__(self, transcript: Sequence[Event]) -> ModelTurn:
        """The turn for the next model call of the task whose events are ``transcript``."""
        calls = sum(e.kind is EventKind.MESSAGE and e.role is Role.ASSISTANT for e in transcript)
        return self.turns[min(calls, len(self.turns) - 1)]


class ModelActivities:
    """The model activity with its dependencies.

    Args:
        client: to read the transcript from the task.
        graph: the graph store, for events of earlier runs.
        scripts: the scripted models by name.
        tools: the specs of the worker's tools (offered to an API model).
        broker: where the call's tokens go (None: nowhere).
    """

    def __init__(
        self,
        client: Client,
        graph: GraphStore,
        scripts: Mapping[str, Script],
        tools: Sequence[ToolSpec] = (),
        broker: Broker | None = None,
    ) -> None:
        self.client = client
        self.graph = graph
        self.scripts = dict(scripts)
        self.tools = {spec.name: spec for spec in tools}
        self.tokens = TokenPublisher(client, broker)

    @activity.defn(name=MODEL_ACTIVITY)
    async def model_turn(self, input: ModelInput) -> ModelTurn:
        """The model's next turn for the task's events 1 to ``up_to_seq``, heartbeating every
        ``CANCEL_BEAT_S`` so a cancel closes its HTTP request."""
        return await heartbeating(self._turn(input), every_s=CANCEL_BEAT_S)

    async def _turn(self, input: ModelInput) -> ModelTurn:
        """The provider's turn within ``bounded_answer`` (fallback call ids from the call's place in
        the task, stable across retries)."""
        turn = await self._answer(input)
        return bounded_answer(turn, f"{input.workflow_id}/{input.up_to_seq}")

    async def _answer(self, input: ModelInput) -> ModelTurn:
        reader = TaskReader(self.client, self.graph)
        transcript = shown(
            await reader.task_events(input.workflow_id, input.run_id, 0, input.up_to_seq)
        )
        attempt = activity.info().attempt
        async with self.tokens.stream(input.workflow_id, input.up_to_seq, attempt) as tokens:
            if input.model.provider == "scripted":
                script = self.scripts.get(input.model.model)
                if script is None:
                    raise ApplicationError(
                        f"no scripted model {input.model.model!r} on this worker",
                        non_retryable=True,
                    )
                turn = script(transcript)
                for token in split_tokens(turn.content):
                    tokens.send(token)
                return turn
            offered = [self.tools[name] for name in input.tools if name in self.tools]
            offered += [ToolSpec(**o.model_dump()) for o in input.mcp_tools]
            if input.model.stream:
                return await openai_streamed_turn(input, transcript, offered, tokens)
            return await openai_turn(input, transcript, offered)


def api_failure(err: Exception) -> ApplicationError:
    """The activity's error for an ``openai`` error: retryable after ``retry-after`` for HTTP
    408/409/429/5xx (not retried past ``MAX_SERVER_WAIT``, naming it), retryable for a lost
    connection or timeout, else non-retryable with the API's message."""
    import openai

    if isinstance(err, openai.APIStatusError):
        wait_s = asked_wait_s(err.response.headers, datetime.now(UTC))
        long = too_long(wait_s)
        said = err.body.get("message") if isinstance(err.body, dict) else None
        return ApplicationError(
            f"model API answered HTTP {err.status_code}{'' if long is None else f'; {long}'}: "
            f"{said or err.message}",
            type="ModelApiError",
            non_retryable=err.status_code not in RETRYABLE_HTTP or long is not None,
            next_retry_delay=retry_delay(wait_s),
        )
    return ApplicationError(f"model API unreachable: {err}", type="ModelApiError")


def _tool_specs(offered: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in offered
    ]


OPENAI_TIMEOUT_S = 100.0
"""Seconds a request may wait for the server's next bytes (the whole answer, or a stream's next
line), well inside ``MODEL_LONGEST_CALL`` so a hung server fails the attempt."""


def openai_client(timeout_s: float) -> Any:
    """The ``openai`` client of one model call, configured by its environment; ``max_retries=0``
    (the activity's retry policy retries, in the history) and ``timeout_s`` seconds per request. Use
    it as ``async with`` so its connections close."""
    import openai  # the optional ``openai`` extra; imported only by workers that use it

    return openai.AsyncOpenAI(max_retries=0, timeout=timeout_s)


def _request(
    input: ModelInput, transcript: Sequence[Event], offered: Sequence[ToolSpec]
) -> dict[str, Any]:
    """The request's arguments for ``chat.completions``."""
    import openai

    tools = _tool_specs(offered)
    return {
        "model": input.model.model,
        "messages": chat_messages(transcript, input.model.system),
        "tools": tools or openai.NOT_GIVEN,
    }


async def openai_turn(
    input: ModelInput,
    transcript: Sequence[Event],
    offered: Sequence[ToolSpec],
    *,
    timeout_s: float = OPENAI_TIMEOUT_S,
) -> ModelTurn:
    """One chat completion (``openai_client``), its body made into the turn by
    ``chat_protocol.completion_turn``.

    Args:
        input: the model call (model, system prompt).
        transcript: the events the model is shown (``activities.transcript.chat_messages``).
        offered: the tools offered.
        timeout_s: seconds the request may take.

    Raises:
        ApplicationError: ``api_failure``'s, and ``completion_turn``'s.
    """
    import openai  # the optional ``openai`` extra; imported only by workers that use it

    try:
        async with openai_client(timeout_s) as client:  # closed here, not by the collector
            raw = await client.chat.completions.with_raw_response.create(
                **_request(input, transcript, offered)
            )
            body = raw.http_response.json()
    except (openai.APIStatusError, openai.APIConnectionError) as err:
        raise api_failure(err) from err
    except ValueError as err:  # not JSON
        raise ApplicationError(
            f"the model API answered with a body that is not JSON: {err}", type="ModelApiError"
        ) from err
    if not isinstance(body, dict):
        raise ApplicationError("the model API answered without a choice", type="ModelApiError")
    return completion_turn(body)


async def openai_streamed_turn(
    input: ModelInput,
    transcript: Sequence[Event],
    offered: Sequence[ToolSpec],
    tokens: TokenStream,
    *,
    timeout_s: float = OPENAI_TIMEOUT_S,
) -> ModelTurn:
    """One streamed chat completion (usage asked for in the final chunk unless the server refuses
    ``stream_options`` with 400 or 422), each content delta sent to ``tokens``, the turn assembled
    by ``chat_protocol.StreamAssembler``; leaving the response's ``async with`` closes the
    connection.

    Raises:
        ApplicationError: ``api_failure``'s; retryable ``ModelStreamCut`` for a lost connection or
            a stream without its end; retryable ``ModelApiError`` for a chunk that is not JSON or an
            error in the stream; ``StreamAssembler.turn``'s.
    """
    import openai

    request = _request(input, transcript, offered)
    try:
        try:
            return await _read_stream(request, {"include_usage": True}, tokens, timeout_s)
        except openai.APIStatusError as err:
            if err.status_code not in (400, 422) or "stream_options" not in str(err.body):
                raise
            # a server that refuses stream_options (Groq, Mistral, some gateways): again
            # without it, the usage then zero unless the stream brings it anyway
            return await _read_stream(request, openai.NOT_GIVEN, tokens, timeout_s)
    except (openai.APIStatusError, openai.APIConnectionError) as err:
        raise api_failure(err) from err
    except _transport_errors() as err:
        raise ApplicationError(
            f"the model's stream was cut ({type(err).__name__}: {err}): the answer is incomplete",
            type="ModelStreamCut",
        ) from err


async def _read_stream(
    request: dict[str, Any], stream_options: Any, tokens: TokenStream, timeout_s: float
) -> ModelTurn:
    """One streamed request and its turn (``openai_streamed_turn``; errors not mapped)."""
    tools = request.get("tools")
    offered = [t["function"]["name"] for t in tools] if isinstance(tools, list) else []
    assembler = StreamAssembler(offered=frozenset(offered))
    decoder = SseDecoder()
    async with (
        openai_client(timeout_s) as client,  # closed here, not by the collector
        client.chat.completions.with_streaming_response.create(
            **request, stream=True, stream_options=stream_options
        ) as response,
    ):
        async for line in response.iter_lines():
            data = decoder.line(line)
            if data is not None and _take(data, assembler, tokens):
                break
        else:
            data = decoder.end()
            if data is not None:
                _take(data, assembler, tokens)
    return assembler.turn()


def _transport_errors() -> tuple[type[Exception], ...]:
    """The errors of a connection lost while a body is read: ``TransportError`` of the HTTP client
    the installed ``openai`` reads with (``httpx2`` or ``httpx``), unwrapped while streaming."""
    found: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name).TransportError)
        except ImportError:
            continue
    return tuple(found)


def _take(data: str, assembler: StreamAssembler, tokens: TokenStream) -> bool:
    """Take one event's data of a stream; True at ``[DONE]`` (the stream's end)."""
    if data.strip() == "[DONE]":
        assembler.done()
        return True
    try:
        chunk = json.loads(data)
    except ValueError as err:
        raise ApplicationError(
            f"the model's stream sent a chunk that is not JSON: {data[:200]!r}",
            type="ModelApiError",
        ) from err
    if isinstance(chunk, dict):
        tokens.send(assembler.add(chunk))
    return False


def tool_call(name: str, arguments: Mapping[str, Any], call_id: str) -> ToolCall:
    """A scripted tool call (arguments as JSON text)."""
    return ToolCall(name=name, arguments=json.dumps(dict(arguments)), call_id=call_id)
