"""The ``branch_events`` activity: one page of a branch's source events, read across the
source's runs (``tasklog.reader.TaskReader.task_events``, sealed text opened) and turned into the
events the branch records: sealed text sealed again under new keys stored for the branch
(``taskgraph.sealing.seal_events``), so redacting a source event never opens its copy and a
copy can be redacted on its own."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client

from taskgraph.graph import TaskGraph
from taskgraph.sealing import seal_events
from tasklog.reader import TaskReader
from workflows.models import (
    BRANCH_ACTIVITY,
    BRANCH_PAGE_EVENTS,
    MAX_PAYLOAD_BYTES,
    BranchedEvent,
    BranchPage,
    BranchQuery,
    CitesInput,
    Event,
    EventInput,
    model_size,
    project_of,
)

PAGE_BYTES = MAX_PAYLOAD_BYTES // 2
"""Bytes of JSON of one page at most (half the activity result's budget: the sealed copies
carry their ciphertext as base64)."""


def copy_of(event: Event) -> EventInput:
    """The branch's copy of ``event`` (opened): the same kind, role, name, call id, usage and
    text, its full length and SHA-256 kept (a text cut at the payload bound stays cut); a
    decision keeps its event citations (the seqs are the same in the branch) and drops its
    step citations (a branch starts with no steps)."""
    cites = None
    if event.cites is not None:
        cites = CitesInput(events=list(event.cites.events))
    return EventInput(
        kind=event.kind,
        role=event.role,
        name=event.name,
        call_id=event.call_id,
        payload=event.payload,
        full_length=event.full_length,
        full_sha256=event.full_sha256,
        usage=event.usage,
        cites=cites,
    )


class BranchActivities:
    """The branch activity with its dependencies: a Temporal client (to read the source) and
    the task graph (earlier runs' events, the key store)."""

    def __init__(self, client: Client, graph: TaskGraph) -> None:
        self.client = client
        self.graph = graph

    @activity.defn(name=BRANCH_ACTIVITY)
    async def branch_events(self, query: BranchQuery) -> BranchPage:
        """The source's events after ``query.after_seq`` up to ``query.up_to_seq``: at most
        ``BRANCH_PAGE_EVENTS`` and ``PAGE_BYTES`` of JSON (one at least)."""
        source = self.client.get_workflow_handle(query.source_workflow_id)
        run_id = (await source.describe()).run_id
        assert run_id is not None
        stop = min(query.up_to_seq, query.after_seq + BRANCH_PAGE_EVENTS)
        reader = TaskReader(self.client, self.graph)
        events = await reader.task_events(query.source_workflow_id, run_id, query.after_seq, stop)
        page: list[Event] = []
        used = 0
        for event in events:
            used += model_size(event)
            if page and used > PAGE_BYTES:
                break
            page.append(event)
        copies = [copy_of(e) for e in page]
        sealed = [i for i, e in enumerate(page) if e.key_id is not None and not e.redacted]
        if sealed:
            resealed = await seal_events(
                self.graph,
                project_of(query.target_workflow_id),
                query.target_workflow_id,
                [copies[i] for i in sealed],
            )
            for i, copy in zip(sealed, resealed, strict=True):
                copies[i] = copy
        return BranchPage(
            events=[
                BranchedEvent(author=e.author, event=c) for e, c in zip(page, copies, strict=True)
            ]
        )
