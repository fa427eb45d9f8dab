"""The transcript the model sees: a task's events as chat-completion messages, by one rule
(``docs/agent-tasks.md``, "What the model sees"):

- ``message``: a message of its role; the tool calls after an assistant message are its
  ``tool_calls``.
- ``tool_call``: a call of the assistant message before it, under its ``call_id`` (else
  ``call_{seq}``); an empty name is ``_``; cut arguments are ``{"_truncated": true, "full_length":
  N}``.
- ``tool_result``: a ``tool`` message answering its ``call_id`` (else the oldest unanswered call); a
  call without a result is answered ``NO_RESULT`` before the next message.
- ``input_request`` and a taken ``input_response``: user messages naming the input id.
- an approval's request and answer are not shown; the call's ``tool`` message says what a person
  did: ``EDITED`` with what ran then the result, ``ANSWERED`` then the text, ``IGNORED``, or the
  result alone after an accept.
- ``child_result``: a user message naming the child, its spawn key and status.
- anything else, and events a ``rolled_back`` note covers: nothing.

A user message arriving while calls wait for results is sent after them (a chat API wants every call
answered first).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent_tasks.contract import ROLLED_BACK, Event, EventKind, Role

NO_RESULT = "no result was recorded for this call"
"""The ``tool`` message of a call whose result the log lacks (so every call is answered)."""
EDITED = (
    "A person edited this call before it ran: it ran as {name} with the arguments {arguments} "
    "(not as you called it). Its result:\n{result}"
)
"""The ``tool`` message of a call a person approved with edited arguments."""
ANSWERED = (
    "A person answered this call instead of running it: the tool was not run. "
    "Their answer:\n{result}"
)
"""The ``tool`` message of a call a person answered in the tool's place."""


def rolled_back_seqs(transcript: Sequence[Event]) -> set[int]:
    """The seqs every ``rolled_back`` note of ``transcript`` covers (``ROLLED_BACK``)."""
    seqs: set[int] = set()
    for event in transcript:
        if event.kind is EventKind.NOTE and event.name == ROLLED_BACK:
            span = json.loads(event.payload)
            seqs.update(range(int(span["from_seq"]), int(span["to_seq"]) + 1))
    return seqs


def _context(event: Event, approvals: dict[str, str | None]) -> str | None:
    """The user message of an input request, a taken answer or a child's end; None for events not
    shown (``approvals``: approval requests' input ids seen so far, with the call each asks
    about)."""
    if event.kind is EventKind.INPUT_REQUEST:
        request = json.loads(event.payload)
        if "approval" in request:
            approval = request["approval"]
            call_id = approval.get("call_id")
            if call_id is None and approval.get("call_seq") is not None:
                call_id = f"call_{approval['call_seq']}"
            approvals[request["input_id"]] = call_id
            return None
        return f"A person was asked (input {request['input_id']}): {request['prompt']}"
    if event.kind is EventKind.INPUT_RESPONSE and event.name not in ("rejected", "late"):
        if event.name in approvals:
            return None
        return f"The person answered {event.name}: {event.payload}"
    if event.kind is EventKind.CHILD_RESULT:
        end = json.loads(event.payload)
        return (
            f"Child task {end['child']} (spawn key {event.name}) ended {end['status']}: "
            f"{end.get('text', '')}"
        )
    return None


def _as_decided(result: str, choice: str | None, ran: dict[str, Any] | None) -> str:
    """The ``tool`` message of a call's ``result`` after a person's ``choice`` (``ran``: the edited
    function that ran)."""
    if ran is not None:
        return EDITED.format(name=ran["name"], arguments=ran["arguments"], result=result)
    if choice == "answer":
        return ANSWERED.format(result=result)
    return result


def _arguments(event: Event) -> str:
    if event.truncated:
        return json.dumps({"_truncated": True, "full_length": event.full_length})
    return event.payload


def shown(transcript: Sequence[Event]) -> list[Event]:
    """The events of ``transcript`` no ``rolled_back`` note covers."""
    skipped = rolled_back_seqs(transcript)
    return [event for event in transcript if event.seq not in skipped]


def chat_messages(transcript: Sequence[Event], system: str | None) -> list[dict[str, Any]]:
    """``transcript`` (events in seq order) as chat-completion messages after the ``system`` prompt,
    by the module docstring's rule."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    assistant: dict[str, Any] | None = None  # the message tool calls attach to
    waiting: list[str] = []  # call ids without a result yet, oldest first
    held: list[str] = []  # user messages waiting for those results
    approvals: dict[str, str | None] = {}  # approval requests' input ids -> their call ids
    choices: dict[str, str] = {}  # call id -> the person's approval choice about it
    edits: dict[str, dict[str, Any]] = {}  # call id -> the function that ran (an edit)

    def answer(call_id: str, content: str) -> None:
        waiting.remove(call_id)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if not waiting:
            messages.extend({"role": "user", "content": text} for text in held)
            held.clear()

    def add(message: dict[str, Any]) -> None:
        nonlocal assistant
        messages.append(message)
        assistant = message if message["role"] == "assistant" else None

    for event in shown(transcript):
        if event.kind is EventKind.MESSAGE and event.role is not None:
            for call_id in list(waiting):  # a call whose result was never recorded
                answer(call_id, NO_RESULT)
            add({"role": event.role.value, "content": event.payload})
        elif event.kind is EventKind.TOOL_CALL:
            if assistant is None:
                assistant = {"role": "assistant", "content": ""}
                messages.append(assistant)
            call_id = event.call_id or f"call_{event.seq}"
            function = {"name": event.name or "_", "arguments": _arguments(event)}
            if call_id in waiting and any(  # a person's edit of the call: it ran as this
                c["id"] == call_id for c in assistant.get("tool_calls", [])
            ):
                edits[call_id] = function
                continue
            assistant.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": function}
            )
            waiting.append(call_id)
        elif event.kind is EventKind.TOOL_RESULT and waiting:
            target = event.call_id if event.call_id in waiting else waiting[0]
            answer(target, _as_decided(event.payload, choices.get(target), edits.get(target)))
        elif event.kind is EventKind.INPUT_RESPONSE and event.name in approvals:
            asked_about = approvals[event.name]
            if asked_about is not None:
                choices[asked_about] = str(json.loads(event.payload).get("type", ""))
        elif (text := _context(event, approvals)) is not None:
            if waiting:
                held.append(text)
            else:
                add({"role": Role.USER.value, "content": text})
    for call_id in list(waiting):
        answer(call_id, NO_RESULT)
    return messages
