"""The ``openai`` provider (``activities.model.openai_turn``) against the tests' own
OpenAI-compatible server replaying recorded responses (``tests/cassettes``): a completion with
parallel tool calls, 429 with ``retry-after``, 400 with the API's message, a request that
outlasts its timeout. Each asserts what the activity returns or raises at its edge, and the
request the server got."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from agent_tasks.activities.model import openai_streamed_turn, openai_turn
from agent_tasks.activities.tokens import TokenStream
from agent_tasks.activities.transcript import chat_messages
from agent_tasks.contract import (
    Event,
    EventInput,
    ModelInput,
    ModelSpec,
    ModelTurn,
    ToolCall,
)
from agent_tasks.workflows.agents import ToolSpec
from tests.model_server import ModelServer, Reply, chunk, error

CASSETTES = Path(__file__).resolve().parents[1] / "cassettes"
TRANSCRIPT = [
    Event.recorded(
        EventInput(kind="message", role="user", payload="Which files mention Neo4j?"),
        workflow_id="w",
        seq=1,
        author="a",
        time=datetime(2026, 1, 1, tzinfo=UTC),
        request_id="r1",
    )
]
OFFERED = [ToolSpec(name="search_text", description="grep", parameters={"type": "object"})]
INPUT = ModelInput(
    workflow_id="w",
    run_id="r",
    up_to_seq=1,
    model=ModelSpec(provider="openai", model="gpt-4o-mini", system="Be brief."),
    tools=["search_text"],
)


@pytest.fixture
def pointed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")


async def call(server: ModelServer, monkeypatch: pytest.MonkeyPatch, **kwargs: float) -> ModelTurn:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    with server.running():
        return await openai_turn(INPUT, TRANSCRIPT, OFFERED, **kwargs)


async def test_a_recorded_completion_with_parallel_tool_calls(
    pointed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = json.loads((CASSETTES / "tool_calls.json").read_text(encoding="utf-8"))
    server = ModelServer([Reply(body=recorded)])
    turn = await call(server, monkeypatch)
    assert turn.tool_calls == [
        ToolCall(
            name="search_text",
            arguments='{"pattern": "Neo4j", "path": "."}',
            call_id="call_Zq4nW1tY8cRk2vLp6mXs0bJd",
        ),
        ToolCall(
            name="read_file",
            arguments='{"path": "README.md"}',
            call_id="call_H7dF3aPq9sLk1mNb5vXc2zRt",
        ),
    ]
    assert turn.content == ""
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (412, 58)
    (request,) = server.requests
    assert request["model"] == "gpt-4o-mini"
    assert request["messages"] == chat_messages(TRANSCRIPT, "Be brief.")
    assert [t["function"]["name"] for t in request["tools"]] == ["search_text"]


async def test_429_is_retried_by_temporal_after_the_servers_retry_after(
    pointed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ModelServer([error(429, "Rate limit reached for gpt-4o-mini", **{"retry-after": "7"})])
    with pytest.raises(ApplicationError) as raised:
        await call(server, monkeypatch)
    assert not raised.value.non_retryable
    assert raised.value.next_retry_delay == timedelta(seconds=7)
    assert "HTTP 429: Rate limit reached for gpt-4o-mini" in raised.value.message
    assert len(server.requests) == 1  # the client retries nothing: Temporal does


@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_asking_for_a_day_is_not_retried_and_names_the_wait(
    pointed: None, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """hashicorp/go-retryablehttp#247's kind on the model's API: a 429 with
    ``retry-after: 86400`` (a daily quota spent) was retried a day later by Temporal
    (``next_retry_delay``), the task waiting unseen. Now the call is not retried and its error
    names the wait and the bound (``MAX_SERVER_WAIT``), streamed or not."""
    server = ModelServer([error(429, "Daily quota exceeded", **{"retry-after": "86400"})])
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    with server.running(), pytest.raises(ApplicationError) as raised:
        if stream:
            async with TokenStream(None, [], "t", 1) as tokens:
                await openai_streamed_turn(INPUT, TRANSCRIPT, OFFERED, tokens)
        else:
            await openai_turn(INPUT, TRANSCRIPT, OFFERED)
    assert raised.value.non_retryable and raised.value.next_retry_delay is None
    assert raised.value.message == (
        "model API answered HTTP 429; it asks to wait 86,400 s before a retry, longer than a "
        "retry waits for a server (300 s): not retried: Daily quota exceeded"
    )


async def test_400_is_not_retried_and_says_why(
    pointed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = "This model's maximum context length is 128000 tokens"
    server = ModelServer([error(400, message)])
    with pytest.raises(ApplicationError) as raised:
        await call(server, monkeypatch)
    assert raised.value.non_retryable and raised.value.type == "ModelApiError"
    assert raised.value.message == f"model API answered HTTP 400: {message}"


async def test_a_request_past_its_timeout_is_retryable(
    pointed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = json.loads((CASSETTES / "tool_calls.json").read_text(encoding="utf-8"))
    server = ModelServer([Reply(body=recorded, delay_s=3)])
    with pytest.raises(ApplicationError) as raised:
        await call(server, monkeypatch, timeout_s=0.5)
    assert not raised.value.non_retryable
    assert raised.value.message.startswith("model API unreachable")
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, timedelta(0)),  # in the past
        ({"retry-after-ms": "1500", "retry-after": "2"}, timedelta(seconds=1.5)),
        ({"retry-after": "soon"}, None),
    ],
)
async def test_503_is_retried_after_the_wait_the_server_names_or_the_policys(
    pointed: None, monkeypatch: pytest.MonkeyPatch, headers: dict[str, str], delay: timedelta
) -> None:
    """A ``retry-after`` that is an HTTP date (RFC 9110 allows it) raised ``ValueError`` in the
    activity instead of a retryable ``ModelApiError``; OpenAI's ``retry-after-ms`` was ignored."""
    server = ModelServer([error(503, "The server is overloaded", **headers)])
    with pytest.raises(ApplicationError) as raised:
        await call(server, monkeypatch)
    assert raised.value.type == "ModelApiError" and not raised.value.non_retryable
    assert raised.value.next_retry_delay == delay


async def test_a_server_that_refuses_stream_options_is_asked_again_without(
    pointed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """openai/openai-agents-python#442 (Mistral: 422 on ``include_usage``), vercel/ai PR #1578
    (Groq: 400 "property 'stream_options' is unsupported"): a client that always sends it
    cannot stream from them at all."""

    def reply(request: dict[str, Any]) -> Reply:
        if "stream_options" in request:
            return error(422, "Extra inputs are not permitted: stream_options.include_usage")
        return Reply(chunks=[chunk(content="Fine."), chunk(finish="stop")])

    server = ModelServer(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    with server.running():
        async with TokenStream(None, [], "t", 1) as tokens:
            turn = await openai_streamed_turn(INPUT, TRANSCRIPT, OFFERED, tokens)
    assert turn.content == "Fine."
    assert ["stream_options" in r for r in server.requests] == [True, False]
