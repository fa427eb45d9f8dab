"""Our own calls of Temporal's service (the ones the SDK's client does not make for us) against
a frontend that recycles its connections, as a cluster does: every call answers, none fails
for the connection it happened to be sent on.

A frontend closes each client connection after ``frontend.keepAliveMaxConnectionAge`` with an
HTTP/2 GOAWAY. A call sent as the GOAWAY arrives fails with CANCELLED "operation was canceled"
unless it is retried; the SDK's own client retries it, a ``workflow_service`` call does only
with ``retry=True``. A CI run lost a module of tests to one such call (the connection age of
the dev server is 5 min); here the age is 1 s and many calls run at once, so that a call
without the retry meets a GOAWAY within seconds.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_tasks.activities.follow import HistoryPoll
from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.devstack import find_temporal_binary
from agent_tasks.worker import prepare_namespace
from tests.conftest import DEV_SERVER_ARGS, private_dev_server

CALLERS = 8
"""Calls in flight at once."""
STORM_S = 8.0
"""Seconds each storm lasts."""


@pytest.fixture(scope="module")
async def recycling() -> AsyncIterator[WorkflowEnvironment]:
    """A private dev server whose frontend recycles each client connection after 1 s."""
    env = await private_dev_server(
        lambda: WorkflowEnvironment.start_local(
            dev_server_existing_path=str(find_temporal_binary()),
            data_converter=DATA_CONVERTER,
            dev_server_extra_args=[
                *DEV_SERVER_ARGS,
                "--dynamic-config-value",
                'frontend.keepAliveMaxConnectionAge="1s"',
            ],
        )
    )
    try:
        yield env
    finally:
        await env.shutdown()


async def storm(call: Callable[[], Awaitable[object]]) -> tuple[int, list[BaseException]]:
    """Run ``call`` again and again from ``CALLERS`` callers for ``STORM_S`` seconds; returns
    how many calls answered and the errors of those that did not."""
    answered = 0
    errors: list[BaseException] = []
    deadline = asyncio.get_running_loop().time() + STORM_S

    async def caller() -> None:
        nonlocal answered
        while asyncio.get_running_loop().time() < deadline:
            try:
                await call()
                answered += 1
            except Exception as err:  # counted: the assertion shows them
                errors.append(err)

    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    return answered, errors


async def test_the_mirror_s_history_poll_outlives_recycled_connections(
    recycling: WorkflowEnvironment,
) -> None:
    client = recycling.client
    handle = await client.start_workflow("NoSuchWorkflow", id=f"w-{uuid.uuid4()}", task_queue="q")
    await handle.terminate()  # a closed run: each poll answers at once with its whole history
    assert handle.result_run_id is not None
    run_id = handle.result_run_id

    async def poll() -> int:
        grown = await HistoryPoll(client, handle.id, run_id, None).grew(timedelta(seconds=5))
        assert grown > 0
        return grown

    answered, errors = await storm(poll)
    assert errors == []
    assert answered > 100


async def test_preparing_the_namespace_outlives_recycled_connections(
    recycling: WorkflowEnvironment,
) -> None:
    client: Client = recycling.client
    assert await prepare_namespace(client)  # the first call adds the search attributes

    async def prepare() -> None:
        assert await prepare_namespace(client) == []

    answered, errors = await storm(prepare)
    assert errors == []
    assert answered > 100
