"""Agent tasks whose model is the tests' scripted OpenAI-compatible server (``tests.model_server``)
answering as real servers do, on a worker of the test tools with the broker (real Temporal,
Neo4j, Redis): names repeated in every delta, streams cut at each point, finish reasons that
are not a complete turn, calls too large to record, a cancel while the model waits and while it
streams. Each names the peer report it reproduces."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent_tasks.activities.chat_protocol import EMPTY_ANSWER, fallback_call_id
from agent_tasks.broker import Subscriber, TokenMessage, WrittenMessage, task_channel
from agent_tasks.contract import (
    MAX_PAYLOAD_CHARS,
    AgentSpec,
    Event,
    EventKind,
    ModelSpec,
    Role,
    TaskView,
)
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services
from tests.conftest import eventually
from tests.model_server import ModelServer, Reply, chunk, completion

ANSWER = "All good"
ECHO_HI = '{"text": "hi"}'


@dataclass
class Heard:
    """What a task's channel carried, in order."""

    messages: list[object] = field(default_factory=list)

    @property
    def tokens(self) -> list[TokenMessage]:
        return [m for m in self.messages if isinstance(m, TokenMessage)]

    def after_end(self) -> list[TokenMessage]:
        """Tokens that came after the word that the task ended (which must have come)."""
        ended = [
            i
            for i, m in enumerate(self.messages)
            if isinstance(m, WrittenMessage) and m.status in {"done", "failed", "cancelled"}
        ]
        assert ended, "the channel carried no word that the task ended"
        return [m for m in self.messages[ended[0] :] if isinstance(m, TokenMessage)]


class Run:
    """One task ``t`` of the tool loop (tool ``echo``) against a scripted server, and what its
    channel carried (``start``)."""

    def __init__(
        self, history: ConversationHistory, heard: Heard, stack: ExitStack, env: Any
    ) -> None:
        self.history = history
        self.heard = heard
        self._stack = stack
        self._env = env
        self.server = ModelServer([])

    async def start(self, replies: Sequence[Reply], *, stream: bool = True) -> ModelServer:
        """Serve ``replies`` and create the task; returns the server."""
        self.server = ModelServer(replies)
        self._stack.enter_context(self.server.running())
        self._env.setenv("OPENAI_BASE_URL", self.server.url)
        model = ModelSpec(provider="openai", model="m", stream=stream)
        spec = AgentSpec(tools=["echo"], model=model)
        assert (await self.history.create_task("t", "check it", agent=spec)).recorded
        return self.server

    async def end(self) -> TaskView:
        """The task's final view (and a moment for its last broker messages)."""
        final = await asyncio.wait_for(self.history.wait_task("t"), 60)
        assert final is not None
        await asyncio.sleep(0.3)
        return final

    async def events(self) -> list[Event]:
        return (await self.history.list_events("t", limit=200)).events


@pytest.fixture
async def run(
    services: Services, project_id: str, openai_queue: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Run]:
    """A ``Run`` whose task channel is listened to from before it starts."""
    assert services.graph is not None and services.broker is not None
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=openai_queue, graph=services.graph
    )
    subscriber = Subscriber(services.broker)
    reading = asyncio.create_task(subscriber.run())
    heard = Heard()
    await subscriber.add(task_channel(history.workflow_id("t")), heard.messages.append)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ExitStack() as stack:
        try:
            yield Run(history, heard, stack, monkeypatch)
        finally:
            reading.cancel()
            await subscriber.close()


def kinds(events: Sequence[Event], kind: EventKind) -> list[Event]:
    return [e for e in events if e.kind is kind]


def echo_stream(*deltas: dict[str, Any]) -> Reply:
    """A streamed turn of ``deltas`` (tool-call deltas) then ``tool_calls``."""
    return Reply(chunks=[*(chunk(d) for d in deltas), chunk(finish="tool_calls")])


FINAL = Reply(chunks=[chunk(content=ANSWER, finish="stop"), chunk(usage=(9, 2))])
FINAL_JSON = Reply(body=completion(ANSWER))


async def test_a_name_repeated_in_every_delta_runs_its_tool(run: Run) -> None:
    """NousResearch/hermes-agent#8259: MiniMax via NVIDIA NIM sends the name in every delta;
    the call became ``read_fileread_file`` and no tool ran."""
    await run.start(
        [
            echo_stream(
                {"index": 0, "id": "call-9", "type": "function", "function": {"name": "echo"}},
                {"index": 0, "id": "call-9", "function": {"name": "echo", "arguments": '{"text"'}},
                {"index": 0, "function": {"name": "echo", "arguments": ': "hi"}'}},
            ),
            FINAL,
        ]
    )
    final = await run.end()
    assert final.status.value == "done" and final.result is not None
    assert final.result.text == ANSWER
    events = await run.events()
    (call,) = kinds(events, EventKind.TOOL_CALL)
    assert (call.name, call.call_id, call.payload) == ("echo", "call-9", ECHO_HI)
    assert [r.payload for r in kinds(events, EventKind.TOOL_RESULT)] == ["hi"]


async def test_parallel_calls_without_ids_each_run_once(run: Run) -> None:
    """sgl-project/sglang#7048 (no id past index 0) and langchain-ai/langchain#34807 (two
    calls on one index merged)."""
    await run.start(
        [
            echo_stream(
                {"index": 0, "function": {"name": "echo", "arguments": '{"text": "a"}'}},
                {"index": 1, "function": {"name": "echo", "arguments": '{"text": "b"}'}},
                {"index": 2, "id": "c3", "function": {"name": "echo", "arguments": ECHO_HI}},
            ),
            FINAL,
        ]
    )
    assert (await run.end()).status.value == "done"
    events = await run.events()
    ids = [e.call_id for e in kinds(events, EventKind.TOOL_CALL)]
    assert ids == [fallback_call_id("chatcmpl-7", 0), fallback_call_id("chatcmpl-7", 1), "c3"]
    results = kinds(events, EventKind.TOOL_RESULT)
    assert [(r.call_id, r.payload) for r in results] == list(
        zip(ids, ["a", "b", "hi"], strict=True)
    )


CUT_CALL = [
    chunk(content="Let me "),
    chunk(content="check"),
    chunk({"index": 0, "id": "c1", "function": {"name": "echo", "arguments": '{"te'}}),
    chunk({"index": 0, "function": {"arguments": 'xt": "hi"}'}}),
]


@pytest.mark.parametrize(
    "cut",
    [
        Reply(chunks=CUT_CALL, drop_after=0),  # before the first chunk
        Reply(chunks=CUT_CALL, drop_after=3),  # mid-arguments
        Reply(chunks=CUT_CALL, done=False),  # after the last chunk: no finish, no [DONE]
    ],
    ids=["before-first-chunk", "mid-arguments", "after-last-chunk"],
)
async def test_a_cut_stream_is_retried_and_its_tokens_say_their_attempt(
    run: Run, cut: Reply
) -> None:
    """can1357/oh-my-pi#9433, BerriAI/litellm PR #42140: a stream cut before its end was taken
    as the model's whole answer (the task ended ``done`` with half a sentence)."""
    server = await run.start([cut, Reply(chunks=[*CUT_CALL, chunk(finish="tool_calls")]), FINAL])
    final = await run.end()
    assert final.status.value == "done" and final.result is not None
    assert final.result.text == ANSWER
    assert len(server.requests) == 3  # the cut attempt, its retry, the turn after the tool
    events = await run.events()
    assert [(e.name, e.payload) for e in kinds(events, EventKind.TOOL_CALL)] == [("echo", ECHO_HI)]
    assert [r.payload for r in kinds(events, EventKind.TOOL_RESULT)] == ["hi"]
    said = [(t.attempt, t.index, t.text) for t in run.heard.tokens]
    first = [token for token in said if token[0] == 1][:-1]  # the last is the next call's
    sent = ["Let me ", "check"][: 2 if cut.drop_after is None else min(cut.drop_after, 2)]
    # what the cut attempt queued but had not published when it failed is dropped
    assert first == [(1, i, text) for i, text in enumerate(sent)][: len(first)]
    assert said[len(first) :] == [(2, 0, "Let me "), (2, 1, "check"), (1, 0, ANSWER)]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("reason", "kind"),
    [("length", "ModelOutputTruncated"), ("content_filter", "ModelContentFiltered")],
)
async def test_a_turn_cut_by_the_model_runs_no_tool_and_fails_naming_why(
    run: Run, stream: bool, reason: str, kind: str
) -> None:
    """NousResearch/hermes-agent#7680, earendil-works/pi#6284: a tool call cut at the output
    limit (``length``) ran with its truncated arguments."""
    call = {"index": 0, "id": "c1", "type": "function"}
    cut_call = {**call, "function": {"name": "echo", "arguments": '{"text": "h'}}
    if stream:
        reply = Reply(chunks=[chunk(cut_call), chunk(finish=reason)])
    else:
        body = completion(tool_calls=[cut_call])
        body["choices"][0]["finish_reason"] = reason
        reply = Reply(body=body)
    server = await run.start([reply], stream=stream)
    final = await run.end()
    assert final.status.value == "failed"
    events = await run.events()
    assert kinds(events, EventKind.TOOL_CALL) == [] and kinds(events, EventKind.TOOL_RESULT) == []
    (error,) = kinds(events, EventKind.ERROR)
    assert reason in error.payload and kind in error.payload
    assert len(server.requests) == 1  # not retried: the same request would be cut again


async def test_calls_too_large_to_record_end_in_results_the_model_reads(run: Run) -> None:
    """Issue 32: a tool name or call id over 128 characters failed the task with a
    ValidationError; arguments over Temporal's payload limit had the model called five times,
    then the task failed with PayloadsTooLarge."""
    long_name, long_id = "read_file" * 30, "id" * 100
    huge = json.dumps({"text": "x" * 3_000_000})
    turn = completion(
        tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": long_name, "arguments": "{}"}},
            {"id": long_id, "type": "function", "function": {"name": "echo", "arguments": ECHO_HI}},
            {"id": "c3", "type": "function", "function": {"name": "echo", "arguments": huge}},
        ]
    )
    server = await run.start([Reply(body=turn), FINAL_JSON], stream=False)
    final = await run.end()
    assert final.status.value == "done" and final.result is not None
    assert final.result.text == ANSWER
    assert len(server.requests) == 2  # each call answered, the model asked once more
    results = {r.call_id: r.payload for r in kinds(await run.events(), EventKind.TOOL_RESULT)}
    named = f"{long_name[:40]}__{len(long_name)}_characters"
    assert results == {
        "c1": f"no tool {named!r} for this agent",
        fallback_call_id("chatcmpl-test", 1): "hi",
        "c3": (  # the real length (issue 44: it was the cut's, 32,001)
            f"the call's arguments are {len(huge):,} characters; a tool call's "
            f"arguments are at most {MAX_PAYLOAD_CHARS:,}: the tool was not run"
        ),
    }
    told = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert sorted(m["content"] for m in told) == sorted(results.values())


async def _cancel_when(run: Run, ready: Any) -> float:
    """Cancel task ``t`` once ``ready()``; returns ``time.monotonic()`` of the cancel."""
    await eventually(ready)
    cancelled_at = time.monotonic()
    await run.history.cancel_task("t")
    return cancelled_at


@pytest.mark.parametrize("where", ["request", "streaming"])
async def test_a_cancel_closes_the_models_http_request(run: Run, where: str) -> None:
    """continuedev/continue#1449 and pydantic/pydantic-ai#6914: a cancelled model call went on
    streaming (a cancel reaches an activity only through its heartbeats); issue 32: its tokens
    kept coming after the task's ``cancelled``."""
    chunks = [chunk(content=f"w{i} ") for i in range(600)] + [chunk(finish="stop")]
    if where == "request":
        reply = Reply(chunks=chunks, delay_s=60)
    else:
        reply = Reply(chunks=chunks, chunk_delay_s=0.1)
    server = await run.start([reply])

    async def ready() -> bool:
        if where == "request":
            return len(server.requests) == 1
        return len(run.heard.tokens) >= 5

    cancelled_at = await _cancel_when(run, ready)
    final = await run.end()
    assert final.status.value == "cancelled"

    async def closed() -> bool:
        return server.exchanges[0].closed_early

    await eventually(closed)
    exchange = server.exchanges[0]
    assert exchange.sent < len(chunks)  # the server was stopped, not read to its end
    assert len(server.requests) == 1
    assert run.heard.after_end() == []
    assert exchange.closed_at is not None
    print(f"cancel -> connection closed: {exchange.closed_at - cancelled_at:.2f} s ({where})")


async def test_arguments_that_are_not_json_and_an_unknown_tool_are_answered(run: Run) -> None:
    """NousResearch/hermes-agent#7693: a router reported a call cut at the output limit as
    ``tool_calls``, its arguments cut JSON; and a call of a tool that does not exist. Each ends
    in a result the model reads; the task goes on."""
    await run.start(
        [
            echo_stream(
                {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": '{"text": "h'}},
                {"index": 1, "id": "c2", "function": {"name": "no_such_tool", "arguments": "{}"}},
            ),
            FINAL,
        ]
    )
    final = await run.end()
    assert final.status.value == "done"
    results = {r.call_id: r.payload for r in kinds(await run.events(), EventKind.TOOL_RESULT)}
    assert results.keys() == {"c1", "c2"}
    assert "ToolArgumentsInvalid" in results["c1"] and "Invalid JSON" in results["c1"]
    assert results["c2"] == "no tool 'no_such_tool' for this agent"
    told = [m["content"] for m in run.server.requests[1]["messages"] if m["role"] == "tool"]
    assert sorted(told) == sorted(results.values())


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_past_the_payload_budget_is_recorded_cut_with_its_digest(
    run: Run, stream: bool
) -> None:
    """A final answer of 624,000 characters (a model's long output) crossed Temporal whole
    before it was cut by the event that records it; here it is cut by the model call, and the
    event keeps the full text's length and SHA-256."""
    text = "".join(f"line {i:06d} of the answer\n" for i in range(24_000))
    assert len(text) == 624_000
    if stream:
        pieces = [text[i : i + 10_000] for i in range(0, len(text), 10_000)]
        reply = Reply(chunks=[*(chunk(content=p) for p in pieces), chunk(finish="stop")])
    else:
        reply = Reply(body=completion(text))
    await run.start([reply], stream=stream)
    final = await run.end()
    assert final.status.value == "done"
    (said,) = [e for e in kinds(await run.events(), EventKind.MESSAGE) if e.role is Role.ASSISTANT]
    assert said.payload == text[:MAX_PAYLOAD_CHARS]
    assert said.full_length == len(text)
    assert said.full_sha256 == hashlib.sha256(text.encode()).hexdigest()


async def test_the_model_call_is_scheduled_to_hear_a_cancel_and_stream_long(
    run: Run, services: Services
) -> None:
    """pydantic/pydantic-ai#6914: a cancel reaches an activity only through its heartbeats (a
    heartbeat timeout, so a dead worker is noticed in seconds); dust-tt/dust PR #18578 and
    achimdehnert/writing-hub#626: a model call's answer may stream for minutes (2 minutes cut a
    local model's 16,000 tokens). Read from the task's history as Temporal holds it."""
    await run.start([FINAL])
    assert (await run.end()).status.value == "done"
    handle = services.client.get_workflow_handle(run.history.workflow_id("t"))
    scheduled = [
        e.activity_task_scheduled_event_attributes
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "model_turn"
    ]
    assert [
        (s.heartbeat_timeout.ToSeconds(), s.start_to_close_timeout.ToSeconds()) for s in scheduled
    ] == [(10, 600)]


def too_large_turn(stream: bool = False) -> Reply:
    """A turn of four ``echo`` calls of 40,000 control characters each: over the payload budget
    as JSON (each escaped to six bytes) even with every one cut to the argument bound."""
    if stream:
        deltas = [
            {"index": i, "id": f"c{i}", "function": {"name": "echo", "arguments": "\x01" * 40_000}}
            for i in range(4)
        ]
        return Reply(chunks=[*(chunk(d) for d in deltas), chunk(finish="tool_calls")])
    calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "echo", "arguments": "\x01" * 40_000},
        }
        for i in range(4)
    ]
    return Reply(body=completion(tool_calls=calls))


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_too_large_is_shown_to_the_model_and_it_answers_again(
    run: Run, stream: bool
) -> None:
    """Issue 32 ("anything the model sends ends in a step result the model can read"): an
    answer still over the payload budget with its longest arguments cut failed the task with
    ``ModelAnswerTooLarge``. Now none of its calls runs, the model reads why as a user message
    and answers again; the task ends ``done`` with that answer."""
    replies = [too_large_turn(stream), FINAL if stream else FINAL_JSON]
    server = await run.start(replies, stream=stream)
    final = await run.end()
    assert final.status.value == "done" and final.result is not None
    assert final.result.text == ANSWER
    events = await run.events()
    assert kinds(events, EventKind.TOOL_CALL) == [] and kinds(events, EventKind.ERROR) == []
    messages = [(e.role, e.payload) for e in kinds(events, EventKind.MESSAGE)]
    size = len(json.dumps("\x01" * (MAX_PAYLOAD_CHARS + 1)))  # one cut call's arguments
    assert messages[0] == (Role.USER, "check it") and messages[-1] == (Role.ASSISTANT, ANSWER)
    (told,) = [text for role, text in messages[1:-1] if role is Role.USER]
    assert told.startswith("Your last answer was ") and "with 4 tool calls" in told
    # the turn's size as JSON with every call cut: the four arguments and a little more
    assert 4 * size < int(told.split()[4].replace(",", "")) < 4 * size + 1_000
    assert "none of its tool calls was run" in told
    assert len(server.requests) == 2
    shown = [m for m in server.requests[1]["messages"] if m["role"] == "user"]
    assert [m["content"] for m in shown] == ["check it", told]


async def test_a_model_that_keeps_answering_too_large_fails_after_three_naming_it(
    run: Run,
) -> None:
    """A model told three times in a row that its answer was too large, and doing it again,
    ends the task ``failed`` with ``ModelAnswerUnusable`` counting them; no tool ran, and the
    model was not called a fourth time."""
    server = await run.start([too_large_turn()] * 3 + [FINAL_JSON], stream=False)
    final = await run.end()
    assert final.status.value == "failed"
    events = await run.events()
    assert kinds(events, EventKind.TOOL_CALL) == []
    (error,) = kinds(events, EventKind.ERROR)
    assert "ModelAnswerUnusable" in error.payload and "3 times in a row" in error.payload
    told = [e for e in kinds(events, EventKind.MESSAGE) if e.role is Role.USER][1:]
    assert len(told) == 2  # after the first two; the third ends the task
    assert len(server.requests) == 3


@pytest.mark.parametrize("stream", [True, False])
async def test_an_unknown_finish_reason_ends_a_complete_turn_as_stop(
    run: Run, stream: bool
) -> None:
    """BerriAI/litellm PR #22138 (an unmapped reason taken as ``stop``, with a warning) and
    vercel/ai PR #1832 (``unknown``, the step finished): a reason this client did not know
    failed the task with ``ModelFinishUnknown``. Now its calls run as a complete turn's."""
    call = {"index": 0, "id": "c1", "type": "function"}
    echo = {**call, "function": {"name": "echo", "arguments": ECHO_HI}}
    if stream:
        reply = Reply(chunks=[chunk(echo), chunk(finish="eos_then_tool")])
    else:
        body = completion(tool_calls=[echo])
        body["choices"][0]["finish_reason"] = "eos_then_tool"
        reply = Reply(body=body)
    await run.start([reply, FINAL if stream else FINAL_JSON], stream=stream)
    final = await run.end()
    assert final.status.value == "done" and final.result is not None
    assert final.result.text == ANSWER
    events = await run.events()
    assert [r.payload for r in kinds(events, EventKind.TOOL_RESULT)] == ["hi"]


async def test_a_stream_opening_with_a_chunk_without_choices_is_read_whole(run: Run) -> None:
    """AbanteAI/archive-old-cli-mentat#429 and meilisearch/meilisearch PR #6477: Azure OpenAI
    opens a stream with a chunk whose ``choices`` is empty and whose ``id`` is "" (its prompt
    filter's results); clients that read ``choices[0]`` crashed, or took it as the stream's
    end. Here it is skipped: the call's arguments, its id and the answer are whole."""
    azure_first = {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [],
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
    }
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "echo"}}
    rest = {"index": 0, "function": {"arguments": ECHO_HI}}
    opening = Reply(chunks=[azure_first, chunk(call), chunk(rest), chunk(finish="tool_calls")])
    final = Reply(chunks=[azure_first, *FINAL.chunks])
    await run.start([opening, final])
    view = await run.end()
    assert view.status.value == "done" and view.result is not None
    assert view.result.text == ANSWER
    events = await run.events()
    (made,) = kinds(events, EventKind.TOOL_CALL)
    assert (made.call_id, made.payload) == ("c1", ECHO_HI)
    assert [r.payload for r in kinds(events, EventKind.TOOL_RESULT)] == ["hi"]


@pytest.mark.parametrize("stream", [True, False])
async def test_arguments_sent_as_a_json_object_reach_the_tool(run: Run, stream: bool) -> None:
    """ggml-org/llama.cpp#20198 (llama-server sent a call's ``arguments`` as a JSON object, not
    a string) and google/adk-go PR #1254 (such arguments were dropped and the tool ran with
    ``{}``): the object is taken as its JSON text, and the tool runs with it."""
    call = {"index": 0, "id": "c1", "type": "function"}
    made = {**call, "function": {"name": "echo", "arguments": {"text": "hi"}}}
    if stream:
        reply = Reply(chunks=[chunk(made), chunk(finish="tool_calls")])
    else:
        reply = Reply(body=completion(tool_calls=[made]))
    await run.start([reply, FINAL if stream else FINAL_JSON], stream=stream)
    final = await run.end()
    assert final.status.value == "done"
    events = await run.events()
    (recorded,) = kinds(events, EventKind.TOOL_CALL)
    assert json.loads(recorded.payload) == {"text": "hi"}
    assert [r.payload for r in kinds(events, EventKind.TOOL_RESULT)] == ["hi"]


EMPTY_STREAM = Reply(chunks=[chunk(content="  \n"), chunk(finish="stop")])
EMPTY_JSON = Reply(body=completion(""))


@pytest.mark.parametrize("stream", [True, False])
async def test_an_empty_answer_is_shown_to_the_model_never_taken_as_the_result(
    run: Run, stream: bool
) -> None:
    """nugget/thane-ai-agent#167, Tencent/WeKnora PR #819, janhq/jan#8712: a turn with no text
    and no tool call ended the agent as done with an empty answer. Now the model reads that its
    answer was empty and answers again; three in a row fail the task naming it."""
    empty = EMPTY_STREAM if stream else EMPTY_JSON
    server = await run.start([empty, FINAL if stream else FINAL_JSON], stream=stream)
    final = await run.end()
    assert final.status.value == "done" and final.result is not None
    assert final.result.text == ANSWER
    told = [m for m in server.requests[1]["messages"] if m["role"] == "user"]
    assert [m["content"] for m in told] == ["check it", EMPTY_ANSWER]
    assert len(server.requests) == 2


async def test_three_empty_answers_in_a_row_fail_the_task(run: Run) -> None:
    """An empty answer three times in a row: ``failed`` with ``ModelAnswerUnusable``, the model
    called three times, no empty result."""
    server = await run.start([EMPTY_JSON] * 3 + [FINAL_JSON], stream=False)
    final = await run.end()
    assert final.status.value == "failed" and final.result is None
    (error,) = kinds(await run.events(), EventKind.ERROR)
    assert "ModelAnswerUnusable" in error.payload and EMPTY_ANSWER in error.payload
    assert len(server.requests) == 3


async def test_a_model_call_waiting_past_its_heartbeat_timeout_keeps_beating(run: Run) -> None:
    """docs/agent-tasks.md, the cancel table: the model call heartbeats while it waits for the
    model. A server that answers after 12 s (past the call's 10 s heartbeat timeout,
    ``MODEL_HEARTBEAT``) is waited for in the call's first attempt: one request, the answer
    recorded. (How often it beats is not asserted: speed goes to bench/.)"""
    slow = Reply(chunks=FINAL.chunks, delay_s=12)
    server = await run.start([slow])
    final = await run.end()
    assert final.status.value == "done" and final.result is not None
    assert final.result.text == ANSWER
    assert len(server.requests) == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_two_calls_of_one_turn_sharing_an_id_each_run_and_are_answered(
    run: Run, stream: bool
) -> None:
    """can1357/oh-my-pi#2055, openclaw/openclaw PR #47136, HKUDS/nanobot#4473: models (MiMo,
    Kimi on some proxies) give two calls of one answer the same id; sent back as they were,
    the next request was refused (HTTP 400: duplicate tool call id) or one call went
    unanswered. Each call runs, and the model is shown each with its own id and result."""
    first = {"index": 0, "id": "dup:1", "type": "function"}
    second = {"index": 1, "id": "dup:1", "type": "function"}
    calls = [
        {**first, "function": {"name": "echo", "arguments": '{"text": "a"}'}},
        {**second, "function": {"name": "echo", "arguments": '{"text": "b"}'}},
    ]
    if stream:
        reply = Reply(chunks=[chunk(*calls), chunk(finish="tool_calls")])
    else:
        reply = Reply(body=completion(tool_calls=calls))
    server = await run.start([reply, FINAL if stream else FINAL_JSON], stream=stream)
    final = await run.end()
    assert final.status.value == "done"
    results = sorted(r.payload for r in kinds(await run.events(), EventKind.TOOL_RESULT))
    assert results == ["a", "b"]
    sent = server.requests[1]["messages"]
    (assistant,) = [m for m in sent if m["role"] == "assistant" and m.get("tool_calls")]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(set(ids)) == 2 and ids[0] == "dup:1"
    answered = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert answered == dict(zip(ids, ["a", "b"], strict=True))


async def test_a_call_id_reused_in_a_later_answer_is_paired_with_its_own_result(
    run: Run,
) -> None:
    """NousResearch/hermes-agent PR #11722: small models (mistral-small) give a call in a later
    answer the id of an earlier call; strict servers count calls and results per id and refused
    the request. Each answer's call is shown with its own result, in order."""

    def echo(text: str) -> Reply:
        arguments = json.dumps({"text": text})
        call = {"id": "b9mgIC84m", "type": "function"}
        return Reply(
            body=completion(
                tool_calls=[{**call, "function": {"name": "echo", "arguments": arguments}}]
            )
        )

    server = await run.start([echo("a"), echo("b"), FINAL_JSON], stream=False)
    final = await run.end()
    assert final.status.value == "done"
    shown = []
    for message in server.requests[2]["messages"]:
        if message["role"] == "assistant":
            shown += [("call", c["id"]) for c in message.get("tool_calls") or []]
        elif message["role"] == "tool":
            shown.append((message["tool_call_id"], message["content"]))
    assert shown == [
        ("call", "b9mgIC84m"),
        ("b9mgIC84m", "a"),
        ("call", "b9mgIC84m"),
        ("b9mgIC84m", "b"),
    ]
