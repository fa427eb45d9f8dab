"""The task model's limits, each with its unit and where the number comes from.

The server facts behind them (DESIGN.md's measured table): an update payload over 2 MiB stalls its
workflow, the SDK warns at 512 KiB, continue-as-new is suggested at 4,096 events or 4 MiB, and a run
is terminated at 51,200 events or 50 MiB.

Tighten a limit only behind ``workflow.patched``: validators run again when a history's input is
decoded on replay (``docs/replay-and-upgrades.md``).
"""

from __future__ import annotations

MAX_PAYLOAD_CHARS = 32_000
"""An event payload longer than this many characters (code points) is cut to it."""
MAX_SEALED_CHARS = 4 * -(-(12 + 4 * MAX_PAYLOAD_CHARS + 16) // 3)
"""Characters of a sealed payload (``EventInput.sealed``, 170,704): base64 of a 12-byte nonce, the
AES-GCM ciphertext of ``MAX_PAYLOAD_CHARS`` characters at 4 UTF-8 bytes each, a 16-byte tag."""
MAX_CITATIONS = 100
"""Events, and steps, one decision may cite (each list)."""
MAX_EVENTS_PER_UPDATE = 200
"""Events in one ``record_events`` update; the client splits larger batches."""
MAX_PAYLOAD_BYTES = 400 * 1024
"""The budget of every payload sent through Temporal, in bytes of its JSON encoding (an update's
input, a query's result, an activity's input and result): under the SDK's 512 KiB warning and the
server's 2 MiB refusal, and over one event's worst case (about 192 KiB of escaped control
characters), so a page always holds one."""
MAX_STEPS_PER_UPDATE = 200
"""Step writes in one ``set_steps`` update; the client splits larger batches."""
MAX_STEPS_PER_TASK = 10_000
"""Steps one task may hold; a closed step is carried across continue-as-new as 10 bytes of a packed
table (``workflows.steps``)."""
MAX_OPEN_STEPS = 500
"""Open steps (not started, in progress, unknown) one task may hold at once, each carried in full
across continue-as-new; 500 keeps every saved history within it."""
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
"""Largest ``full_length`` an event may claim: a count JSON readers and 64-bit integers hold
exactly."""
MAX_TOKEN_COUNT = 2**53
"""Largest token count in an event's ``usage``: exact in JSON and in the graph stores' 64-bit
integers; a larger one is refused (``number_out_of_range``)."""
MIRROR_ERROR_CHARS = 2_000
"""``mirror_error`` is cut to this many characters (it is carried and shown in every view)."""
PAGE_LIMIT_MAX = 200
"""Largest page a read returns (events, steps, tasks)."""
HISTORY_BACKPRESSURE_EVENTS = 40_000
"""History length (events) at which a task refuses writes with ``task_busy``, under Temporal's
51,200; reached only when the graph store stays down long enough to delay continue-as-new."""
