"""The layout's rules: arrows point one way, and importing a package loads only what it needs.

The allowed arrows (README, "Layout"): workflows <- activities <- worker <- starter and the CLI;
taskgraph is used by activities, worker and starter; trajectories is pure; devstack serves the
CLI and tests; config is read by worker, starter and devstack; telemetry (OpenTelemetry, loaded
only when configured) is used by config and worker; codec (the payload codec) by config and
starter; broker (the pub/sub of tokens) by activities, worker and starter; bench measures it
all, and the CLI loads it only for ``agent-tasks bench``. Nothing imports up.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALLOWED: dict[str, set[str]] = {
    "workflows": set(),
    "trajectories": {"workflows"},
    "taskgraph": {"workflows"},
    "activities": {"workflows", "taskgraph", "broker"},
    "telemetry": set(),
    "codec": set(),
    "broker": {"workflows"},
    "config": {"workflows", "telemetry", "codec"},
    "worker": {"workflows", "taskgraph", "activities", "config", "telemetry", "broker"},
    "devstack": {"workflows", "config"},
    "starter": {
        "workflows",
        "taskgraph",
        "activities",
        "config",
        "worker",
        "devstack",
        "trajectories",
        "telemetry",
        "codec",
        "bench",
        "broker",
    },
    "bench": {
        "workflows",
        "taskgraph",
        "activities",
        "config",
        "worker",
        "devstack",
        "starter",
        "codec",
        "trajectories",
        "broker",
    },
}
"""Each top-level part of the project -> the parts it may import (besides itself)."""


def part_files(part: str) -> list[Path]:
    single = ROOT / f"{part}.py"
    return [single] if single.is_file() else sorted((ROOT / part).rglob("*.py"))


def imported_parts(path: Path) -> set[str]:
    """The project parts that ``path`` imports (absolute imports only; the project has no
    relative ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        found |= {name.split(".")[0] for name in names} & ALLOWED.keys()
    return found


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_imports_point_one_way(part: str) -> None:
    files = part_files(part)
    assert files, part
    for path in files:
        upward = imported_parts(path) - ALLOWED[part] - {part}
        assert not upward, f"{path.relative_to(ROOT)} imports {sorted(upward)}"


def loaded_top_level(statement: str) -> set[str]:
    """The top-level modules a fresh interpreter has loaded after ``statement``."""
    listing = "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    code = f"{statement}; import sys; {listing}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(done.stdout.split())


def test_import_starter_loads_no_neo4j_driver() -> None:
    loaded = loaded_top_level("import starter")
    assert "neo4j" not in loaded
    assert {"starter", "workflows", "taskgraph", "temporalio"} <= loaded


def test_workflows_load_no_neo4j_no_settings_no_starter() -> None:
    loaded = loaded_top_level("import workflows.task, workflows.ledger, workflows.models")
    assert not loaded & {"neo4j", "starter", "activities", "config", "pydantic_settings"}


def test_no_opentelemetry_is_loaded_unless_configured() -> None:
    """The ``otel`` extra is optional: with no exporter named, bootstrapping a worker's pieces
    (settings, the Temporal client's options, the task graph) imports no OpenTelemetry."""
    statement = (
        "import worker, starter, telemetry; from config import Settings; "
        "s = Settings(otel_traces_exporter='none', otel_metrics_exporter='none'); "
        "assert telemetry.setup(s.exporters()) == telemetry.Telemetry()"
    )
    loaded = loaded_top_level(statement)
    assert "worker" in loaded
    assert "opentelemetry" not in loaded
