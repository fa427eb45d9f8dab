"""The root group of ``agent-tasks``, whose commands are built when they are first used: a
command's module is imported, and its options read, only when that command runs or shows its
help, and the root's ``--help`` lists every command from its docstring alone (click's lazy
group pattern, with typer building each command).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup

from agent_tasks.cli.common import plain_flags


def build(name: str, target: str) -> Any:
    """The click command of ``target`` (``"module:attribute"``, a ``typer.Typer`` group or a
    command function), named ``name``, with its flags shown as flags (``plain_flags``)."""
    found = target_of(target)
    if isinstance(found, typer.Typer):
        return plain_flags(typer.main.get_group(found))
    single = typer.Typer(add_completion=False, rich_markup_mode=None)
    single.command(name)(found)
    return plain_flags(typer.main.get_command(single))


def target_of(target: str) -> Any:
    """The object ``"module:attribute"`` names (the module imported)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def help_of(target: str) -> str:
    """The help text of ``target`` as typer gives it: a group's ``help``, a command's
    docstring."""
    found = target_of(target)
    if isinstance(found, typer.Typer):
        given = found.info.help
        return inspect.cleandoc(given) if isinstance(given, str) else ""
    return inspect.getdoc(found) or ""


def first_sentence(text: str) -> str:
    """The first sentence of a help text, whole, on one line (a group's ``--help`` lists each
    command with it; click would cut it to the terminal's width)."""
    words = " ".join(text.split())
    end = words.find(". ")
    return (words if end < 0 else words[:end]).removesuffix(".")


class LazyCommands(MutableMapping[str, Any]):
    """A group's commands by name: those of ``targets`` (name -> ``"module:attribute"``) built
    at their first lookup (``build``), in the order of ``targets``, then any added."""

    def __init__(self, targets: Mapping[str, str], added: Mapping[str, Any]) -> None:
        self.targets = dict(targets)
        self.built: dict[str, Any] = dict(added)

    def __getitem__(self, name: str) -> Any:
        if name not in self.built:
            if name not in self.targets:
                raise KeyError(name)
            self.built[name] = build(name, self.targets[name])
        return self.built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        self.targets.pop(name, None)
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.targets
        yield from (name for name in self.built if name not in self.targets)

    def __len__(self) -> int:
        return len(self.targets.keys() | self.built.keys())

    def short_help(self, name: str) -> str:
        """What ``--help`` lists ``name`` with (``first_sentence``), without building it."""
        built = self.built.get(name)
        return first_sentence(built.help or "" if built else help_of(self.targets[name]))


class LazyGroup(TyperGroup):
    """A typer group whose commands are named in ``lazy`` (name -> ``"module:attribute"``) and
    built when first used (``LazyCommands``); a subclass names them (``typer.Typer(cls=...)``).
    The root's ``--help`` lists them without building any."""

    lazy: ClassVar[Mapping[str, str]] = {}
    """The commands: name -> ``"module:attribute"`` of a ``typer.Typer`` or a function."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.lazy, self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        """The commands' names, in the order of ``lazy``, none built."""
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The ``Commands`` section of ``--help``: each name with the first sentence of its help
        (``LazyCommands.short_help``), wrapped, none built."""
        assert isinstance(self.commands, LazyCommands)
        rows = [(name, self.commands.short_help(name)) for name in self.list_commands(ctx)]
        if not rows:
            return
        with formatter.section("Commands"):
            formatter.write_dl(rows)
