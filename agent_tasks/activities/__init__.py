"""Worker-side code, run as activities: the mirror into the graph store (``mirror``,
``follow``, ``history_page``), the rebuild, tools (``tools``, ``http_tool``, ``mcp``,
``files``), the model call (``model``, ``chat_protocol``, ``transcript``, ``tokens``), a
branch's copy and a resumed parent's children. Dependencies are injected (a Temporal client,
the graph store, the broker), never read from the environment here."""
