"""Replay task histories against the workflow code on disk: the check to run before deploying
a new worker (``agent-tasks replay``).

A worker that takes over a running task replays the task's history through its own
``TaskWorkflow`` code, and so does every query of a finished task. If the new code would issue
different commands for the same history (a timer where an activity was, an activity fewer, a
reordered step), Temporal raises ``NondeterminismError`` and the task stops making progress
until a compatible worker returns. This module finds that before the deploy: it replays
histories, either fetched from the Temporal server (open tasks and recently closed ones, every
run, including runs that continued-as-new) or read from saved JSON files (``tests/histories``),
with ``temporalio.worker.Replayer`` and the pydantic data converter, and reports each one as
``ok``, ``nondeterministic`` or ``error``.

Replaying executes workflow code only: no activity runs, nothing is written anywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from google.protobuf import json_format
from pydantic import BaseModel, TypeAdapter
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from agent_tasks.activities.rebuild import before_first_workflow_task
from agent_tasks.codec import DATA_CONVERTER
from agent_tasks.contract import ProjectId, TaskStatus, TaskWorkflowInput
from agent_tasks.plugin import AgentTasksPlugin
from agent_tasks.workflows.agents.registry import agent_function
from agent_tasks.workflows.task import TaskWorkflow

ReplayStatus = Literal["ok", "nondeterministic", "error"]
"""``ok``: the code replays the history; ``nondeterministic``: it issues other commands than
the history holds (``NondeterminismError``); ``error``: the history could not be read, or the
replay failed otherwise (a workflow task that raises, for example)."""

NOT_STARTED = "not replayed: the run has had no workflow task yet, so no workflow code ran"
"""The message of a run before its first workflow task (``replay_histories``)."""

DEFAULT_LIMIT = 200
"""Histories fetched from the server at most (newest first)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


class ReplayResult(BaseModel):
    """The replay of one history (one workflow run)."""

    source: str
    """Where the history came from: ``server`` or the file's path."""
    workflow_id: str
    """The task's workflow id (from the history's start event; a file without one: the
    file's stem)."""
    run_id: str | None
    """The run replayed (None when the file could not be read)."""
    events: int
    """Events in the history (0 when it could not be read)."""
    result: ReplayStatus
    message: str | None = None
    """Why the replay was not ``ok``: the error's message."""
    unregistered_agent: str | None = None
    """The agent the run runs when it is not registered in this process (the run was not
    replayed: ``unregistered``)."""


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The start of a time window: a duration back from ``now`` (``90m``, ``24h``, ``7d``,
    ``2w``, ``3600s``; a plain number is hours) or an ISO 8601 time (UTC when it has no
    offset).

    Args:
        text: the window as given on the command line.
        now: the end of the window (default: the current time, UTC).

    Returns:
        A timezone-aware datetime.

    Raises:
        ValueError: neither a duration nor an ISO time.
    """
    now = now or datetime.now(UTC)
    if re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", text):
        text = f"{text.strip()}h"
    match = _DURATION.match(text)
    if match:
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        return now - timedelta(seconds=seconds)
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r}: expected a duration (90m, 24h, 7d, 2w) or an ISO time"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def task_query(
    project: str | None = None,
    status: TaskStatus | str | None = None,
    since: datetime | None = None,
) -> str:
    """The visibility query of the task runs to replay.

    Every run of a ``TaskWorkflow`` (runs that continued-as-new included), of ``project``
    (every project when None), whose ``TaskStatus`` search attribute is ``status`` (any when
    None), that is running or closed at or after ``since`` (any close time when None).

    Raises:
        pydantic.ValidationError: ``project`` is not a valid project id.
        ValueError: ``status`` is not a task status.
    """
    clauses = ["WorkflowType = 'TaskWorkflow'"]
    if project is not None:
        clauses.append(f"ProjectId = '{TypeAdapter(ProjectId).validate_python(project)}'")
    if status is not None:
        clauses.append(f"TaskStatus = '{TaskStatus(status).value}'")
    if since is not None:
        stamp = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        clauses.append(f"(ExecutionStatus = 'Running' OR CloseTime >= '{stamp}')")
    return " AND ".join(clauses)


async def server_histories(
    client: Client,
    *,
    project: str | None = None,
    status: TaskStatus | str | None = None,
    since: datetime | None = None,
    limit: int = DEFAULT_LIMIT,
) -> AsyncIterator[WorkflowHistory]:
    """The histories of the task runs ``task_query`` selects, newest first, at most
    ``limit`` of them, each fetched whole from the server.

    Raises:
        temporalio.service.RPCError: from the list or a fetch.
    """
    query = task_query(project, status, since)
    async for history in client.list_workflows(query, limit=limit).map_histories():
        yield history


async def count_runs(
    client: Client,
    *,
    project: str | None = None,
    status: TaskStatus | str | None = None,
    since: datetime | None = None,
) -> int:
    """How many task runs ``task_query`` selects (Temporal's ``CountWorkflowExecutions``),
    so a replay limited to fewer can say how many it left out.

    Raises:
        temporalio.service.RPCError: the server refused the count.
    """
    return (await client.count_workflows(task_query(project, status, since))).count


def load_history(path: Path) -> WorkflowHistory:
    """Read a history saved in Temporal's JSON format (``WorkflowHistory.to_json()``, the
    CLI's ``temporal workflow show --output json``, the web UI's download).

    The workflow id is the one in the start event (servers from 1.24 record it), else the
    file's stem.

    Raises:
        ValueError: the file is not JSON, not a history, or does not begin with a
            ``WorkflowExecutionStarted`` event; the message names the file.
        OSError: the file cannot be read.
    """
    text = path.read_text(encoding="utf-8")
    try:
        json.loads(text)
        history = WorkflowHistory.from_json(path.stem, text)
    except (ValueError, json_format.ParseError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path}: not a Temporal history JSON file: {err}") from err
    if not history.events:
        raise ValueError(f"{path}: the history has no events")
    first = history.events[0]
    if not first.HasField("workflow_execution_started_event_attributes"):
        raise ValueError(f"{path}: the history does not begin with WorkflowExecutionStarted")
    workflow_id = first.workflow_execution_started_event_attributes.workflow_id or path.stem
    return WorkflowHistory(workflow_id, history.events)


_CORE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')


def failure_message(failure: Exception) -> str:
    """A one-line reason for a replay failure: the exception type and, for failures the SDK's
    core reports (``Failure { failure: Some(Failure { message: "..." ...``), the core's own
    message, e.g. ``NondeterminismError: [TMPRL1100] Nondeterminism error: Timer machine does
    not handle this event: HistoryEvent(id: 12, ActivityTaskScheduled)``."""
    text = str(failure)
    found = _CORE_MESSAGE.search(text)
    return f"{type(failure).__name__}: {found.group(1) if found else text}"


def replayer(workflows: Sequence[type] = (TaskWorkflow,)) -> Replayer:
    """A ``Replayer`` of ``workflows`` with the product's client plugin (``AgentTasksPlugin``:
    the worker's data converter, whose payload codec passes histories written before it
    through unchanged, and the sandbox passthroughs)."""
    return Replayer(workflows=list(workflows), plugins=[AgentTasksPlugin()])


async def agent_of(history: WorkflowHistory) -> str | None:
    """The name of the agent a task history's run runs (its start input's ``AgentSpec``:
    the new task's, or the state a continued or resumed run carries), None for a recorded
    task or a history whose input cannot be read as a ``TaskWorkflowInput``."""
    attributes = history.events[0].workflow_execution_started_event_attributes
    if attributes.workflow_type.name != TaskWorkflow.__name__:
        return None
    try:
        (start,) = await DATA_CONVERTER.decode(attributes.input.payloads, [TaskWorkflowInput])
    except Exception:  # not ours to judge: the replay reports what it finds
        return None
    task = start.start if start.carried is None else start.carried.start
    return None if task is None or task.agent is None else task.agent.name


def unregistered(agent: str) -> str:
    """The reason a history of agent ``agent`` is not replayed: agent code is workflow code,
    registered when its module is imported (``workflows.agents.agent``), as on the worker."""
    return f"agent {agent!r} is not registered: pass --import MODULE (the module that registers it)"


def not_replayed(
    source: str,
    history: WorkflowHistory,
    result: ReplayStatus,
    message: str,
    agent: str | None = None,
) -> ReplayResult:
    """The result of a history ``replay_histories`` does not replay: ``result`` and
    ``message`` say why; ``agent``, the unregistered agent it runs, if that is why."""
    return ReplayResult(
        source=source,
        workflow_id=history.workflow_id,
        run_id=history.run_id,
        events=len(history.events),
        result=result,
        message=message,
        unregistered_agent=agent,
    )


async def replay_histories(
    histories: Sequence[tuple[str, WorkflowHistory]],
    workflows: Sequence[type] = (TaskWorkflow,),
) -> list[ReplayResult]:
    """Replay each ``(source, history)`` pair with ``workflows`` (the code on disk by
    default) and return one result per pair, in the same order. Never raises for a history
    that fails to replay: the failure is in its result. A history whose agent is not
    registered in this process (``agent_of``) is not replayed: its result is ``error`` with
    ``unregistered``'s reason, not the nondeterminism its replay would report. A run before its
    first workflow task (``before_first_workflow_task``: it has run no workflow code) is not
    replayed either: its result is ``ok``, with ``NOT_STARTED`` as its message."""
    results: dict[int, ReplayResult] = {}
    for i, (source, history) in enumerate(histories):
        if before_first_workflow_task(history):
            results[i] = not_replayed(source, history, "ok", NOT_STARTED)
            continue
        agent = await agent_of(history)
        if agent is not None and agent_function(agent) is None:
            results[i] = not_replayed(source, history, "error", unregistered(agent), agent)
    if len(results) == len(histories):
        return [results[i] for i in range(len(histories))]

    async def feed() -> AsyncIterator[WorkflowHistory]:
        for i, (_, history) in enumerate(histories):
            if i not in results:
                yield history

    index = {id(history): i for i, (_, history) in enumerate(histories)}
    async with replayer(workflows).workflow_replay_iterator(feed()) as replays:
        async for replay in replays:
            i = index[id(replay.history)]
            failure = replay.replay_failure
            status: ReplayStatus = "ok"
            if isinstance(failure, NondeterminismError):
                status = "nondeterministic"
            elif failure is not None:
                status = "error"
            results[i] = ReplayResult(
                source=histories[i][0],
                workflow_id=replay.history.workflow_id,
                run_id=replay.history.run_id,
                events=len(replay.history.events),
                result=status,
                message=None if failure is None else failure_message(failure),
            )
    return [results[i] for i in range(len(histories))]


async def replay_server(
    client: Client,
    *,
    project: str | None = None,
    status: TaskStatus | str | None = None,
    since: datetime | None = None,
    limit: int = DEFAULT_LIMIT,
    workflows: Sequence[type] = (TaskWorkflow,),
) -> list[ReplayResult]:
    """Fetch the task runs ``task_query`` selects (at most ``limit``, newest first) and
    replay them with ``workflows``; one result per run (``source`` is ``server``).

    Raises:
        temporalio.service.RPCError: the server refused the list or a fetch.
    """
    histories = [
        ("server", history)
        async for history in server_histories(
            client, project=project, status=status, since=since, limit=limit
        )
    ]
    return await replay_histories(histories, workflows)


def load_dir(folder: Path) -> list[tuple[str, WorkflowHistory | str]]:
    """Every ``*.json`` file in ``folder``, sorted by name, as ``(path, history)``, or
    ``(path, error message)`` for a file that cannot be read as a history (``load_history``).

    Raises:
        NotADirectoryError: ``folder`` is not a directory.
    """
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a directory")
    loaded: list[tuple[str, WorkflowHistory | str]] = []
    for path in sorted(folder.glob("*.json")):
        try:
            loaded.append((str(path), load_history(path)))
        except (ValueError, OSError) as err:
            loaded.append((str(path), str(err)))
    return loaded


async def replay_dir(
    folder: Path, workflows: Sequence[type] = (TaskWorkflow,)
) -> list[ReplayResult]:
    """Replay every ``*.json`` history in ``folder`` (sorted by name) with ``workflows``;
    one result per file.

    A file that cannot be read as a history gives an ``error`` result whose message names
    the file; the others are replayed all the same.

    Raises:
        NotADirectoryError: ``folder`` is not a directory.
    """
    files = load_dir(folder)
    readable = [(path, h) for path, h in files if isinstance(h, WorkflowHistory)]
    replayed = {r.source: r for r in await replay_histories(readable, workflows)}
    return [
        replayed[path]
        if isinstance(loaded, WorkflowHistory)
        else ReplayResult(
            source=path,
            workflow_id=Path(path).stem,
            run_id=None,
            events=0,
            result="error",
            message=loaded,
        )
        for path, loaded in files
    ]


def all_ok(results: Sequence[ReplayResult]) -> bool:
    """True when every result is ``ok`` (the deploy check passes)."""
    return all(r.result == "ok" for r in results)
