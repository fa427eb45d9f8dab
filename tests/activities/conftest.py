"""Fixtures of the activity tests that run agent tasks: a worker of the test tools with the
broker, on a private task queue."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from agent_tasks.worker import Services, build_worker
from tests.agent_tools import TOOLS
from tests.conftest import eventually


@pytest.fixture(scope="module")
async def openai_queue(services: Services) -> AsyncIterator[str]:
    """A worker with the broker and the test tools, polling before the first test uses it."""
    assert services.graph is not None
    queue = f"openai-{uuid.uuid4().hex[:8]}"
    async with build_worker(
        services.client, services.graph, queue, tools=TOOLS, broker=services.broker
    ):
        request = DescribeTaskQueueRequest(
            namespace=services.client.namespace, task_queue=TaskQueue(name=queue)
        )

        async def polling() -> bool:
            described = await services.client.workflow_service.describe_task_queue(
                request, retry=True
            )
            return bool(described.pollers)

        await eventually(polling)
        yield queue
