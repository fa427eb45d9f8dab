"""The task workflow as its callers name it: its type, and its handlers by name with the pydantic
types they take and answer (``workflows.task.TaskWorkflow`` defines them).

The client SDK calls the workflow through these names, so an app loads none of the workflow's code;
``tests/contract/test_handlers.py`` checks each against the workflow's definition.

>>> view = await VIEW.on(client.get_workflow_handle(task_workflow_id("acme", "fix-42")))
>>> await handle.execute_update(Update.RECORD_EVENTS, write, result_type=WriteOutcome)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agent_tasks.contract.inputs import EventsQuery, RequestLookup, StepsQuery, WriteOutcome
from agent_tasks.contract.state import TaskState
from agent_tasks.contract.views import EventsPage, StepsPage, TaskView

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

WORKFLOW_TYPE = "TaskWorkflow"
"""The task workflow's type (its class name); its run takes a ``TaskWorkflowInput`` and ends with
the task's ``TaskView``."""

_R = TypeVar("_R")


@dataclass(frozen=True)
class Query(Generic[_R]):
    """A query of the task workflow: its handler's name, what it takes, what it answers."""

    name: str
    """The handler's name."""
    arg: type[Any] | None
    """The model it takes (None: no argument)."""
    result: Any
    """The type of its answer (a model, or a union with None)."""

    async def on(self, handle: WorkflowHandle[Any, Any], *args: Any, **options: Any) -> _R:
        """This query's answer from ``handle``'s workflow, validated as ``result``.

        ``args`` is the query's argument (an ``arg`` instance) when it takes one; ``options`` go to
        ``WorkflowHandle.query`` (``reject_condition``, ``rpc_timeout``), whose errors pass through.
        """
        answer: _R = await handle.query(self.name, args=args, result_type=self.result, **options)
        return answer


VIEW: Query[TaskView] = Query("view", None, TaskView)
"""The task's view."""
EVENTS: Query[EventsPage] = Query("events", EventsQuery, EventsPage)
"""A page of the current run's events."""
STEPS: Query[StepsPage] = Query("steps", StepsQuery, StepsPage)
"""A page of the task's steps."""
RESUME_STATE: Query[TaskState] = Query("resume_state", None, TaskState)
"""The state a resumed or continued task starts from."""
REQUEST_OUTCOME: Query[WriteOutcome | None] = Query(
    "request_outcome", RequestLookup, WriteOutcome | None
)
"""The stored outcome of a write's request id, if the task has one."""


class Update:
    """The names of the task workflow's updates: each takes its input model and answers a
    ``WriteOutcome`` (its validator refuses with an ``ErrorCode``)."""

    CREATE_TASK = "create_task"
    """``TaskStart``: create a recorded task (with the workflow's start)."""
    RECORD_EVENTS = "record_events"
    """``RecordEventsInput``."""
    SET_STEPS = "set_steps"
    """``SetStepsInput``."""
    FINISH_TASK = "finish_task"
    """``FinishTaskInput``."""
    RESPOND = "respond"
    """``InputAnswer``: answer an input request."""
    RETRY_STEP = "retry_step"
    """``StepRetry``."""
    UPDATE_STATUS = "update_status"
    """``SetStatusInput``."""
    ASK = "ask"
    """``AskInput``: open an input request."""
    SPAWN = "spawn"
    """``SpawnInput``: start a child task."""


class Signal:
    """The names of the task workflow's signals."""

    SUBMIT_INPUT = "submit_input"
    """``InputAnswer``: an answer that needs no reply."""
    CHILD_ENDED = "child_ended"
    """``ChildEnd``: a spawned child's end."""
    KEEP_CHILDREN = "keep_children"
    """No argument: the next cancel leaves the children running."""
