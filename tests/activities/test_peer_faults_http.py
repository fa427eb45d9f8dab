"""Peers' faults on the HTTP tool (``activities.http_tool``), each reproduced against ours with
the tests' own API (``tests.http_tools.EffectServer``: it counts requests and effects per
``Idempotency-Key``), real Temporal and Neo4j. Each test's docstring names the public report it
comes from."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from agent_tasks.cli.importer import all_events, all_steps
from agent_tasks.contract import AgentSpec, EventKind, ModelSpec, StepState, TaskStatus
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from tests.agent_tools import answer, calls
from tests.http_tools import EffectServer, Mode
from tests.servers import served
from tests.workflows.conftest import script
from tests.workflows.test_http_tool import ended, history_of, http_worker


def charge(url: str, mode: Mode, **more: Any) -> dict[str, Any]:
    """The arguments of a charge of 42 on the API at ``url``."""
    return {"url": f"{url}/charge", "amount": 42, "mode": mode, **more}


@pytest.mark.parametrize(
    ("mode", "more", "seen"),
    [
        ("cut", {}, "RemoteProtocolError"),
        ("garbled", {}, "DecodingError"),
        ("gateway", {}, "a gateway's HTTP 502: <h1>502 Bad Gateway</h1>"),
        ("slow", {"timeout_s": 1}, "ReadTimeout"),
        ("not_json", {"read": "json"}, "HTTP 200 whose body is not JSON"),
    ],
)
async def test_an_answer_that_cannot_be_read_is_unknown_and_the_same_call_gets_the_first(
    client: Client, graph: TaskGraph, project_id: str, mode: Mode, more: dict[str, Any], seen: str
) -> None:
    """currents-dev/currents-mcp#163 ("never sent" and "sent, response lost" collapsed into one
    failure, so a retry duplicates a create), fabriziosalmi/proxxx#254 (a write re-sent after a
    response timeout or a gateway's 502/504), psf/requests#3849 (a body marked gzip that is
    not): the API performs the charge and its answer is cut short of its ``content-length``,
    a gzip body that is not gzip, a gateway's 502, 5 s late for a 1 s timeout, or a body
    ``answer_json`` cannot parse. Before, each failed the step (a cut, a timeout or a 502 as a
    retryable ``HttpToolError``, the body as an unmapped ``DecodingError``), and the model's
    same call ran as a new step under a new key: a second charge. Now the step (a tool not
    idempotent) ends ``unknown``, the model reads that the server may have performed it, and
    its same call again runs as that step, under its key: the API answers the first charge
    again, one effect."""
    history = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url, http_worker(client, graph, history.task_queue):
        call = ("http_charge", charge(url, mode, **more))
        goal = script(calls(call), calls(call), answer("paid"))
        model = ModelSpec(provider="scripted", model="from-goal")
        loop = AgentSpec(tools=["http_charge"], model=model)
        assert (await history.create_task("t", goal, agent=loop)).recorded
        done = await ended(history)
        steps = await all_steps(history, "t")
        events = await all_events(history, "t")
    assert done.status is TaskStatus.DONE, done
    (step,) = steps
    key = step.idempotency_key
    assert (step.state, api.requests, api.effects) == (StepState.COMPLETED, {key: 2}, {key: 1})
    first, second = [e.payload for e in events if e.kind is EventKind.TOOL_RESULT]
    assert "its effect is unknown" in first and seen in first
    assert "the server may have performed it" in first
    assert f'"key": "{key}"' in second or f'"key":"{key}"' in second


async def test_an_idempotent_tool_retries_a_cut_answer_under_its_key_and_ends_unknown(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """django-salesforce/django-salesforce#159 (a create whose answer timed out was retried as
    a new request: a duplicate): an idempotent tool (three attempts) whose every answer is cut
    is retried by its policy under one key, and its last attempt ends the step ``unknown``,
    never ``failed`` (whose next call would carry a new key)."""
    history = history_of(client, graph, project_id)
    api = EffectServer()
    api.cut_always = True
    async with served(api.app) as url, http_worker(client, graph, history.task_queue):
        args = charge(url, "cut")
        agent = AgentSpec(
            name="http_once",
            tools=["http_charge_retried"],
            input={"tool": "http_charge_retried", "args": args},
        )
        assert (await history.create_task("t", "charge", agent=agent)).recorded
        failed = await ended(history)
        (step,) = await all_steps(history, "t")
    key = step.idempotency_key
    assert failed.status is TaskStatus.FAILED and failed.error is not None
    assert "the charge is unknown" in failed.error.text
    assert (step.state, api.requests, api.effects) == (StepState.UNKNOWN, {key: 3}, {key: 1})


async def test_a_429_asking_for_a_day_fails_the_step_at_once_naming_the_wait(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """hashicorp/go-retryablehttp#247 (a ``Retry-After: 3600`` slept past the client's maximum
    wait); the rule of curl/curl#7675 (a wait longer than retries may take stops the retries):
    an idempotent tool's API answers 429 with ``Retry-After: 86400``. Before, the step stayed
    ``in_progress`` with its next attempt a day away. Now it fails at once, not retried, and
    the text names the wait the API asked for and the bound; no effect."""
    history = history_of(client, graph, project_id)
    api = EffectServer()
    async with served(api.app) as url, http_worker(client, graph, history.task_queue):
        agent = AgentSpec(
            name="http_once",
            tools=["http_charge_retried"],
            input={"tool": "http_charge_retried", "args": charge(url, "busy_for_a_day")},
        )
        assert (await history.create_task("t", "charge", agent=agent)).recorded
        failed = await ended(history)
        (step,) = await all_steps(history, "t")
    key = step.idempotency_key
    assert failed.status is TaskStatus.FAILED and failed.error is not None
    assert (step.state, api.requests, api.effects) == (StepState.FAILED, {key: 1}, {})
    assert (
        "answered HTTP 429; it asks to wait 86,400 s before a retry, longer than a retry waits "
        "for a server (300 s): not retried: come back tomorrow"
    ) in failed.error.text
