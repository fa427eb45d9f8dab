"""A small, complete agent project laid out like Temporal's samples: ``tools.py`` (the
activities), ``agent.py`` (the agent: workflow code), ``worker.py``, ``starter.py``. Run the
modules with ``python -m examples.hello_agent.<module>`` from the repository's root."""
