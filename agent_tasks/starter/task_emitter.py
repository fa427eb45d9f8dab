"""``TaskEmitter``, the published API's emitter: one task's progress updates without passing
its id, written in call order (``emit_nowait`` ones included), and its LLM tokens."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from pydantic import JsonValue

from agent_tasks.starter.task_records import TaskUpdate, UpdateType

log = logging.getLogger(__name__)


class Updates(Protocol):
    """What an emitter needs of its manager (``starter.tasks.TaskManager``)."""

    async def add_update(
        self,
        task_id: str,
        message: str,
        update_type: UpdateType | str = UpdateType.INFO,
        *,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> TaskUpdate:
        """Write one update of ``task_id``."""
        ...

    async def emit_token(self, task_id: str, token: str, index: int) -> None:
        """Publish one token of ``task_id``'s live stream."""
        ...


class TaskEmitter:
    """Updates of one task without passing its id, written in call order (``emit_nowait`` too).

    Args:
        task_manager: the manager of the task.
        task_id: the task.
    """

    def __init__(self, task_manager: Updates, task_id: str) -> None:
        self.task_manager = task_manager
        self.task_id = task_id
        self.tokens = 0
        """Tokens emitted so far (the next one's index)."""
        self._queue: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = (
            asyncio.Queue()
        )
        self._writer: asyncio.Task[None] | None = None

    def emit_nowait(
        self,
        message: str,
        *,
        metadata: Mapping[str, JsonValue] | None = None,
        update_type: UpdateType | str = UpdateType.INFO,
    ) -> None:
        """Queue an update and return at once (fire and forget: a refusal is logged)."""
        future = self._enqueue(message, metadata, update_type)
        future.add_done_callback(_log_failure)

    async def emit(
        self,
        message: str,
        metadata: Mapping[str, JsonValue] | None = None,
        update_type: UpdateType | str = UpdateType.INFO,
    ) -> TaskUpdate:
        """Write an update (after those queued before it) and return it.

        Raises:
            TaskRefused: ``task_closed``, ``task_not_found`` ...
        """
        update: TaskUpdate = await self._enqueue(message, metadata, update_type)
        return update

    async def emit_token(self, token: str) -> None:
        """Stream one LLM token to the task's live streams (ephemeral: never stored).

        Raises:
            RuntimeError: the manager has no broker.
        """
        index, self.tokens = self.tokens, self.tokens + 1
        await self.task_manager.emit_token(self.task_id, token, index)

    async def flush(self) -> None:
        """Wait until every queued update is written (or refused)."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((_nothing, done))
        self._start()
        await done

    def _enqueue(
        self,
        message: str,
        metadata: Mapping[str, JsonValue] | None,
        update_type: UpdateType | str,
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def write() -> Awaitable[TaskUpdate]:
            return self.task_manager.add_update(
                self.task_id, message, update_type, metadata=metadata
            )

        self._queue.put_nowait((write, future))
        self._start()
        return future

    def _start(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())

    async def _write_all(self) -> None:
        while not self._queue.empty():
            write, future = self._queue.get_nowait()
            try:
                future.set_result(await write())
            except Exception as err:  # the caller's future holds it
                future.set_exception(err)


async def _nothing() -> None:
    return None


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("an update emitted without waiting was not written: %s", future.exception())
