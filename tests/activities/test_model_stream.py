"""The model activity's token path: the ``openai`` provider with ``stream=True`` against a real
OpenAI-compatible HTTP server on a free port (uvicorn), the tokens read from the broker, the
turn assembled from the stream; the non-streamed path beside it unchanged (no tokens)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agent_tasks.activities.tokens import split_tokens
from agent_tasks.broker import Subscriber, TokenMessage, task_channel
from agent_tasks.contract import AgentSpec, EventKind, ModelSpec, Role
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services
from tests.servers import served

DELTAS = ["Check", "ing the ", "repo"]
ANSWER = "All good"


def _chunk(delta: dict[str, Any], usage: dict[str, int] | None = None) -> str:
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": None}]
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": choices,
        "usage": usage,
    }
    return f"data: {json.dumps(body)}\n\n"


def provider(seen: list[dict[str, Any]]) -> FastAPI:
    """An OpenAI-compatible chat completions server: round 1 text and an ``echo`` call, round
    2 the answer; streamed (SSE chunks, usage in the last) when asked, else one JSON body."""
    app = FastAPI()

    @app.post("/v1/chat/completions", response_model=None)
    async def completions(request: Request) -> StreamingResponse | JSONResponse:
        body = await request.json()
        seen.append(body)
        first = not any(m["role"] == "tool" for m in body["messages"])
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
            return JSONResponse(
                {
                    "id": "c2",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
                }
            )

        async def chunks() -> AsyncIterator[str]:
            if first:
                yield _chunk({"role": "assistant", "content": DELTAS[0]})
                for text in DELTAS[1:]:
                    yield _chunk({"content": text})
                call = {"index": 0, "id": "call-9", "type": "function"}
                yield _chunk(
                    {"tool_calls": [{**call, "function": {"name": "echo", "arguments": ""}}]}
                )
                for part in ('{"text": ', '"hi"}'):
                    yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
            else:
                yield _chunk({"role": "assistant", "content": ANSWER})
                usage = {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}
            yield _chunk({}, usage)
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return app


@pytest.fixture
async def openai_server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    async with served(provider(seen)) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield seen


@pytest.mark.parametrize("stream", [True, False])
async def test_the_openai_provider_streams_tokens_and_records_the_assembled_turn(
    services: Services,
    project_id: str,
    openai_server: list[dict[str, Any]],
    openai_queue: str,
    stream: bool,
) -> None:
    assert services.graph is not None and services.broker is not None
    queue = openai_queue
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=queue, graph=services.graph
    )
    subscriber = Subscriber(services.broker)
    reading = asyncio.create_task(subscriber.run())
    tokens: list[TokenMessage] = []
    await subscriber.add(
        task_channel(history.workflow_id("t")),
        lambda m: tokens.append(m) if isinstance(m, TokenMessage) else None,
    )
    spec = AgentSpec(tools=["echo"], model=ModelSpec(provider="openai", model="m", stream=stream))
    try:
        assert (await history.create_task("t", "check it", agent=spec)).recorded
        final = await history.wait_task("t")
        await asyncio.sleep(0.2)  # the last tokens' round trip through the broker
    finally:
        reading.cancel()
        await subscriber.close()
    assert final is not None and final.status.value == "done"
    assert final.result is not None and final.result.text == ANSWER
    events = (await history.list_events("t", limit=200)).events
    said = [e for e in events if e.kind is EventKind.MESSAGE and e.role is Role.ASSISTANT]
    if not stream:
        assert all("stream" not in body for body in openai_server)
        assert tokens == []
        assert [e.payload for e in said] == [ANSWER]
        return
    assert [body["stream_options"] for body in openai_server] == [{"include_usage": True}] * 2
    assert [e.payload for e in said] == ["".join(DELTAS), ANSWER]
    usage = [(e.usage.input_tokens, e.usage.output_tokens) for e in said if e.usage]
    assert usage == [(11, 5), (20, 2)]  # from each stream's final chunk
    call = next(e for e in events if e.kind is EventKind.TOOL_CALL)
    assert (call.name, call.call_id, json.loads(call.payload)) == ("echo", "call-9", {"text": "hi"})
    result = next(e for e in events if e.kind is EventKind.TOOL_RESULT)
    assert result.payload == "hi"
    assert [t.text for t in tokens] == [*DELTAS, ANSWER]  # each delta as it came
    assert [t.index for t in tokens] == [0, 1, 2, 0]
    goal_seq = events[0].seq
    assert tokens[0].after_seq is not None and tokens[0].after_seq >= goal_seq


def test_scripted_tokens_join_back_to_the_text() -> None:
    for text in ["", "one", "  lead and trail  ", "a\nb\tc", "Redis is an in-memory store"]:
        assert "".join(split_tokens(text)) == text
    assert split_tokens("Redis is fast") == ["Redis ", "is ", "fast"]
