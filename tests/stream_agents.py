"""Agent code and a scripted model for the stream and Tasks API tests: an agent that waits
for a go-ahead before it talks (so a test can connect its stream first), and a model whose
turns stream as several tokens each."""

from __future__ import annotations

from agent_tasks.activities.model import ScriptedModel, tool_call
from agent_tasks.contract import AgentSpec, ModelSpec, ModelTurn
from agent_tasks.workflows.agents import AgentContext, agent, tool_loop
from tests.agent_tools import answer

TURNS = [
    ModelTurn(
        content="Let me look that up for you",
        tool_calls=[tool_call("echo", {"text": "redis"}, "c1")],
    ),
    answer("Redis is an in-memory data store used as a cache and a broker"),
]
"""The two turns of the scripted model ``talk``: text and an echo call, then the answer."""

SCRIPTS = {"talk": ScriptedModel(TURNS)}
"""The scripted models these tests add to a worker."""


@agent("wait_then_talk")
async def wait_then_talk(ctx: AgentContext) -> str:
    """Ask for a go-ahead (any answer), then run the tool-calling loop."""
    await ctx.ask("go", "Start?")
    return await tool_loop(ctx)


TALKER = AgentSpec(name="wait_then_talk", tools=["echo"], model=ModelSpec(model="talk"))
"""An agent task that waits for ``go``, then streams two model turns around one echo step."""
