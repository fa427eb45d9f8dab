"""Which server answers the client's transport sends again (``starter.transport._busy``): the
messages are the Temporal server's own (v1.32.0: ``service/history/workflow/update``,
``service/history/consts``, ``service/history/api/updateworkflow``); the production suite's
storm test restarts a real server under writes, where the first of them came back."""

from __future__ import annotations

import pytest
from temporalio.service import RPCError, RPCStatusCode

from agent_tasks.starter.transport import _busy

NOT_READY = [
    "Unable to perform workflow execution update due to unexpected workflow task failure.",
    "Unable to perform workflow execution update due to Workflow Task in failed state.",
    "Workflow task is not scheduled yet.",
]
"""``WorkflowNotReady`` answers (FAILED_PRECONDITION): nothing was written."""


@pytest.mark.parametrize("message", NOT_READY)
def test_a_workflow_not_ready_answer_is_sent_again(message: str) -> None:
    assert _busy(RPCError(message, RPCStatusCode.FAILED_PRECONDITION, b""))


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("Workflow is paused. Cannot update the workflow.", RPCStatusCode.FAILED_PRECONDITION),
        ("There is no poller seen for this task queue", RPCStatusCode.FAILED_PRECONDITION),
        ("workflow execution already completed", RPCStatusCode.NOT_FOUND),
        (NOT_READY[0], RPCStatusCode.INVALID_ARGUMENT),
    ],
)
def test_other_answers_are_not_sent_again(message: str, status: RPCStatusCode) -> None:
    assert not _busy(RPCError(message, status, b""))
