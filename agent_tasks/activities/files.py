"""The demo agent's read-only tools (list, read, search the text files under one folder) and the
scripted model that drives them (``files-demo``, ``agent-tasks run demo``). Paths are relative to
``AGENT_TASKS_FILES_ROOT``; one that leaves it is refused.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from agent_tasks.activities.model import ScriptedModel, tool_call
from agent_tasks.activities.tools import Tool, ToolContext, tool
from agent_tasks.contract import Event, EventKind, ModelTurn, Role

MAX_FILES = 200
"""Most files a listing or a search returns."""
MAX_MATCHES = 50
"""Most matching lines a search returns."""


class ListFiles(BaseModel):
    """Arguments of ``list_files``."""

    path: str = "."
    """Folder to list, relative to the root."""
    pattern: str = "*"
    """Glob of the file names (recursive)."""


class ReadFile(BaseModel):
    """Arguments of ``read_file``."""

    path: str
    """File to read, relative to the root."""
    max_chars: int = Field(default=4_000, ge=1, le=32_000)
    """Read at most this many characters."""


class SearchText(BaseModel):
    """Arguments of ``search_text``."""

    query: str = Field(min_length=1)
    """Text to find (case-insensitive)."""
    path: str = "."
    """Folder to search, relative to the root."""


class Match(BaseModel):
    """One matching line."""

    path: str
    line: int
    text: str


class Matches(BaseModel):
    """What ``search_text`` found."""

    matches: list[Match]
    files_searched: int


def _text_file(path: Path) -> bool:
    with path.open("rb") as file:
        return b"\0" not in file.read(1024)


def file_tools(root: Path) -> list[Tool]:
    """The three read-only tools over the files under ``root``."""
    base = root.resolve()

    def inside(relative: str) -> Path:
        path = (base / relative).resolve()
        if path != base and base not in path.parents:
            raise ValueError(f"{relative!r} is outside the files root")
        return path

    def files(folder: Path, pattern: str) -> list[Path]:
        """Text files (no NUL byte in their first KiB) under ``folder``, at most MAX_FILES."""
        found = (p for p in sorted(folder.rglob(pattern)) if p.is_file() and _text_file(p))
        return [p for _, p in zip(range(MAX_FILES), found, strict=False)]

    @tool("list_files", arguments=ListFiles, idempotent=True, description="List files")
    async def list_files(args: ListFiles, context: ToolContext) -> str:
        found = await asyncio.to_thread(files, inside(args.path), args.pattern)
        return "\n".join(str(p.relative_to(base)) for p in found)

    @tool("read_file", arguments=ReadFile, idempotent=True, description="Read a text file")
    async def read_file(args: ReadFile, context: ToolContext) -> str:
        text = await asyncio.to_thread(inside(args.path).read_text, "utf-8", "replace")
        return text[: args.max_chars]

    @tool("search_text", arguments=SearchText, idempotent=True, description="Search text")
    async def search_text(args: SearchText, context: ToolContext) -> Matches:
        def search() -> Matches:
            matches: list[Match] = []
            searched = files(inside(args.path), "*")
            needle = args.query.lower()
            for path in searched:
                lines = path.read_text("utf-8", "replace").splitlines()
                for number, line in enumerate(lines, start=1):
                    if needle in line.lower() and len(matches) < MAX_MATCHES:
                        matches.append(
                            Match(path=str(path.relative_to(base)), line=number, text=line[:200])
                        )
            return Matches(matches=matches, files_searched=len(searched))

        return await asyncio.to_thread(search)

    return [list_files, read_file, search_text]


def files_demo(transcript: Sequence[Event]) -> ModelTurn:
    """The demo's scripted model: list, search for the goal's quoted term (or last word), read the
    first match, answer with what it found."""
    goal = next(
        (e.payload for e in transcript if e.kind is EventKind.MESSAGE and e.role is Role.USER), ""
    )
    quoted = re.search(r"[\"']([^\"']+)[\"']", goal)
    term = quoted.group(1) if quoted else (goal.split() or ["TODO"])[-1]
    results = [e.payload for e in transcript if e.kind is EventKind.TOOL_RESULT]
    script = ScriptedModel(
        [
            ModelTurn(tool_calls=[tool_call("list_files", {"path": "."}, "c1")]),
            ModelTurn(tool_calls=[tool_call("search_text", {"query": term}, "c2")]),
        ]
    )
    if len(results) < 2:
        return script(transcript)
    found = Matches.model_validate_json(results[1]) if results[1].startswith("{") else None
    if len(results) == 2 and found and found.matches:
        return ModelTurn(tool_calls=[tool_call("read_file", {"path": found.matches[0].path}, "c3")])
    listed = len(results[0].splitlines())
    if not found or not found.matches:
        return ModelTurn(content=f"{listed} files; none mentions {term!r}.")
    first = found.matches[0]
    return ModelTurn(
        content=(
            f"{listed} files; {len(found.matches)} lines mention {term!r} in "
            f"{len({m.path for m in found.matches})} files; the first is {first.path} line "
            f"{first.line}: {first.text.strip()}"
        )
    )
