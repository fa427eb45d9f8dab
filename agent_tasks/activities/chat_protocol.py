"""The chat-completions protocol as OpenAI-compatible servers really send it: a response (or the
chunks of a streamed one, as JSON) made into the model's turn, by rules that the model activity
(``activities.model``) applies at its edge. Pure: no I/O.

**Streamed tool calls** (``StreamAssembler``) are assembled as the reference clients do, and
as the servers that bend the rules need:

- a call is told apart by its ``index`` and its ``id`` together: a delta at an index whose call
  has another id starts a new call (servers that give parallel calls one index); a delta
  without an index continues the last call, or starts one when it brings a new id; and a delta
  whose arguments start a JSON object while its call's arguments are a whole one starts a new
  call (servers that send parallel calls each whole, at one index, without ids), unless they
  are the same object again, which is taken once (servers whose end-of-stream flush resends
  the whole arguments: never a second call, nor ``{...}{...}``);
- the id is set once (a server that repeats it in every delta does not make ``call_1call_1``);
- the function name's pieces are joined, as the reference clients join them (openai-python,
  the OpenAI Agents SDK), except a piece that is the whole name so far (servers that send the
  whole name in every delta made ``read_fileread_file``), and one that is the name so far with
  more after it (a name resent as it grows), which replaces it; a piece that is only the start
  of the name so far is joined (``list_files`` streamed a character a delta has an ``l`` that
  is the start of ``list_fi``). Where the rule and the plain join disagree, the one that names
  an offered tool wins (``StreamAssembler.offered``: a name such as ``aa`` streamed a character
  a delta);
- the arguments are appended, in order; arguments a server sends as a JSON object instead of
  its text (llama-server did, ggml-org/llama.cpp#20198) are taken as that object's JSON text,
  never dropped (google/adk-go PR #1254: the tool ran with ``{}``);
- a call without an id gets ``fallback_call_id`` (from the response's id and the call's place:
  the same on every replay of the same response), and so does a call whose id an earlier call
  of the same answer has (``distinct_ids``: models behind some proxies give parallel calls one
  id, and sent back so the next request was refused, can1357/oh-my-pi#2055, openclaw PR
  #47136).

**Finish reasons** (``check_finish``), by name: ``stop``, ``tool_calls`` and the legacy
``function_call`` (and the other servers' names for them, ``COMPLETE_FINISH``) end a turn that
is complete (its tool calls run); ``length`` (cut at the output limit) and ``content_filter``
(cut by the provider's filter) end the model call with a non-retryable ``ApplicationError`` of
type ``ModelOutputTruncated`` and ``ModelContentFiltered`` (nothing of the turn is recorded or
run: a cut call's arguments are not the call the model meant); ``abort`` and ``error`` (the
server gave up) are retried; any other reason (a name this client does not know) ends a
complete turn, as ``stop`` would: the peers do the same
(LiteLLM's ``map_finish_reason`` takes an unknown reason as ``stop`` with a warning, BerriAI/
litellm#22138; the Vercel AI SDK reports it as ``unknown``/``other`` and finishes the step,
vercel/ai#1832), and what such a turn holds still goes through every check a call meets (a
cut call's broken arguments fail its step with a result the model reads). A turn in
which the model only refused (``refusal``) ends it with ``ModelRefused`` (``check_refusal``),
not as an empty answer. A stream
is complete once it brought a ``finish_reason`` or ``data: [DONE]``; one that ended with
neither (a proxy or server cut it) is a retryable ``ModelStreamCut`` error, and so is a
connection lost mid-stream (the model activity maps that).

**Bounds** (``bounded_answer``: every provider's turn passes it, the scripted one's too, in the
model activity): the workflow records every call as events (``EventInput``: a name and call id
of 1 to 128 characters, arguments cut at ``MAX_PAYLOAD_CHARS``), and the turn crosses Temporal
as the activity's result (``MAX_PAYLOAD_BYTES``). So, before the turn leaves the activity: a
call id that is empty or over ``MAX_CALL_ID_CHARS`` is replaced by ``fallback_call_id`` (the
call runs: its id was the server's, not the model's choice), and so is an id an earlier call of
the turn has (``distinct_ids``); a name over ``MAX_TOOL_NAME_CHARS`` (no tool's name is that
long) becomes ``{its first 40 characters}__{N}_characters``, so its step fails with "no tool
... for this agent" naming the length; arguments over ``MAX_PAYLOAD_CHARS`` are cut to one
character past it, their full length and SHA-256 kept (``ToolCall.arguments_full_length``):
the workflow refuses the call before any tool runs, records the full length and digest with it
and tells the model the real length (``workflows.agents.steps``, ``tool-call-bounds``). Empty
arguments are ``{}``. Content over ``MAX_PAYLOAD_CHARS`` is cut to it here, as the message
event would cut it, its full length and SHA-256 kept (``ModelTurn.content_full_length``). A turn
still over the budget (hundreds of calls) is not run: its calls are dropped and
``ModelTurn.mistake`` says why (``too_large``); the workflow records its text and shows the model
that mistake as a user message, then calls it again (``workflows.agents.steps``), so the model
can act on it; a model that keeps doing it ends the task after ``MAX_MODEL_MISTAKES`` such
turns in a row with ``ModelAnswerUnusable``.

**An empty answer** (no tool call, and no text but white space: a model that spent its turn
on hidden reasoning, or a server that said ``tool_calls`` and sent none) is not a final answer:
``empty_checked`` gives it the ``mistake`` ``EMPTY_ANSWER``, shown to the model like a turn too
large (the peers' fix: nugget/thane-ai-agent#167, Tencent/WeKnora PR #819, janhq/jan#8712,
where an empty turn ended the agent as done with no answer).
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
"""Finish reasons of a complete turn: OpenAI's (``function_call``: the legacy API's), and the
names some compatible servers use for the same (Hugging Face TGI's ``eos_token`` and
``stop_sequence``, Anthropic-style ``end_turn`` and ``tool_use`` from proxies that pass them
through)."""
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
    """The id of a call the server sent without one (or with one too long to record):
    ``call_`` and 24 hex digits of SHA-256 of ``{response_id}/{place}``, so a retried or
    replayed response gives its calls the same ids and two calls never share one.

    Args:
        response_id: the response's ``id`` ("" when it has none).
        place: the call's place in the turn (0, 1, ...).
    """
    digest = hashlib.sha256(f"{response_id}/{place}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def check_finish(reason: str | None) -> None:
    """Refuse a turn that its ``finish_reason`` says is not complete (module docstring); a
    reason not named here ends a complete turn (as ``stop``: the peers' rule).

    Args:
        reason: the choice's ``finish_reason``; None for a stream that ended with ``[DONE]``
            and no reason (complete).

    Raises:
        ApplicationError: non-retryable, ``ModelOutputTruncated`` (``length``),
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
    """``turn``, or, when it has no tool call and no text but white space (and no other
    mistake), the same with ``mistake`` ``EMPTY_ANSWER``."""
    if turn.tool_calls or turn.content.strip() or turn.mistake is not None:
        return turn
    return turn.model_copy(update={"mistake": EMPTY_ANSWER})


def too_large(size: int, calls: int) -> str:
    """What the model reads after an answer of ``size`` bytes as JSON with ``calls`` tool calls
    that is over ``MAX_PAYLOAD_BYTES`` with its longest arguments cut (``bounded_turn``)."""
    return (
        f"Your last answer was {size:,} bytes as JSON with {calls} tool calls; an answer may "
        f"be at most {MAX_PAYLOAD_BYTES:,} bytes (a call's arguments at most "
        f"{MAX_PAYLOAD_CHARS:,} characters): none of its tool calls was run. Answer again with "
        "fewer or smaller tool calls."
    )


def check_refusal(refusal: str, turn: ModelTurn) -> None:
    """Refuse a turn in which the model refused (OpenAI's ``refusal`` field, streamed as
    ``delta.refusal``) and said nothing else: it is not an answer, and recorded as one the task
    would end ``done`` with empty text.

    Raises:
        ApplicationError: non-retryable ``ModelRefused`` with the model's words.
    """
    if refusal and not turn.content and not turn.tool_calls:
        raise ApplicationError(
            f"the model refused: {refusal[:1_000]}", type="ModelRefused", non_retryable=True
        )


def bounded_call(name: str, arguments: str, call_id: str | None, fallback_id: str) -> ToolCall:
    """One tool call as the workflow can record it (module docstring, "Bounds"): its name and
    id bounded, empty arguments ``{}``; its arguments' length is ``bounded_turn``'s concern.

    Args:
        name: the function's name as the model sent it.
        arguments: its arguments' text.
        call_id: its id ("" when the server sent none; None, a scripted call's, stays None:
            the tool loop names such a call).
        fallback_id: the id given when ``call_id`` is empty or too long.
    """
    if len(name) > MAX_TOOL_NAME_CHARS:
        name = f"{name[:40]}__{len(name)}_characters"
    if call_id is not None and (not call_id or len(call_id) > MAX_CALL_ID_CHARS):
        call_id = fallback_id
    return ToolCall(name=name, arguments=arguments or "{}", call_id=call_id)


def bounded_answer(turn: ModelTurn, response_id: str) -> ModelTurn:
    """``turn`` within every bound of the module docstring ("Bounds", "An empty answer"),
    whichever provider made it: each call's name and id (``bounded_call``; a call that carries
    its arguments' full length already keeps them), ids used once (``distinct_ids``), the
    sizes (``bounded_turn``), an empty answer's mistake (``empty_checked``). Applied twice, the
    second changes nothing.

    Args:
        turn: the turn as the provider made it.
        response_id: what makes the turn's fallback ids (the response's ``id``; for a turn
            without one, a text stable across the call's retries and replays).
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
    """``calls`` with every call id used once: a call whose id an earlier call of the list has
    gets ``fallback_call_id`` of its place (the model's calls are answered one by one, and a
    chat API refuses two calls of one message under one id). Calls without an id are left
    as they are."""
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
    """``call`` with arguments longer than ``MAX_PAYLOAD_CHARS`` (cleaned, ``clean_text``) cut to
    one character past it, their full length and SHA-256 kept (the workflow refuses the call,
    naming the full length); other calls, and a call cut already, as they are."""
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
    """``turn`` within ``MAX_PAYLOAD_BYTES`` as JSON (what an activity's result may be): its
    content bounded like an event's payload (``bound_text``: over ``MAX_PAYLOAD_CHARS`` it is
    cut, its full length and SHA-256 kept in ``content_full_length`` and ``content_sha256``,
    which the message event records); each call's arguments over ``MAX_PAYLOAD_CHARS`` cut,
    their full length and SHA-256 kept (``cut_arguments``).

    Returns:
        the turn; when it is still over the budget, the turn without its tool calls,
        ``mistake`` saying why (``too_large``: its size and call count).
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
    """A call's arguments (or a streamed piece of them) as text: a string as it is, a JSON
    object or array (servers that send the object itself) as its JSON text, else ""."""
    if isinstance(value, Mapping | list):
        return json.dumps(value, ensure_ascii=False)
    return _text(value)


def _whole_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object when it is a whole one (a call's arguments complete), else
    None."""
    if not text.rstrip().endswith("}"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def completion_turn(body: Mapping[str, Any]) -> ModelTurn:
    """The turn of a chat completion (a response's JSON body), its first choice's message:
    content, tool calls (``type`` function, and a legacy ``function_call``), usage, checked
    by its ``finish_reason`` and bounded (module docstring).

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
    """The turn of a streamed chat completion, assembled from its chunks (each the JSON of
    one ``data:`` line) by the rules of the module docstring. Feed ``add`` every chunk and
    ``done`` at ``data: [DONE]``; ``turn`` is the turn once the stream ended."""

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
    """The names of the tools offered (module docstring: a name the rule and the plain join of
    its pieces disagree on)."""

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
        """The call's name by the rule (module docstring), or the plain join of its pieces
        when only that one names an offered tool."""
        joined = "".join(call.pieces)
        if call.name not in self.offered and joined in self.offered:
            return joined
        return call.name


class SseDecoder:
    """Server-Sent Events decoded line by line: ``line`` takes one line of the stream (without
    its line end) and returns the ``data`` of the event it ends (an empty line ends one), or
    None. An event's ``data:`` lines are joined by newlines, the one space after the colon
    dropped; comments and other fields are ignored. ``end`` returns the data of an event the
    stream ended in."""

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
