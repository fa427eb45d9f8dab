"""The contract suite's fixtures (``store``, ``store_history``, ``falkordb_server``) are in
``tests/conftest.py``, so tests of other packages run against both stores too."""
