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
  after the server's ``retry-after`` when it sends one); other errors are not.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.transcript import chat_messages, shown
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
    """

    def __init__(
        self,
        client: Client,
        graph: TaskGraph,
        scripts: Mapping[str, Script],
        tools: Sequence[ToolSpec] = (),
    ) -> None:
        self.client = client
        self.graph = graph
        self.scripts = dict(scripts)
        self.tools = {spec.name: spec for spec in tools}

    @activity.defn(name=MODEL_ACTIVITY)
    async def model_turn(self, input: ModelInput) -> ModelTurn:
        """The model's next turn for the task's events 1 to ``up_to_seq``."""
        reader = TaskReader(self.client, self.graph)
        transcript = shown(
            await reader.task_events(input.workflow_id, input.run_id, 0, input.up_to_seq)
        )
        if input.model.provider == "scripted":
            script = self.scripts.get(input.model.model)
            if script is None:
                raise ApplicationError(
                    f"no scripted model {input.model.model!r} on this worker", non_retryable=True
                )
            return script(transcript)
        offered = [self.tools[name] for name in input.tools if name in self.tools]
        return await openai_turn(input, transcript, offered)


OPENAI_TIMEOUT_S = 100.0
"""Seconds one chat completion request may take (inside the model activity's 2-minute
start-to-close timeout, so a hung server fails the attempt, which Temporal then retries)."""


async def openai_turn(
    input: ModelInput,
    transcript: Sequence[Event],
    offered: Sequence[ToolSpec],
    *,
    timeout_s: float = OPENAI_TIMEOUT_S,
) -> ModelTurn:
    """One chat completion of an OpenAI-compatible API, errors mapped at the activity edge.
    The ``openai`` client itself retries nothing (``max_retries=0``): the activity's retry
    policy does, so a retry is in the history and waits the server's ``retry-after``.

    Args:
        input: the model call (model, system prompt).
        transcript: the events the model is shown (``activities.transcript.chat_messages``).
        offered: the tools offered.
        timeout_s: seconds the request may take.

    Raises:
        ApplicationError: retryable (with ``next_retry_delay`` from ``retry-after``) for HTTP
            408/409/429/5xx, a lost connection and a request past ``timeout_s``;
            non-retryable otherwise (its message the API's own).
    """
    import openai  # the optional ``openai`` extra; imported only by workers that use it

    tools = [
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
    try:
        api = openai.AsyncOpenAI(max_retries=0, timeout=timeout_s)
        response = await api.chat.completions.create(
            model=input.model.model,
            messages=chat_messages(transcript, input.model.system),  # type: ignore[arg-type]
            tools=tools or openai.NOT_GIVEN,  # type: ignore[arg-type]
        )
    except openai.APIStatusError as err:
        retry_after = err.response.headers.get("retry-after")
        delay = timedelta(seconds=float(retry_after)) if retry_after else None
        said = err.body.get("message") if isinstance(err.body, dict) else None
        raise ApplicationError(
            f"model API answered HTTP {err.status_code}: {said or err.message}",
            type="ModelApiError",
            non_retryable=err.status_code not in RETRYABLE_HTTP,
            next_retry_delay=delay,
        ) from err
    except openai.APIConnectionError as err:
        raise ApplicationError(f"model API unreachable: {err}", type="ModelApiError") from err
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


def tool_call(name: str, arguments: Mapping[str, Any], call_id: str) -> ToolCall:
    """A scripted tool call (arguments as JSON text)."""
    return ToolCall(name=name, arguments=json.dumps(dict(arguments)), call_id=call_id)
