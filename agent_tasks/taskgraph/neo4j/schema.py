"""The task graph's schema in Neo4j: its constraints and indexes, created before the first
write (FalkorDB's: ``taskgraph.falkordb.cypher.SCHEMA``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import LiteralString

from neo4j import AsyncManagedTransaction
from neo4j.exceptions import ClientError

from agent_tasks.taskgraph.neo4j.driver import Neo4jRunner, bounded
from agent_tasks.taskgraph.neo4j.keys import KEY_SCHEMA

SCHEMA: tuple[LiteralString, ...] = (
    "CREATE CONSTRAINT project_key IF NOT EXISTS FOR (n:Project) REQUIRE n.project_id IS UNIQUE",
    "CREATE CONSTRAINT task_key IF NOT EXISTS FOR (n:Task) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT event_key IF NOT EXISTS FOR (n:Event) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT step_key IF NOT EXISTS FOR (n:Step) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT agent_key IF NOT EXISTS FOR (n:Agent) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT session_key IF NOT EXISTS FOR (n:Session) REQUIRE n.key IS UNIQUE",
    "CREATE INDEX task_project_name IF NOT EXISTS FOR (n:Task) ON (n.project_id, n.name)",
    "CREATE INDEX task_project_status_name IF NOT EXISTS FOR (n:Task) "
    "ON (n.project_id, n.status, n.name)",
    "CREATE INDEX event_project_kind IF NOT EXISTS FOR (n:Event) ON (n.project_id, n.kind)",
    "CREATE INDEX event_project_time IF NOT EXISTS FOR (n:Event) ON (n.project_id, n.time)",
    "CREATE INDEX step_project_state IF NOT EXISTS FOR (n:Step) ON (n.project_id, n.state)",
    "CREATE CONSTRAINT event_id IF NOT EXISTS FOR (n:Event) REQUIRE n.id IS UNIQUE",
    "CREATE CONSTRAINT decision_id IF NOT EXISTS FOR (n:Decision) REQUIRE n.id IS UNIQUE",
    "CREATE INDEX decision_task IF NOT EXISTS FOR (n:Decision) ON (n.project_id, n.task_key)",
    "CREATE CONSTRAINT tombstone_key IF NOT EXISTS FOR (n:TaskTombstone) REQUIRE n.key IS UNIQUE",
    # the mirror's refused pages (``taskgraph.refusals``)
    "CREATE CONSTRAINT mirror_refusal IF NOT EXISTS FOR (n:MirrorRefusal) REQUIRE n.key IS UNIQUE",
    "CREATE INDEX mirror_refusal_retry IF NOT EXISTS FOR (n:MirrorRefusal) ON (n.retry_at)",
    *KEY_SCHEMA,
    # the HTTP API's records (``server.apikeys``, ``server.pagesessions``)
    "CREATE CONSTRAINT api_key IF NOT EXISTS FOR (n:ApiKey) REQUIRE n.key_id IS UNIQUE",
    "CREATE CONSTRAINT page_session IF NOT EXISTS FOR (n:PageSession) REQUIRE n.session_id "
    "IS UNIQUE",
)
"""Constraints and indexes (single-property uniqueness and range indexes, which Community has). An
older graph's ``task_project_status`` is not dropped: workers of both versions run side by side
during a deploy."""


SCHEMA_RULE_EXISTS = "Neo.ClientError.Schema.EquivalentSchemaRuleAlreadyExists"
"""The error of a schema rule created by another session meanwhile (``create_schema``)."""


async def create_schema(runner: Neo4jRunner) -> None:
    """Create the constraints and indexes of ``SCHEMA`` (idempotent), each in its own managed
    transaction, so processes starting at once all succeed: ``EquivalentSchemaRuleAlreadyExists`` (a
    lost race) is taken as done, ``DeadlockDetected`` is retried by the driver."""
    for statement in SCHEMA:
        async with runner.session() as session:
            try:
                await session.execute_write(bounded(_schema_rule(statement)))
            except ClientError as err:
                if err.code != SCHEMA_RULE_EXISTS:
                    raise


def _schema_rule(
    statement: LiteralString,
) -> Callable[[AsyncManagedTransaction], Awaitable[None]]:
    """A transaction function that runs one schema ``statement``."""

    async def work(tx: AsyncManagedTransaction) -> None:
        await (await tx.run(statement)).consume()

    return work
