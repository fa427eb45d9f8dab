"""The published faces are written as methods: ``inspect.signature`` and ``help()`` read each
one, with the names and parameters that the ledger guide's and the Tasks page's code call
(the call forms below are theirs: ``tests/starter/test_guide.py`` runs the guide's code)."""

from __future__ import annotations

import inspect
import pydoc

import pytest

from agent_tasks.starter import ConversationHistory, HistoryRetention
from agent_tasks.starter.tasks import TaskEmitter, TaskManager

GUIDE_CALLS: dict[str, tuple[int, set[str]]] = {
    "create_task": (2, {"request_id"}),
    "record_event": (2, {"role", "payload", "name", "request_id"}),
    "set_step": (3, {"kind", "result_event_seq", "request_id"}),
    "get_task": (1, set()),
    "list_events": (1, {"after_seq", "limit"}),
    "list_steps": (2, {"limit"}),
}
"""``ConversationHistory`` in the ledger guide: method -> (positional arguments, keywords)."""

RETENTION_CALLS: dict[str, tuple[int, set[str]]] = {
    "redact_event": (1, set()),
    "delete_task": (1, {"include_decisions"}),
}
"""``HistoryRetention`` in the ledger guide."""

TASKS_PAGE_CALLS: dict[type, dict[str, tuple[int, set[str]]]] = {
    TaskManager: {
        "create_task": (0, {"session_id"}),
        "update": (1, {"status", "message", "update_type", "result", "error"}),
        "update_status": (2, set()),
        "add_update": (2, set()),
        "set_result": (2, set()),
        "set_error": (2, set()),
        "get_task": (1, set()),
        "list_tasks": (0, {"status", "session_id"}),
        "delete_task": (1, set()),
    },
    TaskEmitter: {
        "emit": (1, {"metadata"}),
        "emit_nowait": (1, set()),
        "emit_token": (1, set()),
    },
}
"""The Tasks page's ``TaskManager`` and ``TaskEmitter``."""


def takes(face: type, name: str, positional: int, keywords: set[str]) -> None:
    """``face.name`` is a method whose signature binds ``positional`` arguments and
    ``keywords``, as the published code calls it."""
    method = inspect.getattr_static(face, name)
    assert inspect.isfunction(method), f"{face.__name__}.{name} is not a method"
    assert method.__doc__ and method.__doc__.strip(), f"{face.__name__}.{name} has no docstring"
    signature = inspect.signature(method)
    args = [object()] * (positional + 1)  # self first
    signature.bind_partial(*args, **dict.fromkeys(keywords))


@pytest.mark.parametrize(("name", "call"), GUIDE_CALLS.items())
def test_conversation_history_takes_the_guides_calls(name: str, call: tuple[int, set[str]]) -> None:
    takes(ConversationHistory, name, *call)


@pytest.mark.parametrize(("name", "call"), RETENTION_CALLS.items())
def test_history_retention_takes_the_guides_calls(name: str, call: tuple[int, set[str]]) -> None:
    takes(HistoryRetention, name, *call)


@pytest.mark.parametrize(
    ("face", "name", "call"),
    [
        (face, name, call)
        for face, calls in TASKS_PAGE_CALLS.items()
        for name, call in calls.items()
    ],
)
def test_the_tasks_api_takes_the_pages_calls(
    face: type, name: str, call: tuple[int, set[str]]
) -> None:
    takes(face, name, *call)


def test_every_public_method_of_the_history_is_a_documented_coroutine_function() -> None:
    public = {
        name: value
        for name, value in vars(ConversationHistory).items()
        if not name.startswith("_") and callable(value)
    }
    assert len(public) >= 33  # the 32 operations and workflow_id
    for name, value in public.items():
        assert inspect.isfunction(value), name
        assert value.__doc__ and len(value.__doc__) > 40, name
        inspect.signature(value)
    coroutines = [n for n, v in public.items() if inspect.iscoroutinefunction(v)]
    assert len(coroutines) >= 31


def test_help_lists_the_published_methods_with_their_parameters() -> None:
    text = pydoc.plain(pydoc.render_doc(ConversationHistory))
    assert "async create_task(self, name: 'str', goal: 'str', *, request_id:" in text
    assert "async list_events(self, task: 'str'" in text
    assert "_Runs" not in text
