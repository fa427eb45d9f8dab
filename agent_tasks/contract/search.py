"""A task's custom search attributes: what Temporal visibility lists tasks by without Neo4j
(``temporal workflow list --query "TaskStatus = 'open'"``, the Web UI, the CLI's fallbacks).
A server must have them registered (``devstack.temporal`` does, for the dev server)."""

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
    """The custom search attributes of a task, so Temporal visibility can list tasks by
    project, agent, session, parent and status without Neo4j."""
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
