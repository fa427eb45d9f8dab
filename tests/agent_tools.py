"""Tools and scripted models of the agent tests, in a module of their own so that a worker in a
subprocess (``python -m tests.agent_worker``) runs the same ones. Every tool that has an effect
writes it to a file named in its arguments, so a test counts runs from outside."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_tasks.activities.model import Script, ScriptedModel, tool_call
from agent_tasks.activities.tools import Tool, ToolContext, tool
from agent_tasks.contract import AgentSpec, ModelTurn, StepState, TokenUsage, ToolCall
from agent_tasks.workflows.agents import AgentContext, SpawnRefused, agent


class Effect(BaseModel):
    """Arguments of the effect tools: where to write one line per run."""

    log: str
    """File that gets one line per run: ``{idempotency key}``."""
    seconds: float = 0.0
    """How long the tool then runs (heartbeating)."""


def _log(args: Effect, context: ToolContext) -> int:
    """Append the key to the log; returns how many runs of this key the log holds."""
    with Path(args.log).open("a", encoding="utf-8") as file:
        file.write(context.idempotency_key + "\n")
    return Path(args.log).read_text(encoding="utf-8").splitlines().count(context.idempotency_key)


def _cancelled(args: Effect, context: ToolContext) -> None:
    Path(args.log + ".cancelled").write_text(context.idempotency_key, encoding="utf-8")


async def _run(args: Effect, context: ToolContext) -> str:
    """Log the run; the first run of a key then takes ``seconds`` (a retry returns at once)."""
    runs = _log(args, context)
    try:
        await asyncio.sleep(args.seconds if runs == 1 else 0)
    except asyncio.CancelledError:
        _cancelled(args, context)
        raise
    return "done"


@tool("charge_card", arguments=Effect, idempotent=False, heartbeat_s=2, start_to_close_s=600)
async def charge_card(args: Effect, context: ToolContext) -> str:
    """Not idempotent: runs at most once; heartbeats every 0.5 s while it runs."""
    return await _run(args, context)


@tool(
    "sync_data",
    arguments=Effect,
    idempotent=True,
    heartbeat_s=2,
    start_to_close_s=600,
    max_attempts=5,
)
async def sync_data(args: Effect, context: ToolContext) -> str:
    """Idempotent: retried by its policy with the same key."""
    return await _run(args, context)


@tool("flaky", arguments=Effect, idempotent=True, max_attempts=5)
async def flaky(args: Effect, context: ToolContext) -> str:
    """Fails its first two runs of an attempt, then succeeds."""
    runs = _log(args, context)
    if runs < 3:
        raise RuntimeError(f"flaky run {runs}")
    return f"ok after {runs} runs"


class Size(BaseModel):
    """Arguments of ``huge``."""

    chars: int


@tool("huge", arguments=Size, idempotent=True)
async def huge(args: Size, context: ToolContext) -> str:
    """Returns ``chars`` characters."""
    return "x" * args.chars


class Opaque(BaseModel):
    """A result pydantic cannot write as JSON."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    value: Any


@tool("opaque", arguments=Size, idempotent=True)
async def opaque(args: Size, context: ToolContext) -> Opaque:
    """Returns a value that cannot be serialized."""
    return Opaque(value=object())


class Text(BaseModel):
    """Arguments of ``echo``."""

    text: str


@tool("echo", arguments=Text, idempotent=True)
async def echo(args: Text, context: ToolContext) -> str:
    """Returns its text."""
    return args.text


@tool("fail_first", arguments=Effect, idempotent=True, max_attempts=1)
async def fail_first(args: Effect, context: ToolContext) -> str:
    """Fails the first time it runs at all (whatever the key), then succeeds."""
    if _log(args, context) == 1 and _runs(args) == 1:
        raise RuntimeError("the first run fails")
    return "third"


def _runs(args: Effect) -> int:
    return len(Path(args.log).read_text(encoding="utf-8").splitlines())


@tool("plain_wait", arguments=Effect, idempotent=False, start_to_close_s=60)
async def plain_wait(args: Effect, context: ToolContext) -> str:
    """Not idempotent and without heartbeats (a cancellation cannot reach it): logs its run,
    then waits ``seconds``."""
    _log(args, context)
    await asyncio.sleep(args.seconds)
    return f"waited {args.seconds:g} s"


@tool("slow_once", arguments=Effect, idempotent=False, start_to_close_s=1)
async def slow_once(args: Effect, context: ToolContext) -> str:
    """Not idempotent, 1 s to run: its first run of a key takes ``seconds`` (past the timeout:
    the step ends ``unknown``), a retry of the key returns at once."""
    return await _run(args, context)


class Gate(BaseModel):
    """Arguments of ``gated``."""

    path: str
    """The tool writes ``{path}.waiting``, then waits until ``path`` exists."""


@tool("gated", arguments=Gate, idempotent=False, start_to_close_s=120)
async def gated(args: Gate, context: ToolContext) -> str:
    """Waits until the test opens its gate (creates the file ``path``)."""
    waiting, gate = Path(args.path + ".waiting"), Path(args.path)
    await asyncio.to_thread(waiting.write_text, context.idempotency_key, encoding="utf-8")
    # the gate is a file the test (another process, maybe) creates: polled
    while not await asyncio.to_thread(gate.exists):  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return "gated"


class Burn(BaseModel):
    """Arguments of ``burn``: where to log the run, and how much CPU to spend."""

    log: str
    """File that gets one line per run: ``{idempotency key}``."""
    rounds: int = 20_000
    """SHA-256 rounds over 1 KiB (about 20 ms of one core)."""


@tool("burn", arguments=Burn, idempotent=False, start_to_close_s=600)
async def burn(args: Burn, context: ToolContext) -> str:
    """CPU-heavy and synchronous: ``rounds`` chained SHA-256 digests, then the log line."""
    digest = bytes(1024)
    for _ in range(args.rounds):
        digest = hashlib.sha256(digest).digest() * 32
    _log(Effect(log=args.log), context)
    return digest[:8].hex()


TOOLS: list[Tool] = [
    burn,
    charge_card,
    sync_data,
    flaky,
    huge,
    opaque,
    echo,
    fail_first,
    plain_wait,
    gated,
    slow_once,
]
TOOL_NAMES = [t.spec.name for t in TOOLS]


def calls(*calls: tuple[str, dict[str, Any]], content: str = "", tokens: int = 10) -> ModelTurn:
    """A scripted turn with tool calls (call ids ``c1``, ``c2``...)."""
    return ModelTurn(
        content=content,
        tool_calls=[tool_call(name, args, f"c{i}") for i, (name, args) in enumerate(calls, 1)],
        usage=TokenUsage(input_tokens=tokens, output_tokens=tokens),
    )


def answer(text: str, tokens: int = 10) -> ModelTurn:
    """A scripted final answer."""
    return ModelTurn(content=text, usage=TokenUsage(input_tokens=tokens, output_tokens=tokens))


def script_of(goal_json: str) -> ScriptedModel:
    """A script written in the task's goal as JSON (a list of turns), for tests that need
    their own: the scripted model ``from-goal`` reads it from the first user message."""
    return ScriptedModel([ModelTurn.model_validate(t) for t in json.loads(goal_json)])


def from_goal(transcript: Any) -> ModelTurn:
    """The scripted model ``from-goal``: the goal is a JSON list of turns."""
    goal = next(e.payload for e in transcript if e.kind.value == "message" and e.role)
    return script_of(goal)(transcript)


def echo_rounds(transcript: Any) -> ModelTurn:
    """The scripted model ``echo-20k``: 50 rounds each echoing 20,000 characters, then an
    answer (the transcript grows by about 40 KB a round)."""
    done = sum(e.kind.value == "tool_result" for e in transcript)
    if done >= 50:
        return answer(f"{done} rounds")
    return calls(("echo", {"text": f"{done:02d}" + "y" * 19_998}))


CALL_BOUNDS = ScriptedModel(
    [
        ModelTurn(
            tool_calls=[
                ToolCall(name="", arguments="{}"),
                ToolCall(name="echo", arguments=json.dumps({"text": "y" * 40_000})),
            ]
        ),
        answer("told"),
    ]
)
"""The scripted model ``call-bounds``: a call with no tool name and one whose arguments pass
the 32,000-character bound, then an answer."""

SCRIPTS: dict[str, Script] = {
    "from-goal": from_goal,
    "echo-20k": echo_rounds,
    "call-bounds": CALL_BOUNDS,
}


@agent("three_steps")
async def three_steps(ctx: AgentContext) -> str:
    """Agent code: three steps, the third of which fails the first time; a failed step fails
    the task (a ``resume`` runs it again, and only it)."""
    log = str(ctx.input["log"])
    one = await ctx.step("one", "echo", {"text": "first"})
    two = await ctx.step("two", "sync_data", {"log": log})
    three = await ctx.step("three", "fail_first", {"log": log + ".3"})
    if not three.ok:
        raise RuntimeError(f"step three failed: {three.text}")
    await ctx.emit("all three done")
    return f"{one.text}, {two.text}, {three.text}"


@agent("counter")
async def counter(ctx: AgentContext) -> str:
    """Agent code that keeps its progress in ``ctx.state`` and checkpoints each round, so it
    survives continue-as-new: ``input["rounds"]`` (default 30) rounds of one echo step each."""
    rounds = ctx.input.get("rounds", 30)
    assert isinstance(rounds, int)
    while isinstance(done := ctx.state.get("done", 0), int) and done < rounds:
        await ctx.checkpoint()
        await ctx.step(f"echo-{done:02d}", "echo", {"text": f"round {done}"})
        ctx.state["done"] = done + 1
    return f"{rounds} rounds"


@agent("ask_positive")
async def ask_positive(ctx: AgentContext) -> str:
    """A step (``input["seconds"]`` long), then a question whose answer must be a positive
    integer, then a step using it."""
    seconds = ctx.input.get("seconds", 0)
    await ctx.step("prepare", "sync_data", {"log": str(ctx.input["log"]), "seconds": seconds})
    number = await ctx.ask("n", "How many?", {"type": "integer", "minimum": 1})
    used = await ctx.step("use", "echo", {"text": f"using {number}"})
    return used.text


class Approval(BaseModel):
    """An answer as a pydantic model (its JSON Schema is the request's)."""

    approved: bool
    reviewer: str


@agent("ask_later")
async def ask_later(ctx: AgentContext) -> str:
    """A slow step, then a question (an answer may well come before it is asked)."""
    await ctx.step("slow", "sync_data", {"log": str(ctx.input["log"]), "seconds": 2})
    answer = await ctx.ask("approve", "Deploy?", Approval)
    return json.dumps(answer, sort_keys=True)


@agent("ask_timeout")
async def ask_timeout(ctx: AgentContext) -> str:
    """A question that waits 24 hours, with or without a default answer."""
    day = timedelta(hours=24)
    if "default" in ctx.input:
        answer = await ctx.ask("wait", "Anyone?", timeout=day, default=ctx.input["default"])
    else:
        answer = await ctx.ask("wait", "Anyone?", timeout=day)
    return f"answer: {answer}"


@agent("fanout")
async def fanout(ctx: AgentContext) -> str:
    """Spawn ``input["children"]`` recorded child tasks and wait for them all (collecting
    failures as values)."""
    count = ctx.input["children"]
    assert isinstance(count, int)
    for i in range(count):
        await ctx.spawn(f"c{i}", f"child {i}", mode="collect")
    while True:
        await ctx.checkpoint()
        outcomes = await ctx.wait_children()
        return ",".join(f"{o.key}={o.status.value}" for o in outcomes)


@agent("fan_out")
async def fan_out(ctx: AgentContext) -> str:
    """``input["steps"]`` steps of ``burn`` at once (``input["log"]``, ``input["rounds"]``);
    returns how many completed."""
    count, log, rounds = ctx.input["steps"], ctx.input["log"], ctx.input.get("rounds", 20_000)
    assert isinstance(count, int) and isinstance(log, str) and isinstance(rounds, int)
    outcomes = await asyncio.gather(
        *(ctx.step(f"s{i:04d}", "burn", {"log": log, "rounds": rounds}) for i in range(count))
    )
    return str(sum(outcome.ok for outcome in outcomes))


@agent("noop")
async def noop(ctx: AgentContext) -> str:
    """Ends at once."""
    return "nothing to do"


@agent("deep")
async def deep(ctx: AgentContext) -> str:
    """Spawn one child running this agent again, and so on down, until a level is refused."""
    try:
        await ctx.spawn("down", "one level deeper", agent=AgentSpec(name="deep"))
    except SpawnRefused as refused:
        return f"refused: {refused}"
    (outcome,) = await ctx.wait_children()
    return outcome.text


@agent("wide")
async def wide(ctx: AgentContext) -> str:
    """Spawn 33 children that end at once: the 33rd is refused."""
    for i in range(33):
        try:
            await ctx.spawn(f"k{i:02d}", "wide child", agent=AgentSpec(name="noop"))
        except SpawnRefused as refused:
            outcomes = await ctx.wait_children()
            return f"{len(outcomes)} children; refused: {refused}"
    return "never"


@agent("leave")
async def leave(ctx: AgentContext) -> str:
    """Spawn two recorded child tasks and end without waiting for them."""
    for key in ("a", "b"):
        await ctx.spawn(key, f"left {key}", mode="ignore")
    return "left"


@agent("release")
async def release(ctx: AgentContext) -> str:
    """The README's agent: a step, a question, two child tasks (recorded ones, ended from
    outside) and their outcomes."""
    await ctx.step("build", "echo", {"text": "built main"})
    count = await ctx.ask("replicas", "How many replicas?", {"type": "integer", "minimum": 1})
    for region in ("eu", "us"):
        await ctx.spawn(region, f"deploy {count} replicas to {region}", mode="collect")
    outcomes = await ctx.wait_children()
    return ", ".join(f"{o.key}: {o.status.value}" for o in outcomes)


@agent("ask_schema")
async def ask_schema(ctx: AgentContext) -> str:
    """One question whose JSON Schema is ``input["schema"]``; returns the answer as JSON."""
    schema = ctx.input["schema"]
    assert isinstance(schema, dict)
    return json.dumps(await ctx.ask("q", "Answer?", schema))


@agent("bad_spawns")
async def bad_spawns(ctx: AgentContext) -> str:
    """Spawn keys that break the rule (empty, a ``/``, 101 characters, a control character),
    then a good one; returns each refusal's message and the good child's end."""
    refusals = []
    for key in ("", "a/b", "k" * 101, "bell\x07"):
        try:
            await ctx.spawn(key, "never")
        except SpawnRefused as refused:
            refusals.append(str(refused))
    await ctx.spawn("good", "a recorded child", mode="collect")
    (outcome,) = await ctx.wait_children()
    return json.dumps({"refused": refusals, "good": [outcome.status.value, outcome.text]})


@agent("two_questions")
async def two_questions(ctx: AgentContext) -> str:
    """Waits ``input["before_s"]`` (a ``plain_wait`` step), asks ``q1`` (with
    ``input["timeout_s"]``: that long, then the answer ``"default"``), then ``q2``; returns
    both answers as a JSON list."""
    before = ctx.input.get("before_s")
    if isinstance(before, int | float):
        await ctx.step("before", "plain_wait", {"log": os.devnull, "seconds": before})
    timeout = ctx.input.get("timeout_s")
    if isinstance(timeout, int | float):
        first = await ctx.ask("q1", "First?", timeout=timedelta(seconds=timeout), default="default")
    else:
        first = await ctx.ask("q1", "First?")
    second = await ctx.ask("q2", "Second?")
    return json.dumps([first, second])


@agent("ask_then_fail")
async def ask_then_fail(ctx: AgentContext) -> str:
    """Asks ``q`` in the background, then fails while the request is open."""
    question = asyncio.create_task(ctx.ask("q", "Never answered?"))
    await asyncio.sleep(0)  # the request opens
    raise RuntimeError(f"failing on purpose with a question open ({question.done()})")


@agent("ask_loop")
async def ask_loop(ctx: AgentContext) -> str:
    """Asks ``input["questions"]`` questions (``q000`` ...), one after the other, each after
    a step of ``echo`` and a checkpoint (the step's activity grows the history by five
    events a question, so the run is suggested to continue as new however fast the answers
    came: answers kept early are taken without a workflow task of their own); keeps the
    answers in ``ctx.state`` and returns them as a JSON list."""
    count = ctx.input["questions"]
    assert isinstance(count, int)
    answers = ctx.state.setdefault("answers", [])
    assert isinstance(answers, list)
    while len(answers) < count:
        await ctx.step(f"before-q{len(answers):03d}", "echo", {"text": str(len(answers))})
        await ctx.checkpoint()
        answers.append(await ctx.ask(f"q{len(answers):03d}", f"Question {len(answers)}?"))
    return json.dumps(answers)


@agent("ask_while_stepping")
async def ask_while_stepping(ctx: AgentContext) -> str:
    """Runs the step ``slow`` (the ``gated`` tool) in the background while it asks ``go``;
    once answered, looks at the step and, if it completed, runs the step ``after``."""
    slow = asyncio.create_task(ctx.step("slow", "gated", {"path": str(ctx.input["gate"])}))
    await ctx.ask("go", "Go?")
    record = ctx.ledger.step("slow")
    seen = "nothing" if record is None else record.state.value
    after = "not run"
    if record is not None and record.state is StepState.COMPLETED:
        after = (await ctx.step("after", "echo", {"text": "ran"})).text
    await slow
    return f"saw {seen}; after: {after}"


@agent("spawn_taken")
async def spawn_taken(ctx: AgentContext) -> str:
    """Spawns ``c0`` (whose id a test took before) and ``c1``, then waits for them."""
    try:
        await ctx.spawn("c0", "taken", mode="collect")
    except SpawnRefused as refused:
        await ctx.emit(f"SpawnRefused: {refused}")
    await ctx.spawn("c1", "mine", mode="collect")
    outcomes = await ctx.wait_children()
    return ",".join(f"{o.key}={o.status.value}" for o in outcomes)


@agent("leave_many")
async def leave_many(ctx: AgentContext) -> str:
    """Emits ``input["notes"]`` notes, spawns ``input["children"]`` recorded child tasks
    (``k0`` ...) and ends without waiting for them."""
    notes, children = ctx.input["notes"], ctx.input["children"]
    assert isinstance(notes, int) and isinstance(children, int)
    for i in range(notes):
        await ctx.emit(f"note {i}")
    for i in range(children):
        await ctx.spawn(f"k{i}", f"left {i}", mode="ignore")
    return f"left {children}"


@agent("charge_once")
async def charge_once(ctx: AgentContext) -> str:
    """README-style agent code, memoized by step name, started over from the top after each
    continue-as-new: a charge (``charge_card``, not idempotent), then ``input["rounds"]``
    checkpointed echo steps; fails unless the charge completed."""
    log, seconds, rounds = ctx.input["log"], ctx.input["seconds"], ctx.input["rounds"]
    assert isinstance(rounds, int)
    charged = await ctx.step("charge", "charge_card", {"log": log, "seconds": seconds})
    for i in range(rounds):
        await ctx.checkpoint()
        await ctx.step(f"echo-{i:02d}", "echo", {"text": str(i)})
    if not charged.ok:
        raise RuntimeError(f"the charge is {charged.state.value}: {charged.text}")
    return "charged"


@agent("ask_spawn_model")
async def ask_spawn_model(ctx: AgentContext) -> str:
    """Asks a person, waits for a recorded child task, then asks the model; returns its
    answer (the model is shown the answer and the child's result)."""
    await ctx.ask("q", "Which region?")
    await ctx.spawn("c0", "deploy", mode="collect")
    await ctx.wait_children()
    return (await ctx.model_turn()).content


@agent("retry_unknown")
async def retry_unknown(ctx: AgentContext) -> str:
    """A step that times out (``unknown``), retried explicitly by the agent code under the same
    key; returns the step's final state and text."""
    args: dict[str, Any] = {"log": ctx.input["log"], "seconds": 3}
    outcome = await ctx.step("once", "slow_once", args)
    if outcome.state is StepState.UNKNOWN:
        outcome = await ctx.retry("once", "slow_once", args, reason="the tool dedupes by key")
    return f"{outcome.state.value}: {outcome.text}"


@agent("ticking_parent")
async def ticking_parent(ctx: AgentContext) -> str:
    """Spawn one child running ``ticks`` (with this task's input) and wait for it."""
    child = AgentSpec(name="ticks", tools=["sync_data"], input=ctx.input)
    await ctx.spawn("c", "tick", agent=child)
    (outcome,) = await ctx.wait_children()
    return outcome.text


@agent("ticks")
async def ticks(ctx: AgentContext) -> str:
    """``input["ticks"]`` steps of ``sync_data`` (``input["seconds"]`` each), one line each
    in ``input["log"]``."""
    count = ctx.input["ticks"]
    assert isinstance(count, int)
    args = {"log": ctx.input["log"], "seconds": ctx.input["seconds"]}
    for i in range(count):
        await ctx.step(f"tick-{i:02d}", "sync_data", args)
    return f"{count} ticks"


@agent("ask_two_at_once")
async def ask_two_at_once(ctx: AgentContext) -> str:
    """Asks ``a`` and ``b`` at once (two questions open together), returns both answers."""
    first, second = await asyncio.gather(ctx.ask("a", "A?"), ctx.ask("b", "B?"))
    return f"{first},{second}"
