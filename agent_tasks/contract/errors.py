"""The error vocabulary of the task layer: every code and error type (``docs/codes.md``).

What a caller can meet::

    ErrorCode                      a refused write: raised in an update validator as
                                   ApplicationError(type=code), so nothing is written; the
                                   client returns it as ``WriteResult.error``
    DUPLICATE, CONTINUING_AS_NEW   ApplicationError types between workflow and client, never
                                   shown to users
    MIRROR_UNAVAILABLE, MIRROR_DATA_ERROR, MIRROR_REFUSED
                                   the mirror activity's failures (``TaskView.mirror_error``)
    pydantic.ValidationError       an argument of the wrong shape, before anything is sent

Every exception of ours derives from ``AgentTasksError``, in families; a built-in base stays a
second base where callers catch it::

    AgentTasksError
    ├── ServiceUnavailable            a service did not answer: trying later can help
    │   ├── TaskServiceUnavailable    Temporal or a worker (RuntimeError): retry with the same
    │   │                             request id
    │   ├── GraphUnavailable          the graph store (also a GraphError)
    │   └── KeyStoreUnavailable       the key store of sealed text (sealing.seal)
    ├── ConfigurationError            the setup is wrong; retrying does not help (RuntimeError)
    │   ├── Neo4jPasswordMissing      no Neo4j password set or generated (config)
    │   ├── GraphNotConfigured        a read needs the graph store and none was given
    │   └── DevStackError             a local stack's server cannot start (devstack.process)
    ├── GraphError                    the graph store, whichever is behind the port
    │   ├── GraphUnavailable          (above)
    │   ├── GraphAuthError            the store refused the credentials
    │   ├── GraphDataError            the store refused the statement or its data
    │   │   └── TaskIncarnationError  the mirror met a task node that is not its task's
    │   └── GraphIncomplete           the store lacks events a read needs (RuntimeError):
    │                                 rebuild it from the histories
    ├── AgentError                    raised into agent code (workflows.agents)
    │   ├── BudgetExceeded, InputTimeout, SpawnRefused, ChildFailed, ApprovalExpired
    ├── TaskRefused                   the Tasks API refused a write (starter.task_records)
    ├── ApiError                      an HTTP API error answer (server.errors)
    └── TrajectoryFormatError         a file is not a trajectory we read (ValueError)

    AgentTasksControlFlow (BaseException: agent code's ``except Exception`` passes it on)
    └── AgentParked                   the task continues as new here; the agent is called again

Control flow derives from ``BaseException``, as Temporal's ``ContinueAsNewError`` and
``asyncio.CancelledError`` do. Deterministic (stdlib and temporalio only): the workflow imports it.
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
    """The task is run by its agent, the single writer of its steps, events and end; from outside it
    takes notes, input and a cancel only."""
    INPUT_NOT_REQUESTED = "input_not_requested"
    """``respond``: no open input request has that id (or none is open)."""
    INPUT_INVALID = "input_invalid"
    """``respond``: the answer does not satisfy the request's JSON Schema (the message says why)."""
    INPUT_CLOSED = "input_closed"
    """``respond``: the request was closed without an answer it can take (timed out, task ended)."""
    APPROVAL_STALE = "approval_stale"
    """``respond``: the answer's ``digest`` is not the request's: the call changed since it was
    shown."""
    APPROVER_REPEATED = "approver_repeated"
    """``respond``: the answer's author accepted this call already (a call needing more approvers
    runs after that many distinct people accept)."""
    PARENT_NOT_FOUND = "parent_not_found"
    """``create_task``: the parent named does not exist in this project."""
    NOT_RESUMABLE = "not_resumable"
    """``resume_task``: only an agent task that ended ``failed`` or ``cancelled`` resumes."""
    NO_RESUMABLE_TURN = "no_resumable_turn"
    """``resume_task``: the last run was interrupted after its tools ran, so it is continued
    (``continue_task``), never replayed."""
    NO_INTERRUPTED_TURN = "no_interrupted_turn"
    """``continue_task``: the last run was not interrupted after its tools ran (``resume_task``
    it)."""
    TASK_BUSY = "task_busy"
    """The history is near Temporal's hard limit while the mirror catches up; retry later
    (``HISTORY_BACKPRESSURE_EVENTS``)."""
    STEP_NOT_FOUND = "step_not_found"
    """A decision cites a step the task does not have."""
    EVENT_NOT_SEALED = "event_not_sealed"
    """``redact_event``: the event was recorded as plain text, which stays in the workflow history;
    only ``delete_task`` removes it."""
    KEY_STORE_UNAVAILABLE = "key_store_unavailable"
    """A sealing client's first write to a task needs its key tree stored first, and the key store
    did not store it within ``KEY_STORE_WAIT_S``: nothing was sent (``sealing.seal``); retry."""
    INPUT_EXISTS = "input_exists"
    """``ask`` from outside: the task asked an input request of that id before."""
    SCHEMA_INVALID = "schema_invalid"
    """``ask`` from outside: the schema breaks ``contract.waits.check_schema`` (the message says
    which)."""
    INPUT_LIMIT_REACHED = "input_limit_reached"
    """``ask`` from outside: the task has ``MAX_PENDING_INPUTS`` open, ``MAX_INPUTS_PER_TASK``
    asked, or ``MAX_INPUT_SCHEMA_BYTES`` of open requests."""
    CHILD_LIMIT_REACHED = "child_limit_reached"
    """``spawn`` from outside: ``MAX_CHILDREN`` children already, or a child past ``MAX_DEPTH``."""
    NUMBER_OUT_OF_RANGE = "number_out_of_range"
    """An event's token ``usage`` passes ``MAX_TOKEN_COUNT``, which no graph store holds exactly."""


DUPLICATE = "duplicate_request"
"""ApplicationError type of a repeated request id with the same arguments; its details carry the
stored ``WriteOutcome``, which the client returns."""

CONTINUING_AS_NEW = "continuing_as_new"
"""ApplicationError type raised while a task drains before continue-as-new; nothing is written and
the client resends to the new run."""

MIRROR_UNAVAILABLE = "MirrorUnavailable"
"""ApplicationError type of a mirror call that met a transient graph-store error (retried)."""

MIRROR_DATA_ERROR = "MirrorDataError"
"""ApplicationError type of a mirror call whose data the graph store refused (not retried)."""

MIRROR_REFUSED = "MirrorRefused"
"""ApplicationError type of a mirror call whose data the graph store refused and recorded
(``taskgraph.refusals``) for a worker to retry later; a closing task completes with it."""


def refusal(code: ErrorCode, message: str) -> ApplicationError:
    """The error a validator raises to refuse a write: ``type`` is the ``ErrorCode`` value."""
    return ApplicationError(message, type=code.value, non_retryable=True)


def duplicate(outcome: BaseModel) -> ApplicationError:
    """The error a validator raises for a repeated request id, the stored outcome its one detail."""
    return ApplicationError("duplicate request", outcome, type=DUPLICATE, non_retryable=True)


def error_code(type_: str | None) -> ErrorCode | None:
    """The ``ErrorCode`` whose value is ``type_`` (an ApplicationError type), else None."""
    if type_ is None or type_ not in ErrorCode._value2member_map_:
        return None
    return ErrorCode(type_)


class AgentTasksError(Exception):
    """The base of every error of durable-agent-tasks (the tree: the module docstring)."""


class AgentTasksControlFlow(BaseException):
    """The base of control flow that agent code must not catch: a ``BaseException``, so an
    agent's ``except Exception`` passes it on to the workflow."""


class ServiceUnavailable(AgentTasksError):
    """A service (Temporal, a worker, the graph store, the key store) did not answer, or the
    connection was lost before it did: trying later can help."""


class ConfigurationError(AgentTasksError, RuntimeError):
    """The setup is wrong (a missing password or graph store, a server that cannot start): the
    message says what to change; retrying does not help."""


class TaskServiceUnavailable(ServiceUnavailable, RuntimeError):
    """Temporal (or the graph store, for graph reads) did not answer or the connection was lost: the
    write may or may not be recorded, so retry it with the same request id."""


class GraphError(AgentTasksError):
    """A failure of the graph store: each adapter maps its driver's errors to these (the driver's
    error as ``__cause__``), so nothing outside an adapter imports a driver."""


class GraphUnavailable(GraphError, ServiceUnavailable):
    """The graph store did not answer, or answered with a transient error: trying later can help."""


class GraphAuthError(GraphError):
    """The graph store refused the credentials (``NEO4J_USERNAME``/``NEO4J_PASSWORD``, or the
    FalkorDB URL's)."""


class GraphDataError(GraphError):
    """The graph store refused a statement or its data: the same input fails the same way again."""


class TaskIncarnationError(GraphDataError, ValueError):
    """The mirror met a task node that is not its task's (an earlier task of the same workflow id,
    deleted by retention, or a deleted task's tombstone): not retried, the name is taken."""


class GraphNotConfigured(ConfigurationError):
    """A read needs the graph store and the client has none: pass ``graph=`` to
    ``ConversationHistory``."""


class GraphIncomplete(GraphError, RuntimeError):
    """The graph store lacks events of an earlier run that a read needs: rebuild it from the
    histories (``agent-tasks graph rebuild``)."""


class AgentError(AgentTasksError):
    """An error raised into agent code by its context (budget, timeout, refused spawn, failed child,
    expired approval); agent code may catch it."""


def failure_text(err: BaseException) -> str:
    """What went wrong, in words a person can act on (at most ``FAILURE_TEXT_CHARS``): the type and
    message of the first cause past Temporal's activity and child-workflow wrappers (the error
    raised at the activity's edge, e.g. ``ModelApiError: ...``), or of ``err`` itself."""
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
