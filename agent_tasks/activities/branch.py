"""The branch activities: ``branch_events`` reads a page of a branch's source events across its runs
(``tasklog.reader.TaskReader.task_events``) and seals sealed text again under the branch's own keys
(``sealing.seal.seal_events``), so source and copy are redacted apart; ``branch_reuse`` reads what
an agent task's branch reuses (steps settled, questions answered before the branch point)."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client

from agent_tasks.contract import (
    BRANCH_ACTIVITY,
    BRANCH_PAGE_EVENTS,
    BRANCH_REUSE_ACTIVITY,
    BRANCH_REUSE_PAGE_STEPS,
    MAX_PAYLOAD_BYTES,
    BranchedEvent,
    BranchPage,
    BranchQuery,
    BranchReuse,
    BranchReuseQuery,
    CitesInput,
    Event,
    EventInput,
    ReusedStep,
    StepState,
    model_size,
    project_of,
)
from agent_tasks.sealing.seal import seal_events
from agent_tasks.taskgraph.port import GraphStore
from agent_tasks.tasklog.reader import TaskReader
from agent_tasks.workflows.task import TaskWorkflow

PAGE_BYTES = MAX_PAYLOAD_BYTES // 2
"""Bytes of JSON of one page at most: half the result's budget, for the ciphertext's base64."""


def copy_of(event: Event) -> EventInput:
    """The branch's copy of ``event`` (opened): kind, role, name, call id, usage, text with its full
    length and SHA-256; a decision keeps its event citations and drops its step citations."""
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
    """The branch activities with a Temporal client (the source) and the graph store (earlier runs'
    events, the key store)."""

    def __init__(self, client: Client, graph: GraphStore) -> None:
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

    @activity.defn(name=BRANCH_REUSE_ACTIVITY)
    async def branch_reuse(self, query: BranchReuseQuery) -> BranchReuse:
        """One page (``BRANCH_REUSE_PAGE_STEPS``, in name order after ``query.after_name``) of the
        source's steps that ended ``completed`` or ``unknown`` with their result at or before the
        branch point (``TaskReader.steps``); the first page adds the answers and ended children up
        to the point and the model rounds.

        Raises:
            GraphNotConfigured: the source has steps of earlier runs and no graph store is set.
            temporalio.service.RPCError: a query failed (the activity's retry policy retries).
        """
        reader = TaskReader(self.client, self.graph)
        found = await reader.steps(
            query.source_workflow_id, None, BRANCH_REUSE_PAGE_STEPS, query.after_name
        )
        steps, cursor = found if found is not None else ([], None)
        settled = (StepState.COMPLETED, StepState.UNKNOWN)
        reuse = BranchReuse(
            steps=[
                ReusedStep(
                    step_name=s.step_name,
                    state=s.state,
                    kind=s.kind,
                    result_event_seq=s.result_event_seq,
                )
                for s in steps
                if s.state in settled
                and s.result_event_seq is not None
                and s.result_event_seq <= query.up_to_seq
            ],
            next_after_name=cursor,
        )
        if query.after_name is None:
            source = self.client.get_workflow_handle(query.source_workflow_id)
            state = await source.query(TaskWorkflow.resume_state)
            reuse.answers = {k: v for k, v in state.answered.items() if v <= query.up_to_seq}
            reuse.children = {
                key: child
                for key, child in state.children.items()
                if child.result_seq is not None and child.result_seq <= query.up_to_seq
            }
            run = state.agent_run
            reuse.rounds = 0 if run is None else run.round_base + run.rounds
        return reuse
