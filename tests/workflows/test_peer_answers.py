"""Peers' bug reports about answers to a person's requests and approvals, reproduced against
ours (real Temporal, Neo4j): each test names the report and asserts our documented rule
(docs/input-and-children.md, docs/page.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pydantic import JsonValue

from agent_tasks.cli.importer import all_events
from agent_tasks.contract import AgentSpec, EventKind, TaskStatus
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.starter.client import ConversationHistory
from tests.approval_tools import approval_spec, effects, goal
from tests.conftest import eventually
from tests.workflows.test_answers import asking
from tests.workflows.test_approvals import asked, mail


async def test_an_answer_of_the_wrong_kind_never_decides_an_approval(
    agents: ConversationHistory, tmp_path: Path
) -> None:
    """pydantic/pydantic-ai#7624 (a result given under the wrong category resolved a pending
    approval without approving it or running it): an approval request takes only a choice
    (its JSON Schema). A question's kind of answer (a number, a text without ``type``) is
    refused by update with nothing recorded, and by signal recorded ``rejected`` with the
    request still open; the tool runs once, after the accept."""
    log = tmp_path / "mail.log"
    await agents.create_task("t", goal(mail(log)), agent=approval_spec())
    request = await asked(agents, "t")
    wrong_kinds: list[JsonValue] = [5, {"text": "looks fine"}, "yes"]
    for wrong in wrong_kinds:
        refused = await agents.respond("t", wrong, input_id=request.input_id)
        assert not refused.recorded and refused.error is ErrorCode.INPUT_INVALID, refused
    assert (await agents.submit_input("t", "yes", input_id=request.input_id)).recorded

    async def rejected() -> bool:
        events = await all_events(agents, "t")
        return any(e.kind is EventKind.INPUT_RESPONSE and e.name == "rejected" for e in events)

    await eventually(rejected)
    view = (await agents.get_task("t")).view
    assert view is not None and view.status is TaskStatus.AWAITING_INPUT
    assert [r.input_id for r in view.pending_inputs] == [request.input_id]
    assert effects(log) == []
    assert (await agents.approve("t", request.input_id, "accept")).recorded
    final = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert final is not None and final.status is TaskStatus.DONE
    assert len(effects(log)) == 1


async def test_a_taken_answer_is_never_delivered_to_a_later_request(
    agents: ConversationHistory,
) -> None:
    """langchain-ai/langgraph#8837 (a consumed resume value was delivered again to the next
    interrupt, which was answered with a stale payload): a recorded task asks ``q1``, an
    answer without an id takes it; ``q2`` asked next stays open, and the same answer sent
    again (its request id) changes nothing."""
    assert (await agents.create_task("t", "two questions")).recorded
    assert (await agents.request_input("t", "q1", "First?")).recorded
    first = await agents.submit_input("t", "blue", request_id="answer-1")
    assert first.recorded
    await asking_done(agents, "q1")
    assert (await agents.request_input("t", "q2", "Second?")).recorded
    again = await agents.submit_input("t", "blue", request_id="answer-1")
    assert again.recorded
    await asking(agents, "q2")
    events = await all_events(agents, "t")
    responses = [e for e in events if e.kind is EventKind.INPUT_RESPONSE]
    assert len(responses) == 1 and json.loads(responses[0].payload) == "blue"
    view = (await agents.get_task("t")).view
    assert view is not None and [r.input_id for r in view.pending_inputs] == ["q2"]


async def asking_done(history: ConversationHistory, input_id: str) -> None:
    """Wait until request ``input_id`` of task ``t`` is no longer open."""

    async def answered() -> bool:
        view = (await history.get_task("t")).view
        assert view is not None
        return input_id not in [r.input_id for r in view.pending_inputs]

    await eventually(answered)


async def test_an_answer_without_an_id_while_two_requests_are_open(
    agents: ConversationHistory,
) -> None:
    """langchain-ai/langgraph#6108 and #8579 (a resume value without an interrupt id was
    applied to one of several pending interrupts, which one not determined): with ``q1`` and
    ``q2`` open, an answer naming neither is refused by update (``input_not_requested``,
    naming the open requests, nothing recorded); an answer naming one goes to it."""
    assert (await agents.create_task("t", "two open")).recorded
    assert (await agents.request_input("t", "q1", "First?")).recorded
    assert (await agents.request_input("t", "q2", "Second?")).recorded
    unnamed = await agents.respond("t", "which one?")
    assert not unnamed.recorded and unnamed.error is ErrorCode.INPUT_NOT_REQUESTED, unnamed
    assert unnamed.message is not None and "'q1', 'q2'" in unnamed.message
    assert [e for e in await all_events(agents, "t") if e.kind is EventKind.INPUT_RESPONSE] == []
    assert (await agents.respond("t", "second", input_id="q2")).recorded
    view = (await agents.get_task("t")).view
    assert view is not None and [r.input_id for r in view.pending_inputs] == ["q1"]
    assert (await agents.respond("t", "first")).recorded  # one open: it is the one
    events = await all_events(agents, "t")
    said = [(e.name, json.loads(e.payload)) for e in events if e.kind is EventKind.INPUT_RESPONSE]
    assert [answer for _, answer in said] == ["second", "first"]


async def test_two_questions_asked_at_once_are_each_asked_once(
    agents: ConversationHistory,
) -> None:
    """langchain-ai/langgraph#5952 (interrupts of nodes run in parallel fired again after they
    were resolved): agent code asks ``a`` and ``b`` at once; ``a`` answered, only ``b`` stays
    open and neither is asked again; ``b`` answered, the agent gets both."""
    spec = AgentSpec(name="ask_two_at_once")
    assert (await agents.create_task("t", "two at once", agent=spec)).recorded
    await asking(agents, "a")
    await asking(agents, "b")
    assert (await agents.respond("t", 1, input_id="a")).recorded
    await asking_done(agents, "a")
    view = (await agents.get_task("t")).view
    assert view is not None and [r.input_id for r in view.pending_inputs] == ["b"]
    assert (await agents.respond("t", 2, input_id="b")).recorded
    final = await asyncio.wait_for(agents.wait_task("t"), 60)
    assert final is not None and final.result is not None and final.result.text == "1,2"
    events = await all_events(agents, "t")
    asked = [e for e in events if e.kind is EventKind.INPUT_REQUEST]
    assert sorted(json.loads(e.payload)["input_id"] for e in asked) == ["a", "b"]
    assert len([e for e in events if e.kind is EventKind.INPUT_RESPONSE]) == 2
