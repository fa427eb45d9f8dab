"""A task's custom search attributes, by which Temporal visibility lists tasks without the graph
store (``temporal workflow list``, the Web UI, the CLI); a server must register them
(``devstack.temporal`` does)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair

from agent_tasks.contract import TaskStart, TaskStatus

PROJECT_ID = SearchAttributeKey.for_keyword("ProjectId")
AGENT_ID = SearchAttributeKey.for_keyword("AgentId")
SESSION_ID = SearchAttributeKey.for_keyword("SessionId")
TASK_STATUS = SearchAttributeKey.for_keyword("TaskStatus")
PARENT_TASK = SearchAttributeKey.for_keyword("ParentTask")
SEARCH_ATTRIBUTE_KEYS = (PROJECT_ID, AGENT_ID, SESSION_ID, TASK_STATUS, PARENT_TASK)
"""The custom search attributes a Temporal server must have registered for TaskWorkflow."""


def search_attributes(start: TaskStart, status: TaskStatus) -> list[SearchAttributePair[str]]:
    """The custom search attributes of a task (project, agent, session, parent, status)."""
    pairs = [
        SearchAttributePair(PROJECT_ID, start.project_id),
        SearchAttributePair(AGENT_ID, start.agent_id),
        SearchAttributePair(TASK_STATUS, status.value),
    ]
    if start.session_id is not None:
        pairs.append(SearchAttributePair(SESSION_ID, start.session_id))
    if start.parent is not None:
        pairs.append(SearchAttributePair(PARENT_TASK, start.parent))
    return pairs
