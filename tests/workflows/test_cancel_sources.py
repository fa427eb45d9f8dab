"""Cancel claims of docs/agent-tasks.md ("Cancellation: one rule") and
docs/input-and-children.md that the other cancel tests do not reach: ``agent-tasks cancel
NAME [--no-cascade]`` run as a subprocess, the cascade reaching grandchildren, ``temporal
workflow cancel`` of a parent alone, a parent resumed after its own cascade cancel. Against the
real dev server and Neo4j, on the agent worker of ``tests/workflows/conftest.py``."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from temporalio.client import Client

from devstack import find_temporal_binary
from starter.client import ConversationHistory
from starter.importer import all_events
from tests.conftest import eventually
from tests.workflows.conftest import cli
from workflows.models import AgentSpec, EventKind, TaskStatus, TaskView


async def view_of(history: ConversationHistory, task: str) -> TaskView:
    view = (await history.get_task(task)).view
    assert view is not None, task
    return view


async def waiting_for_children(history: ConversationHistory, task: str = "t") -> None:
    """Wait until the ``fanout`` task is ``awaiting_children``."""

    async def waiting() -> bool:
        return (await view_of(history, task)).status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting, within=60)


async def child_results(history: ConversationHistory, task: str) -> list[tuple[str, str]]:
    """(spawn key, status) of the task's ``child_result`` events, sorted."""
    return sorted(
        (e.name or "", json.loads(e.payload)["status"])
        for e in await all_events(history, task)
        if e.kind is EventKind.CHILD_RESULT
    )


async def ended(history: ConversationHistory, task: str) -> TaskStatus:
    """The task's status once its workflow has ended."""
    view = await asyncio.wait_for(history.wait_task(task), 120)
    assert view is not None, task
    return view.status


@pytest.mark.parametrize("cascade", [True, False], ids=["cascade", "no-cascade"])
async def test_agent_tasks_cancel_from_the_cli(agents: ConversationHistory, cascade: bool) -> None:
    """``agent-tasks cancel NAME`` (cli.md, input-and-children.md's ``./run cancel release``)
    cancels the task and its running children, each reporting ``cancelled``; with
    ``--no-cascade`` the children keep running and the parent records no end of theirs."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await waiting_for_children(agents)
    flags = [] if cascade else ["--no-cascade"]
    code, out = await cli("cancel", "t", *flags, "--project", agents.project_id, "--json")
    assert (code, out["recorded"], out["error"]) == (0, True, None)
    assert await ended(agents, "t") is TaskStatus.CANCELLED
    if cascade:
        assert [await ended(agents, f"t/c{i}") for i in range(2)] == [TaskStatus.CANCELLED] * 2
        assert await child_results(agents, "t") == [("c0", "cancelled"), ("c1", "cancelled")]
    else:
        statuses = [(await view_of(agents, f"t/c{i}")).status for i in range(2)]
        assert statuses == [TaskStatus.OPEN] * 2
        assert await child_results(agents, "t") == []
        for i in range(2):
            assert (await agents.cancel_task(f"t/c{i}")).recorded


async def test_agent_tasks_cancel_of_an_unknown_task_is_refused(
    agents: ConversationHistory,
) -> None:
    """The CLI's cancel of a name not in the project: exit 1, ``task_not_found``."""
    code, out = await cli("cancel", "nobody", "--project", agents.project_id, "--json")
    assert (code, out["recorded"], out["error"]) == (1, False, "task_not_found")


async def temporal_cancel(workflow_id: str) -> None:
    """``temporal workflow cancel --workflow-id ID`` against the local dev server."""
    done = await asyncio.to_thread(
        subprocess.run,
        [str(find_temporal_binary()), "workflow", "cancel", "--workflow-id", workflow_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("source", ["cancel_task", "temporal-cli"])
async def test_the_cascade_reaches_grandchildren(
    agents: ConversationHistory, client: Client, source: str
) -> None:
    """A ``fanout`` parent waits for two recorded children; the first has a recorded child
    of its own (``t/c0/g``). A cancel of the parent alone (``cancel_task``, or ``temporal
    workflow cancel`` of its workflow, which cascades once the parent's workflow task runs)
    ends the parent, both children and the grandchild ``cancelled``, each end reported to
    its own parent."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await waiting_for_children(agents)
    assert (await agents.spawn_child("t/c0", "g", "t/c0/g", "grandchild")).recorded
    if source == "cancel_task":
        assert (await agents.cancel_task("t")).recorded
    else:
        await temporal_cancel(agents.workflow_id("t"))
    tree = ["t", "t/c0", "t/c1", "t/c0/g"]
    assert [await ended(agents, name) for name in tree] == [TaskStatus.CANCELLED] * 4
    assert await child_results(agents, "t") == [("c0", "cancelled"), ("c1", "cancelled")]
    assert await child_results(agents, "t/c0") == [("g", "cancelled")]
    for name in tree:
        description = await client.get_workflow_handle(agents.workflow_id(name)).describe()
        assert description.status is not None and description.status.name == "CANCELED", name


async def test_a_parent_resumed_after_its_cascade_cancel_gets_its_children_cancelled(
    agents: ConversationHistory,
) -> None:
    """input-and-children.md: a parent resumed after its own cascade cancel: its children stay
    ``cancelled`` (no new child is started under their keys) and the agent code that waits
    for them gets them ``cancelled``; each end is recorded once."""
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await agents.create_task("t", "two", agent=fanout)).recorded
    await waiting_for_children(agents)
    assert (await agents.cancel_task("t")).recorded
    assert await ended(agents, "t") is TaskStatus.CANCELLED
    assert [await ended(agents, f"t/c{i}") for i in range(2)] == [TaskStatus.CANCELLED] * 2
    assert (await agents.resume_task("t")).recorded
    done = await asyncio.wait_for(agents.wait_task("t", until=TaskStatus.DONE), 120)
    assert done is not None and done.status is TaskStatus.DONE
    assert done.result is not None and done.result.text == "c0=cancelled,c1=cancelled"
    assert await child_results(agents, "t") == [("c0", "cancelled"), ("c1", "cancelled")]
    spawned = [e.name for e in await all_events(agents, "t") if e.kind is EventKind.CHILD_TASK]
    assert spawned == ["c0", "c1"]
    assert [(await view_of(agents, f"t/c{i}")).status for i in range(2)] == [
        TaskStatus.CANCELLED
    ] * 2
