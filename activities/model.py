"""The model call of the tool-calling loop (``model_turn``): read the transcript by reference,
ask the model, return its turn (text, tool calls, token usage).

Providers:
- ``scripted``: a deterministic script registered on the worker by name, for tests and the
  demo; turn ``n`` of a ``ScriptedModel`` answers the ``n``-th model call of the task (the
  assistant messages already in the transcript say which call this is), or a function of the
  transcript does.
- ``openai``: an OpenAI-compatible chat completions API through the ``openai`` package
  (install the ``openai`` extra), configured by its own environment (``OPENAI_API_KEY``,
  ``OPENAI_BASE_URL``). HTTP 408, 409, 429 and 5xx are retryable (the activity's retry policy,
  after the server's ``retry-after`` when it sends one); other errors are not. With
  ``ModelSpec.stream`` the response is streamed (``stream=True``): each content delta is
  published as a token as it arrives, the turn is assembled from the deltas (tool calls by
  their index), and the usage comes from the stream's final chunk (``stream_options``'
  ``include_usage``).

Tokens (``activities.tokens``): with a broker, the scripted provider publishes its turn's text
word by word and the streamed ``openai`` path each delta, the same way
``starter.tasks.TaskEmitter.emit_token`` does; they reach the HTTP API's streams and nothing
else (the turn is recorded whole, as one event, when the call returns).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.tokens import TokenPublisher, TokenStream, split_tokens
from activities.transcript import chat_messages, shown
from broker import Broker
from tasklog.reader import TaskReader
from workflows.agents.registry import ToolSpec
from workflows.agents.steps import MODEL_ACTIVITY
from workflows.models import (
    Event,
    EventKind,
    ModelInput,
    ModelTurn,
    Role,
    TokenUsage,
    ToolCall,
)

if TYPE_CHECKING:  # the driver is loaded by whoever makes the graph (an app's scripts import this)
    from taskgraph.graph import TaskGraph

RETRYABLE_HTTP = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses of a model API that trying again can help."""

Script = Callable[[Sequence[Event]], ModelTurn]
"""A scripted model: the transcript -> the next turn (deterministic)."""


class ScriptedModel:
    """A script of turns: the ``n``-th model call of a task gets ``turns[n]`` (the last one
    again past the end)."""

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
        graph: Neo4j, for events of earlier runs.
        scripts: the scripted models by name.
        tools: the specs of the worker's tools (offered to an API model).
        broker: where the call's tokens go (None: nowhere).
    """

    def __init__(
        self,
        client: Client,
        graph: TaskGraph,
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
        """The model's next turn for the task's events 1 to ``up_to_seq``."""
        reader = TaskReader(self.client, self.graph)
        transcript = shown(
            await reader.task_events(input.workflow_id, input.run_id, 0, input.up_to_seq)
        )
        async with self.tokens.stream(input.workflow_id, input.up_to_seq) as tokens:
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
            if input.model.stream:
                return await openai_streamed_turn(input, transcript, offered, tokens)
            return await openai_turn(input, transcript, offered)


def api_failure(err: Exception) -> ApplicationError:
    """The activity's error for an error of the ``openai`` package (the module's mapping):
    retryable after the server's ``retry-after`` for HTTP 408/409/429/5xx, retryable for a
    lost connection or a request past its timeout, non-retryable otherwise (its message the
    API's own)."""
    import openai

    if isinstance(err, openai.APIStatusError):
        retry_after = err.response.headers.get("retry-after")
        delay = timedelta(seconds=float(retry_after)) if retry_after else None
        said = err.body.get("message") if isinstance(err.body, dict) else None
        return ApplicationError(
            f"model API answered HTTP {err.status_code}: {said or err.message}",
            type="ModelApiError",
            non_retryable=err.status_code not in RETRYABLE_HTTP,
            next_retry_delay=delay,
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
"""Seconds one chat completion request may take (inside the model activity's 2-minute
start-to-close timeout, so a hung server fails the attempt, which Temporal then retries)."""


def openai_client(timeout_s: float) -> Any:
    """The ``openai`` client of one model call, configured by its environment
    (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``): it retries nothing itself (``max_retries=0``:
    the activity's retry policy does, so a retry is in the history and waits the server's
    ``retry-after``) and gives a request ``timeout_s`` seconds."""
    import openai  # the optional ``openai`` extra; imported only by workers that use it

    return openai.AsyncOpenAI(max_retries=0, timeout=timeout_s)


async def openai_turn(
    input: ModelInput,
    transcript: Sequence[Event],
    offered: Sequence[ToolSpec],
    *,
    timeout_s: float = OPENAI_TIMEOUT_S,
) -> ModelTurn:
    """One chat completion of an OpenAI-compatible API (``openai_client``), errors mapped at
    the activity edge.

    Args:
        input: the model call (model, system prompt).
        transcript: the events the model is shown (``activities.transcript.chat_messages``).
        offered: the tools offered.
        timeout_s: seconds the request may take.

    Raises:
        ApplicationError: retryable (with ``next_retry_delay`` from ``retry-after``) for HTTP
            408/409/429/5xx, a lost connection and a request past ``timeout_s``;
            non-retryable otherwise (``api_failure``).
    """
    import openai  # the optional ``openai`` extra; imported only by workers that use it

    tools = _tool_specs(offered)
    try:
        response = await openai_client(timeout_s).chat.completions.create(
            model=input.model.model,
            messages=chat_messages(transcript, input.model.system),
            tools=tools or openai.NOT_GIVEN,
        )
    except (openai.APIStatusError, openai.APIConnectionError) as err:
        raise api_failure(err) from err
    choice = response.choices[0].message
    usage = response.usage
    return ModelTurn(
        content=choice.content or "",
        tool_calls=[
            ToolCall(name=call.function.name, arguments=call.function.arguments, call_id=call.id)
            for call in choice.tool_calls or []
            if call.type == "function"
        ],
        usage=TokenUsage(
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        ),
    )


async def openai_streamed_turn(
    input: ModelInput,
    transcript: Sequence[Event],
    offered: Sequence[ToolSpec],
    tokens: TokenStream,
    *,
    timeout_s: float = OPENAI_TIMEOUT_S,
) -> ModelTurn:
    """One streamed chat completion (``stream=True``): each content delta goes to ``tokens``
    as it arrives; the turn is the deltas joined, its tool calls assembled by their ``index``
    (id and name from the first delta of each, the arguments' text concatenated), its usage
    from the final chunk (``include_usage``; zero when the API sends none).

    Raises:
        ApplicationError: as ``openai_turn`` (``api_failure``), also for a stream cut short.
    """
    import openai

    tools = _tool_specs(offered)
    content: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage = TokenUsage()
    try:
        stream = await openai_client(timeout_s).chat.completions.create(
            model=input.model.model,
            messages=chat_messages(transcript, input.model.system),
            tools=tools or openai.NOT_GIVEN,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.usage is not None:
                usage = TokenUsage(
                    input_tokens=chunk.usage.prompt_tokens,
                    output_tokens=chunk.usage.completion_tokens,
                )
            for choice in chunk.choices:
                if choice.delta.content:
                    content.append(choice.delta.content)
                    tokens.send(choice.delta.content)
                for delta in choice.delta.tool_calls or []:
                    call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = call["id"] or delta.id or ""
                    if delta.function is not None:
                        call["name"] += delta.function.name or ""
                        call["arguments"] += delta.function.arguments or ""
    except (openai.APIStatusError, openai.APIConnectionError) as err:
        raise api_failure(err) from err
    return ModelTurn(
        content="".join(content),
        tool_calls=[
            ToolCall(
                name=call["name"], arguments=call["arguments"] or "{}", call_id=call["id"] or None
            )
            for _, call in sorted(calls.items())
        ],
        usage=usage,
    )


def tool_call(name: str, arguments: Mapping[str, Any], call_id: str) -> ToolCall:
    """A scripted tool call (arguments as JSON text)."""
    return ToolCall(name=name, arguments=json.dumps(dict(arguments)), call_id=call_id)
