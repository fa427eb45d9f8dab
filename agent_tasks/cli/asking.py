"""What a task asks a person, as a terminal shows it: each open question or approval request
with the command that answers it (``agent-tasks run`` prints them as they are asked)."""

from __future__ import annotations

import asyncio
import json
import shlex

from agent_tasks.cli.common import console, invoked_as
from agent_tasks.contract import InputRequest
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.starter.lifecycle import STATUS_POLL_S


def answer_command(task: str, request: InputRequest, project: str) -> str:
    """The command that answers ``request`` of ``task`` in ``project``, as the CLI was invoked
    (``invoked_as``: ``agent-tasks``, ``./run`` in a checkout): ``input ... --json VALUE`` for a
    question, ``approve ... --accept --digest D`` (or ``--edit``, ``--answer``, ``--ignore``)
    for an approval, bound to the call shown by the first 12 characters of its digest; names
    are shell-quoted so the line can be copied as is."""
    command = invoked_as()
    where = f"--project {shlex.quote(project)}"
    if request.approval is not None:
        digest = request.approval.digest  # the call shown: another is refused approval_stale
        bound = f" --digest {digest[:12]}" if digest else ""
        return (
            f"{command} approve {shlex.quote(task)} {shlex.quote(request.input_id)} "
            f"--accept{bound} {where}   (or --edit JSON, --answer TEXT, --ignore)"
        )
    return (
        f"{command} input {shlex.quote(task)} --input-id {shlex.quote(request.input_id)} "
        f"--json VALUE {where}"
    )


def describe(task: str, request: InputRequest, project: str) -> str:
    """The lines a terminal shows for one open request: what is asked (the prompt and the
    answer's JSON Schema, or the tool call to approve) and ``answer_command``."""
    if request.approval is not None:
        call = request.approval
        what = call.description or f"the call of seq {call.call_seq}"
        asked = f"approval {request.input_id!r}: may it call {call.tool}? {what}"
    else:
        asked = f"question {request.input_id!r}: {request.prompt}"
        if request.json_schema:
            asked += f"\n  the answer's JSON Schema: {json.dumps(request.json_schema)}"
    return f"{asked}\n  answer: {answer_command(task, request, project)}"


async def print_questions(history: ConversationHistory, task: str, project: str) -> None:
    """Print each request ``task`` opens, once, as it is asked (its view read every
    ``STATUS_POLL_S`` seconds); runs until cancelled."""
    shown: set[str] = set()
    while True:
        view = (await history.get_task(task)).view
        for request in view.pending_inputs if view is not None else []:
            if request.input_id not in shown:
                shown.add(request.input_id)
                console.print(describe(task, request, project), markup=False, soft_wrap=True)
        await asyncio.sleep(STATUS_POLL_S)
