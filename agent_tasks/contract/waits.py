"""The rules of an agent task's waits: a person's answer checked against its request's JSON Schema
(``jsonschema``, Draft 2020-12).

The check runs in signal and update handlers, so on replay too: deterministic for the pinned
``jsonschema``, never raising, and linear in time: ``pattern`` is matched with RE2, while
``patternProperties`` and any ``$ref`` that does not resolve within the schema are refused when the
question is asked (``docs/input-and-children.md`` has the rules).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import re2  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import extend
from pydantic import JsonValue
from referencing import Registry
from referencing.exceptions import Unresolvable

from agent_tasks.contract import MAX_PAYLOAD_CHARS

MAX_ANSWER_CHARS = MAX_PAYLOAD_CHARS
"""Characters of an answer's JSON text: the event payload's cut, so ``input_response`` holds it
whole."""


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The ``pattern`` keyword matched with RE2 (the library's own matches with ``re``)."""
    if validator.is_type(instance, "string") and not re2.search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = extend(Draft202012Validator, {"pattern": _pattern})  # type: ignore[no-untyped-call]
"""Draft 2020-12 with ``pattern`` matched by RE2."""


def answer_text(answer: JsonValue) -> str:
    """The answer as the JSON text its ``input_response`` event holds.

    Raises:
        ValueError: the answer holds NaN or an infinity (JSON has no such numbers).
    """
    return json.dumps(answer, allow_nan=False)


def answer_error(schema: Mapping[str, JsonValue], answer: JsonValue) -> str | None:
    """Why ``answer`` may not be taken for a request of ``schema``, None when it may: over
    ``MAX_ANSWER_CHARS`` of JSON, a number JSON cannot hold, or ``best_match``'s error after the
    faulty value's path. Never raises (RE2's memory budget can still refuse an answer: a reason
    too).
    """
    try:
        size = len(answer_text(answer))
    except ValueError:
        return "the answer: NaN and infinities are not JSON numbers"
    if size > MAX_ANSWER_CHARS:
        return f"the answer is {size:,} characters of JSON; at most {MAX_ANSWER_CHARS:,}"
    try:
        error = best_match(_validator(schema).iter_errors(answer))
    except (re2.error, Unresolvable, RecursionError) as err:
        return f"the answer could not be checked: {type(err).__name__}: {err}"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where or 'the answer'}: {error.message}"


def _validator(schema: Mapping[str, JsonValue]) -> Any:
    """A validator of ``schema`` whose references resolve within the schema only."""
    return _Validator(schema, registry=Registry())


def _walk(node: JsonValue, path: str = "") -> Iterator[tuple[str, str, JsonValue]]:
    """Every ``(path, key, value)`` of a schema's objects, depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(item, f"{path}/{index}")


def check_schema(schema: Mapping[str, JsonValue]) -> None:
    """Check a question's JSON Schema when it is asked (the module docstring's rules).

    Raises:
        ValueError: naming the fault: not Draft 2020-12; ``patternProperties``; a ``pattern`` RE2
            cannot compile; a ``$ref`` or ``$dynamicRef`` that does not resolve within the schema.
    """
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as err:
        raise ValueError(f"not a valid JSON Schema: {err.message}") from err
    resolver = _validator(schema)._resolver
    for path, key, value in _walk(dict(schema)):
        where = path or "/"
        if key == "patternProperties" and isinstance(value, dict):
            raise ValueError(
                f"{where}: patternProperties is not supported (its regular expressions would "
                "run with Python's re, which can backtrack without bound in workflow code)"
            )
        if key == "pattern" and isinstance(value, str):
            try:
                re2.compile(value)
            except re2.error as err:
                raise ValueError(f"{where}: pattern {value!r} is not RE2 syntax: {err}") from err
        if key in ("$ref", "$dynamicRef") and isinstance(value, str):
            try:
                resolver.lookup(value)
            except Unresolvable as err:
                raise ValueError(
                    f"{where}: {key} {value!r} does not resolve within the schema (nothing "
                    "is fetched)"
                ) from err
