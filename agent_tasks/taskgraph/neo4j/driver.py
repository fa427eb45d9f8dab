"""How the Neo4j adapter talks to Neo4j: the driver (``open_driver``, every bound set) and the
bounded sessions its transactions run in (``Neo4jRunner``).

One session per call; managed transactions retry transient errors for ``NEO4J_RETRY_S``. Each
transaction is bounded by the server (``NEO4J_TRANSACTION_TIMEOUT_S``) and, with its retries, by the
client (``NEO4J_CALL_TIMEOUT_S``), so a silent peer never holds a caller. Errors leave as the port's
(``graph_error``), the driver's as ``__cause__``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, LiteralString, TypeVar

from neo4j import (
    AsyncDriver,
    AsyncGraphDatabase,
    AsyncManagedTransaction,
    AsyncSession,
    unit_of_work,
)
from neo4j.exceptions import AuthError, DriverError, Neo4jError

from agent_tasks.contract.errors import (
    GraphAuthError,
    GraphDataError,
    GraphError,
    GraphUnavailable,
)
from agent_tasks.taskgraph.dialect import GraphKind, Statement, spelled

if TYPE_CHECKING:
    pass


_T = TypeVar("_T")

NEO4J_CONNECT_TIMEOUT_S = 5.0
"""Seconds a new connection may take to connect and finish the Bolt handshake (the driver's default
is 30 s)."""
NEO4J_ACQUIRE_TIMEOUT_S = 10.0
"""Seconds to get a connection from the pool, a new one's connect or an idle one's liveness
check included (the driver's default is 60 s)."""
NEO4J_LIVENESS_CHECK_S = 10.0
"""A pooled connection idle longer than this (seconds) is checked with a round trip before use, so
one that died silently is replaced instead of hanging a transaction."""
NEO4J_TRANSACTION_TIMEOUT_S = 10.0
"""Seconds the server lets one transaction run before it aborts it (a mirror page takes about 0.1
s)."""
NEO4J_RETRY_S = 10.0
"""Seconds the driver keeps retrying a transaction after a transient error (its default is 30 s);
the mirror's retries follow."""
NEO4J_CALL_TIMEOUT_S = NEO4J_RETRY_S + NEO4J_ACQUIRE_TIMEOUT_S + NEO4J_TRANSACTION_TIMEOUT_S + 5.0
"""Client-side bound of one managed transaction with its retries (seconds): the last retry may start
just before ``NEO4J_RETRY_S`` and take an acquisition and a transaction, plus a margin. Only this
ends a transaction whose peer went silent (the call is cancelled: ``ServiceUnavailable``)."""


OUT_OF_TIME_CODES = frozenset(
    {
        "Neo.ClientError.Transaction.TransactionTimedOut",
        "Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration",
        "Neo.ClientError.Transaction.LockClientStopped",
    }
)
"""Neo4j status codes of a transaction ended for running out of time: client errors to Neo4j, but
they mean a slow server, so ``graph_error`` makes them ``GraphUnavailable`` (retried)."""


def graph_error(err: Neo4jError | DriverError) -> GraphError:
    """The port's error for a driver error: ``GraphAuthError`` (credentials), ``GraphUnavailable``
    (``is_retryable()`` or ``OUT_OF_TIME_CODES``), else ``GraphDataError``; the message starts with
    ``Neo4j``."""
    if isinstance(err, AuthError):
        return GraphAuthError(f"Neo4j refused the credentials: {err}")
    if err.is_retryable() or getattr(err, "code", None) in OUT_OF_TIME_CODES:
        return GraphUnavailable(f"Neo4j unavailable: {err}")
    return GraphDataError(f"Neo4j refused the statement: {err}")


def open_driver(uri: str, auth: tuple[str, str]) -> AsyncDriver:
    """The async driver: ``auth`` is ``(user, password)``; connect, acquisition, liveness and retry
    bounded (``NEO4J_*``); server notifications off."""
    return AsyncGraphDatabase.driver(
        uri,
        auth=auth,
        notifications_min_severity="OFF",
        connection_timeout=NEO4J_CONNECT_TIMEOUT_S,
        connection_acquisition_timeout=NEO4J_ACQUIRE_TIMEOUT_S,
        liveness_check_timeout=NEO4J_LIVENESS_CHECK_S,
        max_transaction_retry_time=NEO4J_RETRY_S,
    )


NEO4J_MAX_WRITES = 4
"""The mirror's transactions one graph object runs at once by default
(``Settings.graph_max_writes``); unbounded, many first pages queued in Neo4j past their time."""

bounded = unit_of_work(timeout=NEO4J_TRANSACTION_TIMEOUT_S)
"""Marks a transaction function with the server-side ``NEO4J_TRANSACTION_TIMEOUT_S``."""


class Neo4jRunner:
    """The bounded sessions and one-statement managed transactions of a Neo4j database (the
    adapter's ``taskgraph.runner.StatementRunner``).

    Args:
        driver: from ``open_driver``.
        database: the Neo4j database.
    """

    kind: GraphKind = "neo4j"
    """The store's dialect (``taskgraph.dialect.spelled``)."""

    def __init__(self, driver: AsyncDriver, database: str = "neo4j") -> None:
        self.driver = driver
        self.database = database

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session whose use is bounded by ``NEO4J_CALL_TIMEOUT_S``.

        Raises:
            GraphUnavailable: the bound passed, or the driver's error may pass (``graph_error``).
            GraphAuthError, GraphDataError: the driver's error (``graph_error``).
        """
        try:
            async with (
                asyncio.timeout(NEO4J_CALL_TIMEOUT_S),
                self.driver.session(database=self.database) as session,
            ):
                yield session
        except TimeoutError as err:
            raise GraphUnavailable(
                f"Neo4j did not answer within {NEO4J_CALL_TIMEOUT_S:g} s"
            ) from err
        except (Neo4jError, DriverError) as err:
            raise graph_error(err) from err

    async def read(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one read statement, in a managed read transaction."""
        return await self.run(spelled(query, self.kind), params, write=False)

    async def write(self, query: Statement, **params: Any) -> list[dict[str, Any]]:
        """The rows of one write statement, in a managed write transaction."""
        return await self.run(spelled(query, self.kind), params, write=True)

    async def write_work(self, work: Callable[[AsyncManagedTransaction], Awaitable[_T]]) -> _T:
        """``work``'s result, run as one managed write transaction (bounded, retried)."""
        async with self.session() as session:
            return await session.execute_write(bounded(work))

    async def run(
        self, query: LiteralString, params: dict[str, Any], *, write: bool
    ) -> list[dict[str, Any]]:
        """The rows of ``query`` (Neo4j's Cypher), in a managed write or read transaction."""

        async def work(tx: AsyncManagedTransaction) -> list[dict[str, Any]]:
            result = await tx.run(query, **params)
            return [record.data() async for record in result]

        async with self.session() as session:
            execute = session.execute_write if write else session.execute_read
            return await execute(bounded(work))
