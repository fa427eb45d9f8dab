"""``POST /tasks/{name}/cancel`` of a task with running children (docs/http.md): the cascade by
default, and ``{"cascade": false}`` leaving the children, against the API on uvicorn and the
real stack."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from agent_tasks.cli.importer import all_events
from agent_tasks.contract import AgentSpec, EventKind, TaskStatus
from tests.conftest import eventually
from tests.server.conftest import Project


@pytest.mark.parametrize("cascade", [True, False], ids=["cascade", "no-cascade"])
async def test_a_cancel_over_http_cascades_unless_told_not_to(
    http: httpx.AsyncClient, project: Project, cascade: bool
) -> None:
    """A ``fanout`` parent waits for two recorded children; the cancel is answered 202 and
    the parent ends ``cancelled``; its children end ``cancelled`` and report it, or, with
    ``{"cascade": false}``, stay ``open`` and report nothing."""
    history = project.history
    fanout = AgentSpec(name="fanout", input={"children": 2})
    assert (await history.create_task("t", "two", agent=fanout)).recorded

    async def waiting() -> bool:
        view = (await history.get_task("t")).view
        return view is not None and view.status is TaskStatus.AWAITING_CHILDREN

    await eventually(waiting, within=60)
    body = {} if cascade else {"cascade": False}
    assert (await http.post("/tasks/t/cancel", json=body)).status_code == 202
    parent = await asyncio.wait_for(history.wait_task("t"), 120)
    assert parent is not None and parent.status is TaskStatus.CANCELLED
    results = sorted(
        (e.name, json.loads(e.payload)["status"])
        for e in await all_events(history, "t")
        if e.kind is EventKind.CHILD_RESULT
    )
    if cascade:
        for key in ("c0", "c1"):
            child = await asyncio.wait_for(history.wait_task(f"t/{key}"), 120)
            assert child is not None and child.status is TaskStatus.CANCELLED
        assert results == [("c0", "cancelled"), ("c1", "cancelled")]
    else:
        for key in ("c0", "c1"):
            child = (await http.get(f"/tasks/t%2F{key}")).json()["view"]
            assert child["status"] == "open"
        assert results == []
        for key in ("c0", "c1"):
            assert (await http.post(f"/tasks/t%2F{key}/cancel", json={})).status_code == 202
