"""The production suite's cluster (``tools.cluster``) and ``docker-compose.production.yml``
agree: the same Temporal server version (the server image and the admin tools' image), the
same schema steps for both databases, the server's default dynamic config, and the same setup
(``agent-tasks setup`` registers the namespace and the search attributes)."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from tools.cluster import (
    DATABASES,
    DYNAMIC_CONFIG,
    TEMPORAL_SERVER_VERSION,
    schema_steps,
)

ROOT = Path(__file__).resolve().parents[2]


def services() -> dict[str, dict[str, object]]:
    compose = yaml.safe_load((ROOT / "docker-compose.production.yml").read_text())
    found: dict[str, dict[str, object]] = compose["services"]
    return found


def test_the_same_server_version() -> None:
    version = TEMPORAL_SERVER_VERSION.removeprefix("v")
    assert services()["temporal"]["image"] == f"temporalio/server:{version}"
    assert services()["temporal-schema"]["image"] == f"temporalio/admin-tools:{version}"


def test_the_same_schema_steps() -> None:
    command = services()["temporal-schema"]["command"]
    assert isinstance(command, list) and len(command) == 1
    script = str(command[0])
    run = [
        shlex.split(line.replace("$$", "$"))[1:]
        for line in script.splitlines()
        if line.strip().startswith("temporal-sql-tool")
    ]
    wanted = [
        step for db, folder in DATABASES.items() for step in schema_steps(db, folder, "$schemas")
    ]
    assert run == wanted


def test_the_same_dynamic_config_and_setup() -> None:
    assert DYNAMIC_CONFIG == {}  # the server's defaults: the compose file sets none
    temporal = services()["temporal"]
    assert "DYNAMIC_CONFIG_FILE_PATH" not in temporal["environment"]  # type: ignore[operator]
    assert services()["setup"]["command"][:2] == ["agent-tasks", "setup"]  # type: ignore[index]
