"""The agent: workflow code, registered by name (``@agent``), run inside the task's workflow.

It has two tools: ``search_notes``, an activity the worker runs (``tools.py``), and a person,
asked through ``ctx.ask`` when the notes do not answer. Agent code must be deterministic, as
all workflow code: no I/O, no clock, no randomness here; those belong in tools.
"""

from __future__ import annotations

from agent_tasks.starter import AgentContext, AgentSpec, agent

TASK_QUEUE = "hello-agent"
"""The task queue of this project's worker: its tasks run only where ``worker.py`` polls."""

AGENT = "hello_agent"
"""The agent's registered name."""


def spec(question: str) -> AgentSpec:
    """What runs a task of this agent: its name, its tools, its input."""
    return AgentSpec(name=AGENT, tools=["search_notes"], input={"question": question})


async def ask_person(ctx: AgentContext, question: str) -> str:
    """The second tool, a person: the task waits (``awaiting_input``, minutes or weeks) for
    an answer to ``question``, sent with ``respond`` (or ``agent-tasks input``)."""
    answer = await ctx.ask("answer", f"The notes do not say. {question}", {"type": "string"})
    return str(answer)


@agent(AGENT)
async def hello_agent(ctx: AgentContext) -> str:
    """Answer ``input["question"]`` from the notes, else ask a person."""
    question = str(ctx.input["question"])
    found = await ctx.step("search", "search_notes", {"text": question})
    if found.text:
        return f"From the notes: {found.text}"
    return f"From a person: {await ask_person(ctx, question)}"
