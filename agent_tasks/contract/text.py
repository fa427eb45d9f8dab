"""Pure text rules of the task model: names and ids, cleaning and bounding text, digests.

The workflow and the client both use these, so both validate, bound and hash text the same way; they
run in validators on replay too, so a change here changes what a replay computes
(``docs/replay-and-upgrades.md``).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, StrictStr

from agent_tasks.contract.limits import MAX_PAYLOAD_CHARS

_PROJECT_ID = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Name = Annotated[StrictStr, Field(min_length=1, max_length=200)]
"""A task name: 1 to 200 characters, no control characters (checked by ``check_name``)."""
StepName = Annotated[
    StrictStr, Field(min_length=1, max_length=100, pattern=r"^[^/\x00-\x1f\x7f-\x9f]+$")
]
"""A step name: 1 to 100 characters, no ``/`` and no control characters, so the idempotency key
``{workflow_id}/{step_name}/{attempt}`` reads back one way."""
ShortText = Annotated[StrictStr, Field(min_length=1, max_length=128)]
"""An agent id, session id, tool name or call id: 1 to 128 characters."""
ProjectId = Annotated[StrictStr, Field(pattern=_PROJECT_ID)]
"""1 to 64 characters of ``[A-Za-z0-9_.-]``, starting with a letter or digit (never ``/``)."""


def check_name(value: str, field: str) -> str:
    """Return ``value`` if it has no control character, else raise ``ValueError`` naming
    ``field``."""
    if _CONTROL.search(value):
        raise ValueError(f"{field} must not contain control characters")
    return value


TaskName = Annotated[Name, AfterValidator(lambda value: check_name(value, "a task name"))]
"""A task name wherever an app gives one: a ``Name`` (valid Unicode, 1 to 200 characters) without
control characters (``check_name``)."""


MAX_WORKFLOW_ID = 255
"""The longest workflow id a task gets (characters): SQL persistence keeps workflow ids in
``VARCHAR(255)`` columns, and a plain id can reach 276."""

_ID_DIGEST_CHARS = 16
"""Hex characters of the name's SHA-256 in a bounded workflow id (64 bits)."""


def task_workflow_id(project_id: str, name: str, *, bounded: bool = True) -> str:
    """The workflow id of a task: ``agent-task/{project_id}/{name}``.

    Over ``MAX_WORKFLOW_ID`` characters (with ``bounded``) the name is cut so the id is exactly that
    long: ``agent-task/{project_id}/{name[:k]}~{d}``, ``d`` the first 16 hex of the name's SHA-256.
    ``bounded=False`` gives the plain form, as workflows recorded before the bound computed it
    (``workflows.spawning.task_id``). Collision-free up to the 64-bit digest, since a project id
    never contains ``/``; the view carries the name, which a bounded id loses.
    """
    plain = f"agent-task/{project_id}/{name}"
    if not bounded or len(plain) <= MAX_WORKFLOW_ID:
        return plain
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_ID_DIGEST_CHARS]
    keep = MAX_WORKFLOW_ID - len(plain) + len(name) - 1 - _ID_DIGEST_CHARS
    return f"agent-task/{project_id}/{name[:keep]}~{digest}"


def project_of(workflow_id: str) -> str:
    """The project id in a task's workflow id (``task_workflow_id``'s inverse)."""
    return workflow_id.split("/", 2)[1]


EVENT_ID_NAMESPACE = uuid.UUID("e946b89d-87cc-466d-88ba-1bb8a242992c")
"""The UUID namespace of event ids (``event_id``); fixed for ever, since ids are stored."""


def event_id(workflow_id: str, seq: int) -> str:
    """The id of event ``seq`` of task ``workflow_id``: the UUID5 of ``"{workflow_id}#{seq}"`` in
    ``EVENT_ID_NAMESPACE``. Derived, so it is the same in every read, run and graph store rebuild.
    """
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{workflow_id}#{seq}"))


def valid_step_name(name: object) -> bool:
    """True for a ``str`` that is a ``StepName``; also the rule of a spawn key."""
    return (
        isinstance(name, str)
        and 1 <= len(name) <= 100
        and "/" not in name
        and not _CONTROL.search(name)
        and clean_text(name) == name
    )


def valid_request_id(request_id: object) -> bool:
    """True for a ``str`` of 1 to 64 characters that encodes to UTF-8 (``invalid_request_id``)."""
    return (
        isinstance(request_id, str)
        and 1 <= len(request_id) <= 64
        and clean_text(request_id) == request_id
    )


def clean_text(text: str) -> str:
    """Return ``text`` as valid Unicode that encodes to UTF-8: a surrogate pair written as two code
    points is joined, every lone surrogate becomes U+FFFD; lengths and hashes are of the result.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def sha256_hex(text: str) -> str:
    """SHA-256 (lower-case hex, 64 characters) of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_SEALING_FIELDS = ("sealed", "key_id")
"""Fields of an event input left out of its digest: a retried seal draws a new key; the text's
length and SHA-256, in the digest, identify it."""


def args_digest(model: BaseModel) -> str:
    """A 12-hex (48-bit) digest of a write's arguments as canonical JSON, ``request_id`` and
    ``_SEALING_FIELDS`` excluded: two writes with one request id are the same when these match.
    """
    data = model.model_dump(mode="json", exclude={"request_id"})
    for event in data.get("events", ()):
        for field in _SEALING_FIELDS:
            event.pop(field, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def request_key(request_id: str) -> str:
    """The key a request id is remembered under: 16 hex (64 bits) of its SHA-256, so the window's
    size does not depend on the ids' length."""
    return sha256_hex(request_id)[:16]


def model_size(model: BaseModel) -> int:
    """Bytes of ``model`` as JSON, the size it has as a Temporal payload."""
    return len(model.__pydantic_serializer__.to_json(model))


class BoundedText(BaseModel):
    """Text bounded to ``MAX_PAYLOAD_CHARS``, with the length and hash of the full text."""

    model_config = ConfigDict(frozen=True)

    text: str
    """The text, cut to at most ``MAX_PAYLOAD_CHARS`` characters."""
    full_length: int
    """Length of the full (cleaned) text in characters (code points)."""
    full_sha256: str
    """SHA-256 hex of the full (cleaned) text as UTF-8."""

    @property
    def truncated(self) -> bool:
        """True when ``text`` is shorter than the full text."""
        return self.full_length > len(self.text)


def bound_text(text: str) -> BoundedText:
    """Clean ``text`` (``clean_text``) and cut it to ``MAX_PAYLOAD_CHARS`` code points, with the
    full text's length and SHA-256.
    """
    full = clean_text(text)
    return BoundedText(
        text=full[:MAX_PAYLOAD_CHARS], full_length=len(full), full_sha256=sha256_hex(full)
    )


def json_within(head: Mapping[str, JsonValue], field: str, text: str) -> str:
    """``head`` with ``field: text`` as JSON of at most ``MAX_PAYLOAD_CHARS`` characters, ``text``
    cut to its longest fitting start, so the payload stays JSON that parses."""

    def payload(n: int) -> str:
        return json.dumps({**head, field: text[:n]}, ensure_ascii=False)

    if len(whole := payload(len(text))) <= MAX_PAYLOAD_CHARS:
        return whole
    low, high = 0, min(len(text), MAX_PAYLOAD_CHARS)  # payload(low) fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if len(payload(middle)) <= MAX_PAYLOAD_CHARS else (low, middle)
    return payload(low)


def internal_request_id(key: str) -> str:
    """The request id of a write the workflow makes itself: ``wf-`` and 40 hex of
    SHA-256(``key``)."""
    return "wf-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
