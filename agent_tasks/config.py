"""Settings and ``connect()``: the only reader of the environment (when asked, never at import).

**Temporal** is reached through the SDK's own client configuration (``temporalio.envconfig``):
the environment variables and the TOML profile file that the ``temporal`` CLI reads too, so
one profile serves the CLI, the workers and the apps. The SDK reads these; this project adds
only its defaults for the local stack (address and namespace when the profile sets none):

| variable | default | meaning |
| --- | --- | --- |
| ``TEMPORAL_ADDRESS`` | ``127.0.0.1:7233`` | frontend ``host:port`` |
| ``TEMPORAL_NAMESPACE`` | ``default`` | namespace of the task workflows |
| ``TEMPORAL_API_KEY`` | unset | API key (Temporal Cloud); sent as a bearer token, turns TLS on |
| ``TEMPORAL_TLS`` | unset | ``true`` turns TLS on with the system's roots; ``false`` turns it off |
| ``TEMPORAL_TLS_CLIENT_CERT_PATH``, ``_DATA`` | unset | mTLS client certificate (PEM) |
| ``TEMPORAL_TLS_CLIENT_KEY_PATH``, ``_DATA`` | unset | mTLS client key (PEM) |
| ``TEMPORAL_TLS_SERVER_CA_CERT_PATH``, ``_DATA`` | unset | CA of the server's certificate |
| ``TEMPORAL_TLS_SERVER_NAME`` | unset | server name checked against the certificate (SNI) |
| ``TEMPORAL_GRPC_META_<NAME>`` | unset | a gRPC header sent with every call |
| ``TEMPORAL_PROFILE`` | ``default`` | the profile to read from the file |
| ``TEMPORAL_CONFIG_FILE`` | ``~/.config/temporalio/temporal.toml`` | the TOML profile file |

Any TLS setting or an API key turns TLS on (``TEMPORAL_TLS=false`` turns it off again); the
Temporal Cloud address is ``<namespace>.<account>.tmprl.cloud:7233``, or the regional API
endpoint with an API key. Environment variables override the file's values.
``TemporalProfile`` keeps the loaded profile out of every repr, log line and dump: only the
address, the namespace, and whether TLS and an API key are on are ever shown.

**This project's own variables** (pydantic-settings, case-insensitive):

| variable | default | meaning |
| --- | --- | --- |
| ``TEMPORAL_TASK_QUEUE`` | ``agent-tasks`` | task queue of the TaskWorkflow worker |
| ``NEO4J_URI`` | ``bolt://127.0.0.1:7687`` | Neo4j URI (schemes below) |
| ``NEO4J_USERNAME`` | ``neo4j`` | Neo4j user |
| ``NEO4J_PASSWORD`` | unset | Neo4j password; unset means the generated one in the data folder |
| ``NEO4J_DATABASE`` | ``neo4j`` | Neo4j database name |
| ``AGENT_TASKS_GRAPH`` | ``neo4j`` | the graph store: ``neo4j`` or ``falkordb`` |
| ``AGENT_TASKS_FALKORDB_URL`` | ``falkor://127.0.0.1:6380`` | FalkorDB URL (below; a secret) |
| ``AGENT_TASKS_FALKORDB_GRAPH`` | ``agent_tasks`` | the FalkorDB graph (a Redis key) |
| ``AGENT_TASKS_GRAPH_MAX_WRITES`` | ``4`` | graph-store writes of a worker at once (or NEO4J_...) |
| ``AGENT_TASKS_DATA_DIR`` | the user's data folder | local stack data (below): SQLite, Neo4j |
| ``AGENT_TASKS_FILES_ROOT`` | ``.`` | the folder the demo agent's file tools read, on the worker |
| ``AGENT_TASKS_MCP_HEADERS`` | unset | MCP header sets (below; secrets): JSON, or its file |
| ``AGENT_TASKS_BROKER_URL`` | ``redis://127.0.0.1:6379`` | token broker (``broker``); empty: off |
| ``AGENT_TASKS_HTTP_HOST`` | ``127.0.0.1`` | where ``agent-tasks serve`` listens |
| ``AGENT_TASKS_HTTP_PORT`` | ``8700`` | its port |
| ``AGENT_TASKS_STREAMS_PER_KEY`` | ``100`` | open SSE streams of one API key (``server``) |
| ``AGENT_TASKS_MAX_BODY_BYTES`` | ``1048576`` | the largest request body the HTTP API reads |
| ``AGENT_TASKS_TEMPORAL_UI_URL`` | (the dev server's) | the Temporal Web UI the page links to |
| ``AGENT_TASKS_PAGE_SESSION_HOURS`` | ``12.0`` | how long a sign-in to the page lasts |
| ``OTEL_TRACES_EXPORTER`` | ``none`` | ``otlp`` or ``console``: traces (``telemetry``) |
| ``OTEL_METRICS_EXPORTER`` | ``none`` | ``otlp`` or ``prometheus``: the SDK's runtime metrics |
| ``OTEL_EXPORTER_OTLP_ENDPOINT`` | ``http://localhost:4318`` | OTLP/HTTP collector (base URL) |
| ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` | base + ``/v1/traces`` | traces URL, used as is |
| ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` | base + ``/v1/metrics`` | metrics URL, used as is |
| ``OTEL_EXPORTER_OTLP_HEADERS`` | unset | ``key=value,...`` sent with every export (secret) |
| ``OTEL_EXPORTER_PROMETHEUS_HOST`` | ``localhost`` | where the ``/metrics`` endpoint listens |
| ``OTEL_EXPORTER_PROMETHEUS_PORT`` | ``9464`` | its port |

**The data folder** of the local stack (``agent-tasks dev up`` keeps the Temporal SQLite file,
the Neo4j store and its generated password, the logs and the pid files there) does not depend
on the current folder, so ``dev up``, ``dev down``, the CLI and apps agree wherever they run:
``AGENT_TASKS_DATA_DIR`` when set (a relative path is taken from the current folder, once, and
kept absolute), else the user's data folder of ``agent-tasks`` (``default_data_dir``):
``$XDG_DATA_HOME/agent-tasks``, that is ``~/.local/share/agent-tasks``, on Linux and other
Unix systems (the XDG Base Directory specification), ``~/Library/Application Support/agent-tasks``
on macOS, ``%LOCALAPPDATA%\\agent-tasks`` on Windows. Two stacks on one machine take two data
folders and two sets of ports.

Neo4j URI schemes (the driver's own): ``bolt://`` one server, ``neo4j://`` a cluster (routing),
each with ``+s`` for TLS checked against the system's CAs (Aura: ``neo4j+s://<id>.databases.
neo4j.io``) or ``+ssc`` for TLS with a self-signed certificate.

MCP header sets (``AGENT_TASKS_MCP_HEADERS``, the worker's ``McpServer.headers``): a JSON object
of set name -> {header: value}, ``{"billing": {"Authorization": "Bearer ..."}}``, given as that
text (it starts with ``{``) or as the path of a file holding it; an agent's spec names a set,
never its values, which no repr, log line or history shows (``Settings.mcp_header_sets``).

FalkorDB URL schemes: ``falkor://`` or ``redis://`` a server, ``falkors://`` or ``rediss://``
with TLS; ``[user:password@]host:port``, the password the server's ``requirepass``.

The ``OTEL_*`` names and meanings are OpenTelemetry's standard ones, with one choice of ours:
nothing is exported unless an exporter is named (the specification's default is ``otlp``). The
OpenTelemetry SDK reads the rest of the standard variables itself (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, the OTLP exporter's timeout, compression and certificates).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from temporalio.envconfig import ClientConfigProfile, ClientConnectConfig

from agent_tasks.contract.errors import ConfigurationError

if TYPE_CHECKING:  # loaded when a client connects: a command that only reads settings needs none
    from temporalio.client import Client

    from agent_tasks import telemetry

DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"
"""Where the local stack's Temporal dev server listens (``agent-tasks dev up``)."""
DEFAULT_TEMPORAL_NAMESPACE = "default"
"""The namespace every Temporal server has."""
NEO4J_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")
"""URI schemes the Neo4j Python driver accepts (``+s``: TLS, ``+ssc``: self-signed TLS)."""


@dataclass(frozen=True, repr=False)
class TemporalProfile:
    """How the client reaches Temporal: one profile of the SDK's client configuration, with
    this project's defaults where the profile sets no address or namespace.

    The profile may hold secrets (API key, client key, gRPC headers), so the repr shows only
    the address, the namespace, and whether TLS and an API key are on.
    """

    profile: ClientConfigProfile = field(default_factory=ClientConfigProfile)
    """The SDK's profile as loaded (environment over file)."""

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> TemporalProfile:
        """Load the profile ``TEMPORAL_PROFILE`` names (``default``) from the TOML file and
        the ``TEMPORAL_*`` variables (``ClientConfigProfile.load``).

        Args:
            env: the variables to read instead of the process environment (tests).

        Raises:
            ValueError: the file cannot be read or parsed, or names no such profile.
        """
        try:
            return cls(ClientConfigProfile.load(override_env_vars=env))
        except RuntimeError as err:  # the SDK's ConfigError
            raise ValueError(f"Temporal client configuration: {err}") from err

    @property
    def address(self) -> str:
        """Frontend ``host:port``; ``DEFAULT_TEMPORAL_ADDRESS`` when the profile sets none."""
        return self.profile.address or DEFAULT_TEMPORAL_ADDRESS

    @property
    def namespace(self) -> str:
        """Namespace; ``DEFAULT_TEMPORAL_NAMESPACE`` when the profile sets none."""
        return self.profile.namespace or DEFAULT_TEMPORAL_NAMESPACE

    @property
    def tls(self) -> bool:
        """Whether the connection uses TLS (an API key or any TLS setting, unless
        ``TEMPORAL_TLS=false``)."""
        if self.profile.tls is not None:
            return self.profile.tls.disabled is not True
        return self.profile.api_key is not None

    def with_overrides(
        self, *, address: str | None = None, namespace: str | None = None
    ) -> TemporalProfile:
        """This profile with another address or namespace (None keeps the profile's)."""
        return TemporalProfile(
            replace(
                self.profile,
                address=address or self.profile.address,
                namespace=namespace or self.profile.namespace,
            )
        )

    def connect_config(self) -> ClientConnectConfig:
        """Keyword arguments of ``Client.connect``: ``target_host``, ``namespace``, and
        ``api_key``, ``tls``, ``rpc_metadata`` when the profile sets them.

        Raises:
            OSError: a certificate or key file cannot be read.
        """
        config = self.profile.to_client_connect_config()
        config["target_host"] = self.address
        config["namespace"] = self.namespace
        return config

    def __repr__(self) -> str:
        api_key = "set" if self.profile.api_key else "unset"
        return (
            f"TemporalProfile(address={self.address!r}, namespace={self.namespace!r}, "
            f"tls={self.tls}, api_key={api_key})"
        )


DATA_DIR_NAME = "agent-tasks"
"""The data folder's name inside the user's data directory (``default_data_dir``)."""


def default_data_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """The user's data folder of ``agent-tasks``, the data folder when
    ``AGENT_TASKS_DATA_DIR`` is not set: the same from every current folder.

    Args:
        env: the variables to read instead of the process environment (tests).
        platform: ``sys.platform`` to follow instead of this one's (tests).

    Returns:
        ``%LOCALAPPDATA%/agent-tasks`` on Windows (``~/AppData/Local`` when unset),
        ``~/Library/Application Support/agent-tasks`` on macOS, else
        ``$XDG_DATA_HOME/agent-tasks`` (``~/.local/share`` when unset or not absolute, as the
        XDG Base Directory specification says).
    """
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    home = Path(env.get("HOME") or Path.home())
    if platform == "win32":
        base = Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        xdg = env.get("XDG_DATA_HOME", "")
        base = Path(xdg) if Path(xdg).is_absolute() else home / ".local" / "share"
    return base / DATA_DIR_NAME


def parse_mcp_headers(value: str) -> dict[str, dict[str, str]]:
    """MCP header sets from ``AGENT_TASKS_MCP_HEADERS``: JSON text (starting with ``{``) or the
    path of a file holding it, a JSON object of set name -> {header name: value}, all strings.

    Returns:
        ``{"billing": {"Authorization": "Bearer ..."}}``.

    Raises:
        ValueError: the file cannot be read, or the text is not JSON of that shape; the
            message names the file or the set, never a header's value.
    """
    text = value.strip()
    source = "AGENT_TASKS_MCP_HEADERS"
    if not text.startswith("{"):
        source = f"AGENT_TASKS_MCP_HEADERS file {text!r}"
        try:
            text = Path(text).expanduser().read_text()
        except OSError as err:
            raise ValueError(f"{source}: cannot be read ({err.strerror})") from None
    try:
        sets = json.loads(text)
    except json.JSONDecodeError as err:  # its msg names no text, only the position
        raise ValueError(
            f"{source}: not JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from None
    if not isinstance(sets, dict):
        raise ValueError(f"{source}: not a JSON object of header sets")
    for name, headers in sets.items():
        if not isinstance(headers, dict) or not all(
            isinstance(h, str) and isinstance(v, str) for h, v in headers.items()
        ):
            raise ValueError(f"{source}: set {name!r} is not an object of string headers")
    return sets


class _OwnEnvironment(EnvSettingsSource):
    """pydantic-settings' environment source, minus ``temporal``: the SDK reads the Temporal
    variables (``TemporalProfile.load``), never pydantic from a variable named TEMPORAL."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name == "temporal":
            return None, field_name, False
        return super().get_field_value(field, field_name)


class Neo4jPasswordMissing(ConfigurationError):
    """No ``NEO4J_PASSWORD`` is set and the local stack's data folder holds no generated one."""


class Settings(BaseSettings):
    """Addresses and credentials of Temporal and Neo4j, telemetry, and the local stack's data
    folder. ``Settings()`` reads the environment (the tables in the module docstring); keyword
    arguments override it (``Settings(temporal=TemporalProfile.load({...}))`` in tests)."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    temporal: TemporalProfile = Field(default_factory=TemporalProfile.load, exclude=True)
    """Where and how to reach Temporal (the SDK's client configuration)."""
    temporal_task_queue: str = "agent-tasks"
    """Task queue the worker polls and the client starts workflows on."""
    neo4j_uri: str = "bolt://127.0.0.1:7687"
    """Neo4j URI: ``bolt://`` one server, ``neo4j://`` a cluster, ``+s`` / ``+ssc`` for TLS."""
    neo4j_username: str = "neo4j"
    """Neo4j user name."""
    neo4j_password: SecretStr | None = None
    """Neo4j password; None means the one ``agent-tasks dev up`` generated in the data folder."""
    neo4j_database: str = "neo4j"
    """Neo4j database the mirror writes to."""
    graph_max_writes: int = Field(
        default=4,
        ge=1,
        le=256,
        validation_alias=AliasChoices("AGENT_TASKS_GRAPH_MAX_WRITES", "NEO4J_MAX_WRITES"),
    )
    """Mirror transactions one worker process runs at once in the graph store, either store
    (``NEO4J_MAX_WRITES``, its first name, is read too); the rest wait their turn. More of them
    than the store's server has cores only makes each one slower, and a cold server's first
    ones run out of transaction time. Raise it for a store with more cores, or one far
    away."""
    graph: Literal["neo4j", "falkordb"] = Field(
        default="neo4j", validation_alias="AGENT_TASKS_GRAPH"
    )
    """The graph store (``taskgraph.store.build_graph_store``)."""
    falkordb_url: SecretStr = Field(
        default=SecretStr("falkor://127.0.0.1:6380"), validation_alias="AGENT_TASKS_FALKORDB_URL"
    )
    """FalkorDB URL (a secret: it may carry the server's password); its scheme is checked
    when the store is built (``taskgraph.store.graph_kind``)."""
    falkordb_graph: str = Field(
        default="agent_tasks", validation_alias="AGENT_TASKS_FALKORDB_GRAPH"
    )
    """The FalkorDB graph (one Redis key) that holds the tasks."""
    data_dir: Path = Field(
        default_factory=default_data_dir, validation_alias="AGENT_TASKS_DATA_DIR"
    )
    """Data folder of the local stack: Temporal SQLite file, Neo4j store, password, logs (the
    module docstring: ``AGENT_TASKS_DATA_DIR``, else ``default_data_dir``); always absolute."""
    files_root: Path = Field(default=Path("."), validation_alias="AGENT_TASKS_FILES_ROOT")
    """The folder the demo agent's file tools read (list, read, search), on the worker."""
    mcp_headers: SecretStr | None = Field(default=None, validation_alias="AGENT_TASKS_MCP_HEADERS")
    """The worker's MCP header sets: JSON text or a JSON file's path (``mcp_header_sets``)."""
    broker_url: str = Field(
        default="redis://127.0.0.1:6379", validation_alias="AGENT_TASKS_BROKER_URL"
    )
    """The broker of model tokens and stream wake-ups (Redis pub/sub, ``broker``); empty: none
    (no tokens; streams then read tasks every ``STREAM_POLL_S``)."""
    http_host: str = Field(default="127.0.0.1", validation_alias="AGENT_TASKS_HTTP_HOST")
    """Where ``agent-tasks serve`` listens (``0.0.0.0`` in a container)."""
    http_port: int = Field(default=8700, ge=1, le=65535, validation_alias="AGENT_TASKS_HTTP_PORT")
    """The HTTP API's port."""
    streams_per_key: int = Field(default=100, ge=1, validation_alias="AGENT_TASKS_STREAMS_PER_KEY")
    """Open SSE streams one API key may hold in one server process (another is refused, 429)."""
    max_body_bytes: int = Field(
        default=1_048_576, ge=1_024, validation_alias="AGENT_TASKS_MAX_BODY_BYTES"
    )
    """The largest request body the HTTP API reads (bytes); a larger one is refused, 413."""
    temporal_ui_url: str = Field(default="", validation_alias="AGENT_TASKS_TEMPORAL_UI_URL")
    """The Temporal Web UI the page links each task's workflow to; empty: the local dev
    server's (the Temporal address's port + 1000, ``temporal_ui``)."""
    page_session_hours: float = Field(
        default=12.0, gt=0, le=720, validation_alias="AGENT_TASKS_PAGE_SESSION_HOURS"
    )
    """How long a sign-in to the page lasts (hours)."""
    otel_traces_exporter: Literal["none", "otlp", "console"] = "none"
    """Where traces go: nowhere, an OTLP/HTTP collector, or standard output."""
    otel_metrics_exporter: Literal["none", "otlp", "prometheus"] = "none"
    """Where the SDK's runtime metrics go: nowhere, OTLP/HTTP, or a Prometheus endpoint."""
    otel_exporter_otlp_endpoint: str = "http://localhost:4318"
    """OTLP/HTTP collector base URL (the signal's path is appended)."""
    otel_exporter_otlp_traces_endpoint: str | None = None
    """OTLP/HTTP traces URL, used as is; None: the base URL + ``/v1/traces``."""
    otel_exporter_otlp_metrics_endpoint: str | None = None
    """OTLP/HTTP metrics URL, used as is; None: the base URL + ``/v1/metrics``."""
    otel_exporter_otlp_headers: SecretStr | None = None
    """``key=value`` pairs, comma-separated, sent with every export (for example a token)."""
    otel_exporter_prometheus_host: str = "localhost"
    """Host the Prometheus ``/metrics`` endpoint binds to (``0.0.0.0`` in a container)."""
    otel_exporter_prometheus_port: int = Field(default=9464, ge=1, le=65535)
    """Port of the Prometheus ``/metrics`` endpoint."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment (without ``temporal``, see
        ``_OwnEnvironment``); no dotenv or secrets folder."""
        return init_settings, _OwnEnvironment(settings_cls)

    @field_validator("neo4j_uri")
    @classmethod
    def _check_neo4j_scheme(cls, uri: str) -> str:
        scheme = uri.partition("://")[0]
        if scheme not in NEO4J_SCHEMES:
            raise ValueError(f"NEO4J_URI must start with one of {', '.join(NEO4J_SCHEMES)}://")
        return uri

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, folder: Path) -> Path:
        return folder.expanduser().absolute()

    def mcp_header_sets(self) -> dict[str, dict[str, str]]:
        """The worker's MCP header sets by name (``AGENT_TASKS_MCP_HEADERS``; ``{}`` when
        unset), for ``build_worker(mcp_headers=...)``.

        Raises:
            ValueError: as ``parse_mcp_headers`` (read here, not when the settings are: a
                validation error would show the value).
        """
        if self.mcp_headers is None:
            return {}
        return parse_mcp_headers(self.mcp_headers.get_secret_value())

    @property
    def temporal_ui(self) -> str:
        """The Temporal Web UI's base URL: ``AGENT_TASKS_TEMPORAL_UI_URL``, else the local dev
        server's (``temporal server start-dev`` serves it on the frontend's port + 1000)."""
        if self.temporal_ui_url:
            return self.temporal_ui_url.rstrip("/")
        host, _, port = self.temporal.address.rpartition(":")
        return f"http://{host or '127.0.0.1'}:{int(port or 7233) + 1000}"

    @property
    def neo4j_password_file(self) -> Path:
        """Where ``agent-tasks dev up`` keeps the generated Neo4j password (mode 0600)."""
        return self.data_dir / "neo4j" / "password"

    @property
    def neo4j_max_writes(self) -> int:
        """Deprecated: ``graph_max_writes`` (the bound is the graph store's, either store)."""
        return self.graph_max_writes

    def neo4j_auth(self) -> tuple[str, str]:
        """Return ``(username, password)`` for the Neo4j driver.

        Raises:
            Neo4jPasswordMissing: no NEO4J_PASSWORD is set and the data folder holds none
                (run ``agent-tasks dev up`` first).
        """
        if self.neo4j_password is not None:
            return self.neo4j_username, self.neo4j_password.get_secret_value()
        try:
            return self.neo4j_username, self.neo4j_password_file.read_text().strip()
        except FileNotFoundError:
            raise Neo4jPasswordMissing(
                f"NEO4J_PASSWORD is not set and {self.neo4j_password_file} does not exist: "
                "run `agent-tasks dev up` (it keeps the password in the data folder "
                f"{self.data_dir}, AGENT_TASKS_DATA_DIR) or set NEO4J_PASSWORD"
            ) from None

    def exporters(self) -> telemetry.Exporters:
        """The telemetry exporters these settings name.

        Raises:
            ValueError: ``OTEL_EXPORTER_OTLP_HEADERS`` is not ``key=value,...``.
        """
        from agent_tasks import telemetry

        base = self.otel_exporter_otlp_endpoint.rstrip("/")
        headers = self.otel_exporter_otlp_headers
        return telemetry.Exporters(
            traces=self.otel_traces_exporter,
            metrics=self.otel_metrics_exporter,
            otlp_traces_url=self.otel_exporter_otlp_traces_endpoint or f"{base}/v1/traces",
            otlp_metrics_url=self.otel_exporter_otlp_metrics_endpoint or f"{base}/v1/metrics",
            otlp_headers=telemetry.parse_headers(headers.get_secret_value() if headers else ""),
            prometheus_bind=(
                f"{self.otel_exporter_prometheus_host}:{self.otel_exporter_prometheus_port}"
            ),
        )


async def connect(
    settings: Settings | None = None,
    *,
    address: str | None = None,
    namespace: str | None = None,
) -> Client:
    """Connect to Temporal with the product's client plugin (``plugin.AgentTasksPlugin``: the
    data converter with pydantic models and the zlib payload codec, and the sandbox passthroughs
    of the workers built on the client), the SDK's client configuration
    (address, namespace, TLS, mTLS, API key), and the telemetry the settings name (the tracing
    interceptor, which workers built on this client inherit, and the runtime's metrics).

    Args:
        settings: where to connect; read from the environment when None.
        address: overrides the profile's address (``host:port``).
        namespace: overrides the profile's namespace.

    Raises:
        TaskServiceUnavailable: the server cannot be reached, or refused the TLS handshake or
            the credentials.
        OSError: a certificate or key file named by the configuration cannot be read.
        ValueError: telemetry is asked for but the ``otel`` extra is not installed.
    """
    from temporalio.client import Client

    from agent_tasks import telemetry
    from agent_tasks.contract.errors import TaskServiceUnavailable
    from agent_tasks.plugin import AgentTasksPlugin

    settings = settings or Settings()
    profile = settings.temporal.with_overrides(address=address, namespace=namespace)
    observe = telemetry.setup(settings.exporters())
    try:
        return await Client.connect(
            **profile.connect_config(),
            plugins=[AgentTasksPlugin()],
            interceptors=observe.interceptors,
            runtime=observe.runtime,
        )
    except RuntimeError as err:
        raise TaskServiceUnavailable(
            f"cannot reach Temporal at {profile!r}: {err}. Is it running there? The address "
            "comes from TEMPORAL_ADDRESS (or the profile TEMPORAL_PROFILE names); "
            "`agent-tasks dev up` (`./run dev up` in a checkout) starts the local stack"
        ) from err


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
    (an app that connects, writes and exits). Such a
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
