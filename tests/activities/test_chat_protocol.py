"""The chat-completions protocol's pure rules (``activities.chat_protocol``): streamed tool calls
assembled as servers really send them (peers' reports in each test's docstring), finish reasons
by name, the bounds a recorded call must keep, Server-Sent Events decoded line by line."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from agent_tasks.activities.chat_protocol import (
    EMPTY_ANSWER,
    SseDecoder,
    StreamAssembler,
    bounded_answer,
    bounded_call,
    completion_turn,
    fallback_call_id,
)
from agent_tasks.contract import MAX_PAYLOAD_BYTES, MAX_PAYLOAD_CHARS, ToolCall
from tests.model_server import chunk


def assembled(*chunks: dict[str, Any], done: bool = True) -> StreamAssembler:
    assembler = StreamAssembler()
    for c in chunks:
        assembler.add(c)
    if done:
        assembler.done()
    return assembler


def test_a_name_repeated_in_every_delta_is_the_name_once() -> None:
    """NousResearch/hermes-agent#8259 (PR #11984), maximhq/bifrost#1829: servers that send the
    whole name in every delta made ``read_fileread_file``."""
    turn = assembled(
        chunk({"index": 0, "id": "call_a", "function": {"name": "read_file", "arguments": ""}}),
        chunk({"index": 0, "function": {"name": "read_file", "arguments": '{"path": '}}),
        chunk({"index": 0, "id": "call_a", "function": {"name": "read_file", "arguments": '"a"}'}}),
        chunk(finish="tool_calls"),
    ).turn()
    assert turn.tool_calls == [
        ToolCall(name="read_file", arguments='{"path": "a"}', call_id="call_a")
    ]


def test_a_name_streamed_in_pieces_or_growing_is_joined() -> None:
    """continuedev/continue PR #5849: some servers stream the name in pieces."""
    pieces = assembled(
        chunk({"index": 0, "id": "c1", "function": {"name": "edit_ex"}}),
        chunk({"index": 0, "function": {"name": "isting_file", "arguments": "{}"}}),
        chunk({"index": 1, "id": "c2", "function": {"name": "re"}}),
        chunk({"index": 1, "function": {"name": "read_file", "arguments": "{}"}}),
        chunk(finish="tool_calls"),
    ).turn()
    assert [c.name for c in pieces.tool_calls] == ["edit_existing_file", "read_file"]


def test_a_piece_that_is_only_the_start_of_the_name_so_far_is_joined() -> None:
    """Issue 44: ``list_files`` streamed a character a delta was assembled ``list_fies``: the
    second ``l`` is the start of ``list_fi``, and the rule took it for a resent name. The
    reference clients join the pieces (openai-python, the OpenAI Agents SDK's ``name +=``);
    only a piece that is the whole name so far is a resend (continuedev/continue PR #5849)."""
    streamed = assembled(
        chunk({"index": 0, "id": "c1", "function": {"name": "l", "arguments": ""}}),
        *(chunk({"index": 0, "function": {"name": c}}) for c in "ist_files"),
        chunk({"index": 0, "function": {"arguments": "{}"}}),
        chunk(finish="tool_calls"),
    ).turn()
    assert [c.name for c in streamed.tool_calls] == ["list_files"]


def test_a_name_the_rule_and_the_join_disagree_on_is_the_offered_one() -> None:
    """A name whose second character repeats the first (``aa_tool``) streamed a character a
    delta: the rule takes the second ``a`` for a resend; the plain join is the offered tool's
    name, so it is taken. Without the offer, the rule's name stands (and fails its step as a
    tool nobody offered, the model reading which)."""

    def streamed(offered: frozenset[str]) -> list[str]:
        assembler = StreamAssembler(offered=offered)
        for c in "aa_tool":
            assembler.add(chunk({"index": 0, "id": "c1", "function": {"name": c}}))
        assembler.add(chunk(finish="tool_calls"))
        return [c.name for c in assembler.turn().tool_calls]

    assert streamed(frozenset({"aa_tool", "read_file"})) == ["aa_tool"]
    assert streamed(frozenset()) == ["a_tool"]


def test_parallel_calls_sharing_an_index_are_told_apart_by_id() -> None:
    """langchain-ai/langchain#34807 (PR #35281): parallel calls with one index and two ids were
    merged into ``read_filesearch_text``; and ids repeated in every delta were concatenated
    (openai/openai-agents-python PR #990)."""
    turn = assembled(
        chunk({"index": 0, "id": "c1", "type": "function", "function": {"name": "read_file"}}),
        chunk({"index": 0, "id": "c1", "function": {"arguments": '{"path": "a"}'}}),
        chunk({"index": 0, "id": "c2", "type": "function", "function": {"name": "search_text"}}),
        chunk({"index": 0, "function": {"arguments": '{"pattern": "x"}'}}),
        chunk(finish="tool_calls"),
    ).turn()
    assert turn.tool_calls == [
        ToolCall(name="read_file", arguments='{"path": "a"}', call_id="c1"),
        ToolCall(name="search_text", arguments='{"pattern": "x"}', call_id="c2"),
    ]


def test_interleaved_parallel_calls_by_index() -> None:
    turn = assembled(
        chunk(
            {"index": 0, "id": "c1", "function": {"name": "a", "arguments": '{"x"'}},
            {"index": 1, "id": "c2", "function": {"name": "b", "arguments": '{"y"'}},
        ),
        chunk({"index": 1, "function": {"arguments": ": 2}"}}),
        chunk({"index": 0, "function": {"arguments": ": 1}"}}),
        chunk(finish="tool_calls"),
    ).turn()
    assert [(c.name, json.loads(c.arguments), c.call_id) for c in turn.tool_calls] == [
        ("a", {"x": 1}, "c1"),
        ("b", {"y": 2}, "c2"),
    ]


def test_calls_without_ids_get_distinct_stable_ids() -> None:
    """sgl-project/sglang#7048: a streamed call at index > 0 came without an id; LangChain PR
    #40594: id-less parallel calls collapsed into one."""
    chunks = [
        chunk({"index": 0, "function": {"name": "a", "arguments": "{}"}}),
        chunk({"index": 1, "function": {"name": "b", "arguments": "{}"}}),
        chunk(finish="tool_calls"),
    ]
    first, again = assembled(*chunks).turn(), assembled(*chunks).turn()
    ids = [c.call_id for c in first.tool_calls]
    assert ids == [fallback_call_id("chatcmpl-7", 0), fallback_call_id("chatcmpl-7", 1)]
    assert len(set(ids)) == 2 and ids == [c.call_id for c in again.tool_calls]


def test_deltas_without_an_index_continue_the_last_call_or_start_one_by_id() -> None:
    """comet-ml/opik#8362, ollama/ollama#7881: streams that omit ``index``."""
    turn = assembled(
        chunk({"id": "c1", "function": {"name": "a", "arguments": '{"x": '}}),
        chunk({"function": {"arguments": "1}"}}),
        chunk({"id": "c2", "function": {"name": "b", "arguments": "{}"}}),
        chunk(finish="tool_calls"),
    ).turn()
    assert [(c.name, c.arguments, c.call_id) for c in turn.tool_calls] == [
        ("a", '{"x": 1}', "c1"),
        ("b", "{}", "c2"),
    ]


def test_a_stream_without_finish_reason_or_done_is_cut_and_retryable() -> None:
    """can1357/oh-my-pi#9433, BerriAI/litellm PR #42140: a stream a proxy cut was taken as the
    model's complete answer."""
    assembler = assembled(chunk(content="Half a sent"), done=False)
    with pytest.raises(ApplicationError) as raised:
        assembler.turn()
    assert raised.value.type == "ModelStreamCut" and not raised.value.non_retryable
    # [DONE] without a reason, or a reason without [DONE], is an end
    assert assembled(chunk(content="Whole."), done=True).turn().content == "Whole."
    assert assembled(chunk(content="Whole.", finish="stop"), done=False).turn().content == "Whole."


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("length", "ModelOutputTruncated"),
        ("content_filter", "ModelContentFiltered"),
        ("max_tokens", "ModelOutputTruncated"),
    ],
)
def test_finish_reasons_that_are_not_a_complete_turn(reason: str, kind: str) -> None:
    """NousResearch/hermes-agent#7680, earendil-works/pi PR #6285: a call cut at ``length``
    had its truncated arguments run."""
    call = {"index": 0, "id": "c1", "function": {"name": "write_file", "arguments": '{"body": "x'}}
    streamed = assembled(chunk(call), chunk(finish=reason))
    for raised_by in (streamed.turn, lambda: completion_turn(completion(reason, call))):
        with pytest.raises(ApplicationError) as raised:
            raised_by()
        assert raised.value.type == kind and raised.value.non_retryable
        assert reason in raised.value.message


def completion(reason: str | None, *calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.get("id"), "type": "function", "function": c["function"]} for c in calls
        ]
    return {"id": "r1", "choices": [{"index": 0, "message": message, "finish_reason": reason}]}


@pytest.mark.parametrize(
    "reason", ["stop", "tool_calls", "function_call", "eos_token", "stop_sequence", "end_turn"]
)
def test_complete_finish_reasons_run_their_calls(reason: str) -> None:
    call = {"index": 0, "id": "c1", "function": {"name": "a", "arguments": "{}"}}
    want = [ToolCall(name="a", arguments="{}", call_id="c1")]
    assert assembled(chunk(call), chunk(finish=reason)).turn().tool_calls == want
    assert completion_turn(completion(reason, call)).tool_calls == want


def test_a_legacy_function_call() -> None:
    streamed = StreamAssembler()
    streamed.add({"id": "r", "choices": [{"index": 0, "delta": {"function_call": {"name": "a"}}}]})
    streamed.add({"choices": [{"index": 0, "delta": {"function_call": {"arguments": "{}"}}}]})
    streamed.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "function_call"}]})
    body = {
        "id": "r",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "function_call": {"name": "a", "arguments": "{}"}},
                "finish_reason": "function_call",
            }
        ],
    }
    want = [ToolCall(name="a", arguments="{}", call_id=fallback_call_id("r", 0))]
    assert streamed.turn().tool_calls == want
    assert completion_turn(body).tool_calls == want


def test_an_error_inside_the_stream_is_retryable() -> None:
    with pytest.raises(ApplicationError) as raised:
        StreamAssembler().add({"error": {"message": "overloaded", "type": "server_error"}})
    assert raised.value.type == "ModelApiError" and not raised.value.non_retryable
    assert "overloaded" in raised.value.message


def test_a_body_without_a_choice_is_retryable() -> None:
    with pytest.raises(ApplicationError) as raised:
        completion_turn({"id": "r", "choices": []})
    assert raised.value.type == "ModelApiError" and not raised.value.non_retryable


def test_bounds_of_a_recorded_call() -> None:
    long_name, long_id = "read_file" * 40, "x" * 300
    call = bounded_call(long_name, "{}", long_id, "call_f")
    assert call.name == f"{long_name[:40]}__{len(long_name)}_characters"
    assert len(call.name) <= 64 and call.call_id == "call_f"
    empty = bounded_call("a", "", "", "call_g")
    assert empty == ToolCall(name="a", arguments="{}", call_id="call_g")
    kept = bounded_call("a" * 64, "{}", "i" * 128, "call_h")
    assert (kept.name, kept.call_id) == ("a" * 64, "i" * 128)


def test_arguments_over_the_bound_are_cut_keeping_their_real_length_and_digest() -> None:
    """Issue 32: arguments over Temporal's payload limit had the model called five times, then
    the task failed with PayloadsTooLarge. Issue 44: cut past the budget, the length the model
    was told was the cut's (32,001), not theirs: now every such argument is cut to one
    character past the bound and carries its full length and SHA-256, which the refusal
    names."""
    over = '{"text": "' + "y" * 40_000 + '"}'
    huge = '{"text": "' + "x" * 3_000_000 + '"}'
    calls = [
        {"index": 0, "id": "c1", "function": {"name": "a", "arguments": over}},
        {"index": 1, "id": "c2", "function": {"name": "a", "arguments": huge}},
        {"index": 2, "id": "c3", "function": {"name": "a", "arguments": '{"k": 1}'}},
    ]
    turn = completion_turn(completion("tool_calls", *calls))
    for call, full in zip(turn.tool_calls, (over, huge), strict=False):
        assert call.arguments == full[: MAX_PAYLOAD_CHARS + 1]
        assert call.arguments_full_length == len(full)
        assert call.arguments_sha256 == hashlib.sha256(full.encode()).hexdigest()
    kept = turn.tool_calls[2]
    assert (kept.arguments, kept.arguments_full_length, kept.arguments_sha256) == (
        '{"k": 1}',
        None,
        None,
    )
    assert len(turn.model_dump_json().encode()) <= MAX_PAYLOAD_BYTES
    assert bounded_answer(turn, "again") == turn  # a second pass changes nothing


def test_a_turn_past_the_payload_budget_keeps_no_call_and_says_why() -> None:
    """Issue 32: such a turn failed the task (``ModelAnswerTooLarge``); now it crosses without
    its calls, ``mistake`` the text the model reads, naming the sizes."""
    calls = [
        {"index": i, "id": f"c{i}", "function": {"name": "a", "arguments": "\x01" * 40_000}}
        for i in range(4)
    ]
    turn = completion_turn(completion("tool_calls", *calls, content="Here:"))
    assert turn.tool_calls == [] and turn.content == "Here:"
    assert turn.mistake is not None and "with 4 tool calls" in turn.mistake
    assert f"at most {MAX_PAYLOAD_BYTES:,} bytes" in turn.mistake
    assert len(turn.model_dump_json().encode()) <= MAX_PAYLOAD_BYTES


@pytest.mark.parametrize("reason", ["something_new", "eos", "STOP"])
def test_an_unknown_finish_reason_is_a_complete_turn(reason: str) -> None:
    """BerriAI/litellm PR #22138, vercel/ai PR #1832: peers take a reason they do not know as
    the end of a complete turn; it failed the task here (``ModelFinishUnknown``)."""
    call = {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": "{}"}}
    for turn in (
        assembled(chunk(call), chunk(finish=reason)).turn(),
        completion_turn(completion(reason, call)),
    ):
        assert [c.name for c in turn.tool_calls] == ["echo"] and turn.mistake is None


def test_sse_lines_decoded() -> None:
    decoder = SseDecoder()
    lines = [": keep-alive", "event: message", 'data: {"a":', "data:1}", "", "data: [DONE]"]
    found = [d for line in lines if (d := decoder.line(line)) is not None]
    assert found == ['{"a":\n1}']
    assert decoder.end() == "[DONE]" and decoder.end() is None


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_a_generation_the_server_gave_up_is_retried(reason: str) -> None:
    with pytest.raises(ApplicationError) as raised:
        assembled(chunk(content="Hal"), chunk(finish=reason)).turn()
    assert raised.value.type == "ModelStreamCut" and not raised.value.non_retryable


def test_content_past_the_payload_bound_is_cut_with_its_length_and_digest() -> None:
    text = "word " * 120_000  # 600,000 characters: more than an activity's result may carry
    turn = completion_turn(completion("stop", content=text))
    assert turn.content == text[:MAX_PAYLOAD_CHARS]
    assert turn.content_full_length == len(text)
    assert turn.content_sha256 == hashlib.sha256(text.encode()).hexdigest()
    short = completion_turn(completion("stop", content="short"))
    assert (short.content, short.content_full_length, short.content_sha256) == ("short", None, None)


def test_a_turn_the_model_only_refused_is_not_an_empty_answer() -> None:
    """microsoft/agent-framework-go PR #556, NousResearch/hermes-agent PR #91181: a streamed
    ``delta.refusal`` was dropped and the turn became a silent empty answer."""
    streamed = StreamAssembler()
    for words in ("I can't ", "help with that."):
        streamed.add({"id": "r", "choices": [{"index": 0, "delta": {"refusal": words}}]})
    streamed.add(chunk(finish="stop"))
    body = completion("stop")
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    for refused_by in (streamed.turn, lambda: completion_turn(body)):
        with pytest.raises(ApplicationError) as raised:
            refused_by()
        assert raised.value.type == "ModelRefused" and raised.value.non_retryable
        assert raised.value.message == "the model refused: I can't help with that."


def test_an_empty_answer_carries_the_empty_mistake_and_nothing_else_does() -> None:
    """nugget/thane-ai-agent#167: no text and no call is not an answer (``EMPTY_ANSWER``);
    white space is no text; a call, or any text, is an answer."""
    call = {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": "{}"}}
    assert completion_turn(completion("stop", content=" \n")).mistake == EMPTY_ANSWER
    assert assembled(chunk(finish="tool_calls")).turn().mistake == EMPTY_ANSWER
    assert completion_turn(completion("stop", content="ok")).mistake is None
    assert completion_turn(completion("tool_calls", call)).mistake is None
