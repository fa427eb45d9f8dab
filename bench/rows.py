"""The rows of ``python -m bench``: each measures ours and its floor in alternating blocks
(``bench.harness.in_turn``); ``bench.suite`` runs them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any, LiteralString

from neo4j import AsyncManagedTransaction
from temporalio.client import WorkflowHistory

from agent_tasks.cli.replay_check import replay_histories
from agent_tasks.contract import (
    AgentSpec,
    EventInput,
    TaskStatus,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.writes import split_events
from agent_tasks.taskgraph.models import TaskFilter
from agent_tasks.taskgraph.properties import task_properties
from agent_tasks.taskgraph.seeds import seed_view
from agent_tasks.workflows.task import TaskWorkflow
from bench.bare import BareSteps, BareWorkflow
from bench.bench_step import per_step
from bench.harness import (
    SETTLE_S,
    SIDES,
    WORKER_PROCESS_PREFIX,
    Bench,
    Row,
    Sizes,
    cpu_profile,
    event_json,
    in_turn,
    replace_queue,
    rss_kib,
    timed,
    transcript,
)


async def single_writes(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """Quiet and back-to-back single writes, and CPU per write (back to back, until
    mirrored: ours, and bare with the minimal mirror)."""
    events = transcript(sizes.writes)
    name = await bench.task()
    handles = {"bare": await bench.bare(), "mirror": await bench.bare(follow=bench.mirror.follow)}

    async def write_ours(pause: float) -> list[float]:
        took = []
        for event in events:
            await asyncio.sleep(pause)
            took.append(await timed(bench.history.record_events(name, [event])))
        return took

    async def write_bare(side: str, pause: float) -> list[float]:
        took = []
        for event in event_json(events):
            await asyncio.sleep(pause)
            took.append(await timed(handles[side].execute_update(BareWorkflow.append, [event])))
        return took

    async def block(side: str) -> None:
        write = write_ours if side == "ours" else partial(write_bare, side)
        rows["quiet"].samples(side).extend(await write(sizes.pause_s))
        cpu = rows["cpu"]
        with cpu_profile(bench, cpu, side, len(events)):
            rows["b2b"].samples(side).extend(await write(0.0))
            if side == "ours":
                view = (await bench.history.get_task(name)).view
                assert view is not None
                await bench.mirrored(name, view.last_seq)
            elif side == "mirror":  # the quiet writes and these, so far this round
                await bench.held(handles[side].id, 2 * len(events))
            await asyncio.sleep(0.3)  # the same settling time for all
        cpu.samples(side).append(sum(spent[-1] for spent in cpu.cpu[side].values()))

    await in_turn(turn, *(partial(block, side) for side in SIDES))


async def import_ours(
    bench: Bench, history: ConversationHistory, name: str, events: list[EventInput], row: Row
) -> None:
    """``record_events`` of ``events`` into the task ``name``, acknowledged: one sample of
    ``row`` (events/s) and its CPU profile."""
    with cpu_profile(bench, row, "ours", len(events)):
        took = await timed(history.record_events(name, events))
    row.ours.append(len(events) / took)


async def import_bare(
    handle: Any, bench: Bench, events: list[EventInput], row: Row, side: str = "bare"
) -> None:
    """The same chunks (``split_events``) as updates of the bare workflow ``handle`` (one
    followed by the minimal mirror for ``side`` ``mirror``)."""
    chunks = [event_json(chunk) for chunk in split_events(events)]

    async def send() -> None:
        for chunk in chunks:
            await handle.execute_update(BareWorkflow.append, chunk)

    with cpu_profile(bench, row, side, len(events)):
        took = await timed(send())
    row.samples(side).append(len(events) / took)


async def batch_and_replay(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """``batch_events`` events into one task by ``record_events`` against the same chunks as
    bare updates (and as bare updates the minimal mirror follows); then the replay of each
    history (every run of the task, the bare workflow's)."""
    events = transcript(sizes.batch_events)

    async def ours() -> None:
        name = await bench.task()
        await import_ours(bench, bench.history, name, events, rows["batch"])
        workflow_id = bench.history.workflow_id(name)
        runs = [e async for e in bench.client.list_workflows(f"WorkflowId = '{workflow_id}'")]
        histories = [
            await bench.client.get_workflow_handle(workflow_id, run_id=e.run_id).fetch_history()
            for e in runs
        ]
        rows["replay"].ours.append(await _replay(histories, TaskWorkflow))

    async def bare() -> None:
        handle = await bench.bare()
        await import_bare(handle, bench, events, rows["batch"])
        rows["replay"].base.append(await _replay([await handle.fetch_history()], BareWorkflow))

    async def mirror() -> None:
        handle = await bench.bare(follow=bench.mirror.follow)
        await import_bare(handle, bench, events, rows["batch"], "mirror")

    await in_turn(turn, ours, bare, mirror)


async def _replay(histories: list[WorkflowHistory], workflow: type) -> float:
    """Seconds to replay ``histories`` (one ``Replayer`` pass, as ``agent-tasks replay``)."""
    started = time.perf_counter()
    results = await replay_histories([("server", h) for h in histories], (workflow,))
    took = time.perf_counter() - started
    assert all(r.result == "ok" for r in results), results
    return took


async def write_ours(
    bench: Bench, history: ConversationHistory, names: list[str], events: list[EventInput], row: Row
) -> None:
    """One writer per task of ``names``, each writing ``events`` one at a time, all at once:
    one sample of ``row`` (events/s) and its CPU profile."""

    async def write(name: str) -> None:
        for event in events:
            assert (await history.record_events(name, [event])).recorded

    total = len(names) * len(events)
    with cpu_profile(bench, row, "ours", total):
        took = await timed(asyncio.gather(*map(write, names)))
    row.ours.append(total / took)


async def write_bare(
    bench: Bench, handles: list[Any], events: list[EventInput], row: Row, side: str = "bare"
) -> None:
    """The same into bare workflows, one update per event (followed by the minimal mirror
    for ``side`` ``mirror``)."""

    async def append(handle: Any) -> None:
        for event in event_json(events):
            await handle.execute_update(BareWorkflow.append, [event])

    total = len(handles) * len(events)
    with cpu_profile(bench, row, side, total):
        took = await timed(asyncio.gather(*map(append, handles)))
    row.samples(side).append(total / took)


async def writers(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """``writers`` writers, each on its own task, single events back to back."""
    events = transcript(sizes.writer_events)

    async def ours() -> None:
        names = [await bench.task() for _ in range(sizes.writers)]
        await write_ours(bench, bench.history, names, events, rows["writers"])

    async def bare(side: str) -> None:
        follow = bench.mirror.follow if side == "mirror" else None
        handles = [await bench.bare(follow=follow) for _ in range(sizes.writers)]
        await write_bare(bench, handles, events, rows["writers"], side)

    await in_turn(turn, ours, partial(bare, "bare"), partial(bare, "mirror"))


async def workers_apart(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """The batch import and the writers again with each side's worker in a process of its
    own (``worker_process``; bare with the minimal mirror: the bare worker and the mirror in
    one), so this process holds the clients alone, as an app and its workers are deployed;
    the CPU profile gives the worker a column of its own. Our tasks, and the minimal mirror's,
    are mirrored before their worker stops."""
    batch = transcript(sizes.batch_events)
    events = transcript(sizes.writer_events)

    async def block(side: str) -> None:
        queue = f"{bench.queue}-apart-{side}"
        history = replace_queue(bench.history, queue)
        async with worker_process(side, queue, bench.worker_env, bench.mirror_project) as worker:
            bench.server_pids["worker"] = worker.pid
            try:
                if side != "ours":
                    follow = worker.follow if side == "mirror" else None
                    handle = await bench.bare(queue, follow)
                    await import_bare(handle, bench, batch, rows["batch_apart"], side)
                    handles = [await bench.bare(queue, follow) for _ in range(sizes.writers)]
                    await write_bare(bench, handles, events, rows["writers_apart"], side)
                    if side == "mirror":
                        await bench.held(handle.id, len(batch))
                        for each in handles:
                            await bench.held(each.id, len(events))
                    return
                name = await apart_task(bench, history)
                await import_ours(bench, history, name, batch, rows["batch_apart"])
                names = [await apart_task(bench, history) for _ in range(sizes.writers)]
                await write_ours(bench, history, names, events, rows["writers_apart"])
                for task in (name, *names):
                    await history.wait_mirrored(task, timeout_s=SETTLE_S)
            finally:
                del bench.server_pids["worker"]

    await in_turn(turn, *(partial(block, side) for side in SIDES))


async def apart_task(bench: Bench, history: ConversationHistory) -> str:
    """A new task of ``history``'s task queue (a worker process's), which ``Bench.settle``
    skips; returns its name."""
    name = f"{WORKER_PROCESS_PREFIX}{history.task_queue}-{next(bench.numbers)}"
    assert (await history.create_task(name, "bench")).recorded
    bench.started.append(history.workflow_id(name))
    return name


_LEDGER_EVENT: LiteralString = """
MERGE (t:Task {key: $task_key})
  ON CREATE SET t.project_id = $project_id, t.last_seq = 0
SET t.last_seq = t.last_seq + 1
WITH t, t.last_seq AS seq
MERGE (e:Event {key: $task_key + '#' + toString(seq)})
SET e += $event, e.seq = seq, e.project_id = $project_id, e.time = datetime()
MERGE (t)-[:HAS_EVENT]->(e)
WITH t, e, seq
OPTIONAL MATCH (previous:Event {key: $task_key + '#' + toString(seq - 1)})
FOREACH (p IN CASE WHEN previous IS NULL THEN [] ELSE [previous] END | MERGE (p)-[:NEXT]->(e))
"""
"""A Neo4j-only ledger's write of one event: the task's counter gives the seq, the event is
merged on its key and linked after the previous one, in one write transaction."""


async def neo4j_ledger(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """The same transcript written one event per write: ours by update, a Neo4j-only ledger
    by one write transaction each, bare updates followed by the minimal mirror; then
    Temporal's floor of such a ledger (bare updates, one event each) against the Neo4j-only
    ledger again."""
    events = transcript(sizes.transcript_events)

    async def ours() -> None:
        name = await bench.task()
        started = time.perf_counter()
        for event in events:
            assert (await bench.history.record_events(name, [event])).recorded
        rows["ledger"].ours.append(len(events) / (time.perf_counter() - started))

    async def floor(row: list[float], follow: Callable[[str], None] | None = None) -> None:
        handle = await bench.bare(follow=follow)
        started = time.perf_counter()
        for event in event_json(events):
            await handle.execute_update(BareWorkflow.append, [event])
        row.append(len(events) / (time.perf_counter() - started))

    async def ledger(row: Row) -> None:
        key = f"ledger/{bench.project}/{uuid.uuid4().hex[:8]}"

        async def write(tx: AsyncManagedTransaction, event: dict[str, Any]) -> None:
            parameters = {"task_key": key, "project_id": bench.project, "event": event}
            await (await tx.run(_LEDGER_EVENT, parameters)).consume()

        started = time.perf_counter()
        async with bench.graph.driver.session(database=bench.graph.database) as session:
            for event in event_json(events):
                await session.execute_write(write, event)
        row.base.append(len(events) / (time.perf_counter() - started))

    mirrored = partial(floor, rows["ledger"].mirror, bench.mirror.follow)
    await in_turn(turn, ours, partial(ledger, rows["ledger"]), mirrored)
    await in_turn(turn, partial(floor, rows["floor"].ours), partial(ledger, rows["floor"]))


async def mirror_lag(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """100 events/s into one task as 20 writes/s of 5 events, then ``writers`` writers on a
    task each, single events back to back: each write's time from sent to visible in Neo4j,
    ours and bare writes the minimal mirror follows (``bench.mirror``), and from sent to
    acknowledged (the baseline: nothing is visible before it is acknowledged), for ``lag_s``
    each. Neo4j is polled every 10 ms (one read for all the tasks)."""
    batch, one = transcript(5), transcript(1)

    async def ours() -> None:
        name = await bench.task()
        names = [await bench.task() for _ in range(sizes.writers)]

        def writer(task: str, events: list[EventInput], row: Row) -> Write:
            async def write() -> int:
                began = time.perf_counter()
                result = await bench.history.record_events(task, events)
                row.base.append(time.perf_counter() - began)
                assert result.last_seq is not None
                return result.last_seq

            return bench.history.workflow_id(task), write

        rows["lag"].ours += await _lag(bench, [writer(name, batch, rows["lag"])], sizes, True)
        many = [writer(task, one, rows["writers_lag"]) for task in names]
        rows["writers_lag"].ours += await _lag(bench, many, sizes, False)

    async def mirror() -> None:
        handle = await bench.bare(follow=bench.mirror.follow)
        handles = [await bench.bare(follow=bench.mirror.follow) for _ in range(sizes.writers)]

        def writer(handle: Any, events: list[EventInput]) -> Write:
            sent = event_json(events)

            async def write() -> int:
                return int(await handle.execute_update(BareWorkflow.append, sent))

            return handle.id, write

        rows["lag"].mirror += await _lag(bench, [writer(handle, batch)], sizes, True)
        many = [writer(each, one) for each in handles]
        rows["writers_lag"].mirror += await _lag(bench, many, sizes, False)

    await in_turn(turn, ours, mirror)


Write = tuple[str, Callable[[], Awaitable[int]]]
"""A task's node key in Neo4j and a write to it, which returns the task's newest seq."""


async def _lag(bench: Bench, writers: list[Write], sizes: Sizes, paced: bool) -> list[float]:
    """Send writes for ``lag_s`` (``paced``: 20 a second from the one writer; else each
    writer back to back) while Neo4j is polled every 10 ms; returns each write's time from
    sent to visible there (its seq at the node's ``mirrored_seq``)."""
    seen: dict[tuple[str, int], float] = {}
    sent: dict[tuple[str, int], float] = {}
    done = asyncio.Event()
    keys = [key for key, _ in writers]

    async def poll() -> None:
        while not done.is_set() or len(seen) < len(sent):
            marks = await bench.held_seqs(keys)
            now = time.perf_counter()
            seen.update((w, now) for w in sent if w[1] <= marks[w[0]] and w not in seen)
            await asyncio.sleep(0.01)

    async def each(key: str, write: Callable[[], Awaitable[int]]) -> None:
        start = time.perf_counter()
        number = 0
        while time.perf_counter() < start + sizes.lag_s:
            if paced:
                await asyncio.sleep(max(0.0, start + number * 0.05 - time.perf_counter()))
                number += 1
            began = time.perf_counter()
            sent[key, await write()] = began

    poller = asyncio.create_task(poll())
    await asyncio.gather(*(each(key, write) for key, write in writers))
    done.set()
    await asyncio.wait_for(poller, 120)
    return [seen[w] - began for w, began in sent.items()]


async def seed_tasks(bench: Bench, count: int) -> str:
    """``count`` task nodes (the mirror's own properties) in a project of their own, half
    ``done`` and half ``open``, written by UNWIND in batches; returns the project id."""
    project = f"{bench.project}-list"
    now = datetime.now(UTC)
    rows = [
        task_properties(
            seed_view(
                project,
                f"task-{n:06d}",
                last_seq=0,
                now=now,
                status=TaskStatus.DONE if n % 2 else TaskStatus.OPEN,
            )
        )
        for n in range(count)
    ]
    for at in range(0, len(rows), 2_000):
        await bench.graph.driver.execute_query(
            """
            MERGE (p:Project {project_id: $project})
            WITH p UNWIND $rows AS row
            MERGE (t:Task {key: row.key}) SET t += row
            MERGE (p)-[:HAS_TASK]->(t)
            """,
            project=project,
            rows=rows[at : at + 2_000],
            database_=bench.graph.database,
        )
    return project


async def list_by_status(
    bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int, *, project: str
) -> None:
    """Pages of 50 ``done`` tasks in name order: ``find_tasks`` against the hand-written
    Cypher of that one filter (its best form: ordered by the properties of the index on
    ``(project_id, status, name)``, so that Neo4j reads the page in index order when the
    index exists), page by page in turn."""
    cursor: dict[str, str | None] = {"ours": None, "bare": ""}

    async def ours() -> None:
        where = TaskFilter(status=TaskStatus.DONE, after_name=cursor["ours"], limit=50)
        started = time.perf_counter()
        page = await bench.graph.reads.find_tasks(project, where)
        rows["list"].ours.append(time.perf_counter() - started)
        cursor["ours"] = page[-1].name if len(page) == 50 else None

    async def cypher() -> None:
        started = time.perf_counter()
        records, _, _ = await bench.graph.driver.execute_query(
            """
            MATCH (t:Task {project_id: $p, status: $s}) WHERE t.name > $after
            RETURN t ORDER BY t.project_id, t.status, t.name LIMIT 50
            """,
            p=project,
            s="done",
            after=cursor["bare"],
            database_=bench.graph.database,
            routing_="r",
        )
        rows["list"].base.append(time.perf_counter() - started)
        cursor["bare"] = records[-1]["t"]["name"] if len(records) == 50 else ""

    for _ in range(sizes.list_reads):
        await in_turn(turn, ours, cypher)


async def one_step(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """An agent task of ``steps`` steps of the echo tool (``bench.bench_step``: each step its
    tool_call event and in_progress, the tool's activity, tool_result and completed) against a
    workflow running as many bare activities; the time per step, from each history."""
    spec = AgentSpec(name="bench_steps", tools=["bench_echo"], input={"steps": sizes.steps})

    async def ours() -> None:
        name = await bench.task(agent=spec)
        await bench.history.wait_task(name)
        seconds, _ = await per_step(bench.client, bench.history.workflow_id(name), sizes.steps)
        rows["step"].ours.append(seconds)

    async def bare() -> None:
        workflow_id = f"{bench.bare_queue}/steps-{uuid.uuid4().hex[:12]}"
        await bench.plain.execute_workflow(
            BareSteps.run, sizes.steps, id=workflow_id, task_queue=bench.bare_queue
        )
        seconds, _ = await per_step(bench.plain, workflow_id, sizes.steps)
        rows["step"].base.append(seconds)

    await in_turn(turn, ours, bare)


class WorkerProcess:
    """A worker in a process of its own (``bench.rss_worker``): its pid, and for a ``mirror``
    worker the workflows its minimal mirror follows (``follow``)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pid = process.pid

    def follow(self, workflow_id: str) -> None:
        """Have the worker's minimal mirror follow ``workflow_id`` (a line on its input)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{workflow_id}\n".encode())


@asynccontextmanager
async def worker_process(
    kind: str, queue: str, env: dict[str, str], project: str = "bench-mirror"
) -> AsyncIterator[WorkerProcess]:
    """A worker in a process of its own (``bench.rss_worker``; a ``mirror`` worker's minimal
    mirror writes under ``project``)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.rss_worker",
        kind,
        queue,
        project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line.strip() == b"ready", line
        yield WorkerProcess(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def worker_rss(bench: Bench, sizes: Sizes, rows: dict[str, Row], turn: int) -> None:
    """The resident memory a worker process gains per open task it holds (``rss_tasks``
    tasks of ``rss_events`` events each, 20 opened at a time), ours against bare (and bare
    with the minimal mirror, which tails each open workflow's history, in the same
    process)."""
    events = transcript(sizes.rss_events)
    gate = asyncio.Semaphore(20)

    async def open_ours(history: ConversationHistory, number: int) -> None:
        async with gate:
            name = f"{WORKER_PROCESS_PREFIX}{history.task_queue}-{number}"
            assert (await history.create_task(name, "rss")).recorded
            bench.started.append(history.workflow_id(name))
            for _ in range(5):  # a first write whose key tree the loaded key store did not
                # store within KEY_STORE_WAIT_S is refused, nothing sent: resent as documented
                result = await history.record_events(name, events, request_id=name)
                if result.error != ErrorCode.KEY_STORE_UNAVAILABLE:
                    break
            assert result.recorded, result
            await bench.mirrored(name, len(events))

    async def open_bare(queue: str, follow: Callable[[str], None] | None) -> None:
        async with gate:
            handle = await bench.bare(queue, follow)
            await handle.execute_update(BareWorkflow.append, event_json(events))
            if follow is not None:
                await bench.held(handle.id, len(events))

    async def block(side: str) -> None:
        queue = f"{bench.queue}-rss-{side}"
        history = replace_queue(bench.history, queue)
        async with worker_process(side, queue, bench.worker_env, bench.mirror_project) as worker:
            await asyncio.sleep(1.0)
            before = rss_kib(worker.pid)
            follow = worker.follow if side == "mirror" else None
            await asyncio.gather(
                *(
                    open_ours(history, n) if side == "ours" else open_bare(queue, follow)
                    for n in range(sizes.rss_tasks)
                )
            )
            await asyncio.sleep(1.0)
            rows["rss"].samples(side).append((rss_kib(worker.pid) - before) / sizes.rss_tasks)

    await in_turn(turn, *(partial(block, side) for side in SIDES))
