"""Input requests and child tasks: what an agent asks a person, the answers that come back by signal
or update, and the child tasks it spawns (whose ends come back by signal).

Carried across continue-as-new (``TaskState.inputs``, ``TaskState.children``), so each is bounded by
a limit below (``test_carried_state_stays_within_the_payload_budget``).
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
"""Answers kept before the request they name is asked, one per request id (more are recorded as
rejected): as many as a task may ask, so answers sent ahead between runs are all kept."""
LEGACY_EARLY_ANSWERS = 16
"""``MAX_EARLY_ANSWERS`` of tasks recorded before the ``answers-bound-to-requests`` patch."""
MAX_EARLY_ANSWER_BYTES = 16_384
"""Bytes of JSON of the answers kept before their requests, together (they are carried)."""
MAX_INPUT_SCHEMA_BYTES = 16_384
"""Bytes of JSON of a task's open input requests (prompt and schema), together: they are carried."""
CHILD_RESULT_PREVIEW_CHARS = 100
"""Characters of a child's result kept in its parent's record; ``wait_children`` reads the whole
text from the ``child_result`` event."""
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
    """The form in which two people's names are compared (who accepted a call, who answers): NFKC
    case-folded (NFKC, fold, NFKC), format characters dropped (zero-width, soft hyphen, BOM), white
    space collapsed to single spaces and stripped. ``"ann"``, ``"Ann "`` and full-width ``"ANN"``
    are one person; names are kept as written, only comparisons use this form."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    kept = "".join(c for c in folded if unicodedata.category(c) != "Cf")
    return " ".join(kept.split())


class ApprovalAsk(BaseModel):
    """What an approval request asks about: one tool call, before it runs
    (``InputRequest.approval``). Its arguments are read from the ``call_seq`` event, not carried
    (they may be 32,000 characters)."""

    tool: str
    """The tool the call names."""
    step_name: StepName
    """The step that runs the call once approved."""
    call_seq: int
    """Seq of the ``tool_call`` event: its payload is the arguments (JSON text)."""
    call_id: str | None = None
    """The model's id of the call."""
    idempotency_key: str
    """The key the approved (or edited) call runs with: ``{workflow id}/{step}/{next attempt}``."""
    description: Annotated[StrictStr, Field(max_length=APPROVAL_DESCRIPTION_CHARS)] = ""
    """Markdown for the person (the tool's ``approval_description``, or its description)."""
    digest: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """SHA-256 hex of the exact call asked about (``workflows.agents.approvals.call_digest``); an
    answer naming another is refused ``approval_stale``. None in older requests."""
    approvers: int = Field(default=1, ge=1, exclude_if=lambda value: value == 1)
    """How many distinct people accept the call before it runs (the tool's ``approvers``)."""
    approved_by: list[ShortText] = Field(default_factory=list, exclude_if=lambda value: not value)
    """Who accepted it so far; none of them may accept again (``approver_repeated``)."""


ApprovalType = Literal["accept", "edit", "answer", "ignore"]
"""A person's choice about a call: run it, run it with edited arguments, answer in its place (the
tool's result for the model), or leave it (the model is told)."""


class ApprovalChoice(BaseModel):
    """The answer to an approval request (its JSON Schema: ``workflows.agents.approvals``)."""

    type: ApprovalType
    """What the person chose."""
    arguments: dict[str, JsonValue] | None = None
    """``edit``: the arguments the call runs with (checked against the tool's JSON Schema on
    arrival)."""
    text: StrictStr | None = None
    """``answer``: the tool's result for the model; ``ignore``: why it was not run (optional)."""
    digest: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The digest of the call the person was shown (``ApprovalAsk.digest``); another is refused
    ``approval_stale``."""


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
    """Set when the request asks a person to approve a tool call (answered by an
    ``ApprovalChoice``)."""


class InputAnswer(BaseModel):
    """An answer to an input request: the ``submit_input`` signal and the ``respond`` update."""

    answer: JsonValue
    """The answer (JSON), validated against the request's schema."""
    input_id: StepName | None = None
    """The request answered; None: the oldest one open on arrival (none open: rejected, never kept
    for a later request)."""
    agent_id: ShortText = "person"
    """Who answers."""
    request_id: StrictStr
    """Request id (1 to 64 characters): a repeat with the same id is ignored."""


class ChildRecord(BaseModel):
    """A child task the agent spawned, as its parent keeps it."""

    name: str
    """The child task's name (``{parent}/{spawn key}``)."""
    status: TaskStatus
    """``queued`` until its end comes back, then the child's final status. Temporal starts the
    child's workflow once the spawning workflow task completes, so a write just after it is listed
    can answer ``task_not_found``."""
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
    """The end of the child task ``name`` (workflow id ``workflow_id``) under the request id of the
    child's own ``child_ended`` signal, so the same end from several paths counts once."""
    return ChildEnd(
        child=name,
        status=status,
        result=result,
        error=error,
        request_id=internal_request_id(f"child-end/{workflow_id}"),
    )


class ChildEndsInput(BaseModel):
    """The ``child_ends`` activity's input: a resumed parent's children that had not reported an
    end."""

    project_id: str
    """The parent's project."""
    names: list[str]
    """The children's task names (at most ``MAX_CHILDREN``)."""


class ChildEnds(BaseModel):
    """The ``child_ends`` activity's result: the ends of the children that ended (running ones left
    out)."""

    ends: list[ChildEnd] = Field(default_factory=list)
    """Each as the child's own ``child_ended`` signal would say it."""
