"""What a writer tells a task's mirror of the writes Temporal took (``broker.page_channel``): a
``record_events`` write of at most ``PAGE_EVENTS`` events as its signed page
(``broker.PageMessage``), any other as a word to poll (``broker.PollMessage``), so the follower
copies without polling (``activities.follow``).

Published in the background of the write and in each task's order (an out-of-order page costs the
follower a poll). Loaded with a broker only (``tests/test_layout.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agent_tasks.broker import (
    Broker,
    Message,
    PollMessage,
    PublishedWrite,
    page_channel,
    sign_page,
)
from agent_tasks.contract import RecordEventsInput, WriteOutcome
from agent_tasks.sealing.keys import KeyStore
from agent_tasks.sealing.seal import page_signer

PAGE_EVENTS = 32
"""The most events a write's published page carries; a larger write publishes a word to poll, since
past a few dozen events signing and parsing a page costs more than the poll it spares
(``bench/RESULTS.md``)."""

_IN_FLIGHT: dict[str, asyncio.Future[None]] = {}
"""The last publish in flight of each task (by workflow id) in this process: the next one
waits for it, and it holds the ones before it."""


class PagePublisher:
    """Publishes a writer's word to the mirror of each task it writes.

    Args:
        broker: where to publish.
        keys: the key store this process seals with (its ``ConversationHistory``'s graph);
            None: no pages (nothing is signed), words to poll only.
    """

    def __init__(self, broker: Broker, keys: KeyStore | None) -> None:
        self.broker = broker
        self.keys = keys

    def wrote(
        self, workflow_id: str, run_id: str | None, input: Any, outcome: WriteOutcome
    ) -> None:
        """Tell the mirror of ``workflow_id`` of a write its run ``run_id`` took: a new
        ``record_events`` write of at most ``PAGE_EVENTS`` events this process sealed as its page;
        another as a word to poll; a repeated request id's, nothing."""
        signer = None if self.keys is None else page_signer(self.keys, workflow_id)
        message: Message | None = None
        if (
            isinstance(input, RecordEventsInput)
            and len(input.events) <= PAGE_EVENTS
            and run_id
            and outcome.writes is not None
            and signer is not None
        ):
            write = PublishedWrite(
                workflow_id=workflow_id, run_id=run_id, input=input, outcome=outcome
            )
            message = sign_page(write, *signer)
        elif not outcome.duplicate:
            message = PollMessage()
        if message is not None:
            self._in_order(workflow_id, message)

    def nudge(self, workflow_id: str) -> None:
        """Tell the mirror of ``workflow_id`` that its run took a write no page carries: a word to
        poll."""
        self._in_order(workflow_id, PollMessage())

    @staticmethod
    async def published() -> None:
        """Wait for what this process is still publishing (each publish ends within the
        broker's ``PUBLISH_TIMEOUT_S``)."""
        if _IN_FLIGHT:
            await asyncio.gather(*_IN_FLIGHT.values(), return_exceptions=True)

    def _in_order(self, workflow_id: str, message: Message) -> None:
        before = _IN_FLIGHT.get(workflow_id)
        publishing = asyncio.ensure_future(self._after(before, message, workflow_id))
        _IN_FLIGHT[workflow_id] = publishing

        def done(_: asyncio.Future[None]) -> None:
            if _IN_FLIGHT.get(workflow_id) is publishing:
                del _IN_FLIGHT[workflow_id]

        publishing.add_done_callback(done)

    async def _after(
        self, before: asyncio.Future[None] | None, message: Message, workflow_id: str
    ) -> None:
        if before is not None:
            with contextlib.suppress(Exception):
                await before
        await self.broker.publish([page_channel(workflow_id)], message)
