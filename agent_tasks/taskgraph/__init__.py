"""The graph store's port: what the product needs of a graph store, whichever is behind it.

``port`` declares the Protocols, ``store.build_graph_store`` picks the adapter by kind or URI
(``neo4j/``: ``TaskGraph``; ``falkordb/``: ``FalkorGraph``, each loading its own driver only
when chosen); ``models`` (the read results and filters), ``reads`` and ``retention`` (the
store-neutral statements) load no driver, so the client can import them. The errors are
``contract.errors``' ``GraphError`` family.
"""
