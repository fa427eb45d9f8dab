"""The Neo4j adapter of the graph store's port: ``graph.TaskGraph`` on the official driver, with its
schema, writes, retention and key store in modules of their own."""
