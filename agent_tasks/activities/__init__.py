"""Worker-side code: the Neo4j mirror activity (later: tools and the model call). Dependencies
are injected (a Temporal client, the task graph), never read from the environment here."""
