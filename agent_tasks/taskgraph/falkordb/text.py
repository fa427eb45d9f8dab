"""Text as FalkorDB keeps it: every string is sent in its stored form (``stored_text``) and read
back (``read_text``), so any string reads back equal and every name is found by its index
(``docs/graph-stores.md``).

FalkorDB does not take as they are: U+0000 (the client inlines parameters into the query text, which
the server reads as a C string); U+0001 (4.16's string index takes it for a separator); and
whitespace at either end of a string (the index drops it, so lookups miss, and under a unique
constraint the server crashed). These, and the escape ``TEXT_ESCAPE`` itself, are written as the
escape and a code character; interior whitespace is kept. The codes keep the escaped characters'
order, so names sort as unescaped, and a string needing none is stored as it is.

Keys joined from stored parts hold the parts' stored forms, so keys are joined in the statements
only, never in Python.
"""

from __future__ import annotations

import re

TEXT_ESCAPE = "\x1f"
"""The escape of the stored form (module docstring)."""
_CODES = {"\x00": "0", "\x01": "1", "\t": "9", "\n": ":", "\x0b": ";", "\x0c": "<", "\r": "="}
_CODES |= {TEXT_ESCAPE: "O", " ": "P"}
"""Each escaped character's code after the escape: ``0x30`` plus its code point, keeping order."""
_READ = {code: char for char, code in _CODES.items()}
_ANYWHERE = re.compile("[\x00\x01\x1f]")
_EDGES = re.compile(r"\A[\t\n\x0b\x0c\r ]+|[\t\n\x0b\x0c\r ]+\Z")
_STORED = re.compile("\x1f([" + re.escape("".join(_READ)) + "])")


def _escaped(match: re.Match[str]) -> str:
    return "".join(TEXT_ESCAPE + _CODES[char] for char in match.group())


def stored_text(text: str) -> str:
    """``text`` as FalkorDB keeps it: U+0000, U+0001 and ``TEXT_ESCAPE`` escaped anywhere, the
    whitespace at either end escaped, the rest as it is."""
    return _EDGES.sub(_escaped, _ANYWHERE.sub(_escaped, text))


def read_text(text: str) -> str:
    """The string whose stored form is ``text``; a ``TEXT_ESCAPE`` without a code is kept."""
    if TEXT_ESCAPE not in text:
        return text
    return _STORED.sub(lambda m: _READ[m.group(1)], text)
