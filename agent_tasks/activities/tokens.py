"""What the worker tells the broker (``broker``): a model call's tokens as they come.

Tokens go to the broker only (the turn is recorded whole, as one event). A call never waits for the
broker: one task per call publishes its queue in order, and a call that ends waits at most
``FLUSH_TIMEOUT_S``; a cancelled or failed call drops what it queued, so no token follows its end.
Each token carries its attempt (``TokenMessage.attempt``): a reader drops an earlier attempt's
tokens when a later one's come.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from types import TracebackType

from temporalio.client import Client

from agent_tasks.broker import Broker, TokenMessage, channels
from agent_tasks.workflows.task import TaskWorkflow

FLUSH_TIMEOUT_S = 2.0
"""How long a model call that ended waits for its queued tokens to reach the broker."""
SESSION_CACHE = 1_024
"""Tasks whose session a worker remembers (a task's session never changes)."""
_TOKEN = re.compile(r"\S+\s*|\s+")


def split_tokens(text: str) -> list[str]:
    """``text`` as the scripted model streams it: each word with its following white space (leading
    white space a token of its own), so the tokens join to ``text``."""
    return _TOKEN.findall(text)


class TokenStream:
    """The tokens of one model call of ``task``: ``send`` queues one, a task of its own publishes
    them in order. Use as ``async with``; leaving waits up to ``FLUSH_TIMEOUT_S`` for the queue.
    Without a broker, ``send`` does nothing.

    Args:
        broker: where to publish (None: nowhere).
        targets: the channels (``broker.channels``).
        task: the task's name.
        after_seq: the seq of the last event the model saw (``TokenMessage.after_seq``).
        attempt: the model call's attempt (``TokenMessage.attempt``).
    """

    def __init__(
        self,
        broker: Broker | None,
        targets: list[str],
        task: str,
        after_seq: int | None,
        attempt: int = 1,
    ) -> None:
        self.broker = broker
        self.targets = targets
        self.task = task
        self.after_seq = after_seq
        self.attempt = attempt
        self.sent = 0
        """Tokens queued so far (the next one's ``index``)."""
        self._queue: asyncio.Queue[TokenMessage | None] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TokenStream:
        if self.broker is not None:
            self._sender = asyncio.create_task(self._send_all(self.broker))
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._sender is None:
            return
        if e is not None:  # cancelled or failed: what is queued is of a turn never recorded
            while not self._queue.empty():  # the one being published ends (a publish is
                self._queue.get_nowait()  # never cut short: its connection would be lost)
        self._queue.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._sender), FLUSH_TIMEOUT_S)
        except TimeoutError:
            self._sender.cancel()

    def send(self, text: str) -> None:
        """Queue one token (never waits)."""
        if self._sender is None or not text:
            return
        self._queue.put_nowait(
            TokenMessage(
                task=self.task,
                text=text,
                index=self.sent,
                after_seq=self.after_seq,
                attempt=self.attempt,
            )
        )
        self.sent += 1

    async def _send_all(self, broker: Broker) -> None:
        while True:
            message = await self._queue.get()
            if message is None:
                return
            await broker.publish(self.targets, message)


class TokenPublisher:
    """Opens a model call's ``TokenStream`` with its task's channels (its session, asked by the
    ``view`` query once per worker).

    Args:
        client: to ask a task its session.
        broker: where tokens go (None: nowhere; streams then show no tokens).
    """

    def __init__(self, client: Client, broker: Broker | None) -> None:
        self.client = client
        self.broker = broker
        self._sessions: dict[str, tuple[str | None, str]] = {}

    @contextlib.asynccontextmanager
    async def stream(
        self, workflow_id: str, after_seq: int | None, attempt: int = 1
    ) -> AsyncIterator[TokenStream]:
        """The token stream of attempt ``attempt`` of one model call of ``workflow_id``."""
        targets: list[str] = []
        task = ""  # without a broker the stream publishes nothing
        if self.broker is not None:
            session, task = await self._session(workflow_id)
            targets = channels(workflow_id, session)
        async with TokenStream(self.broker, targets, task, after_seq, attempt) as tokens:
            yield tokens

    async def _session(self, workflow_id: str) -> tuple[str | None, str]:
        """The task's session and name from its view (a bounded workflow id loses a long name)."""
        if workflow_id not in self._sessions:
            view = await self.client.get_workflow_handle(workflow_id).query(TaskWorkflow.view)
            if len(self._sessions) >= SESSION_CACHE:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[workflow_id] = (view.session_id, view.name)
        return self._sessions[workflow_id]
