"""Input requests and child tasks: what an agent asks a person, the answers that come back by
signal or update, and the child tasks it spawns (whose ends come back by signal).

Carried across continue-as-new (``TaskState.inputs`` and ``TaskState.children``), bounded:
at most ``MAX_PENDING_INPUTS`` open requests and ``MAX_INPUT_SCHEMA_BYTES`` of them,
``MAX_INPUTS_PER_TASK`` requests in all, ``MAX_EARLY_ANSWERS`` answers kept before their request
and ``MAX_EARLY_ANSWER_BYTES`` of them, ``MAX_CHILDREN`` children a task with a result preview of
``CHILD_RESULT_PREVIEW_CHARS`` each (``test_carried_state_stays_within_the_payload_budget``).
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, Field, JsonValue, StrictStr

from agent_tasks.contract.kinds import TaskStatus
from agent_tasks.contract.text import BoundedText, ShortText, StepName, internal_request_id

MAX_PENDING_INPUTS = 16
"""Input requests a task may have open at once."""
MAX_INPUTS_PER_TASK = 100
"""Input requests one task may ask in all (each answered one is carried: its id and seq)."""
MAX_EARLY_ANSWERS = 100
"""Answers kept before the request they name is asked, one per request id (more are recorded
as rejected): as many as a task may ask questions (``MAX_INPUTS_PER_TASK``), so answers sent
ahead at any rate are all kept while the agent has not asked yet (between runs, say)."""
LEGACY_EARLY_ANSWERS = 16
"""``MAX_EARLY_ANSWERS`` of tasks recorded before answers were bound to requests (the
``answers-bound-to-requests`` patch); their histories replay with it."""
MAX_EARLY_ANSWER_BYTES = 16_384
"""Bytes of JSON of the answers kept before their requests, together (they are carried)."""
MAX_INPUT_SCHEMA_BYTES = 16_384
"""Bytes of JSON of a task's open input requests (prompt and schema), together (they are
carried while open)."""
CHILD_RESULT_PREVIEW_CHARS = 100
"""Characters of a child's result kept in its parent's record (the view); the agent's
``wait_children`` reads the whole text from the ``child_result`` event."""
MAX_CHILDREN = 32
"""Child tasks one task may spawn."""
MAX_DEPTH = 5
"""Levels of child tasks below a root task (a root is at depth 0)."""
CHILD_ENDS_ACTIVITY = "child_ends"
"""Activity name of a resumed parent's look at its children's real states (``ChildEnds``)."""

FailureMode = Literal["propagate", "collect", "ignore"]
"""What a child's failure does to the wait for it: ``propagate`` raises ``ChildFailed`` in the
parent's agent, ``collect`` returns it as a value, ``ignore`` leaves it out."""


APPROVAL_DESCRIPTION_CHARS = 4_000
"""Characters of an approval request's Markdown description (longer ones are cut)."""


def person_key(name: str) -> str:
    """The form in which two names of people are compared (who accepted a call, who answers):
    Unicode NFKC with case folded (Unicode's NFKC_Casefold recipe: NFKC, fold, NFKC again),
    format characters dropped (zero-width spaces and joiners, the soft hyphen, a byte order
    mark), each run of white space one space, none around. So ``"ann"``, ``"Ann "``, ``"ANN"``
    in full-width letters and ``"an\u200bn"`` name one person; ``"ann"`` and ``"anna"`` two.
    Names are kept as written; only comparisons use this form."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    kept = "".join(c for c in folded if unicodedata.category(c) != "Cf")
    return " ".join(kept.split())


class ApprovalAsk(BaseModel):
    """What an approval request asks about: one tool call, before it runs
    (``InputRequest.approval``). The arguments are the call event's (``call_seq``), read from
    the task: they are not carried (a call's arguments may be 32,000 characters)."""

    tool: str
    """The tool the call names."""
    step_name: StepName
    """The step that runs the call once approved."""
    call_seq: int
    """Seq of the ``tool_call`` event: its payload is the arguments (JSON text)."""
    call_id: str | None = None
    """The model's id of the call."""
    idempotency_key: str
    """The key the approved call runs with (``{workflow id}/{step}/{attempt}``: the step's
    next attempt); an edited call runs with it too."""
    description: Annotated[StrictStr, Field(max_length=APPROVAL_DESCRIPTION_CHARS)] = ""
    """Markdown for the person (the tool's ``approval_description``, or its description)."""
    digest: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """SHA-256 hex of the exact call asked about (``workflows.agents.approvals.call_digest``:
    the tool, the arguments and the key as canonical JSON): an answer that names another is
    refused ``approval_stale``. None in requests asked before it (added later)."""
    approvers: int = Field(default=1, ge=1, exclude_if=lambda value: value == 1)
    """How many distinct people accept the call before it runs (the tool's ``approvers``)."""
    approved_by: list[ShortText] = Field(default_factory=list, exclude_if=lambda value: not value)
    """Who accepted it so far (the authors of earlier requests' accepts): none of them may
    accept again (``approver_repeated``)."""


ApprovalType = Literal["accept", "edit", "answer", "ignore"]
"""A person's choice about a call: run it as it is, run it with edited arguments, answer in
its place (the answer is the tool's result for the model), or leave it (the model is told)."""


class ApprovalChoice(BaseModel):
    """The answer to an approval request (its JSON Schema: ``workflows.agents.approvals``)."""

    type: ApprovalType
    """What the person chose."""
    arguments: dict[str, JsonValue] | None = None
    """``edit``: the arguments the call runs with (checked against the tool's argument
    model's JSON Schema when the answer arrives)."""
    text: StrictStr | None = None
    """``answer``: the tool's result for the model; ``ignore``: why it was not run (optional,
    for the model)."""
    digest: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The digest of the call the person was shown (``ApprovalAsk.digest``): the task refuses
    the answer (``approval_stale``) when it is not the request's."""


class InputRequest(BaseModel):
    """An open request for a person's input."""

    input_id: StepName
    """The request's name, unique in the task (the agent code's ``ask`` names it)."""
    prompt: Annotated[StrictStr, Field(max_length=4_000)]
    """What is asked."""
    json_schema: dict[str, JsonValue] = Field(default_factory=dict)
    """JSON Schema the answer must satisfy (empty: any JSON value)."""
    deadline: AwareDatetime | None = None
    """When the agent stops waiting (workflow time); None: never."""
    asked_seq: int
    """Seq of the ``input_request`` event."""
    approval: ApprovalAsk | None = Field(default=None, exclude_if=lambda value: value is None)
    """Set when the request asks a person to approve a tool call (``ApprovalChoice`` is its
    answer). Added later."""


class InputAnswer(BaseModel):
    """An answer to an input request: the ``submit_input`` signal and the ``respond`` update."""

    answer: JsonValue
    """The answer (JSON), validated against the request's schema."""
    input_id: StepName | None = None
    """The request answered; None: the oldest request open when the answer arrives (with
    none open it is rejected: it is never kept for a request asked later)."""
    agent_id: ShortText = "person"
    """Who answers."""
    request_id: StrictStr
    """Request id (1 to 64 characters): a repeat with the same id is ignored."""


class ChildRecord(BaseModel):
    """A child task the agent spawned, as its parent keeps it."""

    name: str
    """The child task's name (``{parent}/{spawn key}``)."""
    status: TaskStatus
    """``queued`` until its end comes back, then the child's final status. The parent lists
    the child from the workflow task that spawned it; Temporal starts the child's workflow
    once that task completes, so a write to the child just after it is listed can answer
    ``task_not_found`` (read the child's own view to know it started)."""
    mode: FailureMode = "propagate"
    """What a failure of the child does to a wait for it."""
    result: str = ""
    """The start of the child's result or error text, once it ended (at most
    ``CHILD_RESULT_PREVIEW_CHARS``)."""
    result_seq: int | None = None
    """Seq of the parent's ``child_result`` event for it."""


class ChildEnd(BaseModel):
    """The ``child_ended`` signal a child task sends its parent when it ends."""

    child: str
    """The child task's name."""
    status: TaskStatus
    """Its final status."""
    result: BoundedText | None = None
    """Its result text."""
    error: BoundedText | None = None
    """Its error text."""
    request_id: StrictStr
    """``internal_request_id("child-end/{the child's workflow id}")``: a repeat is ignored."""


def child_end(
    name: str,
    workflow_id: str,
    status: TaskStatus,
    result: BoundedText | None = None,
    error: BoundedText | None = None,
) -> ChildEnd:
    """The end of the child task ``name`` (workflow id ``workflow_id``) as its parent records
    it, under the request id the child's own ``child_ended`` signal carries
    (``child-end/{workflow id}``), so the same end from several paths (the child's signal, a
    resumed parent's look, a deletion) counts once."""
    return ChildEnd(
        child=name,
        status=status,
        result=result,
        error=error,
        request_id=internal_request_id(f"child-end/{workflow_id}"),
    )


class ChildEndsInput(BaseModel):
    """The ``child_ends`` activity's input: the children of a resumed parent that had not
    reported an end."""

    project_id: str
    """The parent's project."""
    names: list[str]
    """The children's task names (at most ``MAX_CHILDREN``)."""


class ChildEnds(BaseModel):
    """The ``child_ends`` activity's result: the ends of the children that have ended (one
    still running is left out)."""

    ends: list[ChildEnd] = Field(default_factory=list)
    """Each as the child's own ``child_ended`` signal would say it."""
