"""What the worker tells the broker (``broker``): the tokens of a model call as they come, and
the word that a task's log grew, sent by the mirror activity.

Tokens go to the broker only, never into the activity's result beyond the turn the model
returns (recorded whole as one event) and never into Neo4j. A model call never waits for the
broker: its tokens are queued and sent by one task per call (in order, a pipeline round trip
per batch), and a call that ends waits at most ``FLUSH_TIMEOUT_S`` for the last of them. A
call that was cancelled (its task cancelled or ended) or failed sends nothing more: what it
had queued is dropped (a publish under way ends, within ``broker.PUBLISH_TIMEOUT_S``), so a
reader sees no token of a call after the call has ended.

Each token says which attempt of its model call it belongs to (``TokenMessage.attempt``, the
activity's attempt number; its ``index`` starts at 0 again in each attempt): a reader that
gets a token of a later attempt drops what it holds of the earlier one, whose turn was never
recorded.
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
    """``text`` as the scripted model streams it: each word with the white space after it (and
    white space at the start as a token of its own), so the tokens joined are ``text``."""
    return _TOKEN.findall(text)


class TokenStream:
    """The tokens of one model call of task ``task``: ``send`` queues one, a task of its own
    publishes them in order. Use as ``async with``; leaving waits for the queue to drain (at
    most ``FLUSH_TIMEOUT_S``). Without a broker, ``send`` does nothing.

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
    """Opens the ``TokenStream`` of a model call, with the channels of its task (its session,
    asked of the task once per worker by the ``view`` query).

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
        """The token stream of attempt ``attempt`` of one model call of the task
        ``workflow_id``."""
        targets: list[str] = []
        task = ""  # without a broker the stream publishes nothing
        if self.broker is not None:
            session, task = await self._session(workflow_id)
            targets = channels(workflow_id, session)
        async with TokenStream(self.broker, targets, task, after_seq, attempt) as tokens:
            yield tokens

    async def _session(self, workflow_id: str) -> tuple[str | None, str]:
        """The task's session and name, from its view (a long name is not in its workflow id:
        ``task_workflow_id`` cuts it)."""
        if workflow_id not in self._sessions:
            view = await self.client.get_workflow_handle(workflow_id).query(TaskWorkflow.view)
            if len(self._sessions) >= SESSION_CACHE:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[workflow_id] = (view.session_id, view.name)
        return self._sessions[workflow_id]
