"""The rules of an agent task's waits: validating a person's answer against its request's JSON
Schema (with the maintained ``jsonschema`` library, Draft 2020-12).

Workflow code: the validation runs in the signal and update handlers, and so on replay too; it
is deterministic for a given ``jsonschema`` version (pinned in the lock; a version that judged
an old answer otherwise would change what a replay records).
"""

from __future__ import annotations

from collections.abc import Mapping

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from pydantic import JsonValue


def answer_error(schema: Mapping[str, JsonValue], answer: JsonValue) -> str | None:
    """Why ``answer`` does not satisfy ``schema`` (the library's ``best_match`` error, after the
    path of the value at fault or ``the answer``), None when it does. An empty schema takes any
    JSON value.

    Raises:
        jsonschema.exceptions.SchemaError: ``schema`` is not a valid JSON Schema (checked
            when the request is asked, so answers never meet a bad one).
    """
    error = best_match(Draft202012Validator(schema).iter_errors(answer))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where or 'the answer'}: {error.message}"


def check_schema(schema: Mapping[str, JsonValue]) -> None:
    """Raise ``ValueError`` naming the fault when ``schema`` is not a valid JSON Schema."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as err:
        raise ValueError(f"not a valid JSON Schema: {err.message}") from err
