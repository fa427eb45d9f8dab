"""The graph store's port: what the product needs of a graph store, whichever is behind it.

``port`` declares the Protocols; ``store.build_graph_store`` picks the adapter (``neo4j/``,
``falkordb/``, each loading its driver only when chosen); ``models``, ``reads`` and ``retention``
load no driver. The errors are ``contract.errors``' ``GraphError`` family.
"""
