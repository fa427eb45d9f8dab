"""The rules of an agent task's waits: checking a person's answer against its request's JSON
Schema (with the maintained ``jsonschema`` library, Draft 2020-12).

Workflow code: the check runs in the signal and update handlers, and so on replay too, so it
must be deterministic, bounded in time, and never raise for any answer:

- it is deterministic for a given ``jsonschema`` version (pinned in the lock; a version that
  judged an old answer otherwise would change what a replay records);
- ``pattern`` is matched with RE2 (``google-re2``: linear time in the answer's length, no
  backtracking), since Python's ``re`` can take exponential time (``(a+)+$`` against 30
  characters stalls the worker's workflow thread, and with it every task on that worker);
  ``patternProperties`` (which ``jsonschema`` also matches with ``re`` inside
  ``additionalProperties`` and ``unevaluatedProperties``) is refused when the question is
  asked;
- every ``$ref`` must resolve within the schema itself, checked when the question is asked:
  nothing is fetched (a workflow does no I/O), so a remote or dangling reference is refused
  then, never met by an answer;
- an answer is at most ``MAX_ANSWER_CHARS`` characters of JSON, so its ``input_response``
  event holds it whole.
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
"""Characters of an answer's JSON text (``answer_text``): the event payload's cut, so the
``input_response`` event keeps the whole answer and the agent reads back what was sent."""


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
    """Why ``answer`` may not be taken for a request of ``schema``, None when it may: more
    than ``MAX_ANSWER_CHARS`` characters of JSON, a number JSON cannot hold, or the library's
    ``best_match`` error after the path of the value at fault (or ``the answer``). An empty
    schema takes any JSON value. Never raises: a schema the checks of ``check_schema`` let
    through can still fail on some answer (RE2's memory budget), and that is a reason too.
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
    """Check a question's JSON Schema when it is asked (the rules in the module's docstring).

    Raises:
        ValueError: naming the fault: not a valid Draft 2020-12 schema; ``patternProperties``;
            a ``pattern`` RE2 cannot compile (backreferences, lookaround); a ``$ref`` or
            ``$dynamicRef`` that does not resolve within the schema.
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
