"""Generated strings for the tests that every string a history can hold survives the graph
stores (``tests/taskgraph/test_strings.py``): a seeded generator over the characters that
break encoders (NUL and the other control characters, quotes and backslashes as FalkorDB's
inlined parameters escape them, line and paragraph separators, right-to-left marks, combining
marks, astral characters, noncharacters, the FalkorDB adapter's own escape), at every length
up to the field's bound. A failure prints its seed; ``STRINGS_SEED`` runs that seed again."""

from __future__ import annotations

import os
import random
from collections.abc import Callable

from agent_tasks.taskgraph.falkordb.text import TEXT_ESCAPE

_CONTROL = [chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]]
_ASCII = [chr(c) for c in range(0x20, 0x7F)]
_QUOTING = ["\\", '"', "'", "`", "$", "{", "}", "\\\\", '\\"', "\\u0000", "\\0", "%s", "\\n"]
_SCRIPTS = [
    *"éßøÆΩЖЯ",  # Latin, Greek, Cyrillic
    *"שלוםمرحبا",  # right to left
    *"日本語中文한국어",  # CJK
    "\u0301", "\u0308", "\u20dd",  # combining marks
    "\u200e", "\u200f", "\u202e", "\u2066", "\u200d", "\u200b",  # direction marks, joiners
    "🎉", "👩‍👩‍👧", "🏳️‍🌈", "\U0001d11e", "\U00010348",  # astral
]  # fmt: skip
_SPECIAL = [
    "\u0085", "\u2028", "\u2029", "\ufeff", "\ufffd", "\ufffe", "\uffff", "\U0010ffff",
    "\ue000", "\U000f0000", "\ufdef", TEXT_ESCAPE, TEXT_ESCAPE + "0", TEXT_ESCAPE * 2,
]  # fmt: skip
_POOLS = [_CONTROL, _ASCII, _QUOTING, _SCRIPTS, _SPECIAL]
_NAME_POOLS = [_ASCII, _QUOTING, _SCRIPTS, _SPECIAL]

SEED = int(os.environ.get("STRINGS_SEED", "4406"))
"""The generator's seed (``STRINGS_SEED`` overrides it, to run a failure's seed again)."""


class Strings:
    """Strings drawn from ``random.Random(seed)``."""

    def __init__(self, seed: int = SEED) -> None:
        self.seed = seed
        self.rng = random.Random(seed)

    def _length(self, most: int) -> int:
        """Mostly short, sometimes long, sometimes exactly the bound."""
        roll = self.rng.random()
        if roll < 0.6:
            return self.rng.randint(0, min(most, 12))
        if roll < 0.9:
            return self.rng.randint(0, most)
        return most

    def text(self, most: int, *, least: int = 0, names: bool = False) -> str:
        """A string of ``least`` to ``most`` characters; ``names``: without control characters
        (the rule of task and step names)."""
        pools = _NAME_POOLS if names else _POOLS
        length = max(least, self._length(most))
        out: list[str] = []
        size = 0
        pool = self.rng.choice(pools)
        while size < length:
            if self.rng.random() < 0.1:
                pool = self.rng.choice(pools)  # runs of one kind, and mixes
            piece = self.rng.choice(pool)
            if size + len(piece) > length:
                piece = piece[: length - size]
            out.append(piece)
            size += len(piece)
        return "".join(out)

    def pick(self, fixed: list[str], make: Callable[[], str]) -> str:
        """One of ``fixed`` a third of the time, else ``make()``."""
        return self.rng.choice(fixed) if self.rng.random() < 0.33 else make()


EDGES = [
    "",
    "\x00",
    "a\x00b",
    "\x00" * 3,
    TEXT_ESCAPE,
    TEXT_ESCAPE + "0",
    TEXT_ESCAPE + "\x00",
    "\\",
    "end with a backslash \\",
    '"',
    "\r\n",
    "\u2028",
    "line\nbreak",
    "🎉" * 5,
    " ",
    "trailing space ",
    " leading space",
    "\x01",
    "a\x01b",
    "tab\t",
]
"""Strings every field gets in turn, before the generated ones."""
