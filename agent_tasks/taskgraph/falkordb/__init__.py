"""The FalkorDB adapter of the graph store's port: ``graph.FalkorGraph`` on the official client,
with the dialect's statements in ``cypher``."""
