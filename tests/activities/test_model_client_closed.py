"""Each model call closes its HTTP client before it returns (the kind of
confident-ai/deepeval#3120 and openai/openai-python#1254: an ``AsyncOpenAI`` client made per
call and never closed is left to its destructor, which schedules ``AsyncClient.aclose`` on
whatever loop runs then; when that loop ends first the coroutine is never awaited and the
connection is left open). A call in a loop of its own, ended right after it, leaves no
unclosed connection and no coroutine never awaited, streamed or not."""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from agent_tasks.activities.model import openai_streamed_turn, openai_turn
from agent_tasks.activities.tokens import TokenStream
from agent_tasks.contract import ModelTurn
from tests.activities.test_openai_provider import INPUT, OFFERED, TRANSCRIPT
from tests.model_server import ModelServer, Reply, chunk

CASSETTES = Path(__file__).resolve().parents[1] / "cassettes"


def left_behind(server: ModelServer, turn: Callable[[], Awaitable[ModelTurn]]) -> list[str]:
    """The warnings a call leaves once its loop has ended and garbage is collected."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")

        async def once() -> ModelTurn:
            with server.running():
                return await turn()

        asyncio.run(once())
        gc.collect()
    return [f"{w.category.__name__}: {w.message}" for w in seen]


def test_a_model_call_closes_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    recorded = json.loads((CASSETTES / "tool_calls.json").read_text(encoding="utf-8"))
    server = ModelServer([Reply(body=recorded)])
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    assert left_behind(server, lambda: openai_turn(INPUT, TRANSCRIPT, OFFERED)) == []
    assert len(server.requests) == 1


def test_a_streamed_model_call_closes_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server = ModelServer([Reply(chunks=[chunk(content="Hello"), chunk(finish="stop")])])
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)

    async def streamed() -> ModelTurn:
        async with TokenStream(None, [], "t", 1) as tokens:
            return await openai_streamed_turn(INPUT, TRANSCRIPT, OFFERED, tokens)

    assert left_behind(server, streamed) == []
    assert len(server.requests) == 1
