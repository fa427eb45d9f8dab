"""``agent-tasks run``, ``cancel``, ``input``, ``approve``, ``resume``, ``continue`` and
``step retry``: agent tasks from the command line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_tasks.cli.common import (
    AgentOpt,
    ImportOpt,
    JsonOpt,
    ProjectOpt,
    RequestOpt,
    command_group,
    console,
    emit,
    import_modules,
    open_history,
    run,
    table,
    with_history,
    write_outcome,
)

if TYPE_CHECKING:
    from types import ModuleType

    from agent_tasks.activities.tools import Tool
    from agent_tasks.contract import AgentSpec, ApprovalType, StepView, TaskView

DEMO_TOOLS = ["list_files", "read_file", "search_text"]
"""The demo agent's tools (``activities.files``)."""


def demo_spec() -> AgentSpec:
    """The demo agent: the tool-calling loop with the ``files-demo`` scripted model over the
    read-only file tools."""
    from agent_tasks.contract import AgentSpec, ModelSpec

    return AgentSpec(tools=DEMO_TOOLS, model=ModelSpec(provider="scripted", model="files-demo"))


def module_tools(modules: list[ModuleType]) -> list[Tool]:
    """The tools (``activities.tools.tool``) defined at the top level of ``modules``."""
    from agent_tasks.activities.tools import Tool

    found: dict[str, Tool] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Tool):
                found.setdefault(value.spec.name, value)
    return list(found.values())


def served_tools(modules: Sequence[str] | None) -> list[Tool]:
    """Import ``modules`` (``--import``, as ``import_modules`` finds them: their agents
    register themselves) and return the tools they define (``module_tools``): what
    ``worker --import`` and ``serve --with-worker --import`` serve beside the demo's."""
    return module_tools(import_modules(modules))


# Long: one CLI command's flow: options, the agent spec, the run with an optional worker, the result
# and exit code
def run_command(
    agent: Annotated[
        str, typer.Argument(help="The agent to run: demo, or any agent registered by name.")
    ],
    goal: Annotated[str, typer.Argument(help='What to do, e.g. "Which files mention Neo4j?"')],
    name: Annotated[
        str | None,
        typer.Option(help="Task name (default: the agent, a dash, 8 hex digits: demo-1a2b3c4d)."),
    ] = None,
    input_json: Annotated[
        str | None,
        typer.Option("--input", help="The agent's input, a JSON object (ctx.input): '{\"q\": 1}'."),
    ] = None,
    tools: Annotated[
        list[str] | None,
        typer.Option("--tool", help="A tool the agent may call (repeat; default: those imported)."),
    ] = None,
    modules: ImportOpt = None,
    path: Annotated[
        Path | None,
        typer.Option(
            help="Run a worker in this process whose file tools read this folder (the demo)."
        ),
    ] = None,
    with_worker: Annotated[
        bool,
        typer.Option(
            "--with-worker",
            help="Run a worker in this process with the tools of the --import modules.",
        ),
    ] = False,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Run an agent task and wait for its end. The demo agent lists, searches and reads text
    files (on the worker: AGENT_TASKS_FILES_ROOT, or --path with a worker in this process) and
    answers. Any other agent is agent code registered by name (``@agent``): the worker polling
    TEMPORAL_TASK_QUEUE runs it, or, with --with-worker, a worker in this process with the
    --import modules' agents and tools. A worker in this process polls a task queue of its
    own, so a worker already polling TEMPORAL_TASK_QUEUE never takes its tasks. Each question
    or approval the task asks is printed as it is asked, with the command that answers it.
    Exit 1 when the task does not end done."""
    import asyncio
    import contextlib

    from pydantic import ValidationError

    from agent_tasks.activities.files import file_tools
    from agent_tasks.broker import open_broker
    from agent_tasks.cli.asking import print_questions
    from agent_tasks.cli.importer import all_steps
    from agent_tasks.config import Settings
    from agent_tasks.contract import AgentSpec
    from agent_tasks.worker import build_worker
    from agent_tasks.workflows.agents.registry import agent_function

    imported = import_modules(modules)
    try:
        given = json.loads(input_json) if input_json is not None else {}
    except ValueError as err:
        raise typer.BadParameter(
            f"{input_json!r} is not JSON: {err}", param_hint="--input"
        ) from err
    if not isinstance(given, dict):
        raise typer.BadParameter(f"{input_json!r} is not a JSON object", param_hint="--input")
    if agent == "demo":
        spec = demo_spec()
        local_tools = file_tools(path) if path is not None else None
    else:
        if path is not None:
            raise typer.BadParameter("--path is the demo's: its file tools", param_hint="--path")
        if (with_worker or imported) and agent_function(agent) is None:
            raise typer.BadParameter(
                f"agent {agent!r} is not registered: pass --import MODULE (the module that "
                "registers it with @agent)",
                param_hint="AGENT",
            )
        found = module_tools(imported)
        names = tools if tools is not None else [t.spec.name for t in found]
        try:
            spec = AgentSpec(name=agent, tools=names, input=given)
        except ValidationError as err:
            raise typer.BadParameter(str(err), param_hint="AGENT or --tool") from err
        local_tools = found if with_worker else None
    task = name or f"{agent}-{uuid.uuid4().hex[:8]}"
    private = None if local_tools is None else f"agent-tasks-cli-{uuid.uuid4().hex[:12]}"

    async def go() -> tuple[TaskView | None, list[StepView]]:
        async with (
            open_history(project, "cli", task_queue=private) as history,
            contextlib.AsyncExitStack() as stack,
        ):
            if local_tools is not None:
                assert history.graph is not None
                # the broker, so the page and the streams hear of this worker's events at once
                broker = await stack.enter_async_context(open_broker(Settings().broker_url))
                await stack.enter_async_context(
                    build_worker(
                        history.client,
                        history.graph,
                        history.task_queue,
                        tools=local_tools,
                        broker=broker,
                    )
                )
            created = await history.create_task(task, goal, agent=spec)
            if not created.recorded:
                write_outcome(created, as_json)
            if as_json:
                return await history.wait_task(task), await all_steps(history, task)
            console.print(f"task {task!r} started on task queue {history.task_queue!r}")
            asking = asyncio.create_task(print_questions(history, task, project))
            try:
                view = await history.wait_task(task)
            finally:
                asking.cancel()
            return view, await all_steps(history, task)

    view, steps = run(go())
    if as_json:
        emit({"view": view, "steps": steps}, True)
    elif view is not None:
        table(steps, ["step_name", "state", "attempt", "result_validity", "idempotency_key"])
        answer = view.result.text if view.result else view.error.text if view.error else ""
        console.print(f"task {task!r} in project {project!r}: {view.status.value}\n{answer}")
    if view is None or view.status.value != "done":
        raise typer.Exit(1)


def cancel_command(
    name: str,
    no_cascade: Annotated[
        bool, typer.Option("--no-cascade", help="Leave the spawned child tasks running.")
    ] = False,
    project: ProjectOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Cancel a task (a Temporal cancel request; the task ends cancelled, and so do the child
    tasks its agent spawned unless --no-cascade)."""

    result = with_history(
        project,
        "cli",
        lambda history: history.cancel_task(name, cascade=not no_cascade),
        with_graph=False,
    )
    write_outcome(result, as_json)


def input_command(
    name: str,
    answer: Annotated[str, typer.Option("--json", help="The answer, as JSON.")],
    input_id: Annotated[
        str | None, typer.Option(help="The request answered (default: the oldest open one).")
    ] = None,
    signal: Annotated[
        bool,
        typer.Option(
            "--signal",
            help="Send it by signal (fire and forget; an invalid answer is recorded as "
            "rejected) instead of by update (validated: refused, nothing recorded).",
        ),
    ] = False,
    request_id: RequestOpt = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    as_json: Annotated[bool, typer.Option("--json-output", help="Print JSON.")] = False,
) -> None:
    """Answer a task's input request (see its pending requests with `task show`)."""
    from agent_tasks.contract.waits import answer_error

    try:
        value = json.loads(answer)
    except ValueError as err:
        raise typer.BadParameter(f"not JSON: {err}", param_hint="--json") from err
    error = answer_error({}, value)
    if error is not None:
        raise typer.BadParameter(error, param_hint="--json")

    result = with_history(
        project,
        agent,
        lambda history: (history.submit_input if signal else history.respond)(
            name, value, input_id=input_id, request_id=request_id
        ),
        with_graph=False,
    )
    write_outcome(result, as_json)


def approve_command(
    name: str,
    input_id: Annotated[str, typer.Argument(help="The approval request (`task show` lists it).")],
    accept: Annotated[bool, typer.Option("--accept", help="Run the call as it is.")] = False,
    edit: Annotated[
        str | None, typer.Option("--edit", help="Run it with these arguments (a JSON object).")
    ] = None,
    answer: Annotated[
        str | None, typer.Option("--answer", help="Do not run it: this is its result.")
    ] = None,
    ignore: Annotated[bool, typer.Option("--ignore", help="Do not run it.")] = False,
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="With --ignore: why, for the model (its tool result)."),
    ] = None,
    digest: Annotated[
        str | None,
        typer.Option(
            "--digest",
            help="The digest of the call you read (`task show`: the request's approval.digest, "
            "12 characters or more): refused approval_stale if the request asks about another "
            "call. Left out: the call the request asks about now.",
        ),
    ] = None,
    request_id: RequestOpt = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    as_json: Annotated[bool, typer.Option("--json-output", help="Print JSON.")] = False,
) -> None:
    """Answer a tool call's approval request with one of --accept, --edit, --answer, --ignore
    (recorded as a decision by --agent; --ignore --reason TEXT: the model reads that a person
    ignored the call and TEXT; --digest: the call you read, refused approval_stale when the
    request asks about another); refused with the reason (an edit's arguments are checked
    against the tool's argument model, a second accept by the same --agent of a call that
    needs several approvers is approver_repeated)."""
    chosen = [c for c, on in [("accept", accept), ("edit", edit is not None),
              ("answer", answer is not None), ("ignore", ignore)] if on]  # fmt: skip
    if len(chosen) != 1:
        raise typer.BadParameter("give one of --accept, --edit, --answer, --ignore")
    if reason is not None and not ignore:
        raise typer.BadParameter("a reason goes with --ignore", param_hint="--reason")
    if reason is not None and not reason.strip():
        raise typer.BadParameter("an empty reason: leave --reason out", param_hint="--reason")
    arguments = None if edit is None else _edited_arguments(edit)
    choice: ApprovalType = chosen[0]  # type: ignore[assignment]

    result = with_history(
        project,
        agent,
        lambda history: history.approve(
            name,
            input_id,
            choice,
            arguments=arguments,
            text=answer if reason is None else reason,
            digest=digest,
            request_id=request_id,
        ),
        with_graph=False,
    )
    write_outcome(result, as_json)


def _edited_arguments(edit: str) -> dict[str, Any]:
    """``--edit``'s arguments: a JSON object, else ``typer.BadParameter``."""
    try:
        arguments = json.loads(edit)
    except ValueError as err:
        raise typer.BadParameter(f"not JSON: {err}", param_hint="--edit") from err
    if not isinstance(arguments, dict):
        raise typer.BadParameter("a JSON object of arguments", param_hint="--edit")
    return arguments


def resume_command(name: str, project: ProjectOpt = "default", as_json: JsonOpt = False) -> None:
    """Replay a failed or cancelled agent task's turn in a new run (completed steps keep their
    results, unknown ones stay unknown); refused (no_resumable_turn) for a turn interrupted
    after its tools ran: continue that one."""

    result = with_history(
        project, "cli", lambda history: history.resume_task(name), with_graph=False
    )
    write_outcome(result, as_json)


def continue_command(name: str, project: ProjectOpt = "default", as_json: JsonOpt = False) -> None:
    """Continue a cancelled agent task's interrupted turn in a new run: the model is asked
    again with what the turn committed (no interrupted call runs again); refused
    (no_interrupted_turn) when there is none."""

    result = with_history(
        project, "cli", lambda history: history.continue_task(name), with_graph=False
    )
    write_outcome(result, as_json)


def branch_command(
    source: str,
    seq: Annotated[int, typer.Argument(help="The last event of SOURCE the branch copies.")],
    name: Annotated[str, typer.Option(help="The branch's task name.")],
    task_queue: Annotated[
        str | None,
        typer.Option(help="The task queue the branch runs on (default: SOURCE's)."),
    ] = None,
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a new task from a point of SOURCE's log: its events 1 to SEQ copied (sealed text
    under new keys), linked in Neo4j by BRANCHED_FROM; an agent task's branch goes on from
    there, on SOURCE's task queue unless --task-queue names another. SOURCE is untouched."""
    if task_queue is not None and not task_queue.strip():
        raise typer.BadParameter("an empty task queue: leave it out", param_hint="--task-queue")

    result = with_history(
        project,
        agent,
        lambda history: history.branch_from(
            source, seq, name, request_id=request_id, task_queue=task_queue
        ),
    )
    write_outcome(result, as_json)


step_app = command_group("Steps of agent tasks.")


@step_app.command("retry")
def step_retry_command(
    name: str,
    step: str,
    reason: Annotated[str, typer.Option(help="Why it runs again (the decision's text).")],
    project: ProjectOpt = "default",
    agent: AgentOpt = "cli",
    request_id: RequestOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run an agent task's unknown or failed step again when its agent code reaches it (an
    unknown one under its old idempotency key), recorded as a decision by --agent; a failed or
    cancelled task is run again for it."""

    result = with_history(
        project,
        agent,
        lambda history: history.retry_step(name, step, reason=reason, request_id=request_id),
    )
    write_outcome(result, as_json)
