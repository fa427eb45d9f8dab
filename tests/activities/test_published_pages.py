"""Published pages (``broker.PageMessage``, ``activities.follow.Published``) against the real
Temporal, Neo4j and Redis: a writer with a broker publishes each event write Temporal took,
signed with its key tree's page leaf, and the worker's follower copies it to Neo4j without
polling the history; a page it cannot trust or that does not follow what it holds changes
nothing, and one that does not follow makes it poll at once.

The follower's gap between polls while pages come (``MIRROR_FOLLOW_GAP``) and its idle end
(``..._IDLE``, after which the workflow's next mirror call would copy by query) are stretched
to 60 s here, so a write in Neo4j within the test's 15 s came by its page, or by a poll that a
page or a writer's word woke (which the tests count or name)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_tasks.activities import follow
from agent_tasks.broker import (
    RECONNECT_PAUSE_S,
    Broker,
    PublishedWrite,
    Subscriber,
    page_channel,
    sign_page,
)
from agent_tasks.contract import EventInput, RecordEventsInput, WriteOutcome
from agent_tasks.devstack import free_port
from agent_tasks.devstack.redis_server import RedisServer
from agent_tasks.sealing.seal import page_signer
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.pages import PAGE_EVENTS
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import Services, build_worker
from agent_tasks.workflows.task import TaskWorkflow
from tests.conftest import eventually, mirrored
from tests.workflows.conftest import worker_process

SLOW = timedelta(seconds=60)
"""The stretched cadence: no poll of the history comes within a test."""
WITHIN_S = 15.0
TAKEN_OVER_S = 90.0
"""Time for a new worker to mirror what a killed one's follower held: the dead attempt's
heartbeat timeout (``MIRROR_HEARTBEAT``, 10 s), the sticky queue's, the retry, the copy."""
SUBSCRIBED_S = 1.0
"""Time for a new follower's subscription to hold (the worker's subscriber sends it within
its 50 ms read): a page published before it holds is lost, and only the stretched poll
would bring its write."""


@pytest.fixture(scope="module")
async def pages_queue(services: Services) -> AsyncIterator[str]:
    """A worker that listens for published pages (it has the broker)."""
    assert services.graph is not None and services.broker is not None
    queue = f"pages-{uuid.uuid4().hex[:8]}"
    async with build_worker(services.client, services.graph, queue, broker=services.broker):
        yield queue


@pytest.fixture
def publishing(
    services: Services, graph: TaskGraph, pages_queue: str, project_id: str
) -> ConversationHistory:
    """A writer that publishes its pages."""
    return ConversationHistory(
        services.client,
        project_id,
        "writer",
        task_queue=pages_queue,
        graph=graph,
        broker=services.broker,
    )


class Polls:
    """Every long poll of a history the worker's followers make from the time it is made
    (``count``): what each that ended brought (``brought``: ``HistoryPoll.grew``'s bytes, 0:
    nothing), in order, and how many are in flight (``waiting``)."""

    def __init__(self) -> None:
        self.brought: list[int] = []
        self.waiting = 0

    @classmethod
    def count(cls, monkeypatch: pytest.MonkeyPatch) -> Polls:
        polls = cls()
        grew = follow.HistoryPoll.grew

        async def counted(poll: follow.HistoryPoll, wait: timedelta) -> int:
            polls.waiting += 1
            try:
                grown = await grew(poll, wait)
            finally:
                polls.waiting -= 1
            polls.brought.append(grown)
            return grown

        monkeypatch.setattr(follow.HistoryPoll, "grew", counted)
        return polls

    async def none_waiting(self) -> bool:
        """True when no poll is in flight (an ``eventually`` check)."""
        return self.waiting == 0

    def grown_since(self, ended: int) -> list[int]:
        """What each poll after the first ``ended`` that brought something brought."""
        return [grown for grown in self.brought[ended:] if grown]


def stretch(monkeypatch: pytest.MonkeyPatch, *cadences: str) -> None:
    """Set the follower's ``cadences`` (``activities.follow``'s names) to ``SLOW``."""
    for name in cadences:
        monkeypatch.setattr(follow, name, SLOW)


async def stored(graph: TaskGraph, history: ConversationHistory, task: str) -> list[str]:
    """The payloads of the task's events in Neo4j, in seq order (seqs 1, 2, ... checked)."""
    events = await graph.reads.events(
        history.project_id, history.workflow_id(task), 0, 1_000, 1_000
    )
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.payload for e in events]


async def same_view(client: Client, graph: TaskGraph, history: ConversationHistory) -> None:
    """Neo4j's view of task ``t`` is the workflow's (its seq, write counter and time)."""
    wid = history.workflow_id("t")
    view = await client.get_workflow_handle(wid).query(TaskWorkflow.view)
    held = await graph.reads.task_view(history.project_id, wid)
    assert held is not None
    assert (held.last_seq, held.writes, held.updated_at) == (
        view.last_seq,
        view.writes,
        view.updated_at,
    )


async def test_published_writes_reach_neo4j_with_no_poll_of_the_history(
    client: Client,
    graph: TaskGraph,
    publishing: ConversationHistory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six writes back to back, then one more after the cadence: every one in Neo4j, as the
    workflow holds it, with no long poll of the history that brought anything.

    The writes counted come after two pages heard and no poll in flight: the follower's poll
    that began before it heard the first page (the poll beat the page, which the writer
    publishes in the background) waits its full length, and the second write ends it."""
    stretch(monkeypatch, "MIRROR_FOLLOW_GAP", "MIRROR_FOLLOW_IDLE")
    polls = Polls.count(monkeypatch)
    await publishing.create_task("t", "pages")
    await mirrored(publishing, "t", WITHIN_S)  # the follower's first copy
    await asyncio.sleep(SUBSCRIBED_S)
    for number in (1, 2):
        assert (await publishing.record_event("t", "message", f"m{number}")).recorded
        await mirrored(publishing, "t", WITHIN_S)
        await asyncio.sleep(SUBSCRIBED_S)  # the page heard: polls wait the gap now
    await eventually(polls.none_waiting, WITHIN_S)
    polled = len(polls.brought)
    for number in range(3, 7):
        assert (await publishing.record_event("t", "message", f"m{number}")).recorded
    pair = [{"kind": "message", "payload": "m7"}, {"kind": "message", "payload": "m8"}]
    assert (await publishing.record_events("t", pair)).recorded
    await mirrored(publishing, "t", WITHIN_S)
    await asyncio.sleep(0.2)  # past the cadence: a lone write is written at once
    assert (await publishing.record_event("t", "message", "m9")).recorded
    await mirrored(publishing, "t", WITHIN_S)

    assert await stored(graph, publishing, "t") == [f"m{n}" for n in range(1, 10)]
    await same_view(client, graph, publishing)
    assert polls.grown_since(polled) == []


async def test_a_page_not_signed_by_a_writer_or_of_another_run_changes_nothing(
    client: Client,
    graph: TaskGraph,
    services: Services,
    publishing: ConversationHistory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stretch(monkeypatch, "MIRROR_FOLLOW_GAP", "MIRROR_FOLLOW_IDLE")
    assert services.broker is not None
    await publishing.create_task("t", "forged pages")
    await mirrored(publishing, "t", WITHIN_S)
    await asyncio.sleep(SUBSCRIBED_S)
    assert (await publishing.record_event("t", "message", "m1")).recorded
    await mirrored(publishing, "t", WITHIN_S)
    wid = publishing.workflow_id("t")
    view = await client.get_workflow_handle(wid).query(TaskWorkflow.view)
    run_id = (await client.get_workflow_handle(wid).describe()).run_id
    forged = PublishedWrite(
        workflow_id=wid,
        run_id=run_id,
        input=RecordEventsInput(
            agent_id="writer",
            events=[EventInput(kind="message", payload="forged")],
            request_id="forged",
        ),
        outcome=WriteOutcome(
            first_seq=view.last_seq + 1,
            last_seq=view.last_seq + 1,
            time=view.updated_at,
            writes=view.writes + 1,
        ),
    )
    signer = page_signer(graph, wid)
    assert signer is not None
    key_id, _ = signer
    channel = [page_channel(wid)]
    # the writer's key id with another key; the writer's key for another run
    assert await services.broker.publish(channel, sign_page(forged, key_id, os.urandom(32)))
    other_run = forged.model_copy(update={"run_id": "another-run"})
    assert await services.broker.publish(channel, sign_page(other_run, *signer))

    assert (await publishing.record_event("t", "message", "m2")).recorded
    await mirrored(publishing, "t", WITHIN_S)

    assert await stored(graph, publishing, "t") == ["m1", "m2"]
    await same_view(client, graph, publishing)


async def pages_flowing(history: ConversationHistory) -> None:
    """Task ``t`` with three writes mirrored, the last two published while its follower
    followed: it now waits its gap between polls."""
    await history.create_task("t", "pages flowing")
    assert (await history.record_event("t", "message", "m1")).recorded
    await mirrored(history, "t", WITHIN_S)
    for number in (2, 3):
        assert (await history.record_event("t", "message", f"m{number}")).recorded
        await mirrored(history, "t", WITHIN_S)


async def test_a_writers_other_write_makes_the_follower_poll_at_once(
    client: Client,
    graph: TaskGraph,
    publishing: ConversationHistory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step: no page carries it; its writer's word to poll (``PollMessage``) brings it."""
    stretch(monkeypatch, "MIRROR_FOLLOW_GAP", "MIRROR_FOLLOW_IDLE")
    await pages_flowing(publishing)

    assert (await publishing.set_step("t", "fetch", "in_progress")).recorded
    await mirrored(publishing, "t", WITHIN_S)

    step = await graph.reads.step(publishing.project_id, publishing.workflow_id("t"), "fetch")
    assert step is not None and step.state.value == "in_progress"
    await same_view(client, graph, publishing)


async def test_a_large_write_publishes_a_word_to_poll_and_its_poll_brings_it(
    services: Services,
    client: Client,
    graph: TaskGraph,
    publishing: ConversationHistory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A write of more than ``PAGE_EVENTS`` events is not published as its page (serializing,
    signing and parsing 200 events cost the writer and the worker more than the long poll it
    spares: issue 46) but as a word to poll, which brings it from the history at once; a
    write of ``PAGE_EVENTS`` events still goes as its page."""
    stretch(monkeypatch, "MIRROR_FOLLOW_GAP", "MIRROR_FOLLOW_IDLE")
    await pages_flowing(publishing)
    assert services.broker is not None
    heard: list[str] = []
    subscriber = Subscriber(services.broker)
    reading = asyncio.ensure_future(subscriber.run())
    try:
        channel = page_channel(publishing.workflow_id("t"))
        await subscriber.add(channel, lambda message: heard.append(message.type))
        large = [{"kind": "message", "payload": f"b{n}"} for n in range(PAGE_EVENTS + 1)]
        assert (await publishing.record_events("t", large)).recorded
        await mirrored(publishing, "t", WITHIN_S)
        most = [{"kind": "message", "payload": f"c{n}"} for n in range(PAGE_EVENTS)]
        assert (await publishing.record_events("t", most)).recorded
        await mirrored(publishing, "t", WITHIN_S)
        await eventually(lambda: _count(heard, 2), WITHIN_S)
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        await subscriber.close()
    assert heard == ["poll", "page"]
    expected = ["m1", "m2", "m3", *(e["payload"] for e in large), *(e["payload"] for e in most)]
    assert await stored(graph, publishing, "t") == expected
    await same_view(client, graph, publishing)


async def _count(heard: list[str], count: int) -> bool:
    return len(heard) >= count


async def test_a_page_that_does_not_follow_makes_the_follower_poll_at_once(
    client: Client,
    graph: TaskGraph,
    publishing: ConversationHistory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step, then an event, written by a writer with no broker (no page, no word to poll),
    each followed by an event write published: its page is one write ahead of what the
    follower holds, so the follower polls (at its 100 ms cadence, not the stretched gap) and
    copies both from the run."""
    stretch(monkeypatch, "MIRROR_FOLLOW_GAP", "MIRROR_FOLLOW_IDLE")
    await pages_flowing(publishing)
    silent = ConversationHistory(
        publishing.client,
        publishing.project_id,
        "silent",
        task_queue=publishing.task_queue,
        graph=publishing.graph,
    )
    assert (await silent.set_step("t", "fetch", "in_progress")).recorded
    assert (await publishing.record_event("t", "message", "m4")).recorded
    await mirrored(publishing, "t", WITHIN_S)
    # a page lost (its writer published none): the next page is one write ahead
    assert (await silent.record_event("t", "message", "m5")).recorded
    assert (await publishing.record_event("t", "message", "m6")).recorded
    await mirrored(publishing, "t", WITHIN_S)

    assert await stored(graph, publishing, "t") == [f"m{n}" for n in range(1, 7)]
    step = await graph.reads.step(publishing.project_id, publishing.workflow_id("t"), "fetch")
    assert step is not None and step.state.value == "in_progress"
    await same_view(client, graph, publishing)


async def test_a_broker_outage_delays_the_mirror_and_loses_nothing(
    services: Services, graph: TaskGraph, tmp_path: Path, project_id: str
) -> None:
    """A broker of the test's own, stopped while pages flow and started again: the writes
    meanwhile go on (a publish waits for nothing), the follower's polls bring them, and pages
    flow again once the worker's subscription is back (no poll that brought anything)."""
    server = RedisServer(tmp_path, free_port())
    await server.start_ready()
    broker = Broker(server.url)
    queue = f"outage-{uuid.uuid4().hex[:8]}"
    try:
        async with build_worker(services.client, graph, queue, broker=broker):
            history = ConversationHistory(
                services.client, project_id, "w", task_queue=queue, graph=graph, broker=broker
            )
            await pages_flowing(history)
            await server.stop()
            for number in (4, 5):
                assert (await history.record_event("t", "message", f"m{number}")).recorded
            await mirrored(history, "t", WITHIN_S)
            await server.start_ready()
            await asyncio.sleep(RECONNECT_PAUSE_S + SUBSCRIBED_S)  # the subscriber is back
            for number in (6, 7):
                assert (await history.record_event("t", "message", f"m{number}")).recorded
                await mirrored(history, "t", WITHIN_S)
            await asyncio.sleep(SUBSCRIBED_S)
            with pytest.MonkeyPatch.context() as monkeypatch:
                stretch(monkeypatch, "MIRROR_FOLLOW_GAP", "MIRROR_FOLLOW_IDLE")
                polls = Polls.count(monkeypatch)
                assert (await history.record_event("t", "message", "m8")).recorded
                await mirrored(history, "t", WITHIN_S)
                assert polls.grown_since(0) == []
        assert await stored(graph, history, "t") == [f"m{n}" for n in range(1, 9)]
    finally:
        await broker.close()
        await server.stop()


async def test_a_worker_killed_while_pages_flow_loses_nothing(
    services: Services, graph: TaskGraph, project_id: str
) -> None:
    """The worker that follows the run, in a process of its own, is killed (SIGKILL) right
    after two more writes were acknowledged: their pages were taken or on their way, and a
    page taken waits up to the follower's cadence before it is written, so they may be in no
    store but the run's history. A new worker takes over (the dead follower's attempt is
    retried once its heartbeat is late): every write in Neo4j, in seq order, as the workflow
    holds it."""
    assert services.broker is not None
    queue = f"killed-{uuid.uuid4().hex[:8]}"
    history = ConversationHistory(
        services.client, project_id, "w", task_queue=queue, graph=graph, broker=services.broker
    )
    process = await worker_process(queue, pages=True)
    try:
        await pages_flowing(history)
        for number in (4, 5):
            assert (await history.record_event("t", "message", f"m{number}")).recorded
    finally:
        process.kill()  # SIGKILL: no shutdown of any kind
        await process.wait()
    async with build_worker(services.client, graph, queue, broker=services.broker):
        assert (await history.record_event("t", "message", "m6")).recorded
        await mirrored(history, "t", TAKEN_OVER_S)
        assert await stored(graph, history, "t") == [f"m{n}" for n in range(1, 7)]
        await same_view(services.client, graph, history)  # the query needs a worker


async def test_a_run_terminated_while_its_follower_waits_ends_the_call_quietly(
    client: Client,
    publishing: ConversationHistory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The follower waits its gap (no long poll open), the task's workflow is terminated: the
    call's heartbeat finds the run gone, and the call ends as ``MirrorRunGone`` at DEBUG, not
    as a failure's warning with a traceback."""
    stretch(monkeypatch, "MIRROR_FOLLOW_GAP", "MIRROR_FOLLOW_IDLE")
    await pages_flowing(publishing)
    handle = client.get_workflow_handle(publishing.workflow_id("t"))
    caplog.set_level(logging.DEBUG, logger="temporalio.activity")

    await handle.terminate("test")

    def ended(record: logging.LogRecord) -> bool:
        return record.getMessage().startswith("Completing activity as failed") and (
            publishing.workflow_id("t") in str(getattr(record, "activity_info", ""))
            or publishing.workflow_id("t") in record.getMessage()
        )

    async def call_ended() -> bool:
        return any(ended(r) for r in caplog.records)

    await eventually(call_ended, within=WITHIN_S)
    [record] = [r for r in caplog.records if ended(r)]
    assert record.levelno == logging.DEBUG
    assert record.exc_info is not None and "MirrorRunGone" in repr(record.exc_info[1])
