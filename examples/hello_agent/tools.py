"""The agent's tool that runs as an activity on the worker: a search of a few notes.

A tool is an activity: the worker runs it, with retries by its retry policy, and its result is
recorded in the task's history before the agent sees it, so a crash never runs it twice on its
own (``idempotent=True``: it may run again; ``context.idempotency_key`` is the same on every
retry, the key to deduplicate an external side effect with).
"""

from __future__ import annotations

from pydantic import BaseModel

from agent_tasks.starter import ToolContext, tool

NOTES = {
    "temporal": "Temporal keeps every task's history: a crash loses nothing.",
    "neo4j": "Neo4j holds the mirror of every task, for the questions across tasks.",
}
"""What the notes know, by keyword."""


class Query(BaseModel):
    """The arguments of ``search_notes``."""

    text: str
    """The question; each of its words is looked up in ``NOTES``."""


@tool("search_notes", arguments=Query, idempotent=True, description="Search the notes.")
async def search_notes(args: Query, context: ToolContext) -> str:
    """The notes whose keyword is a word of the question, one a line; "" when none is."""
    words = {word.strip("?.,!").lower() for word in args.text.split()}
    return "\n".join(note for key, note in NOTES.items() if key in words)
