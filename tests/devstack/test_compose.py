"""docker-compose.yml runs the stack the code expects: its service names and the worker's
environment match the settings the code reads."""

from __future__ import annotations

from pathlib import Path

import yaml

from config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_and_environment_match_the_code() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert set(compose["services"]) == {"temporal", "neo4j", "worker"}
    env = compose["services"]["worker"]["environment"]
    settings_vars = {
        str(field.validation_alias or name).upper()
        for name, field in Settings.model_fields.items()
        if name != "data_dir"
    }
    assert set(env) == settings_vars - {"NEO4J_DATABASE"}
    host, port = env["TEMPORAL_ADDRESS"].split(":")
    assert host == "temporal" and port == "7233"
    assert env["NEO4J_URI"] == "bolt://neo4j:7687"
    assert env["TEMPORAL_TASK_QUEUE"] == Settings.model_fields["temporal_task_queue"].default
    temporal_args = " ".join(compose["services"]["temporal"]["command"])
    for attribute in ("ProjectId", "AgentId", "SessionId", "TaskStatus", "ParentTask"):
        assert f"--search-attribute={attribute}=Keyword" in temporal_args
    parsed = Settings.model_validate(
        {
            k.lower(): v.replace("${NEO4J_PASSWORD:?set NEO4J_PASSWORD}", "pw")
            for k, v in env.items()
        }
    )
    assert parsed.neo4j_auth() == ("neo4j", "pw")
