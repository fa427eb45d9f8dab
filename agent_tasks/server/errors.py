"""How the HTTP API answers a refusal or an error: the product's code as JSON with the HTTP
status that fits it.

Every error body is ``{"error": {"code": ..., "message": ...}}`` (``details``: the fields of
a body or query that failed validation). The statuses (``STATUS``; ``docs/http.md`` has the
table):

- 401 ``unauthorized``: no API key, or one that is not valid (unknown, revoked);
- 403 ``forbidden``: the key's project is not the one named in the path;
- 404: ``task_not_found``, ``parent_not_found``, ``event_not_found``, ``step_not_found``;
- 409: every other refusal by the task's state (``task_exists``, ``request_id_reused``,
  ``task_closed``, ``run_by_agent``, ``input_not_requested``, the limits reached ...);
- 413 ``body_too_large``: a body over ``AGENT_TASKS_MAX_BODY_BYTES``;
- 422: ``invalid_argument`` (a field of the wrong shape), ``invalid_json``,
  ``invalid_request_id``, ``input_invalid``, ``schema_invalid``, ``number_out_of_range``;
- 429 ``too_many_streams``: the key holds ``AGENT_TASKS_STREAMS_PER_KEY`` streams already;
- 503: ``task_busy`` (with ``Retry-After``), ``service_unavailable`` (Temporal, a worker or
  Neo4j did not answer: retry with the same request id).

A message never holds an API key (the key is read from its header only, and never echoed).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from agent_tasks.contract.errors import AgentTasksError, ErrorCode

STATUS: dict[str, int] = {
    ErrorCode.TASK_NOT_FOUND: 404,
    ErrorCode.PARENT_NOT_FOUND: 404,
    ErrorCode.EVENT_NOT_FOUND: 404,
    ErrorCode.STEP_NOT_FOUND: 404,
    ErrorCode.INVALID_REQUEST_ID: 422,
    ErrorCode.INPUT_INVALID: 422,
    ErrorCode.SCHEMA_INVALID: 422,
    ErrorCode.NUMBER_OUT_OF_RANGE: 422,
    ErrorCode.TASK_BUSY: 503,
    ErrorCode.KEY_STORE_UNAVAILABLE: 503,
}
"""The HTTP status of each code that is not 409 (a refusal by the task's state)."""


class ErrorBody(BaseModel):
    """What an error says."""

    code: str
    """The product's code (``ErrorCode``) or the HTTP layer's (the table above)."""
    message: str
    """For people."""
    details: list[dict[str, Any]] | None = None
    """The fields that failed validation (``invalid_argument``)."""


class ErrorResponse(BaseModel):
    """The body of every error answer."""

    error: ErrorBody


class ApiError(AgentTasksError):
    """An error answer: raised by a route, turned into ``ErrorResponse`` JSON."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorResponse(error=ErrorBody(code=code, message=message, details=details))
        self.headers = headers

    @classmethod
    def refused(cls, code: ErrorCode, message: str) -> ApiError:
        """The answer to a refused write (``STATUS``, else 409)."""
        later = code in (ErrorCode.TASK_BUSY, ErrorCode.KEY_STORE_UNAVAILABLE)
        headers = {"Retry-After": "1"} if later else None
        return cls(STATUS.get(code, 409), code.value, message, headers=headers)

    @classmethod
    def task_not_found(cls) -> ApiError:
        """404 ``task_not_found``: the task is not in the key's project (nor is it named, so
        that a key learns nothing of another project's names)."""
        return cls.refused(ErrorCode.TASK_NOT_FOUND, "no such task in this project")


def error_response(error: ApiError) -> JSONResponse:
    """The JSON answer of ``error``."""
    return JSONResponse(
        error.body.model_dump(exclude_none=True), status_code=error.status, headers=error.headers
    )


async def api_error_handler(request: Request, error: Exception) -> JSONResponse:
    """FastAPI's handler of ``ApiError``."""
    assert isinstance(error, ApiError)
    return error_response(error)


def _invalid(errors: list[Any], title: str = "") -> JSONResponse:
    """422 ``invalid_json`` for a body that is not JSON, else ``invalid_argument`` with the
    fields (their input values left out: they may be long, or hold what a client should not
    see echoed)."""
    problems = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors
    ]
    if any(p["type"] == "json_invalid" for p in problems):
        return error_response(ApiError(422, "invalid_json", "the body is not valid JSON"))
    first = problems[0] if problems else {"loc": [], "msg": "invalid"}
    where = ".".join(str(part) for part in first["loc"]) or title
    return error_response(
        ApiError(422, "invalid_argument", f"{where}: {first['msg']}", details=problems)
    )


async def validation_error_handler(request: Request, error: Exception) -> JSONResponse:
    """FastAPI's handler of a body, query or path that failed validation (``_invalid``)."""
    assert isinstance(error, RequestValidationError)
    return _invalid(list(error.errors()))


async def model_error_handler(request: Request, error: Exception) -> JSONResponse:
    """FastAPI's handler of pydantic's ``ValidationError`` raised by the client under a route
    (an argument of the wrong shape, found before anything was sent): ``_invalid``."""
    assert isinstance(error, ValidationError)
    return _invalid(list(error.errors()), error.title)
