"""The Temporal plugin of durable-agent-tasks for clients (and the replayers built like them).

An app adds it to its own client instead of remembering the data converter, the way the SDK's
own integrations (OpenAI Agents, Pydantic AI) are added::

    client = await Client.connect("localhost:7233", plugins=[AgentTasksPlugin()])

It gives the client ``codec.DATA_CONVERTER`` (pydantic models and the zlib payload codec: a
client without the codec cannot read compressed payloads), and every worker and ``Replayer``
built on such a client the sandbox passthroughs of ``TaskWorkflow`` (``PASSTHROUGH_MODULES``).
A worker that runs tasks adds ``worker.AgentTasksWorkerPlugin`` (the workflow and the
activities, which need the Neo4j graph and the worker's tools) to its ``Worker``. They are two
plugins because the SDK applies a client's plugins to every worker built on the client too,
and warns when one plugin type is given to both: the client's part holds nothing a worker
must bring (the same split as Pydantic AI's ``PydanticAIPlugin`` and ``AgentPlugin``).

No Neo4j driver is loaded here (``import starter`` loads none).
"""

from __future__ import annotations

import dataclasses

from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agent_tasks.codec import DATA_CONVERTER

PLUGIN_NAME = "durable-agent-tasks"
"""The client plugin's name (``Plugin.name``; the worker plugin's is this + ``.worker``)."""

PASSTHROUGH_MODULES = (
    # The contract the task workflow shares with its callers (the models, the error
    # vocabulary, the search attributes, the answer checks) and the workflow's helpers (the
    # ledger and its rooms, the agent registry and context, the mirror policy, the decision
    # rules): deterministic code over pydantic and temporalio that holds no state of a run at
    # module level (the agent registry maps names to functions, filled when agent modules are
    # imported on the worker, and must be the worker's own to be found).
    # ``workflows/task.py`` imports them passed through too.
    "agent_tasks.contract",
    "agent_tasks.workflows.agents",
    "agent_tasks.workflows.decisions",
    "agent_tasks.workflows.ledger",
    "agent_tasks.workflows.mirroring",
    "agent_tasks.workflows.patches",
    # The workflow's module itself. The sandbox imports a workflow's module again for every
    # run (its global-state isolation), which cost every open task's memory a copy of this
    # large module. What passing it through gives up is that isolation, so the module holds
    # nothing a run could change: constants, functions and the class, whose state lives in
    # its instances (``tests/test_plugin.py`` checks); determinism is held by the replay of
    # every saved history, as for the helpers above.
    "agent_tasks.workflows.task",
    # The answer checks of ``contract.waits``: jsonschema (pure, its version pinned in the
    # lock) and RE2 (a C++ extension, which the sandbox cannot re-import per run).
    "jsonschema",
    "re2",
)
"""Modules the workflow sandbox passes through (shares with the worker) instead of importing
them again for each run: each is deterministic and keeps no state between runs."""


def sandbox_passthrough(runner: WorkflowRunner | None) -> WorkflowRunner:
    """``runner`` with ``PASSTHROUGH_MODULES`` passed through when it is the sandboxed runner
    (the SDK's default); any other runner (``UnsandboxedWorkflowRunner``) as it is.

    Raises:
        ValueError: no runner (the SDK always gives its default to a plugin).
    """
    if runner is None:
        raise ValueError("no workflow runner to configure")
    if isinstance(runner, SandboxedWorkflowRunner):
        restrictions = runner.restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES)
        return dataclasses.replace(runner, restrictions=restrictions)
    return runner


class AgentTasksPlugin(SimplePlugin):
    """The client plugin: the product's data converter (``codec.DATA_CONVERTER``) for the
    client and its replayers, and the sandbox passthroughs (``sandbox_passthrough``) for the
    workers and replayers built on the client. See the module docstring."""

    def __init__(self) -> None:
        super().__init__(
            PLUGIN_NAME, data_converter=DATA_CONVERTER, workflow_runner=sandbox_passthrough
        )
