"""One error tree: every exception class of ours derives from ``AgentTasksError``, or, for
control flow that agent code must not catch, from ``AgentTasksControlFlow`` (a
``BaseException``), and the tree drawn in ``agent_tasks.contract.errors`` names them all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import agent_tasks
from agent_tasks.contract import errors
from agent_tasks.contract.errors import AgentTasksControlFlow, AgentTasksError


def our_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in a module of ``agent_tasks`` (each module imported)."""
    found: set[type[BaseException]] = set()
    for info in pkgutil.walk_packages(agent_tasks.__path__, f"{agent_tasks.__name__}."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith(f"{agent_tasks.__name__}.")
            ):
                found.add(value)
    return found


def test_every_exception_of_ours_has_one_of_the_two_bases() -> None:
    found = our_exceptions()
    assert len(found) >= 20  # the walk reached the rooms (the tree has 24 classes)
    strays = {
        cls.__qualname__
        for cls in found
        if not issubclass(cls, AgentTasksError | AgentTasksControlFlow)
    }
    assert strays == set()


def test_control_flow_is_not_an_exception_and_errors_are() -> None:
    control = {cls for cls in our_exceptions() if issubclass(cls, AgentTasksControlFlow)}
    assert {cls.__name__ for cls in control} >= {"AgentTasksControlFlow", "AgentParked"}
    assert not any(issubclass(cls, Exception) for cls in control)
    assert issubclass(AgentTasksError, Exception)


def test_the_drawn_tree_names_every_public_class() -> None:
    drawing = errors.__doc__ or ""
    public = {cls.__name__ for cls in our_exceptions() if not cls.__name__.startswith("_")}
    missing = public - set(re.findall(r"\w+", drawing))
    # GrantEnded is the HTTP streams' internal signal of a grant's end (server.grants)
    assert missing <= {"GrantEnded"}, missing


def test_built_in_bases_stay_where_callers_catch_them() -> None:
    from agent_tasks.config import Neo4jPasswordMissing
    from agent_tasks.trajectories.base import TrajectoryFormatError

    assert issubclass(errors.TaskServiceUnavailable, RuntimeError)
    assert issubclass(errors.GraphIncomplete, RuntimeError)
    assert issubclass(Neo4jPasswordMissing, RuntimeError)
    assert issubclass(TrajectoryFormatError, ValueError)
    assert issubclass(errors.TaskIncarnationError, ValueError)
    assert issubclass(errors.GraphUnavailable, errors.ServiceUnavailable)
