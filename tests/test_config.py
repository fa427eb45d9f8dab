"""Configuration: the SDK's client configuration (environment and TOML profile) reaches a TLS
and mTLS Temporal endpoint with no code, a worker started from the environment alone works
through it, secrets never show, and Neo4j URIs are checked.

The TLS endpoint is real: a TLS-terminating TCP proxy (``ssl`` with ALPN ``h2``) in front of
the local stack's Temporal dev server, with a CA, server and client certificates made here
with ``cryptography`` (the dev server has no TLS flags: ``temporal server start-dev --help``).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import signal
import ssl
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pydantic import ValidationError

from agent_tasks.config import (
    DEFAULT_TEMPORAL_ADDRESS,
    Settings,
    TemporalProfile,
    connect,
    default_data_dir,
)
from agent_tasks.contract.errors import TaskServiceUnavailable
from agent_tasks.devstack import free_port
from agent_tasks.starter.client import ConversationHistory
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from tests.conftest import mirrored

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------ certificates


@dataclass(frozen=True)
class Pki:
    """PEM files of a CA, a server certificate for localhost, and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key_and_pem(folder: Path, name: str) -> tuple[ec.EllipticCurvePrivateKey, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    path = folder / f"{name}.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return key, path


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    extensions: list[x509.ExtensionType],
) -> x509.Certificate:
    """An RFC 5280 certificate, as Python 3.13's default ``VERIFY_X509_STRICT`` requires:
    critical basic constraints and key usage, subject and authority key identifiers."""
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    is_ca = issuer is None
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not is_ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
        )
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca_key, _ = _key_and_pem(folder, "ca")
    ca = _certificate("test CA", ca_key, None, [])
    server_key, server_key_path = _key_and_pem(folder, "server")
    server = _certificate(
        "localhost",
        server_key,
        ("test CA", ca_key),
        [
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
        ],
    )
    client_key, client_key_path = _key_and_pem(folder, "client")
    client = _certificate(
        "agent-tasks-worker",
        client_key,
        ("test CA", ca_key),
        [x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])],
    )
    paths = {}
    for name, cert in (("ca", ca), ("server", server), ("client", client)):
        paths[name] = folder / f"{name}.pem"
        paths[name].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pki(paths["ca"], paths["server"], server_key_path, paths["client"], client_key_path)


# ------------------------------------------------------------------ the TLS endpoint


@dataclass
class TlsEndpoint:
    """A TLS (optionally mTLS) endpoint forwarding to the dev server; records each
    handshake's client certificate subject (None without one)."""

    port: int
    clients: list[str | None] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


def _subject(peercert: object) -> str | None:
    if not isinstance(peercert, dict) or "subject" not in peercert:
        return None
    return ",".join(value for rdn in peercert["subject"] for _, value in rdn)


async def _serve_tls(context: ssl.SSLContext, upstream: str) -> AsyncIterator[TlsEndpoint]:
    host, port = upstream.rsplit(":", 1)
    endpoint = TlsEndpoint(free_port())

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        endpoint.clients.append(_subject(writer.get_extra_info("peercert")))
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", endpoint.port, ssl=context)
    try:
        yield endpoint
    finally:
        server.close()


def _server_context(pki: Pki, *, require_client_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.set_alpn_protocols(["h2"])  # gRPC runs on HTTP/2
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    return context


@pytest.fixture
async def mtls(pki: Pki, settings: Settings) -> AsyncIterator[TlsEndpoint]:
    """mTLS in front of the local stack's Temporal: a client certificate signed by the CA is
    required."""
    context = _server_context(pki, require_client_cert=True)
    async for endpoint in _serve_tls(context, settings.temporal.address):
        yield endpoint


@pytest.fixture
async def tls(pki: Pki, settings: Settings) -> AsyncIterator[TlsEndpoint]:
    """Server-authenticated TLS only (what Temporal Cloud's API-key endpoints are)."""
    context = _server_context(pki, require_client_cert=False)
    async for endpoint in _serve_tls(context, settings.temporal.address):
        yield endpoint


def _mtls_env(endpoint: TlsEndpoint, pki: Pki) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": endpoint.address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca),
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
    }


@pytest.fixture
def worker_process(mtls: TlsEndpoint, pki: Pki) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``python -m agent_tasks.worker`` configured by its environment alone: Temporal through
    mTLS, its own task queue, Neo4j from the inherited settings."""
    queue = f"mtls-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **_mtls_env(mtls, pki), "TEMPORAL_TASK_QUEUE": queue}
    process = subprocess.Popen(
        [sys.executable, "-m", "agent_tasks.worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield queue, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# ------------------------------------------------------------------ connecting over TLS


async def test_a_worker_configured_by_environment_alone_serves_tasks_over_mtls(
    worker_process: tuple[str, subprocess.Popen[str]],
    mtls: TlsEndpoint,
    pki: Pki,
    graph: TaskGraph,
    project_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue, process = worker_process
    for name, value in _mtls_env(mtls, pki).items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert repr(settings.temporal) == (
        f"TemporalProfile(address='{mtls.address}', namespace='default', tls=True, api_key=unset)"
    )
    client = await connect(settings)
    history = ConversationHistory(
        client, project_id=project_id, agent_id="a", task_queue=queue, graph=graph
    )
    assert (await history.create_task("t", "over mTLS")).recorded
    written = await history.record_event("t", "message", "hello", role="user")
    assert written.recorded and written.first_seq == 1
    await mirrored(history, "t")  # the worker's mirror activity wrote Neo4j
    events = await history.list_events("t", after_seq=0, limit=10)
    assert [e.payload for e in events.events] == ["hello"]

    process.send_signal(signal.SIGTERM)
    output, _ = await asyncio.to_thread(process.communicate, timeout=60)
    assert process.returncode == 0, output
    assert f"worker polling task queue {queue!r}" in output and "worker stopped" in output
    # every connection (worker and this client) came through the TLS endpoint with the cert
    assert len(mtls.clients) >= 2
    assert set(mtls.clients) == {"agent-tasks-worker"}


async def test_a_toml_profile_selects_the_tls_endpoint(
    mtls: TlsEndpoint, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = tmp_path / "temporal.toml"
    config_file.write_text(
        "[profile.default]\n"
        'address = "127.0.0.1:1"\n'
        "[profile.secure]\n"
        f'address = "{mtls.address}"\n'
        'namespace = "default"\n'
        "[profile.secure.tls]\n"
        f'server_ca_cert_path = "{pki.ca}"\n'
        f'client_cert_path = "{pki.client_cert}"\n'
        f'client_key_path = "{pki.client_key}"\n'
    )
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config_file))
    monkeypatch.setenv("TEMPORAL_PROFILE", "secure")
    client = await connect()
    assert await client.service_client.check_health()
    assert mtls.clients == ["agent-tasks-worker"]


async def test_an_api_key_turns_tls_on_and_is_never_shown(
    tls: TlsEndpoint, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", tls.address)
    monkeypatch.setenv("TEMPORAL_API_KEY", "key-0123456789")
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca))
    settings = Settings()
    assert settings.temporal.tls
    assert "key-0123456789" not in repr(settings) + str(settings.model_dump())
    client = await connect(settings)  # the dev server behind ignores the key
    assert await client.service_client.check_health()
    assert tls.clients == [None]  # TLS, no client certificate


async def test_the_endpoint_refuses_what_the_configuration_does_not_allow(
    mtls: TlsEndpoint, pki: Pki
) -> None:
    attempts = {
        "plain text to a TLS port": {"TEMPORAL_ADDRESS": mtls.address},
        "no client certificate": {
            "TEMPORAL_ADDRESS": mtls.address,
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca),
        },
        "server not signed by a trusted CA": {
            "TEMPORAL_ADDRESS": mtls.address,
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
        },
    }
    for why, env in attempts.items():
        settings = Settings(temporal=TemporalProfile.load(env))
        with pytest.raises(TaskServiceUnavailable, match="cannot reach Temporal"):
            async with asyncio.timeout(60):
                await connect(settings)
        assert mtls.clients.count("agent-tasks-worker") == 0, why


# ------------------------------------------------------------------ settings alone


def test_defaults_are_the_local_stack() -> None:
    profile = TemporalProfile.load({})
    assert (profile.address, profile.namespace, profile.tls) == (
        DEFAULT_TEMPORAL_ADDRESS,
        "default",
        False,
    )
    assert profile.connect_config() == {"target_host": "127.0.0.1:7233", "namespace": "default"}


def test_the_mirrors_write_bound_is_the_graphs_default() -> None:
    """``NEO4J_MAX_WRITES`` (a setting) defaults to what a ``TaskGraph`` made without it
    takes, and is read from the environment."""
    from agent_tasks.taskgraph.neo4j.driver import NEO4J_MAX_WRITES

    assert Settings.model_fields["graph_max_writes"].default == NEO4J_MAX_WRITES
    assert Settings.model_validate({"NEO4J_MAX_WRITES": "16"}).graph_max_writes == 16
    new_name = Settings.model_validate({"AGENT_TASKS_GRAPH_MAX_WRITES": "8"})
    assert (new_name.graph_max_writes, new_name.neo4j_max_writes) == (8, 8)  # the old name
    with pytest.raises(ValidationError, match="NEO4J_MAX_WRITES"):
        Settings.model_validate({"NEO4J_MAX_WRITES": "0"})


def test_the_sdk_variables_shape_the_connection() -> None:
    profile = TemporalProfile.load(
        {
            "TEMPORAL_ADDRESS": "acme.a1b2c.tmprl.cloud:7233",
            "TEMPORAL_NAMESPACE": "acme.a1b2c",
            "TEMPORAL_API_KEY": "key-0123456789",
            "TEMPORAL_GRPC_META_X_TEAM": "blue",
        }
    )
    config = profile.connect_config()
    assert config == {
        "target_host": "acme.a1b2c.tmprl.cloud:7233",
        "namespace": "acme.a1b2c",
        "api_key": "key-0123456789",
        "tls": True,
        "rpc_metadata": {"x-team": "blue"},
    }
    off = TemporalProfile.load({"TEMPORAL_API_KEY": "k", "TEMPORAL_TLS": "false"})
    assert not off.tls and off.connect_config()["tls"] is False
    moved = profile.with_overrides(address="other:7233")
    assert (moved.address, moved.namespace) == ("other:7233", "acme.a1b2c")


def test_secrets_never_show_in_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_API_KEY", "key-0123456789")
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_DATA", "PRIVATE-KEY-PEM-xyz")
    monkeypatch.setenv("TEMPORAL_GRPC_META_AUTHORIZATION", "Bearer grpc-token")
    monkeypatch.setenv("NEO4J_PASSWORD", "neo4j-password-123")
    settings = Settings()
    shown = repr(settings) + str(settings) + str(settings.model_dump()) + repr(settings.temporal)
    for secret in ("key-0123456789", "PRIVATE-KEY-PEM-xyz", "grpc-token", "neo4j-password-123"):
        assert secret not in shown
    assert settings.neo4j_auth() == ("neo4j", "neo4j-password-123")


def test_a_missing_profile_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_PROFILE", "nowhere")
    with pytest.raises(ValueError, match="Temporal client configuration: Profile 'nowhere'"):
        Settings()


def test_a_variable_named_temporal_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL", "not json")
    assert Settings().temporal.address  # the SDK's loader fills it, pydantic reads nothing


@pytest.mark.parametrize(
    "uri",
    [
        "bolt://127.0.0.1:7687",
        "bolt+s://db.example:7687",
        "bolt+ssc://10.0.0.5:7687",
        "neo4j://cluster.example:7687",
        "neo4j+s://a1b2c3d4.databases.neo4j.io",
        "neo4j+ssc://cluster.example",
    ],
)
def test_neo4j_uri_schemes_of_the_driver_are_accepted(uri: str) -> None:
    assert Settings(neo4j_uri=uri).neo4j_uri == uri


@pytest.mark.parametrize("uri", ["http://127.0.0.1:7474", "127.0.0.1:7687", "neo4j+tls://x"])
def test_other_neo4j_uris_are_refused(uri: str) -> None:
    with pytest.raises(ValidationError, match="NEO4J_URI must start with one of bolt, "):
        Settings(neo4j_uri=uri)


# ------------------------------------------------------------------ the data folder


@pytest.mark.parametrize(
    ("platform", "env", "expected"),
    [
        ("linux", {"HOME": "/home/ann"}, "/home/ann/.local/share/agent-tasks"),
        ("linux", {"HOME": "/home/ann", "XDG_DATA_HOME": "/data"}, "/data/agent-tasks"),
        # the XDG specification: a relative XDG_DATA_HOME is invalid and ignored
        (
            "linux",
            {"HOME": "/home/ann", "XDG_DATA_HOME": "rel"},
            "/home/ann/.local/share/agent-tasks",
        ),
        ("freebsd14", {"HOME": "/usr/home/b"}, "/usr/home/b/.local/share/agent-tasks"),
        ("darwin", {"HOME": "/Users/c"}, "/Users/c/Library/Application Support/agent-tasks"),
        ("win32", {"HOME": "/h", "LOCALAPPDATA": "/appdata"}, "/appdata/agent-tasks"),
        ("win32", {"HOME": "/h"}, "/h/AppData/Local/agent-tasks"),
    ],
)
def test_the_default_data_folder_is_the_users_data_folder(
    platform: str, env: dict[str, str], expected: str
) -> None:
    assert default_data_dir(env, platform) == Path(expected)


def test_the_data_folder_does_not_depend_on_the_current_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AGENT_TASKS_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    seen = set()
    for here in (tmp_path, tmp_path / "a" / "b", Path("/")):
        here.mkdir(parents=True, exist_ok=True)
        monkeypatch.chdir(here)
        seen.add(Settings().data_dir)
    assert seen == {tmp_path / "xdg" / "agent-tasks"}
    # the variable overrides it; a relative one is taken from the current folder, once
    monkeypatch.chdir(tmp_path / "a")
    monkeypatch.setenv("AGENT_TASKS_DATA_DIR", "stack")
    settings = Settings()
    assert settings.data_dir == tmp_path / "a" / "stack"
    assert settings.neo4j_password_file == tmp_path / "a" / "stack" / "neo4j" / "password"
    monkeypatch.setenv("AGENT_TASKS_DATA_DIR", "~/stack")
    assert Settings().data_dir == Path.home() / "stack"
