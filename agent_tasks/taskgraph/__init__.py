"""The Neo4j task graph: schema, idempotent mirror writes and typed cross-task reads.

``taskgraph.models`` (the read results and filters) loads no driver, so the client can import
it; ``taskgraph.neo4j.graph`` holds ``TaskGraph`` and the Cypher, and loads the neo4j driver.
"""
