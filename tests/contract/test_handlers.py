"""The names the client SDK calls the task workflow by (``contract.handlers``) against the
workflow's own definition: each handler exists, of its kind, with the types the contract says."""

from __future__ import annotations

from typing import Any, get_type_hints

from temporalio import workflow

from agent_tasks.contract import TaskView, TaskWorkflowInput, WriteOutcome, handlers
from agent_tasks.workflows.task import TaskWorkflow

DEFINITION = workflow._Definition.must_from_class(TaskWorkflow)

QUERIES: list[handlers.Query[Any]] = [
    handlers.VIEW,
    handlers.EVENTS,
    handlers.STEPS,
    handlers.RESUME_STATE,
    handlers.REQUEST_OUTCOME,
]


def names_of(space: type) -> set[str]:
    return {value for key, value in vars(space).items() if key.isupper()}


def test_the_workflow_type_and_its_run() -> None:
    assert DEFINITION.name == handlers.WORKFLOW_TYPE
    hints = get_type_hints(TaskWorkflow.run)
    assert (hints["input"], hints["return"]) == (TaskWorkflowInput, TaskView)


def test_each_query_takes_and_answers_what_the_contract_says() -> None:
    for query in QUERIES:
        hints = get_type_hints(DEFINITION.queries[query.name].fn)
        taken = [kind for name, kind in hints.items() if name != "return"]
        assert taken == ([] if query.arg is None else [query.arg]), query.name
        assert hints["return"] == query.result, query.name


def test_each_update_and_signal_is_the_workflows() -> None:
    updates = names_of(handlers.Update)
    assert updates and updates <= set(DEFINITION.updates)
    for name in updates:
        assert get_type_hints(DEFINITION.updates[name].fn)["return"] is WriteOutcome, name
    signals = names_of(handlers.Signal)
    assert signals and signals <= set(DEFINITION.signals)
