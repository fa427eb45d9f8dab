"""The transcript the model sees (``activities.transcript.chat_messages``), a pure function:
each rule of its docstring against messages written out by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agent_tasks.activities.transcript import ANSWERED, EDITED, NO_RESULT, chat_messages
from agent_tasks.contract import Event, EventInput
from agent_tasks.workflows.agents.approvals import IGNORED

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def log(*items: dict[str, Any]) -> list[Event]:
    """Events 1, 2, 3 ... of ``items`` (``EventInput`` fields)."""
    return [
        Event.recorded(
            EventInput.model_validate(item),
            workflow_id="w",
            seq=seq,
            author="a",
            time=NOW,
            request_id=f"r{seq}",
        )
        for seq, item in enumerate(items, 1)
    ]


def user(text: str) -> dict[str, Any]:
    return {"kind": "message", "role": "user", "payload": text}


def assistant(text: str) -> dict[str, Any]:
    return {"kind": "message", "role": "assistant", "payload": text}


def call(name: str | None, arguments: str, call_id: str | None) -> dict[str, Any]:
    return {"kind": "tool_call", "name": name, "payload": arguments, "call_id": call_id}


def result(text: str, call_id: str | None) -> dict[str, Any]:
    return {"kind": "tool_result", "payload": text, "call_id": call_id}


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_parallel_calls_of_one_turn_stay_one_assistant_message() -> None:
    """Run one after the other, the calls' results come between them in the log; the chat
    still holds one assistant message with both calls, then both results."""
    events = log(
        user("go"),
        assistant("two things"),
        call("a", "{}", "c1"),
        result("ra", "c1"),
        call("b", '{"x": 1}', "c2"),
        result("rb", "c2"),
        assistant("done"),
    )
    assert chat_messages(events, "be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "two things",
            "tool_calls": [tool_call("c1", "a", "{}"), tool_call("c2", "b", '{"x": 1}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ra"},
        {"role": "tool", "tool_call_id": "c2", "content": "rb"},
        {"role": "assistant", "content": "done"},
    ]


def test_a_call_without_an_id_is_paired_with_its_result() -> None:
    events = log(assistant(""), call("a", "{}", None), result("ra", None))
    assert chat_messages(events, None) == [
        {"role": "assistant", "content": "", "tool_calls": [tool_call("call_2", "a", "{}")]},
        {"role": "tool", "tool_call_id": "call_2", "content": "ra"},
    ]


def test_a_call_without_a_name_and_cut_arguments_are_sent_valid() -> None:
    """A call whose name the model left empty is recorded without one (``name`` None)."""
    long = json.dumps({"text": "y" * 40_000})
    events = log(assistant(""), call(None, "{}", "c1"), call("echo", long, "c2"))
    (message,) = chat_messages(events, None)[:1]
    names = [c["function"]["name"] for c in message["tool_calls"]]
    arguments = [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]]
    assert names == ["_", "echo"]
    assert arguments == [{}, {"_truncated": True, "full_length": len(long)}]


def test_inputs_and_child_results_are_user_messages_after_the_waiting_results() -> None:
    request = json.dumps({"input_id": "n", "prompt": "How many?", "schema": {}})
    child = json.dumps({"child": "t/c0", "status": "done", "text": "built"})
    events = log(
        assistant(""),
        call("a", "{}", "c1"),
        {"kind": "child_result", "name": "c0", "payload": child},  # while c1 waits
        result("ra", "c1"),
        {"kind": "input_request", "name": "n", "payload": request},
        {"kind": "input_response", "name": "rejected", "payload": '{"answer": "x"}'},
        {"kind": "input_response", "name": "n", "payload": "3"},
        {"kind": "note", "name": "status", "payload": "in_progress"},
    )
    assert chat_messages(events, None) == [
        {"role": "assistant", "content": "", "tool_calls": [tool_call("c1", "a", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ra"},
        {"role": "user", "content": "Child task t/c0 (spawn key c0) ended done: built"},
        {"role": "user", "content": "A person was asked (input n): How many?"},
        {"role": "user", "content": "The person answered n: 3"},
    ]


def test_rolled_back_events_are_never_shown_and_unanswered_calls_are_closed() -> None:
    events = log(
        user("go"),
        assistant(""),
        call("a", "{}", "c1"),  # its result never recorded
        assistant("next"),
        call("b", "{}", "c2"),
        result("rb", "c2"),
        {"kind": "note", "name": "rolled_back", "payload": '{"from_seq": 4, "to_seq": 6}'},
    )
    assert chat_messages(events, None) == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("c1", "a", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": NO_RESULT},
    ]


def approved(choice: dict[str, Any], *after: dict[str, Any]) -> list[Event]:
    """A model's call of ``mail`` (seq 3, id ``c1``) asked about, answered with ``choice``,
    then ``after``."""
    asked = {
        "input_id": "approve-3",
        "prompt": "Run?",
        "schema": {},
        "approval": {"tool": "mail", "step_name": "s", "call_seq": 3, "call_id": "c1"},
    }
    return log(
        user("go"),
        assistant(""),
        call("mail", '{"to": "a"}', "c1"),
        {"kind": "input_request", "name": "approve-3", "payload": json.dumps(asked)},
        {"kind": "input_response", "name": "approve-3", "payload": json.dumps(choice)},
        {"kind": "decision", "payload": "what the person chose"},
        *after,
    )


MODELS_CALL = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": "", "tool_calls": [tool_call("c1", "mail", '{"to": "a"}')]},
]
"""What the model is shown of its own call, whatever a person chose: the call as it made it."""


def test_an_edit_keeps_the_models_call_and_its_result_says_what_ran() -> None:
    """The approval's request and answer are not shown; the model's call stays as the model
    made it (its arguments ``{"to": "a"}``), and the tool message says a person edited it,
    what ran and its result (langchain#33787, langchain#40463: a model shown the edited call
    as its own retried the original)."""
    edited = {"type": "edit", "arguments": {"to": "b"}}
    events = approved(edited, call("mail", '{"to": "b"}', "c1"), result("sent to b", "c1"))
    said = EDITED.format(name="mail", arguments='{"to": "b"}', result="sent to b")
    assert chat_messages(events, None) == [
        *MODELS_CALL,
        {"role": "tool", "tool_call_id": "c1", "content": said},
    ]
    assert said.startswith("A person edited this call before it ran: it ran as mail with")


def test_an_answer_instead_says_a_person_answered_and_the_tool_did_not_run() -> None:
    events = approved({"type": "answer", "text": "done by hand"}, result("done by hand", "c1"))
    assert chat_messages(events, None) == [
        *MODELS_CALL,
        {"role": "tool", "tool_call_id": "c1", "content": ANSWERED.format(result="done by hand")},
    ]


def test_an_ignore_and_an_accept_show_the_recorded_result() -> None:
    """An ignored call's result is ``IGNORED`` (the tool was not run), an accepted one's the
    tool's own result; a later plain question is shown as asked."""
    asked = {"input_id": "q", "prompt": "Run?", "schema": {}}
    ignored = approved({"type": "ignore"}, result(IGNORED, "c1"))
    accepted = approved(
        {"type": "accept"},
        result("sent to a", "c1"),
        {"kind": "input_request", "name": "q", "payload": json.dumps(asked)},
    )
    assert chat_messages(ignored, None) == [
        *MODELS_CALL,
        {"role": "tool", "tool_call_id": "c1", "content": IGNORED},
    ]
    assert chat_messages(accepted, None) == [
        *MODELS_CALL,
        {"role": "tool", "tool_call_id": "c1", "content": "sent to a"},
        {"role": "user", "content": "A person was asked (input q): Run?"},
    ]
