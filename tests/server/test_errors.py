"""The HTTP status of refusals (pure): a refusal the client should retry soon is 503 with
``Retry-After``; one by the task's state is 409."""

from __future__ import annotations

import pytest

from agent_tasks.contract.errors import ErrorCode
from agent_tasks.server.errors import ApiError


@pytest.mark.parametrize("code", [ErrorCode.TASK_BUSY, ErrorCode.KEY_STORE_UNAVAILABLE])
def test_a_refusal_to_retry_soon_is_503_with_retry_after(code: ErrorCode) -> None:
    error = ApiError.refused(code, "later")
    assert (error.status, error.headers, error.body.error.code) == (
        503,
        {"Retry-After": "1"},
        code.value,
    )


def test_a_refusal_by_the_tasks_state_is_409() -> None:
    error = ApiError.refused(ErrorCode.TASK_CLOSED, "closed")
    assert (error.status, error.headers) == (409, None)
