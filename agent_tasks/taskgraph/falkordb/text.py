"""Text as FalkorDB keeps it: the adapter sends every string in its stored form
(``stored_text``) and reads every string back (``read_text``), so any string a history holds
reads back equal, and every name and key is found by its index.

What FalkorDB does not take as it is:

- **U+0000.** The client inlines parameters into the query text (a ``CYPHER name="..."``
  prefix, escaping only the backslash and the double quote) and the server reads that text as
  a C string: a NUL ends the query where it stands ("Invalid input at end of input"), and a
  string literal has no escape that spells one.
- **U+0001.** FalkorDB 4.16's string index takes it for a separator: an equality lookup of a
  value holding it misses, and a value holding it under a unique constraint crashes the
  server (signal 11).
- **Whitespace at either end** (space, tab, the line breaks, vertical tab, form feed: C's
  ``isspace``). The index drops it: ``MATCH (t:Task {key: $key})`` misses a task named
  ``"report "``, so each page's MERGE made another node, and under a unique constraint (an
  agent id ``"bot\\n"``, a session id ``" s"``) the server crashed, on every retry.

So U+0000, U+0001 and the escape ``TEXT_ESCAPE`` (U+001F, the unit separator) are written as
the escape and a character (``0``, ``1``, ``O``) wherever they stand, and the whitespace of a
string's leading and trailing runs likewise (space as ``P``, tab as ``9``...). Interior
whitespace is kept, so payloads read as they are in FalkorDB's own tools. The escape sorts below
every character a name may hold and the second characters in the order of the characters they
stand for, so names sort as they do unescaped. A string that needs none of this is stored as
it is (so graphs written before read the same).

A key the statements join from stored parts (``t.key + '#' + toString(ev.seq)``) holds the
parts' stored forms, which the stored form of the joined string is not when a part ends or
starts with whitespace: keys are joined in the statements only, never in Python.
"""

from __future__ import annotations

import re

TEXT_ESCAPE = "\x1f"
"""The escape of the stored form (module docstring)."""
_CODES = {"\x00": "0", "\x01": "1", "\t": "9", "\n": ":", "\x0b": ";", "\x0c": "<", "\r": "="}
_CODES |= {TEXT_ESCAPE: "O", " ": "P"}
"""Each escaped character and the character after the escape: ``0x30`` plus its code point,
so the escaped characters keep their order."""
_READ = {code: char for char, code in _CODES.items()}
_ANYWHERE = re.compile("[\x00\x01\x1f]")
_EDGES = re.compile(r"\A[\t\n\x0b\x0c\r ]+|[\t\n\x0b\x0c\r ]+\Z")
_STORED = re.compile("\x1f([" + re.escape("".join(_READ)) + "])")


def _escaped(match: re.Match[str]) -> str:
    return "".join(TEXT_ESCAPE + _CODES[char] for char in match.group())


def stored_text(text: str) -> str:
    """``text`` as FalkorDB keeps it (module docstring): U+0000, U+0001 and ``TEXT_ESCAPE``
    escaped wherever they stand, the whitespace at either end escaped, the rest as it is."""
    return _EDGES.sub(_escaped, _ANYWHERE.sub(_escaped, text))


def read_text(text: str) -> str:
    """The string whose stored form is ``text`` (``stored_text`` reversed); a ``TEXT_ESCAPE``
    not followed by a code is kept as it is."""
    if TEXT_ESCAPE not in text:
        return text
    return _STORED.sub(lambda m: _READ[m.group(1)], text)
