"""The mirror's pages of many tasks written together: one graph store transaction (Neo4j) or
one run of statements (FalkorDB) for the pages that wait, instead of one per page.

A page (``PageWrite``) waits in a first-in, first-out line until a batch takes it. A batch is
sent as soon as fewer than ``BATCHES_IN_FLIGHT`` are on their way, so pages that come while
batches are written gather for the next one: a page waits for one batch in flight at most
(and the gather window below) before its own is sent. While pages come fast (the last batch
was sent less than ``GATHER_S`` ago), the next batch waits until ``GATHER_S`` after it, or
until it is full, so that more pages share its transaction (a transaction's cost is mostly
per transaction, not per page); a page that comes after a quiet ``GATHER_S`` is sent at once. A
batch holds at most ``BATCH_PAGES`` pages, of one project, at most one page per task (a
second page of a task waits for the next batch: the write counter rule, a page applies only
if newer, is then checked against the node the earlier page left, as with one transaction
per page), taken in line order.

A batch that fails is written again page by page, each in its own transaction, so a page that
cannot be written (a data error, a task node of another incarnation) fails its own caller
only, and the other pages of its batch are written; a batch that fails for the store's sake
(``GraphUnavailable``: down, a deadlock, out of time; ``GraphAuthError``) is not written
again here: each of its callers gets that error and retries as before (``activities.mirror``:
the activity's retries, then the workflow's pause), so an outage costs one failed batch, not
one wait per page. No page is dropped: each caller's
``write`` returns once its page is written, or raises its page's error. A caller cancelled
while its page waits takes the page out of the line; one cancelled while its batch is sent
does not stop the batch (its page is written, idempotently, or fails with nobody to tell).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agent_tasks.contract import Event, StepView, TaskView
from agent_tasks.contract.errors import GraphAuthError, GraphUnavailable

BATCH_PAGES = 64
"""Pages one batch holds at most (one transaction's size: 64 pages of one event each are
about 0.1 MB of parameters; pages of 100 events, about 6 MB at most)."""
BATCHES_IN_FLIGHT = 2
"""Batches one graph object writes at once (one per core of the machine the bench measures
on; more made Neo4j's transactions of the same project's tasks wait on each other's locks on
the shared project and agent nodes)."""
GATHER_S = 0.05
"""How long after a batch was sent the next one gathers pages (seconds): the mirror lag it
adds at most, while pages come faster than that."""


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
    """Refuse a batch that is not of one project with one page per task (what a store's
    ``write_pages`` takes).

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
        write: writes a batch (``Write``); a batch of one page is one page's write.
        pages: pages per batch at most (``BATCH_PAGES``).
        in_flight: batches sent at once at most (``BATCHES_IN_FLIGHT``).
        gather: seconds after a batch was sent that the next one gathers pages
            (``GATHER_S``; 0: none).
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
        """The next batch from the line: its first page's project, a page per task, in line
        order, ``pages`` at most; the rest stay in the line in their order."""
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
