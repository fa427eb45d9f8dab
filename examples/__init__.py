"""Examples: shipped trajectories (``trajectories/``), a small agent project (``hello_agent/``)."""
