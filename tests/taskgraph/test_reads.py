"""The read arguments: time zones of the event-time bounds (every datetime reaches the Neo4j
driver in UTC, naive ones are refused) and bad arguments of every public read (a pydantic
``ValidationError`` naming the field), against the real Neo4j and Temporal."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.models import EventFilter, utc
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.taskgraph.properties import event_properties
from agent_tasks.taskgraph.reads import event_fields
from tests.conftest import mirrored

ROOT = Path(__file__).resolve().parents[2]
KOLKATA = ZoneInfo("Asia/Kolkata")


def test_utc_keeps_the_instant_and_refuses_naive_datetimes() -> None:
    noon_utc = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    for same in (
        datetime(2024, 5, 1, 17, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        datetime(2024, 5, 1, 14, 0, tzinfo=ZoneInfo("Europe/Berlin")),  # summer time: +02:00
        datetime(2024, 5, 1, 8, 0, tzinfo=ZoneInfo("America/New_York")),  # -04:00
    ):
        normal = utc(same)
        assert normal == noon_utc and normal.tzinfo is UTC
        assert (normal.hour, normal.minute) == (12, 0)
    with pytest.raises(ValueError, match="has no time zone"):
        utc(datetime(2024, 5, 1, 12, 0))
    midnight_kolkata = datetime(2024, 5, 1, tzinfo=KOLKATA)
    where = EventFilter(since="2024-05-01T13:00:00+01:00", until=midnight_kolkata)
    assert (where.since, where.until) == (noon_utc, datetime(2024, 4, 30, 18, 30, tzinfo=UTC))
    assert where.since is not None and where.since.tzinfo is UTC
    with pytest.raises(ValidationError) as naive:
        EventFilter(since=datetime(2024, 5, 1, 12, 0))
    assert naive.value.errors()[0]["loc"] == ("since",)


def test_zoneinfo_datetimes_are_encoded_in_utc_without_crashing() -> None:
    """The driver's encoding of a ``ZoneInfo`` datetime segfaulted (CPython's C zoneinfo
    given a ``neo4j.time.DateTime``); the same loop over values normalised by ``utc`` and the
    event properties built for a write runs to the end, in a process of its own."""
    script = """
from datetime import datetime
from zoneinfo import ZoneInfo
from neo4j._codec.hydration.bolt.v2 import HydrationHandler
from neo4j._codec.packstream.v1 import PackableBuffer, Packer
from agent_tasks.taskgraph.models import utc
hooks = HydrationHandler().new_hydration_scope().dehydration_hooks
buffer = PackableBuffer()
packer = Packer(buffer)
zones = [ZoneInfo(z) for z in ("Asia/Kolkata", "Europe/Berlin", "America/New_York")]
for i in range(20_000):
    packer.pack(utc(datetime(2024, 5, 1, 12, i % 60, tzinfo=zones[i % 3])), dehydration_hooks=hooks)
    buffer.clear()
print("encoded")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert (done.returncode, done.stdout.strip()) == (0, "encoded"), done.stderr[-2000:]


def test_event_properties_hold_the_utc_instant_as_epoch_numbers() -> None:
    from agent_tasks.contract import Event, EventKind

    event = Event(
        id="e",
        seq=1,
        kind=EventKind.NOTE,
        payload="",
        full_length=0,
        full_sha256="0" * 64,
        author="a",
        time=datetime(2024, 5, 1, 17, 30, tzinfo=KOLKATA),
        request_id="r",
    )
    # 2024-05-01T12:00Z: 19,844 days after 1970-01-01, plus 12 hours
    assert event_properties(event)["time"] == [19_844 * 86_400 + 12 * 3_600, 0]
    late = event.model_copy(update={"time": datetime(1969, 12, 31, 23, 59, 59, 5, UTC)})
    assert event_properties(late)["time"] == [-1, 5_000]
    with pytest.raises(ValueError, match="has no time zone"):
        event_properties(event.model_copy(update={"time": datetime(2024, 5, 1)}))


def test_token_usage_round_trips_through_node_properties() -> None:
    """A property cannot hold a map: a message's usage is stored as two numbers and read back."""
    from agent_tasks.contract import Event, EventKind, Role, TokenUsage, event_id

    event = Event(
        id=event_id("p/t", 3),
        seq=3,
        kind=EventKind.MESSAGE,
        role=Role.ASSISTANT,
        payload="hi",
        full_length=2,
        full_sha256="0" * 64,
        author="a",
        time=datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
        request_id="r",
        usage=TokenUsage(input_tokens=120, output_tokens=7),
    )
    props = event_properties(event)
    assert (props["input_tokens"], props["output_tokens"], "usage" in props) == (120, 7, False)
    assert all(not isinstance(value, dict) for value in props.values())
    # the node as the mirror's statement leaves it: the time made a datetime, the task's key
    node = props | {"time": event.time, "task_key": "p/t"}
    assert Event.model_validate(event_fields(node), strict=False) == event


async def graph_events_cli(project: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "agent_tasks.cli",
        "graph",
        "events",
        "--project",
        project,
        *args,
    ]
    return await asyncio.to_thread(
        subprocess.run,
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "400"},  # no message wrapped
        timeout=120,
    )


async def test_event_time_bounds_in_any_offset_find_the_event_at_that_instant(
    history: ConversationHistory,
) -> None:
    await history.create_task("t", "time zones")
    for text in ("first", "second"):
        await history.record_event("t", "note", text)
    await mirrored(history, "t")
    first, second = (await history.list_events("t")).events
    instant = second.time
    assert instant.utcoffset() == timedelta(0)
    offsets = [
        timezone(timedelta(hours=5, minutes=30)),
        timezone(timedelta(hours=2)),
        timezone(timedelta(hours=-7)),
        KOLKATA,
        ZoneInfo("Europe/Berlin"),
    ]
    for zone in offsets:
        bound = instant.astimezone(zone)
        since = await history.find_events(since=bound)
        assert [e.seq for e in since] == [2], zone
        until = await history.find_events(until=bound)
        assert [e.seq for e in until] == ([1] if first.time < instant else []), zone
    assert await history.find_events(since=instant + timedelta(microseconds=1)) == []

    plus_one = instant.astimezone(timezone(timedelta(hours=1))).isoformat()
    done = await graph_events_cli(history.project_id, "--since", plus_one, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [row["seq"] for row in json.loads(done.stdout)] == [2]

    with pytest.raises(ValidationError) as naive:
        await history.find_events(since=instant.replace(tzinfo=None))
    assert naive.value.errors()[0]["loc"] == ("since",)
    refused = await graph_events_cli(history.project_id, "--since", "2024-05-01T12:00:00")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = "Invalid value for '--since': '2024-05-01T12:00:00' is not an ISO time with an offset"
    assert said in refused.stderr and "timezone" in refused.stderr


BAD_READS: list[tuple[str, dict[str, Any], str]] = [
    ("get_task", {"name": ""}, "task"),
    ("get_task", {"name": 7}, "task"),
    ("list_events", {"task": "t", "after_seq": -1}, "after_seq"),
    ("list_events", {"task": "t", "after_seq": 10**30}, "after_seq"),
    ("list_events", {"task": "t", "after_seq": "3"}, "after_seq"),
    ("list_events", {"task": "t", "limit": 0}, "limit"),
    ("list_events", {"task": "t", "limit": 10**30}, "limit"),
    ("list_events", {"task": "t", "limit": "5"}, "limit"),
    ("list_events", {"task": "t", "limit": True}, "limit"),
    ("list_tasks", {"status": "bogus"}, "status"),
    ("list_tasks", {"limit": -1}, "limit"),
    ("task_tree", {"task": "t", "depth": -1}, "depth"),
    ("task_tree", {"task": "t", "depth": 21}, "depth"),
    ("task_tree", {"task": "t", "depth": "2"}, "depth"),
    ("find_tasks", {"limit": -1}, "limit"),
    ("find_tasks", {"limit": "5"}, "limit"),
    ("find_tasks", {"status": "bogus"}, "status"),
    ("find_events", {"limit": 10**30}, "limit"),
    ("find_events", {"kind": "bogus"}, "kind"),
    ("find_events", {"since": "yesterday"}, "since"),
    ("find_steps", {"state": "bogus"}, "state"),
    ("find_steps", {"limit": -1}, "limit"),
]


@pytest.mark.parametrize(("method", "kwargs", "field"), BAD_READS)
async def test_bad_read_arguments_raise_naming_the_field(
    history: ConversationHistory, method: str, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        await getattr(history, method)(**kwargs)
    assert [error["loc"] for error in refused.value.errors()] == [(field,)]


async def test_good_read_arguments_at_their_bounds(
    graph: TaskGraph, history: ConversationHistory
) -> None:
    await history.create_task("t", "bounds")
    await history.record_event("t", "note", "one")
    far = await history.list_events("t", after_seq=2**63 - 1, limit=200)
    assert (far.found, far.events, far.next_after_seq) == (True, [], None)
    assert [e.seq for e in (await history.list_events("t", after_seq=0, limit=1)).events] == [1]
    await mirrored(history, "t")
    assert [t.name for t in await history.task_tree("t", depth=0)] == ["t"]
    assert [t.name for t in await history.task_tree("t", depth=20)] == ["t"]
    assert await history.list_tasks(status="open", limit=200) == ["t"]


async def test_cli_reads_refuse_bad_arguments_with_exit_2(history: ConversationHistory) -> None:
    command = [sys.executable, "-m", "agent_tasks.cli", "task", "events", "x" * 201]
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "invalid arguments" in done.stdout and "task" in done.stdout
