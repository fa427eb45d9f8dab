"""The ready tool-calling loop (``AgentSpec(name="tool_loop")``, the default agent)."""

from __future__ import annotations

from temporalio import workflow

from agent_tasks.contract import StepState, ToolCall
from agent_tasks.workflows.agents.approvals import call_digest
from agent_tasks.workflows.agents.context import AgentContext
from agent_tasks.workflows.agents.registry import agent
from agent_tasks.workflows.agents.runner import StepOutcome
from agent_tasks.workflows.patches import RESUME_OPEN_CALLS, SAME_CALL_SAME_KEY


def step_name(round_: int, index: int, tool: str) -> str:
    """The tool loop's step name: ``r{round:05d}.{index}:{tool}``, ``/`` and control characters as
    ``_``, cut to 100 characters."""
    name = f"r{round_:05d}.{index}:{tool}"
    return "".join("_" if c == "/" or ord(c) < 32 or 127 <= ord(c) < 160 else c for c in name)[:100]


@agent("tool_loop")
async def tool_loop(ctx: AgentContext) -> str:
    """The ready tool-calling loop: each tool call the model asks for runs as a step and its result
    goes back with the transcript; a turn without calls finishes the task ``done``. A turn a
    continue-as-new interrupted is resumed first (``RESUME_OPEN_CALLS``), and a call identical to
    one that ended ``unknown`` runs as that step (``SAME_CALL_SAME_KEY``)."""
    if ctx.run.open_calls:  # carried by a run parked inside its turn
        await run_calls(ctx, ctx.run.open_calls, resumed=True)
    while True:
        await ctx.checkpoint()
        turn = await ctx.model_turn()
        if not turn.tool_calls:
            return turn.content
        if workflow.patched(RESUME_OPEN_CALLS):
            ctx.run.open_calls = list(turn.tool_calls)
        await run_calls(ctx, turn.tool_calls)


async def run_calls(ctx: AgentContext, calls: list[ToolCall], *, resumed: bool = False) -> None:
    """Run the turn's ``calls`` as steps in order, then clear ``AgentRun.open_calls``. With
    ``resumed``, calls whose steps ended in an earlier run are passed over. A call identical to one
    whose step ended ``unknown`` is a retry of that step under its key (``StepRunner.retry``).

    Raises:
        AgentParked: the task is to continue-as-new while a call waits for approval.
    """
    round_ = ctx.run.round_base + ctx.run.rounds
    for index, call in enumerate(calls):
        # a call without an id gets one its result carries too (a strict API pairs them)
        call_id = call.call_id or f"call_{round_}_{index}"
        name = step_name(round_, index, call.name)
        before = ctx.run.claimed_calls.get(name)  # run as an unknown step by an earlier run
        ended = ctx.ledger.step(before or name) if resumed else None
        if ended is not None and ended.state is not StepState.IN_PROGRESS:
            if before is None or ended.retry_by is None:
                continue
        same = before or _same_unknown_call(ctx, name, call)
        if same is None:
            await _step(ctx, name, call, call_id)
            continue
        prior = ctx.ledger.step(same)
        if prior is not None and prior.retry_by is None:
            reason = f"the model called {call.name!r} again with the same arguments"
            outcome = await ctx.retry(
                same, call.name, call.arguments, reason=reason, call_id=call_id
            )
        else:  # its retry was asked already (by this turn in an earlier run, or by a person)
            outcome = await _step(ctx, same, call, call_id)
        if outcome.state is not StepState.UNKNOWN:
            ctx.run.unknown_calls.pop(call_digest(call.name, call.arguments, ""), None)
    ctx.run.open_calls = []
    ctx.run.claimed_calls = {}


async def _step(ctx: AgentContext, name: str, call: ToolCall, call_id: str) -> StepOutcome:
    """Run ``call`` as the step ``name`` (with ``ToolCall.arguments_full_length``)."""
    return await ctx.step(
        name,
        call.name,
        call.arguments,
        call_id=call_id,
        full_length=call.arguments_full_length,
        full_sha256=call.arguments_sha256,
    )


def _same_unknown_call(ctx: AgentContext, name: str, call: ToolCall) -> str | None:
    """The step an identical earlier call ran as, if it ended ``unknown`` and was not run since
    (``AgentRun.unknown_calls``; kept in ``claimed_calls``); None: a step of its own."""
    same = ctx.run.unknown_calls.get(call_digest(call.name, call.arguments, ""))
    if same is None:
        return None
    prior = ctx.ledger.step(same)
    if prior is None or prior.state is not StepState.UNKNOWN:
        return None
    if not workflow.patched(SAME_CALL_SAME_KEY):
        return None
    ctx.run.claimed_calls[name] = same
    return same
