"""The effect ledger: one SQLite file every runtime's tools write each effect to, with the key
the runtime handed the tool (or none), and the holds the bench sets to stop a tool after its
effect (so a fault lands there). Standard library only: both environments import it.

The tool side (``record_effect``) reads the file from ``BENCH_LEDGER`` and the runtime's name
from ``BENCH_RUNTIME``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
create table if not exists effects (
    id integer primary key, runtime text, task text, tool text, key text, args text, at real
);
create table if not exists holds (task text, tool text, primary key (task, tool));
"""
HOLD_S = 300.0
"""Longest a held tool waits for its release (seconds): a fault's run ends long before."""


@dataclass(frozen=True)
class Effect:
    """One effect a tool recorded."""

    runtime: str
    task: str
    tool: str
    key: str | None
    """What the runtime handed the tool to deduplicate by; None when it hands nothing."""
    args: dict[str, Any]


@dataclass(frozen=True)
class EffectCount:
    """The effects of one tool of one task, counted two ways."""

    raw: int
    """Times the tool's effect happened (what a tool that deduplicates nothing does)."""
    deduplicated: int
    """What a tool that deduplicates by the key it is handed would have done: one per
    distinct key, and every effect without a key."""


def count(effects: list[Effect]) -> EffectCount:
    """``effects`` counted raw and as deduplicated by their keys."""
    keys = {effect.key for effect in effects if effect.key}
    keyless = sum(1 for effect in effects if not effect.key)
    return EffectCount(raw=len(effects), deduplicated=len(keys) + keyless)


class Ledger:
    """The ledger file at ``path`` (created with its tables)."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        with self._connect() as db:
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("pragma journal_mode=wal")
        return db

    def record(self, runtime: str, task: str, tool: str, key: str | None, args: Any) -> None:
        """Write one effect."""
        with self._connect() as db:
            db.execute(
                "insert into effects (runtime, task, tool, key, args, at) values (?,?,?,?,?,?)",
                (runtime, task, tool, key, json.dumps(args, sort_keys=True), time.time()),
            )

    def effects(self, task: str, tool: str | None = None) -> list[Effect]:
        """The effects of ``task`` (of ``tool`` only, when given), in order."""
        query = "select runtime, task, tool, key, args from effects where task = ?"
        params: tuple[str, ...] = (task,)
        if tool is not None:
            query += " and tool = ?"
            params += (tool,)
        with self._connect() as db:
            rows = db.execute(query + " order by id", params).fetchall()
        return [Effect(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def hold(self, task: str, tool: str) -> None:
        """Stop ``tool`` of ``task`` after its effect until ``release``."""
        with self._connect() as db:
            db.execute("insert or ignore into holds values (?, ?)", (task, tool))

    def release(self, task: str, tool: str) -> None:
        with self._connect() as db:
            db.execute("delete from holds where task = ? and tool = ?", (task, tool))

    def held(self, task: str, tool: str) -> bool:
        with self._connect() as db:
            found = db.execute(
                "select 1 from holds where task = ? and tool = ?", (task, tool)
            ).fetchone()
        return found is not None


async def record_effect(task: str, tool: str, key: str | None, args: Any) -> None:
    """The tool side: record the effect in the ledger (``BENCH_LEDGER``), then wait while the
    bench holds this tool of this task (at most ``HOLD_S``)."""
    ledger = Ledger(os.environ["BENCH_LEDGER"])
    await asyncio.to_thread(ledger.record, os.environ["BENCH_RUNTIME"], task, tool, key, args)
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end and await asyncio.to_thread(ledger.held, task, tool):  # noqa: ASYNC110 (another process releases it)
        await asyncio.sleep(0.05)
