"""The branch activities. ``branch_events``: one page of a branch's source events, read across
the source's runs (``tasklog.reader.TaskReader.task_events``, sealed text opened) and turned into
the events the branch records: sealed text sealed again under new keys stored for the branch
(``sealing.seal.seal_events``), so redacting a source event never opens its copy and a
copy can be redacted on its own. ``branch_reuse``: what an agent task's branch reuses from its
source (the steps settled and the questions answered before the branch point), so its agent
code, run again from the top, reads their recorded results instead of running them again."""

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
        """One page (``BRANCH_REUSE_PAGE_STEPS``, in name order after ``query.after_name``) of
        the source's steps that ended ``completed`` or ``unknown`` with their result event at
        the branch point or before (read across its runs: ``TaskReader.steps``); with the
        first page, the answers the source took at the point or before, the children whose
        end it recorded at the point or before, and its model rounds (its last run's
        ``resume_state``).

        Raises:
            GraphNotConfigured: the source has steps of earlier runs and no graph is set.
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
