"""The error vocabulary of the task layer: one place for every code and error type.

What a caller can meet, and where it comes from::

    refusal of a write (a result, never an exception in the client)
      ErrorCode                      raised in an update validator as ApplicationError(type=code),
                                     so nothing is written; the client returns it as
                                     ``WriteResult.error``
    control flow between workflow and client (ApplicationError types, never shown to users)
      DUPLICATE                      a repeated request id with the same arguments; the details
                                     carry the stored ``WriteOutcome``, the client returns it
      CONTINUING_AS_NEW              the task drains before continue-as-new; the client resends
    the mirror activity (ApplicationError types, seen in ``TaskView.mirror_error``)
      MIRROR_UNAVAILABLE             Neo4j unreachable or a transient error: retried
      MIRROR_DATA_ERROR              Neo4j refused the data: not retried, the workflow pauses
    client exceptions (Python exceptions raised to the app)
      TaskServiceUnavailable         Temporal, a worker or Neo4j did not answer: retry with the
                                     same request id
      pydantic.ValidationError       an argument of the wrong shape, before anything is sent
      GraphNotConfigured             a read needs Neo4j and none was given
      GraphIncomplete                Neo4j lacks events a read needs: rebuild the graph

This module is deterministic (stdlib and temporalio only), so the workflow imports it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    TimeoutError,
)

FAILURE_TEXT_CHARS = 2_000
"""Characters of a failure's text kept in a task's ``error`` (``failure_text``)."""


class ErrorCode(StrEnum):
    """Why a write was refused. A refused write leaves nothing in the history or the state."""

    TASK_EXISTS = "task_exists"
    """``create_task``: the name exists in this project with another goal."""
    TASK_NOT_FOUND = "task_not_found"
    """No task of that name in this project."""
    EVENT_NOT_FOUND = "event_not_found"
    """``result_event_seq`` names no event of this task."""
    REQUEST_ID_REUSED = "request_id_reused"
    """The request id was used before with other arguments."""
    INVALID_REQUEST_ID = "invalid_request_id"
    """A request id must be 1 to 64 characters."""
    TASK_CLOSED = "task_closed"
    """The task was finished; it takes no more writes."""
    INVALID_TRANSITION = "invalid_transition"
    """The step cannot move from its state to the asked one (``STEP_TRANSITIONS``)."""
    STEP_KIND_CHANGED = "step_kind_changed"
    """A step keeps the kind it was created with."""
    STEP_LIMIT_REACHED = "step_limit_reached"
    """The task already holds ``MAX_STEPS_PER_TASK`` steps."""
    RUN_BY_AGENT = "run_by_agent"
    """The task is run by its agent, the single writer of its steps, events and end: from
    outside it takes notes, input and a cancel only."""
    INPUT_NOT_REQUESTED = "input_not_requested"
    """``respond``: no open input request has that id (or none is open)."""
    INPUT_INVALID = "input_invalid"
    """``respond``: the answer does not satisfy the request's JSON Schema (the message says
    why)."""
    INPUT_CLOSED = "input_closed"
    """``respond``: the request named was closed without an answer it can take (it timed out,
    or its task ended); the message says which."""
    APPROVAL_STALE = "approval_stale"
    """``respond``: the answer approves a call other than the one the request asks about (its
    ``digest`` is not the request's: the call changed since the person was shown it)."""
    APPROVER_REPEATED = "approver_repeated"
    """``respond``: the answer's author accepted this call already; a call that needs more
    than one approver runs after that many distinct people accepted it."""
    PARENT_NOT_FOUND = "parent_not_found"
    """``create_task``: the parent named does not exist in this project."""
    NOT_RESUMABLE = "not_resumable"
    """``resume_task``: only an agent task that ended ``failed`` or ``cancelled`` resumes."""
    NO_RESUMABLE_TURN = "no_resumable_turn"
    """``resume_task``: the task's last run was interrupted after its tools ran (it committed
    something): it is continued (``continue_task``), never replayed."""
    NO_INTERRUPTED_TURN = "no_interrupted_turn"
    """``continue_task``: the task's last run was not interrupted after its tools ran (it
    finished, failed and was rolled back, or committed nothing: ``resume_task`` it)."""
    TASK_BUSY = "task_busy"
    """The task's history is near Temporal's hard limit while the mirror catches up; retry
    later (see ``HISTORY_BACKPRESSURE_EVENTS``)."""
    STEP_NOT_FOUND = "step_not_found"
    """A decision cites a step the task does not have."""
    EVENT_NOT_SEALED = "event_not_sealed"
    """``redact_event``: the event was recorded as plain text (by a client without a key
    store, or before sealing existed), so its text is in the workflow history for good; only
    ``delete_task`` removes it."""
    KEY_STORE_UNAVAILABLE = "key_store_unavailable"
    """A sealing client's first write to a task (from its process) needs a key tree stored
    first, and the key store (Neo4j) did not store it within ``KEY_STORE_WAIT_S`` or refused:
    nothing was sent, never plain text in its place (``sealing.seal``). Later writes to
    a task need no key store; retry this one once Neo4j answers."""
    INPUT_EXISTS = "input_exists"
    """``ask`` from outside: the task asked an input request of that id before."""
    SCHEMA_INVALID = "schema_invalid"
    """``ask`` from outside: the JSON Schema breaks the rules of ``contract.waits.check_schema``
    (the message says which)."""
    INPUT_LIMIT_REACHED = "input_limit_reached"
    """``ask`` from outside: the task has as many open requests, or asked as many questions,
    as it may (``MAX_PENDING_INPUTS``, ``MAX_INPUTS_PER_TASK``, ``MAX_INPUT_SCHEMA_BYTES``)."""
    CHILD_LIMIT_REACHED = "child_limit_reached"
    """``spawn`` from outside: the task has ``MAX_CHILDREN`` children, or a child would be more
    than ``MAX_DEPTH`` levels deep."""


DUPLICATE = "duplicate_request"
"""ApplicationError type a validator raises for a repeated request id with the same arguments;
its details carry the stored ``WriteOutcome``. The client turns it into a normal result."""

CONTINUING_AS_NEW = "continuing_as_new"
"""ApplicationError type a validator raises while a task drains before continue-as-new (the
mirror catching up); nothing is written, and the client sends the write again shortly, when
the new run takes it."""

MIRROR_UNAVAILABLE = "MirrorUnavailable"
"""ApplicationError type of a mirror call that met a transient Neo4j error (retryable)."""

MIRROR_DATA_ERROR = "MirrorDataError"
"""ApplicationError type of a mirror call whose data Neo4j refused (not retryable)."""


def refusal(code: ErrorCode, message: str) -> ApplicationError:
    """The error a validator raises to refuse a write: its ``type`` is the ``ErrorCode`` value,
    and the client maps it back to the same code."""
    return ApplicationError(message, type=code.value, non_retryable=True)


def duplicate(outcome: BaseModel) -> ApplicationError:
    """The error a validator raises for a repeated request id: ``DUPLICATE`` with the stored
    outcome as its one detail."""
    return ApplicationError("duplicate request", outcome, type=DUPLICATE, non_retryable=True)


def error_code(type_: str | None) -> ErrorCode | None:
    """The ``ErrorCode`` whose value is ``type_`` (an ApplicationError type), else None."""
    if type_ is None or type_ not in ErrorCode._value2member_map_:
        return None
    return ErrorCode(type_)


class TaskServiceUnavailable(RuntimeError):
    """Temporal (or Neo4j, for graph reads) could not be reached, or the connection was lost
    before the server answered. The write may or may not have been recorded: retry it with the
    same request id."""


class GraphNotConfigured(RuntimeError):
    """A read needs the Neo4j task graph (older runs' events, cross-task reads) and the client
    was made without one: pass ``graph=`` to ``ConversationHistory``."""


class GraphIncomplete(RuntimeError):
    """Neo4j lacks events of a task's earlier run that a read needs (the graph was wiped or
    lost): rebuild it from the Temporal histories with ``agent-tasks graph rebuild``."""


def failure_text(err: BaseException) -> str:
    """What went wrong, in words a person can act on (at most ``FAILURE_TEXT_CHARS``): for a
    Temporal failure (an ``ActivityError`` around the model call's ``ModelApiError``, a tool's
    ``RuntimeError``, a timeout) the innermost cause's type and message, e.g. ``ModelApiError:
    model API answered HTTP 400: ...``, never the wrapper's "Activity task failed"; for any
    other exception its type and message. The cause looked at is the first one past the
    activity and child workflow wrappers: the error raised at the activity's edge."""
    while isinstance(err, ActivityError | ChildWorkflowError) and err.cause is not None:
        err = err.cause
    if isinstance(err, ApplicationError):
        text = f"{err.type}: {err.message}" if err.type else err.message
    elif isinstance(err, TimeoutError):
        kind = "activity" if err.type is None else err.type.name.lower().replace("_", "-")
        text = f"{kind} timeout: {err.message}"
    else:
        text = f"{type(err).__name__}: {err}"
    return text[:FAILURE_TEXT_CHARS]
