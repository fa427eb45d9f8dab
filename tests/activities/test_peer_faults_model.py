"""Peers' faults on the model's turn (``activities.chat_protocol``, ``activities.model``): the
bounds every provider's turn keeps, the scripted one's included, and streamed tool calls as
servers send them. Against real Temporal and Neo4j with a worker of the test's own; each test's
docstring names the public report (or issue) it comes from."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator

import pytest

from agent_tasks.activities.chat_protocol import StreamAssembler, fallback_call_id
from agent_tasks.activities.model import ScriptedModel, tool_call
from agent_tasks.cli.importer import all_events
from agent_tasks.contract import (
    MAX_PAYLOAD_CHARS,
    AgentSpec,
    EventKind,
    ModelSpec,
    ModelTurn,
    Role,
    TokenUsage,
    ToolCall,
)
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker
from tests.agent_tools import TOOLS, answer
from tests.model_server import chunk

LONG_NAME = "read_file" * 30
"""270 characters: over a tool name's 64 and an event's 128."""
LONG_ID = "id" * 100
"""200 characters: over a call id's 128."""
HUGE = json.dumps({"text": "x" * 2_200_000})
"""Arguments over Temporal's 2 MiB payload limit."""
OVERSIZED = ScriptedModel(
    [
        ModelTurn(
            tool_calls=[
                tool_call(LONG_NAME, {}, "c1"),
                tool_call("echo", {"text": "hi"}, LONG_ID),
                ToolCall(name="echo", arguments=HUGE, call_id="c3"),
                tool_call("echo", {"text": "twice"}, "c4"),
                tool_call("echo", {"text": "again"}, "c4"),
            ],
            usage=TokenUsage(input_tokens=10, output_tokens=10),
        ),
        answer("done"),
    ]
)


@pytest.fixture
async def scripted_queue(services: Services) -> AsyncIterator[str]:
    """A worker with the test tools and the script ``oversized`` (``OVERSIZED``)."""
    assert services.graph is not None
    queue = f"bounds-{uuid.uuid4().hex[:8]}"
    async with build_worker(
        services.client, services.graph, queue, tools=TOOLS, scripts={"oversized": OVERSIZED}
    ):
        yield queue


async def test_a_scripted_turn_keeps_the_bounds_an_api_models_turn_keeps(
    services: Services, project_id: str, scripted_queue: str
) -> None:
    """Issue 44 (the scripted provider skipped the bounds the openai provider has): a worker's
    ``scripts=`` are public API, and a script turn with a tool name or call id over 128
    characters failed the whole task with a pydantic ``ValidationError``; arguments over
    2 MiB cost five model calls, then failed the task ``PayloadsTooLarge``; two calls under one
    id were recorded so. Now the turn passes the same bounds as an API model's: the task goes
    on, each call's step ends with a result the model reads (a name over 64 characters is no
    tool, a long id gets a stable one, the huge arguments are refused naming their real
    length), the second call of a shared id gets its own, and the model is asked once more."""
    assert services.graph is not None
    history = ConversationHistory(
        services.client, project_id, "agent-1", task_queue=scripted_queue, graph=services.graph
    )
    spec = AgentSpec(tools=["echo"], model=ModelSpec(provider="scripted", model="oversized"))
    assert (await history.create_task("t", "go", agent=spec)).recorded
    final = await asyncio.wait_for(history.wait_task("t"), 120)
    assert final is not None and final.status.value == "done", final
    assert final.result is not None and final.result.text == "done"
    assert final.agent_run is not None and final.agent_run.rounds == 2
    events = await all_events(history, "t")
    results = {e.call_id: e.payload for e in events if e.kind is EventKind.TOOL_RESULT}
    named = f"{LONG_NAME[:40]}__{len(LONG_NAME)}_characters"
    # the model call's fallback ids come from the task and the seq it read up to (the one
    # before its answer's message)
    said = next(e for e in events if e.kind is EventKind.MESSAGE and e.role is Role.ASSISTANT)
    key = f"{history.workflow_id('t')}/{said.seq - 1}"
    assert results == {
        "c1": f"no tool {named!r} for this agent",
        fallback_call_id(key, 1): "hi",
        "c3": (
            f"the call's arguments are {len(HUGE):,} characters; a tool call's arguments are "
            f"at most {MAX_PAYLOAD_CHARS:,}: the tool was not run"
        ),
        "c4": "twice",
        fallback_call_id(key, 4): "again",
    }
    (cut,) = [e for e in events if e.kind is EventKind.TOOL_CALL and e.call_id == "c3"]
    assert (cut.full_length, cut.full_sha256) == (
        len(HUGE),
        hashlib.sha256(HUGE.encode()).hexdigest(),
    )
    assert cut.payload == HUGE[:MAX_PAYLOAD_CHARS]


def test_parallel_calls_of_one_tool_each_whole_at_one_index_are_two_calls() -> None:
    """NousResearch/hermes-agent#57939: a server sends parallel calls of one tool each whole
    in its own delta, at index 0, without ids (Gemini's OpenAI-compatible stream): they were
    joined into one call whose arguments are ``{"path": "A"}{"path": "B"}``. A delta that
    starts a JSON object while the open call's arguments are a whole one starts a new call."""
    assembler = StreamAssembler()
    for path in ("A", "B"):
        args = json.dumps({"path": path})
        assembler.add(chunk({"index": 0, "function": {"name": "read_file", "arguments": args}}))
    assembler.add(chunk(finish="tool_calls"))
    turn = assembler.turn()
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("read_file", '{"path": "A"}'),
        ("read_file", '{"path": "B"}'),
    ]
    assert len({c.call_id for c in turn.tool_calls}) == 2


def test_the_whole_arguments_sent_again_at_the_end_are_taken_once() -> None:
    """vllm-project/vllm#51697 (the xlam parser's end-of-stream flush sends the whole arguments
    again: a client joined ``{...}{...}``, which no tool can read): the repeat is taken once,
    and is never a second call (which would run the tool twice)."""
    args = {"city": "Seattle", "state": "WA"}
    pieces = ['{"city": "Seattle", ', '"state": "WA"}', json.dumps(args)]
    assembler = StreamAssembler()
    assembler.add(chunk({"index": 0, "id": "c1", "function": {"name": "weather"}}))
    for piece in pieces:
        assembler.add(chunk({"index": 0, "function": {"arguments": piece}}))
    assembler.add(chunk(finish="tool_calls"))
    (call,) = assembler.turn().tool_calls
    assert (call.name, json.loads(call.arguments), call.call_id) == ("weather", args, "c1")


def test_an_empty_name_on_every_continuation_delta_is_no_new_call() -> None:
    """bitrouter/bitrouter#552 (upstreams that send ``"name": ""`` on every argument
    continuation chunk: a present, empty name was taken as the start of a new call, and one
    call became many, the first without arguments, the others without a name): one call."""
    assembler = StreamAssembler()
    assembler.add(chunk({"index": 0, "id": "c1", "function": {"name": "echo", "arguments": ""}}))
    for piece in ('{"te', 'xt": ', '"hi"}'):
        assembler.add(chunk({"index": 0, "function": {"name": "", "arguments": piece}}))
    assembler.add(chunk(finish="tool_calls"))
    assert assembler.turn().tool_calls == [
        ToolCall(name="echo", arguments='{"text": "hi"}', call_id="c1")
    ]


def test_an_id_type_and_name_repeated_in_every_delta_are_taken_once() -> None:
    """SillyTavern/SillyTavern PR #5948 (Fireworks repeats ``id``, ``type`` and ``name`` in
    every chunk: the tool call id became ``chatcmpl-tool-aa62chatcmpl-tool-aa62...`` and the
    next request was refused): the id, the type and the name are each taken once."""
    assembler = StreamAssembler()
    for piece in ('{"text"', ': "hi"}'):
        assembler.add(
            chunk(
                {
                    "index": 0,
                    "id": "chatcmpl-tool-aa62",
                    "type": "function",
                    "function": {"name": "echo", "arguments": piece},
                }
            )
        )
    assembler.add(chunk(finish="tool_calls"))
    assert assembler.turn().tool_calls == [
        ToolCall(name="echo", arguments='{"text": "hi"}', call_id="chatcmpl-tool-aa62")
    ]
