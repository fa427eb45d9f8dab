"""The task model's limits, each with its unit and where the number comes from.

The server facts behind them were measured on a Temporal CLI dev server 1.32 with temporalio 1.35
(the project's design notes): an update payload over 2 MiB stalls its workflow, the SDK warns at
512 KiB, continue-as-new is suggested at 4,096 history events or 4 MiB, and a run is terminated
at 51,200 events or 50 MiB.

Changing a limit is a change to workflow code: the models' validators run when Temporal decodes
an update's input, also on replay, so a tighter limit can make an old history's input fail to
decode. Loosen limits freely; tighten them only behind ``workflow.patched``
(``docs/replay-and-upgrades.md``).
"""

from __future__ import annotations

MAX_PAYLOAD_CHARS = 32_000
"""An event payload longer than this many characters (code points) is cut to it."""
MAX_SEALED_CHARS = 4 * -(-(12 + 4 * MAX_PAYLOAD_CHARS + 16) // 3)
"""Characters of a sealed payload (``EventInput.sealed``): base64 of a 12-byte nonce, the
AES-GCM ciphertext of at most ``MAX_PAYLOAD_CHARS`` characters (4 bytes each in UTF-8 at most)
and its 16-byte tag; 170,704. As JSON that is at most 167 KiB, less than the 188 KiB of a
plain payload of 32,000 control characters, so a sealed event fits every page and update."""
MAX_CITATIONS = 100
"""Events, and steps, one decision may cite (each list)."""
MAX_EVENTS_PER_UPDATE = 200
"""Events in one ``record_events`` update; the client splits larger batches."""
MAX_PAYLOAD_BYTES = 400 * 1024
"""The budget of every payload the product sends through Temporal, in bytes of its JSON encoding
(what the pydantic data converter writes; a compressing codec only makes it smaller): an
update's input (the client splits batches), a query's result (events and steps are paged by
it), an activity's input and result. Bytes, not characters: JSON writes a control character as
six bytes (``\u0001``). The server refuses a payload over 2 MiB (an update that large stalls
its workflow for good) and the SDK warns at 512 KiB, so 400 KiB keeps a margin under both. One
event is at most about 192 KiB (32,000 control characters), so a page always holds one."""
MAX_STEPS_PER_UPDATE = 200
"""Step writes in one ``set_steps`` update; the client splits larger batches."""
MAX_STEPS_PER_TASK = 10_000
"""Steps one task may hold. Open steps are carried across continue-as-new in full; a closed
one (``completed``, ``failed``) as 10 bytes of a packed table (``workflows.steps``): its
name, result and times stay in the history and Neo4j."""
MAX_OPEN_STEPS = 500
"""Open steps (not started, in progress, unknown) one task may hold at once: each is carried
in full across continue-as-new. (500 was the limit on all steps before, so every existing
history stays within it.)"""
MAX_STEP_ATTEMPTS = 255
"""Attempts of one step (the closed-step table keeps the count in one byte)."""
STEPS_PAGE_MAX = 500
"""Largest page of steps a query returns (also bounded by ``MAX_PAYLOAD_BYTES``)."""
REQUEST_WINDOW = 2_000
"""How many of a task's most recent writes keep their request id for deduplication."""
MAX_METADATA_ENTRIES = 16
"""Entries in a task's metadata map."""
MAX_METADATA_VALUE_CHARS = 500
"""Characters of one metadata value."""
MAX_GOAL_CHARS = 4_000
"""Characters of a task goal."""
MAX_FULL_LENGTH = 2**53
"""Largest ``full_length`` an event may claim (a count every JSON reader and Neo4j's 64-bit
integers hold exactly)."""
MAX_TOKEN_COUNT = 2**53
"""Largest token count an event's ``usage`` may carry: a count JSON readers hold exactly, and
the graph stores (64-bit integers: Neo4j's driver refuses a larger one, FalkorDB keeps
``2**63 - 1`` in its place). A larger one is refused (``number_out_of_range``)."""
MIRROR_ERROR_CHARS = 2_000
"""``mirror_error`` is cut to this many characters (it is carried and shown in every view)."""
PAGE_LIMIT_MAX = 200
"""Largest page a read returns (events, steps, tasks)."""
HISTORY_BACKPRESSURE_EVENTS = 40_000
"""History length (events) at which a task refuses writes with ``task_busy``: Temporal
terminates a run at 51,200 events, and this happens only if Neo4j stays down long enough to
delay continue-as-new."""
