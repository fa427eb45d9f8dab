"""Settings and ``connect()``: the only reader of the environment (when asked, never at import).

Every name below is an environment variable (pydantic-settings, case-insensitive):

| variable | default | meaning |
| --- | --- | --- |
| ``TEMPORAL_ADDRESS`` | ``127.0.0.1:7233`` | Temporal frontend, host:port |
| ``TEMPORAL_NAMESPACE`` | ``default`` | Temporal namespace |
| ``TEMPORAL_TASK_QUEUE`` | ``agent-tasks`` | task queue of the TaskWorkflow worker |
| ``NEO4J_URI`` | ``bolt://127.0.0.1:7687`` | Neo4j Bolt address |
| ``NEO4J_USERNAME`` | ``neo4j`` | Neo4j user |
| ``NEO4J_PASSWORD`` | unset | Neo4j password; unset means the generated one in the data folder |
| ``NEO4J_DATABASE`` | ``neo4j`` | Neo4j database name |
| ``AGENT_TASKS_DATA_DIR`` | ``.agent-tasks`` | local stack data: SQLite file, Neo4j store, logs |
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from workflows.errors import TaskServiceUnavailable


class Settings(BaseSettings):
    """Addresses and credentials of Temporal and Neo4j, plus the local stack's data folder."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    temporal_address: str = "127.0.0.1:7233"
    """Temporal frontend gRPC address, ``host:port``."""
    temporal_namespace: str = "default"
    """Temporal namespace holding the task workflows."""
    temporal_task_queue: str = "agent-tasks"
    """Task queue the worker polls and the client starts workflows on."""
    neo4j_uri: str = "bolt://127.0.0.1:7687"
    """Neo4j Bolt URI."""
    neo4j_username: str = "neo4j"
    """Neo4j user name."""
    neo4j_password: SecretStr | None = None
    """Neo4j password; None means the one ``agent-tasks dev up`` generated in the data folder."""
    neo4j_database: str = "neo4j"
    """Neo4j database the mirror writes to."""
    data_dir: Path = Field(default=Path(".agent-tasks"), validation_alias="AGENT_TASKS_DATA_DIR")
    """Data folder of the local stack: Temporal SQLite file, Neo4j store, password, logs."""

    @property
    def neo4j_password_file(self) -> Path:
        """Where ``agent-tasks dev up`` keeps the generated Neo4j password (mode 0600)."""
        return self.data_dir / "neo4j" / "password"

    def neo4j_auth(self) -> tuple[str, str]:
        """Return ``(username, password)`` for the Neo4j driver.

        Raises:
            RuntimeError: no NEO4J_PASSWORD is set and the data folder holds no generated one
                (run ``agent-tasks dev up`` first).
        """
        if self.neo4j_password is not None:
            return self.neo4j_username, self.neo4j_password.get_secret_value()
        try:
            return self.neo4j_username, self.neo4j_password_file.read_text().strip()
        except FileNotFoundError:
            raise RuntimeError(
                f"NEO4J_PASSWORD is not set and {self.neo4j_password_file} does not exist: "
                "run `agent-tasks dev up` or set NEO4J_PASSWORD"
            ) from None


async def connect(
    settings: Settings | None = None,
    *,
    address: str | None = None,
    namespace: str | None = None,
) -> Client:
    """Connect to Temporal with the pydantic data converter.

    Args:
        settings: where to connect; read from the environment when None.
        address: overrides ``settings.temporal_address`` (``host:port``).
        namespace: overrides ``settings.temporal_namespace``.

    Raises:
        TaskServiceUnavailable: the server cannot be reached.
    """
    settings = settings or Settings()
    target = address or settings.temporal_address
    try:
        return await Client.connect(
            target,
            namespace=namespace or settings.temporal_namespace,
            data_converter=pydantic_data_converter,
        )
    except RuntimeError as err:
        raise TaskServiceUnavailable(f"cannot reach Temporal at {target}: {err}") from err


RUNTIME_SETTLE_S = 1.0
"""How long ``release_runtime`` waits at most (seconds); a call's completion leaves Python
within microseconds, so this is only a bound."""


async def release_runtime(within_s: float = RUNTIME_SETTLE_S) -> None:
    """Wait until no thread of the Temporal SDK's Rust runtime is running Python code: call it
    once a process is done with Temporal, before the interpreter exits.

    Why: the SDK's Rust runtime (tokio threads) completes each call by running Python on its
    own thread (``loop.call_soon_threadsafe``), and lets go of the GIL while it writes to the
    event loop's wake-up socket. The awaiting coroutine can resume in that gap, the program
    end, and the interpreter start finalizing; the runtime thread then takes the GIL back
    during finalization and CPython aborts with ``Fatal Python error: PyGILState_Release``
    (1 run in 4 of an app that connects, writes and exits; temporalio/sdk-python#300). Such a
    thread shows in ``sys._current_frames()`` while it runs Python, and is not one of the
    ``threading`` module's threads; this waits until none is left (at most ``within_s``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while loop.time() < deadline:
        python_threads = {thread.ident for thread in threading.enumerate()}
        if not set(sys._current_frames()) - python_threads:
            return
        await asyncio.sleep(0.001)
