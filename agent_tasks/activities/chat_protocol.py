"""The chat-completions protocol as OpenAI-compatible servers really send it: a response (or a
stream's chunks) made into the model's turn by the model activity's edge rules. Pure: no I/O.
``docs/agent-tasks.md`` describes it for users.

**Streamed tool calls** (``StreamAssembler``):

- a call is told apart by ``index`` and ``id`` together: another id at an index starts a new call; a
  delta without an index continues the last call unless it brings a new id; arguments starting a
  JSON object after a whole one start a new call, unless they repeat it (a flush);
- the id is set once; name pieces are joined, except a piece that is the whole name so far (dropped)
  or the name so far and more (replaces it); where this rule and the plain join disagree, the one
  naming an offered tool wins (``StreamAssembler.offered``);
- arguments are appended in order; arguments sent as a JSON object are taken as its JSON text;
- a call without an id, or with an id an earlier call of the answer has, gets ``fallback_call_id``
  (stable across replays of the response).

**Finish reasons** (``check_finish``): ``COMPLETE_FINISH`` and any unknown reason end a complete
turn; ``length`` and ``content_filter`` end the call non-retryable (``ModelOutputTruncated``,
``ModelContentFiltered``: nothing of a cut turn runs); ``RETRIED_FINISH`` is retried. A turn that is
only a refusal is ``ModelRefused`` (``check_refusal``). A stream without a ``finish_reason`` or
``data: [DONE]`` is a retryable ``ModelStreamCut``.

**Bounds** (``bounded_answer``, applied to every provider's turn): call ids and names fit an event
(``MAX_CALL_ID_CHARS``, ``MAX_TOOL_NAME_CHARS``: a longer name becomes ``{first
40}__{N}_characters``, so its step fails naming the length); arguments past ``MAX_PAYLOAD_CHARS``
are cut with their full length and SHA-256 kept, so the workflow refuses the call naming the real
length; empty arguments are ``{}``; content is cut like an event's. A turn still over
``MAX_PAYLOAD_BYTES`` loses its calls and carries a ``mistake`` (``too_large``) the model reads
next, as does an empty answer (``empty_checked``, ``EMPTY_ANSWER``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.exceptions import ApplicationError

from agent_tasks.contract import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_CHARS,
    ModelTurn,
    TokenUsage,
    ToolCall,
    bound_text,
    clean_text,
    sha256_hex,
)

COMPLETE_FINISH = frozenset(
    {"stop", "tool_calls", "function_call", "eos_token", "stop_sequence", "end_turn", "tool_use"}
)
"""Finish reasons of a complete turn: OpenAI's (``function_call``: the legacy API's) and compatible
servers' names for the same (TGI's ``eos_token``, ``stop_sequence``; proxies' ``end_turn``,
``tool_use``)."""
RETRIED_FINISH = frozenset({"abort", "error"})
"""Finish reasons of a generation the server gave up (vLLM's ``abort``, proxies' ``error``):
retryable ``ModelStreamCut``."""
REFUSED_FINISH = {
    "length": (
        "ModelOutputTruncated",
        "the model's answer was cut at its output limit (finish_reason 'length'): nothing of "
        "it was recorded and no tool of it ran; give the model a larger output limit or ask "
        "for less at once",
    ),
    "max_tokens": (  # Anthropic-style, from proxies that pass it through
        "ModelOutputTruncated",
        "the model's answer was cut at its output limit (finish_reason 'max_tokens'): nothing "
        "of it was recorded and no tool of it ran; give the model a larger output limit or ask "
        "for less at once",
    ),
    "content_filter": (
        "ModelContentFiltered",
        "the provider's content filter cut the model's answer (finish_reason "
        "'content_filter'): nothing of it was recorded and no tool of it ran",
    ),
}
"""Finish reasons that end the model call with an error: reason -> (error type, message)."""
MAX_CALL_ID_CHARS = 128
"""Characters of a call id an event holds (``EventInput.call_id``)."""
MAX_TOOL_NAME_CHARS = 64
"""Characters of a tool's name (``AgentName``, and the chat API's own limit for a function)."""
LEGACY_CALL = -1
"""The index under which a legacy ``function_call`` delta is assembled."""


def fallback_call_id(response_id: str, place: int) -> str:
    """The id of a call sent without one (or one too long): ``call_`` and 24 hex of SHA-256 of
    ``{response_id}/{place}`` (``place``: 0, 1, ... in the turn), the same on every retry or replay.
    """
    digest = hashlib.sha256(f"{response_id}/{place}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def check_finish(reason: str | None) -> None:
    """Refuse a turn its ``finish_reason`` says is not complete (module docstring); an unknown
    reason ends a complete turn, as ``stop``. ``reason`` None: a stream ended by ``[DONE]`` alone.

    Raises:
        ApplicationError: non-retryable ``ModelOutputTruncated`` (``length``),
            ``ModelContentFiltered`` (``content_filter``); retryable ``ModelStreamCut``
            (``RETRIED_FINISH``).
    """
    if reason is None or reason in COMPLETE_FINISH:
        return
    if reason in RETRIED_FINISH:
        raise ApplicationError(
            f"the model's server gave up its answer (finish_reason {reason!r})",
            type="ModelStreamCut",
        )
    refused = REFUSED_FINISH.get(reason)
    if refused is not None:
        kind, message = refused
        raise ApplicationError(message, type=kind, non_retryable=True)


EMPTY_ANSWER = (
    "Your last answer was empty (no text and no tool call). Answer the task, or call one of "
    "the tools offered."
)
"""The ``mistake`` of an empty answer (``empty_checked``): what the model reads next."""


def empty_checked(turn: ModelTurn) -> ModelTurn:
    """``turn``, or, when it has no tool call, no text but white space and no other mistake, with
    ``mistake`` ``EMPTY_ANSWER``."""
    if turn.tool_calls or turn.content.strip() or turn.mistake is not None:
        return turn
    return turn.model_copy(update={"mistake": EMPTY_ANSWER})


def too_large(size: int, calls: int) -> str:
    """What the model reads after an answer of ``size`` bytes of JSON with ``calls`` tool calls that
    stays over ``MAX_PAYLOAD_BYTES`` with its arguments cut."""
    return (
        f"Your last answer was {size:,} bytes as JSON with {calls} tool calls; an answer may "
        f"be at most {MAX_PAYLOAD_BYTES:,} bytes (a call's arguments at most "
        f"{MAX_PAYLOAD_CHARS:,} characters): none of its tool calls was run. Answer again with "
        "fewer or smaller tool calls."
    )


def check_refusal(refusal: str, turn: ModelTurn) -> None:
    """Refuse a turn in which the model only refused (``refusal``, streamed as ``delta.refusal``):
    recorded as an answer, the task would end ``done`` with empty text.

    Raises:
        ApplicationError: non-retryable ``ModelRefused`` with the model's words.
    """
    if refusal and not turn.content and not turn.tool_calls:
        raise ApplicationError(
            f"the model refused: {refusal[:1_000]}", type="ModelRefused", non_retryable=True
        )


def bounded_call(name: str, arguments: str, call_id: str | None, fallback_id: str) -> ToolCall:
    """One tool call as the workflow can record it (module docstring, "Bounds"): name and id bounded
    (``fallback_id`` for an empty or too long ``call_id``; None, a scripted call's, stays None),
    empty arguments ``{}``.
    """
    if len(name) > MAX_TOOL_NAME_CHARS:
        name = f"{name[:40]}__{len(name)}_characters"
    if call_id is not None and (not call_id or len(call_id) > MAX_CALL_ID_CHARS):
        call_id = fallback_id
    return ToolCall(name=name, arguments=arguments or "{}", call_id=call_id)


def bounded_answer(turn: ModelTurn, response_id: str) -> ModelTurn:
    """``turn`` within every bound of the module docstring, whichever provider made it (idempotent).
    ``response_id`` makes the fallback ids: the response's ``id``, or a text stable across retries.
    """
    calls = [
        call
        if call.arguments_full_length is not None
        else bounded_call(
            call.name, call.arguments, call.call_id, fallback_call_id(response_id, place)
        )
        for place, call in enumerate(turn.tool_calls)
    ]
    turn = turn.model_copy(update={"tool_calls": distinct_ids(calls, response_id)})
    return empty_checked(bounded_turn(turn))


def distinct_ids(calls: list[ToolCall], response_id: str) -> list[ToolCall]:
    """``calls`` with every call id used once: a repeated id gets ``fallback_call_id`` of its place
    (a chat API refuses two calls of one message under one id); calls without an id are kept."""
    seen: set[str] = set()
    distinct = []
    for place, call in enumerate(calls):
        if call.call_id is not None and call.call_id in seen:
            call = call.model_copy(update={"call_id": fallback_call_id(response_id, place)})
        if call.call_id is not None:
            seen.add(call.call_id)
        distinct.append(call)
    return distinct


def cut_arguments(call: ToolCall) -> ToolCall:
    """``call`` with arguments over ``MAX_PAYLOAD_CHARS`` cut to one character past it, their full
    length and SHA-256 kept; other calls as they are."""
    if call.arguments_full_length is not None or len(call.arguments) <= MAX_PAYLOAD_CHARS:
        return call
    full = clean_text(call.arguments)
    if len(full) <= MAX_PAYLOAD_CHARS:
        return call.model_copy(update={"arguments": full})
    return call.model_copy(
        update={
            "arguments": full[: MAX_PAYLOAD_CHARS + 1],
            "arguments_full_length": len(full),
            "arguments_sha256": sha256_hex(full),
        }
    )


def bounded_turn(turn: ModelTurn) -> ModelTurn:
    """``turn`` within ``MAX_PAYLOAD_BYTES`` of JSON: content bounded (``bound_text``, full length
    and SHA-256 in ``content_full_length``, ``content_sha256``), arguments cut (``cut_arguments``);
    if still over, without its calls and with a ``too_large`` mistake.
    """
    if len(turn.content) > MAX_PAYLOAD_CHARS and turn.content_full_length is None:
        bounded = bound_text(turn.content)
        if bounded.full_length > MAX_PAYLOAD_CHARS:
            turn = turn.model_copy(
                update={
                    "content": bounded.text,
                    "content_full_length": bounded.full_length,
                    "content_sha256": bounded.full_sha256,
                }
            )
    turn = turn.model_copy(update={"tool_calls": [cut_arguments(c) for c in turn.tool_calls]})
    size = len(turn.model_dump_json().encode())
    if size > MAX_PAYLOAD_BYTES:
        return turn.model_copy(
            update={"tool_calls": [], "mistake": too_large(size, len(turn.tool_calls))}
        )
    return turn


def _usage(body: Mapping[str, Any]) -> TokenUsage | None:
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        return None
    return TokenUsage(
        input_tokens=max(0, int(usage.get("prompt_tokens") or 0)),
        output_tokens=max(0, int(usage.get("completion_tokens") or 0)),
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _arguments(value: Any) -> str:
    """A call's arguments (or a piece) as text: a string as it is, an object or array as JSON, else
    ""."""
    if isinstance(value, Mapping | list):
        return json.dumps(value, ensure_ascii=False)
    return _text(value)


def _whole_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object when it is a whole one, else None."""
    if not text.rstrip().endswith("}"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def completion_turn(body: Mapping[str, Any]) -> ModelTurn:
    """The turn of a chat completion's JSON body (its first choice), checked and bounded (module
    docstring).

    Raises:
        ApplicationError: ``check_finish``'s and ``check_refusal``'s errors; a retryable
            ``ModelApiError`` for a body without a choice.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ApplicationError("the model API answered without a choice", type="ModelApiError")
    choice = choices[0]
    check_finish(_text(choice.get("finish_reason")) or None)
    message = choice.get("message") or {}
    response_id = _text(body.get("id"))
    raw: list[Mapping[str, Any]] = [
        call
        for call in message.get("tool_calls") or []
        if isinstance(call, Mapping) and call.get("type", "function") == "function"
    ]
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        raw.append({"id": "", "function": legacy})
    calls = [
        ToolCall(
            name=_text((call.get("function") or {}).get("name")),
            arguments=_arguments((call.get("function") or {}).get("arguments")),
            call_id=_text(call.get("id")),
        )
        for call in raw
    ]
    turn = ModelTurn(
        content=_text(message.get("content")),
        tool_calls=calls,
        usage=_usage(body) or TokenUsage(),
    )
    check_refusal(_text(message.get("refusal")), turn)
    return bounded_answer(turn, response_id)


@dataclass
class _Call:
    index: int
    id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    """The name's pieces as the deltas brought them."""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    """The turn of a streamed chat completion, assembled from its chunks (each a ``data:`` line's
    JSON) by the module docstring's rules: ``add`` every chunk, ``done`` at ``data: [DONE]``, then
    ``turn``."""

    response_id: str = ""
    """The response's ``id`` (from its first chunk that has one)."""
    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    """The model's refusal, as ``delta.refusal`` brought it."""
    finish_reason: str | None = None
    """The last ``finish_reason`` the first choice brought."""
    ended: bool = False
    """``data: [DONE]`` came."""
    usage: TokenUsage | None = None
    calls: list[_Call] = field(default_factory=list)
    offered: frozenset[str] = frozenset()
    """The names of the tools offered (they settle a name the rule and the plain join disagree
    on)."""

    def add(self, chunk: Mapping[str, Any]) -> str:
        """Take one chunk; returns the text it adds to the turn's content ("" for none).

        Raises:
            ApplicationError: retryable ``ModelApiError`` for an error the server sent in the
                stream (``{"error": ...}``).
        """
        error = chunk.get("error")
        if error:
            said = error.get("message") if isinstance(error, Mapping) else error
            raise ApplicationError(
                f"the model API sent an error in its stream: {str(said)[:500]}",
                type="ModelApiError",
            )
        self.response_id = self.response_id or _text(chunk.get("id"))
        self.usage = _usage(chunk) or self.usage
        text = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue  # one choice is asked for (n=1)
            self.finish_reason = _text(choice.get("finish_reason")) or self.finish_reason
            delta = choice.get("delta") or {}
            text += _text(delta.get("content"))
            if refused := _text(delta.get("refusal")):
                self.refusal.append(refused)
            for call in delta.get("tool_calls") or []:
                if isinstance(call, Mapping) and call.get("type", "function") == "function":
                    self._take(call.get("index"), call)
            legacy = delta.get("function_call")
            if isinstance(legacy, Mapping):
                self._take(LEGACY_CALL, {"function": legacy})
        if text:
            self.content.append(text)
        return text

    def done(self) -> None:
        """``data: [DONE]`` came: the stream ended as it should."""
        self.ended = True

    def _take(self, index: Any, delta: Mapping[str, Any]) -> None:
        call_id = _text(delta.get("id"))
        at = index if isinstance(index, int) else None
        function = delta.get("function") or {}
        piece = _arguments(function.get("arguments"))
        open_ = None
        for call in reversed(self.calls):
            if at is None or call.index == at:
                open_ = call
                break
        whole = None if open_ is None else _whole_object("".join(open_.arguments))
        if open_ is not None and whole is not None and piece.lstrip().startswith("{"):
            if _whole_object(piece) == whole:
                piece = ""  # the whole arguments again (a server's flush at the end): once
            elif not call_id or call_id != open_.id:
                open_ = None  # another call, sent whole at the same index
        if open_ is None or (call_id and open_.id and call_id != open_.id):
            open_ = _Call(index=at if at is not None else len(self.calls))
            self.calls.append(open_)
        open_.id = open_.id or call_id
        name = _text(function.get("name"))
        if name:
            open_.pieces.append(name)
            if name != open_.name:  # the whole name so far again: a server resending it
                open_.name = name if name.startswith(open_.name) else open_.name + name
        if piece:
            open_.arguments.append(piece)

    def turn(self) -> ModelTurn:
        """The turn the stream brought, checked and bounded like ``completion_turn``.

        Raises:
            ApplicationError: retryable ``ModelStreamCut`` when the stream ended with neither a
                ``finish_reason`` nor ``[DONE]``; ``check_finish``'s and ``check_refusal``'s.
        """
        if self.finish_reason is None and not self.ended:
            raise ApplicationError(
                "the model's stream ended before its end (no finish_reason and no [DONE]): "
                "the answer is incomplete",
                type="ModelStreamCut",
            )
        check_finish(self.finish_reason)
        calls = [
            ToolCall(name=self._name(call), arguments="".join(call.arguments), call_id=call.id)
            for call in self.calls
        ]
        turn = ModelTurn(
            content="".join(self.content),
            tool_calls=calls,
            usage=self.usage or TokenUsage(),
        )
        check_refusal("".join(self.refusal), turn)
        return bounded_answer(turn, self.response_id)

    def _name(self, call: _Call) -> str:
        """The call's name by the rule, or the plain join when only that names an offered tool."""
        joined = "".join(call.pieces)
        if call.name not in self.offered and joined in self.offered:
            return joined
        return call.name


class SseDecoder:
    """Server-Sent Events decoded line by line: ``line`` takes a line (no line end) and returns the
    ``data`` of the event it ends; ``data:`` lines join with newlines; comments and other fields are
    ignored; ``end`` returns the data the stream ended in."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, line: str) -> str | None:
        """Take one line; the data of the event it ends, if any."""
        if not line:
            return self.end()
        if line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> str | None:
        """The data of the event not yet ended by an empty line, if any."""
        data, self._data = self._data, []
        return "\n".join(data) if data else None
