"""``python -m bench peers``: the same agent on five runtimes, side by side in cost and under
faults (``bench.peers.runner``); the table is ``docs/comparison.md`` (``bench.peers.table``).

The modules the peers' own environment runs (``ledger``, ``protocol``, ``rt_*`` but
``rt_ours``) import the standard library and their runtime's packages only, never
``agent_tasks``: the peers are installed apart (``.venv-peers``, ``requirements.txt``), so
their pins never change ours.
"""
