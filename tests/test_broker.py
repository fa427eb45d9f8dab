"""The broker (``broker``): messages on the real ``redis-server`` of the local stack, and what
happens when no broker answers (publishing drops, a model call goes on)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import uuid
from pathlib import Path

import pytest

from agent_tasks.broker import (
    RECONNECT_PAUSE_S,
    Broker,
    Message,
    PageMessage,
    PublishedWrite,
    Subscriber,
    TokenMessage,
    WrittenMessage,
    channels,
    open_page,
    session_channel,
    sign_page,
    task_channel,
)
from agent_tasks.contract import AgentSpec, EventInput, ModelSpec, RecordEventsInput, WriteOutcome
from agent_tasks.devstack import free_port
from agent_tasks.devstack.redis_server import RedisServer
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.worker import Services, build_worker
from tests.conftest import eventually
from tests.stream_agents import SCRIPTS


def test_channels_of_a_task_with_and_without_a_session() -> None:
    assert channels("agent-task/p/t", None) == ["agent-tasks:task:agent-task/p/t"]
    assert channels("agent-task/p/a/b", "s1") == [
        task_channel("agent-task/p/a/b"),
        session_channel("p", "s1"),
    ]
    assert session_channel("p", "s1") == "agent-tasks:session:p:s1"


async def test_messages_reach_every_subscriber_of_a_channel_in_order(services: Services) -> None:
    assert services.broker is not None
    subscriber = Subscriber(services.broker)
    reading = asyncio.create_task(subscriber.run())
    channel = f"agent-tasks:test:{uuid.uuid4().hex}"
    got: tuple[list[object], list[object]] = ([], [])
    try:
        await subscriber.add(channel, got[0].append)
        await subscriber.add(channel, got[1].append)
        sent = [TokenMessage(task="t", text=f"w{n}", index=n) for n in range(50)]
        sent_all: list[TokenMessage | WrittenMessage] = [
            *sent,
            WrittenMessage(task="t", seq=3, status="open"),
        ]
        for message in sent_all:
            assert await services.broker.publish([channel], message)
        await eventually(lambda: _true(len(got[1]) == len(sent_all)), within=10)
        assert got[0] == got[1] == sent_all
        subscriber.remove(channel, got[0].append)
        assert await services.broker.publish([channel], sent[0])
        await eventually(lambda: _true(len(got[1]) == len(sent_all) + 1), within=10)
        assert len(got[0]) == len(sent_all)  # removed: no more
        await services.broker.redis.publish(channel, b"not one of ours")  # ignored
        assert await services.broker.publish([channel], sent[1])
        await eventually(lambda: _true(got[1][-1] == sent[1]), within=10)
    finally:
        reading.cancel()
        await subscriber.close()


async def test_after_a_failed_publish_the_broker_is_not_tried_for_a_pause(
    services: Services,
) -> None:
    """A failed publish drops the messages of the next ``RECONNECT_PAUSE_S`` untried (a hung
    broker holds a publisher once a pause): the same client pointed at a broker that answers
    drops at once, and publishes again after the pause."""
    assert services.broker is not None
    broker = Broker(f"redis://127.0.0.1:{free_port()}")
    try:
        message = TokenMessage(task="t", text="x", index=0)
        assert not await broker.publish(["c"], message)
        absent, broker.redis = broker.redis, services.broker.redis
        assert not await broker.publish(["c"], message)  # within the pause: not tried
        await asyncio.sleep(RECONNECT_PAUSE_S)
        assert await broker.publish(["c"], message)
    finally:
        await absent.aclose()


async def test_a_subscription_asked_for_while_the_broker_is_down_holds_once_it_is_back(
    tmp_path: Path,
) -> None:
    """redis/redis-py #2089's kind: the broker stops, a stream subscribes meanwhile, the
    broker starts again: the subscription holds and its messages arrive (it was asked for
    again, not lost with the failed SUBSCRIBE)."""
    server = RedisServer(tmp_path, free_port())
    await server.start_ready()
    broker = Broker(server.url)
    subscriber = Subscriber(broker)
    reading = asyncio.ensure_future(subscriber.run())
    got: list[Message] = []
    try:
        await subscriber.add("before", got.append)
        await server.stop()
        adding = asyncio.ensure_future(subscriber.add("during", got.append))
        await asyncio.sleep(2 * RECONNECT_PAUSE_S)  # the subscriber tries and fails meanwhile
        await server.start_ready()
        await asyncio.wait_for(adding, 30)
        sent = TokenMessage(task="t", text="back", index=0)
        await asyncio.sleep(RECONNECT_PAUSE_S)  # the publisher's pause after its failures
        assert await broker.publish(["during"], sent)
        await eventually(lambda: _true(sent in got), within=10)
    finally:
        reading.cancel()
        await subscriber.close()
        await broker.close()
        await server.stop()


def test_a_page_opens_only_with_the_key_that_signed_it() -> None:
    write = PublishedWrite(
        workflow_id="p/t",
        run_id="r",
        input=RecordEventsInput(
            agent_id="a", events=[EventInput(kind="message", payload="hi")], request_id="q"
        ),
        outcome=WriteOutcome(first_seq=3, last_seq=3, writes=4),
    )
    key, other = os.urandom(32), os.urandom(32)
    message = sign_page(write, "k", key)
    assert message.key_id == "k"
    assert message.mac == hmac.new(key, message.body.encode(), hashlib.sha256).hexdigest()
    assert open_page(message, key) == write
    assert open_page(message, other) is None
    assert open_page(message, None) is None  # the key store has no such key
    forged = message.body.replace('"last_seq":3', '"last_seq":9')
    assert forged != message.body
    assert open_page(message.model_copy(update={"body": forged}), key) is None
    # signed, but no page: dropped, not raised
    garbage = PageMessage(key_id="k", body="{}", mac=hmac.new(key, b"{}", "sha256").hexdigest())
    assert open_page(garbage, key) is None


async def _true(value: bool) -> bool:
    return value


async def test_without_a_broker_publishing_drops_and_the_model_call_goes_on(
    services: Services, project_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker URL nothing answers at: each publish fails fast (False, one warning a
    minute), and an agent task whose model streams tokens ends done as without one."""
    assert services.graph is not None
    absent = Broker(f"redis://127.0.0.1:{free_port()}")
    try:
        assert not await absent.publish(["c"], TokenMessage(task="t", text="x", index=0))
        assert not await absent.publish(["c"], TokenMessage(task="t", text="y", index=1))
        assert caplog.text.count("broker unavailable") == 1
        queue = f"nobroker-{uuid.uuid4().hex[:8]}"
        history = ConversationHistory(
            services.client, project_id, "a", task_queue=queue, graph=services.graph
        )
        spec = AgentSpec(tools=["echo"], model=ModelSpec(model="talk"))
        async with build_worker(
            services.client, services.graph, queue, scripts=SCRIPTS, broker=absent
        ):
            assert (await history.create_task("t", "go", agent=spec)).recorded
            final = await asyncio.wait_for(history.wait_task("t"), 120)
        assert final is not None and final.status.value == "done"
    finally:
        await absent.close()
