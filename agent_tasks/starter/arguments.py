"""The one check of an argument an app or a person gives: by its pydantic type, the same wherever it
appears (client calls, CLI options), the error naming the argument and showing the value.
``checked(value, TaskName, "task")`` returns the value or raises ``ValidationError`` at ``task``.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

TITLE = "argument"
"""The title of the errors ``checked`` raises (``1 validation error for argument``)."""


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def invalid(field: str, value: object, reason: str) -> ValidationError:
    """The ``ValidationError`` of an argument a rule beyond its type refuses (``raise
    invalid("status", status, "a task awaits input through request_input")``)."""
    error = PydanticCustomError("value_error", "{reason}", {"reason": reason})
    return ValidationError.from_exception_data(
        TITLE, [InitErrorDetails(type=error, loc=(field,), input=value)]
    )


def checked(value: object, kind: Any, field: str) -> Any:
    """``value`` validated as ``kind`` (a type or an ``Annotated`` type of the models).

    Returns:
        The validated value (as pydantic returns it: an enum member for its value, say).

    Raises:
        ValidationError: the value is not a ``kind``; each error's location starts with ``field``.
    """
    try:
        validated = _adapter(kind).validate_python(value)
    except ValidationError as err:
        details = [
            InitErrorDetails(
                type=PydanticCustomError(error["type"], "{reason}", {"reason": error["msg"]}),
                loc=(field, *error["loc"]),
                input=error["input"],
            )
            for error in err.errors()
        ]  # a custom error of the same type and message: any type, ours or pydantic's
        raise ValidationError.from_exception_data(TITLE, details) from None
    return validated
