"""durable-agent-tasks: the durable task layer for AI agents, on Temporal with a graph store.

An app imports ``agent_tasks.starter`` (the client SDK, the Tasks API, the agent and tool
decorators); a worker process runs ``agent_tasks.worker``; ``agent-tasks`` is the command line.
This module imports nothing, so every room loads only what it uses.
"""
