"""The mirror's pages of many tasks written together: one transaction (Neo4j) or one run of
statements (FalkorDB) for the pages that wait, instead of one per page.

Pages wait in a FIFO line. A batch is sent once fewer than ``BATCHES_IN_FLIGHT`` are under way;
while pages come fast, the next waits up to ``GATHER_S`` after the last to fill up. A batch holds at
most ``BATCH_PAGES`` pages of one project, one per task (a task's second page waits, so the
write-counter rule sees the first).

A failed batch is written again page by page, so a bad page fails its own caller only; a batch
failed for the store's sake (``GraphUnavailable``, ``GraphAuthError``) is not: each caller gets the
error and retries. No page is dropped; a caller cancelled while waiting takes its page out, one
cancelled while its batch is sent does not stop it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agent_tasks.contract import Event, StepView, TaskView
from agent_tasks.contract.errors import GraphAuthError, GraphUnavailable

BATCH_PAGES = 64
"""Pages one batch holds at most: 64 one-event pages are about 0.1 MB of parameters, 64 pages of 100
events about 6 MB."""
BATCHES_IN_FLIGHT = 2
"""Batches one graph object writes at once: more made one project's transactions wait on each
other's locks of the shared nodes."""
GATHER_S = 0.05
"""How long after a batch was sent the next one gathers pages (seconds): the mirror lag it adds at
most."""


@dataclass(frozen=True)
class PageWrite:
    """One mirror page of one task (``taskgraph.port.MirrorStore.write_task``'s arguments)."""

    view: TaskView
    """The task's view (its node's properties, and the write counter that versions them)."""
    events: Sequence[Event]
    """Events of the page, in seq order."""
    steps: Sequence[StepView]
    """Steps of the page."""
    mark: str | None = None
    """A rebuild's id, stamped on the page's event and step nodes."""
    mirrored_write: int | None = None
    """Raises the task node's ``mirrored_write`` (a copy's last page)."""


def check_batch(pages: Sequence[PageWrite]) -> None:
    """Refuse a batch that is not of one project with one page per task.

    Raises:
        ValueError: it is not.
    """
    keys = [page.view.workflow_id for page in pages]
    projects = {page.view.project_id for page in pages}
    if len(projects) != 1 or len(set(keys)) != len(keys):
        raise ValueError("a batch of mirror pages is of one project, with one page per task")


@dataclass
class _Waiting:
    page: PageWrite
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


Write = Callable[[Sequence[PageWrite]], Awaitable[None]]
"""Writes some pages together (one transaction in Neo4j), all or nothing where the store has
transactions."""


class PageBatches:
    """The line of pages of one graph object and the batches it sends (module docstring).

    Args:
        write: writes a batch (``Write``).
        pages: pages per batch at most (``BATCH_PAGES``).
        in_flight: batches sent at once at most (``BATCHES_IN_FLIGHT``).
        gather: seconds after a batch the next one gathers pages (``GATHER_S``; 0: none).
    """

    def __init__(
        self,
        write: Write,
        *,
        pages: int = BATCH_PAGES,
        in_flight: int = BATCHES_IN_FLIGHT,
        gather: float = GATHER_S,
    ) -> None:
        self._write = write
        self._pages = pages
        self._in_flight = in_flight
        self._gather = gather
        self._sent_at = float("-inf")
        self._sending = 0
        self._line: list[_Waiting] = []
        self._changed: asyncio.Condition | None = None

    async def write(self, page: PageWrite) -> None:
        """Write ``page`` in the next batch that can take it; returns once it is written.

        Raises:
            Exception: the page's own error, from its write alone (the batch's failed).
        """
        if self._changed is None:
            self._changed = asyncio.Condition()
        changed = self._changed
        waiting = _Waiting(page)
        self._line.append(waiting)
        try:
            while True:
                async with changed:
                    await changed.wait_for(lambda: waiting.done.done() or self._free())
                    if waiting.done.done():
                        return waiting.done.result()
                    loop = asyncio.get_running_loop()
                    hold = self._sent_at + self._gather - loop.time()
                    if len(self._line) >= self._pages:
                        hold = 0
                    if hold <= 0:
                        batch = self._take()
                        self._sending += 1
                        self._sent_at = loop.time()
                if hold > 0:
                    await asyncio.sleep(hold)  # pages come fast: more gather for this batch
                    continue
                # shielded: if this caller is cancelled, the batch's pages are still written
                # and every other caller is told
                await asyncio.shield(asyncio.ensure_future(self._send(batch, changed)))
        except asyncio.CancelledError:
            if waiting in self._line:
                self._line.remove(waiting)
            raise

    def _free(self) -> bool:
        """True when a batch may be sent: pages wait and fewer batches than ``in_flight``
        are on their way."""
        return bool(self._line) and self._sending < self._in_flight

    def _take(self) -> list[_Waiting]:
        """The next batch from the line: the first page's project, a page per task, in line order,
        at most ``pages``; the rest keep their order."""
        project = self._line[0].page.view.project_id
        batch: list[_Waiting] = []
        tasks: set[str] = set()
        left: list[_Waiting] = []
        for waiting in self._line:
            key = waiting.page.view.workflow_id
            view = waiting.page.view
            if len(batch) < self._pages and view.project_id == project and key not in tasks:
                batch.append(waiting)
                tasks.add(key)
            else:
                left.append(waiting)
        self._line = left
        return batch

    async def _send(self, batch: list[_Waiting], changed: asyncio.Condition) -> None:
        """Write ``batch``; when it fails, each page again alone; tell every page's caller."""
        try:
            try:
                await self._write([w.page for w in batch])
                results: list[BaseException | None] = [None] * len(batch)
            except (GraphUnavailable, GraphAuthError) as err:
                results = [err] * len(batch)  # the store's, not a page's: each caller retries
            except Exception as err:
                if len(batch) == 1:
                    results = [err]
                else:
                    results = [await self._alone(w.page) for w in batch]
            for waiting, result in zip(batch, results, strict=True):
                if waiting.done.done():
                    continue
                if result is None:
                    waiting.done.set_result(None)
                else:
                    waiting.done.set_exception(result)
        finally:
            async with changed:
                self._sending -= 1
                changed.notify_all()

    async def _alone(self, page: PageWrite) -> BaseException | None:
        try:
            await self._write([page])
        except Exception as err:
            return err
        return None
