"""Tools that need a person's approval, and the scripted model that calls them, for the
approval tests (workflow, CLI, HTTP API, the page) and the inbox benchmark. Each tool writes
its effect to the file named in its arguments (``{idempotency key} {what}`` a line), so a test
sees from outside what ran, under which key, with which arguments."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agent_tasks.activities.model import Script
from agent_tasks.activities.tools import Tool, ToolContext, tool
from agent_tasks.activities.transcript import chat_messages
from agent_tasks.contract import AgentSpec, ModelSpec, ModelTurn
from agent_tasks.workflows.agents import AgentContext, agent
from tests.agent_tools import answer, calls


class Mail(BaseModel):
    """Arguments of ``send_mail``."""

    log: str
    """File that gets a line per run."""
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    """An address."""
    subject: str = Field(min_length=1, max_length=80)
    copies: int = Field(default=1, ge=1, le=5)


def _effect(log: str, context: ToolContext, what: str) -> None:
    with Path(log).open("a", encoding="utf-8") as file:
        file.write(f"{context.idempotency_key} {what}\n")


def mail_description(args: Mail) -> str:
    """The Markdown a person reads about a mail."""
    copies = "1 copy" if args.copies == 1 else f"{args.copies} copies"
    return f"Sends **{args.subject}** to `{args.to}` ({copies})."


@tool(
    "send_mail",
    arguments=Mail,
    idempotent=False,
    description="Send a mail.",
    approval=True,
    approval_description=mail_description,
)
async def send_mail(args: Mail, context: ToolContext) -> str:
    """Always asks first."""
    _effect(args.log, context, f"mail {args.to} {args.subject} x{args.copies}")
    return f"sent {args.subject!r} to {args.to}"


class Payment(BaseModel):
    """Arguments of ``pay``."""

    log: str
    amount: int = Field(ge=1)


@tool(
    "pay",
    arguments=Payment,
    idempotent=False,
    description="Pay an amount.",
    approval=lambda args: args.amount > 100,
)
async def pay(args: Payment, context: ToolContext) -> str:
    """Asks first when the amount is over 100 (a predicate on the arguments)."""
    _effect(args.log, context, f"pay {args.amount}")
    return f"paid {args.amount}"


def _broken(args: Payment) -> bool:
    raise RuntimeError("the predicate is broken")


@tool("pay_broken", arguments=Payment, idempotent=False, approval=_broken)
async def pay_broken(args: Payment, context: ToolContext) -> str:
    """Its predicate raises: its calls never run."""
    _effect(args.log, context, f"pay {args.amount}")
    return "never"


@tool(
    "wire",
    arguments=Payment,
    idempotent=False,
    description="Wire an amount.",
    approval=True,
    approvers=2,
    approval_expires_after=timedelta(hours=1),
)
async def wire(args: Payment, context: ToolContext) -> str:
    """Runs once two distinct people accepted it, within an hour."""
    _effect(args.log, context, f"wire {args.amount}")
    return f"wired {args.amount}"


@tool(
    "page_oncall",
    arguments=Mail,
    idempotent=False,
    description="Page the on-call person.",
    approval=True,
    approval_expires_after=timedelta(seconds=2),
)
async def page_oncall(args: Mail, context: ToolContext) -> str:
    """Asks first; the request expires after 2 s."""
    _effect(args.log, context, f"page {args.to}")
    return f"paged {args.to}"


@tool(
    "deploy",
    arguments=Mail,
    idempotent=False,
    description="Deploy.",
    approval=True,
    approvers=2,
    approval_expires_after=timedelta(seconds=3),
)
async def deploy(args: Mail, context: ToolContext) -> str:
    """Needs two approvers within 3 s."""
    _effect(args.log, context, f"deploy {args.subject}")
    return f"deployed {args.subject}"


class Host(BaseModel):
    """Arguments of ``reboot``."""

    log: str
    host: str = Field(min_length=1, max_length=80)


@tool(
    "reboot",
    arguments=Host,
    idempotent=False,
    description="Reboot a host.",
    approval=True,
    approval_expires_after=timedelta(seconds=10),
)
async def reboot(args: Host, context: ToolContext) -> str:
    """Asks first; the request expires after 10 s (long enough for a test to stop its worker
    before the deadline)."""
    _effect(args.log, context, f"reboot {args.host}")
    return f"rebooted {args.host}"


APPROVAL_TOOLS: list[Tool] = [send_mail, pay, pay_broken, wire, page_oncall, deploy, reboot]


def call_then_report(transcript: Any) -> ModelTurn:
    """The scripted model ``call-then-report``: the goal is JSON ``{"calls": [[tool,
    arguments], ...]}``; its first turn makes those calls, the next one answers with every
    tool result it was shown (``the tools said: ...``)."""
    results = [e.payload for e in transcript if e.kind.value == "tool_result"]
    if results:
        return answer("the tools said: " + " | ".join(results))
    goal = next(e.payload for e in transcript if e.kind.value == "message" and e.role)
    return calls(*[(name, arguments) for name, arguments in json.loads(goal)["calls"]])


def call_then_show(transcript: Any) -> ModelTurn:
    """The scripted model ``call-then-show``: as ``call-then-report``, but its answer is the
    chat messages an API model is shown (``activities.transcript.chat_messages``), as JSON."""
    if any(e.kind.value == "tool_result" for e in transcript):
        return answer(json.dumps(chat_messages(transcript, None)))
    return call_then_report(transcript)


APPROVAL_SCRIPTS: dict[str, Script] = {
    "call-then-report": call_then_report,
    "call-then-show": call_then_show,
}


def approval_spec(model: str = "call-then-report") -> AgentSpec:
    """The tool-calling loop over these tools with the scripted ``model``."""
    return AgentSpec(
        tools=[t.spec.name for t in APPROVAL_TOOLS],
        model=ModelSpec(provider="scripted", model=model),
    )


def goal(*calls: tuple[str, dict[str, Any]]) -> str:
    """A goal for ``call-then-report``."""
    return json.dumps({"calls": [[name, arguments] for name, arguments in calls]})


def effects(log: Path) -> list[str]:
    """The lines the tools wrote to ``log`` (none when it does not exist)."""
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@agent("wire_once")
async def wire_once(ctx: AgentContext) -> str:
    """Agent code: one step ``wire`` of the tool ``wire`` with ``input["args"]`` (memoized by
    name, so after a continue-as-new it waits on the same approval request); returns the
    step's state and text."""
    args = ctx.input["args"]
    assert isinstance(args, dict)
    outcome = await ctx.step("wire", "wire", args)
    return f"{outcome.state.value}: {outcome.text}"


@agent("mail_once")
async def mail_once(ctx: AgentContext) -> str:
    """Agent code: one step ``mail`` of the tool ``send_mail`` (asked about first) with
    ``input["args"]``; returns the step's state and text."""
    args = ctx.input["args"]
    assert isinstance(args, dict)
    outcome = await ctx.step("mail", "send_mail", args)
    return f"{outcome.state.value}: {outcome.text}"
