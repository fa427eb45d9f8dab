"""The answer rules of input requests (``contract.waits``) and the JSON payloads of the ledger
(``json_within``): pure functions, no server."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import JsonValue

from agent_tasks.contract import MAX_PAYLOAD_CHARS, json_within
from agent_tasks.contract.waits import MAX_ANSWER_CHARS, answer_error, check_schema


def test_a_backtracking_pattern_is_matched_in_linear_time() -> None:
    """``(a+)+$`` against 30 ``a`` and a ``!`` takes Python's ``re`` about 2**30 steps (the
    test's timeout would end it); RE2 answers at once, with the library's message."""
    schema: dict[str, JsonValue] = {"type": "string", "pattern": "(a+)+$"}
    check_schema(schema)
    text = "a" * 30 + "!"
    assert answer_error(schema, text) == f"the answer: {text!r} does not match '(a+)+$'"
    assert answer_error(schema, "a" * 30) is None
    assert answer_error({"properties": {"id": {"pattern": "^[0-9]+$"}}}, {"id": "12x"}) == (
        "id: '12x' does not match '^[0-9]+$'"
    )


@pytest.mark.parametrize(
    ("schema", "fault"),
    [
        ({"type": "foo"}, "not a valid JSON Schema"),
        ({"patternProperties": {"^x": {}}}, "/: patternProperties is not supported"),
        ({"properties": {"a": {"pattern": "(a)\\1"}}}, "/properties/a: pattern '(a)\\\\1' is not"),
        ({"$ref": "https://example.com/schema.json"}, "/: $ref 'https://example.com/schema.json'"),
        ({"$ref": "#/$defs/missing"}, "/: $ref '#/$defs/missing' does not resolve"),
        ({"items": {"$dynamicRef": "#/$defs/x"}}, "/items: $dynamicRef '#/$defs/x' does not"),
    ],
)
def test_schemas_an_answer_could_not_be_checked_against_are_refused_when_asked(
    schema: dict[str, JsonValue], fault: str
) -> None:
    """Refused when the question is asked, so no answer ever meets them: invalid, regular
    expressions ``re`` would run, RE2-foreign syntax, references that do not resolve within
    the schema (nothing is fetched)."""
    with pytest.raises(ValueError, match="^" + re.escape(fault)):
        check_schema(schema)


def test_local_references_resolve() -> None:
    schema: dict[str, JsonValue] = {
        "$defs": {"n": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {"count": {"$ref": "#/$defs/n"}},
    }
    check_schema(schema)
    assert answer_error(schema, {"count": 2}) is None
    assert answer_error(schema, {"count": 0}) == "count: 0 is less than the minimum of 1"


def test_every_answer_is_whole_json_within_the_payload_cut() -> None:
    """An answer is its JSON text, whole in its event: at most 32,000 characters; no NaN or
    infinity (JSON has none: ``json.dumps`` would write ``NaN``, which no reader parses)."""
    assert MAX_ANSWER_CHARS == MAX_PAYLOAD_CHARS == 32_000
    fits = "x" * (32_000 - 2)  # the two quotes make 32,000
    assert answer_error({}, fits) is None
    assert answer_error({}, fits + "x") == "the answer is 32,001 characters of JSON; at most 32,000"
    assert answer_error({}, float("nan")) == "the answer: NaN and infinities are not JSON numbers"
    assert answer_error({}, [1, float("inf")]) is not None


@pytest.mark.parametrize("text", ["plain", "é" * 40_000, "\x01" * 40_000, '"\\' * 20_000])
def test_json_within_cuts_the_text_until_the_json_fits(text: str) -> None:
    payload = json_within({"child": "c", "status": "done"}, "text", text)
    assert len(payload) <= MAX_PAYLOAD_CHARS
    read = json.loads(payload)
    assert (read["child"], read["status"]) == ("c", "done")
    assert text.startswith(read["text"])
    # cut by no more than needed: one character more would not fit
    if read["text"] != text:
        longer = {"child": "c", "status": "done", "text": text[: len(read["text"]) + 1]}
        assert len(json.dumps(longer, ensure_ascii=False)) > MAX_PAYLOAD_CHARS
