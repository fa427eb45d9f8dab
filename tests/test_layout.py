"""The layout's rules: arrows point one way, and importing a package loads only what it needs.

The allowed arrows (docs/concepts.md, "Layout"): workflows <- activities <- worker <- starter and
the CLI; taskgraph is used by tasklog, activities, worker and starter; tasklog (the cross-run
reader) by activities and starter; trajectories is pure; devstack serves the CLI and tests;
config is read by worker, starter and devstack; telemetry (OpenTelemetry, loaded only when
configured) is used by config and worker; codec (the payload codec) and plugin (the client
plugin) by config, worker and starter; broker (the pub/sub of tokens and of a log's growth) by
activities, worker and starter; bench measures it all and nothing imports it but its
own tests. Nothing imports up, no import (of a part or of a module, ``TYPE_CHECKING`` ones
included) runs in a circle, and the wheel ships the runtime parts only.
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
    "tasklog": {"workflows", "taskgraph"},
    "activities": {"workflows", "taskgraph", "tasklog", "broker"},
    "telemetry": set(),
    "codec": set(),
    "plugin": {"codec"},
    "broker": {"workflows"},
    "config": {"workflows", "telemetry", "codec", "plugin"},
    "worker": {
        "workflows",
        "taskgraph",
        "activities",
        "config",
        "telemetry",
        "codec",
        "plugin",
        "broker",
    },
    "devstack": {"workflows", "config"},
    "starter": {
        "workflows",
        "taskgraph",
        "tasklog",
        "activities",
        "config",
        "worker",
        "devstack",
        "trajectories",
        "telemetry",
        "codec",
        "plugin",
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
        "tasklog",
        "plugin",
        "telemetry",
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


# ------------------------------------------------------------------- the import graph


def module_name(path: Path) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """Every module of the project's parts and of ``tests``, by dotted name."""
    files = [f for part in [*ALLOWED, "tests"] for f in part_files(part)]
    return {module_name(f): f for f in files}


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports, ``TYPE_CHECKING`` imports included: ``import a.b``
    is ``a.b``; ``from a import b`` is ``a.b`` when that is a module, else ``a``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names} & modules
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The circles of a directed graph: one path ``a -> ... -> a`` per back edge found by a
    depth-first search (empty when the graph is acyclic)."""
    found: list[list[str]] = []
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def part_graph() -> dict[str, set[str]]:
    """Each part (and ``tests``) -> the parts its files import, from the code."""
    graph: dict[str, set[str]] = {}
    for part in [*ALLOWED, "tests"]:
        imported = set().union(*(imported_parts(f) | imports_tests(f) for f in part_files(part)))
        graph[part] = imported - {part}
    return graph


def imports_tests(path: Path) -> set[str]:
    """``{"tests"}`` when ``path`` imports the test suite, else empty."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        if any(name.split(".")[0] == "tests" for name in names):
            return {"tests"}
    return set()


def test_the_cycle_finder_finds_a_circle_and_none_in_a_tree() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_module_imports_in_a_circle() -> None:
    modules = project_modules()
    names = set(modules)
    edges = {name: module_imports(path, names) - {name} for name, path in modules.items()}
    assert cycles(edges) == []


def test_no_part_imports_in_a_circle_and_the_allowed_arrows_have_none() -> None:
    assert cycles(part_graph()) == []
    assert cycles(ALLOWED) == []


def test_no_arrow_runs_back_up_the_house() -> None:
    """workflows <- activities <- worker <- starter and the CLI: the part graph, computed
    from the code, against the order of the house (each part imports only parts before it)."""
    order = ["workflows", "taskgraph", "tasklog", "activities", "worker", "starter"]
    graph = part_graph()
    for rank, part in enumerate(order):
        assert not graph[part] & set(order[rank:]), (part, graph[part])


def test_tools_stay_tools() -> None:
    """Nothing of the product imports ``bench``, no benchmark imports ``tests``, and the CLI
    loads no benchmark."""
    graph = part_graph()
    assert [part for part, imported in graph.items() if "bench" in imported] == ["tests"]
    assert "tests" not in graph["bench"]
    assert "bench" not in loaded_top_level("import starter.cli")


def test_the_wheel_ships_the_runtime_and_the_image_copies_it() -> None:
    """pyproject's package list (as setuptools finds it) is every runtime part and nothing
    else (no ``bench``, no ``tests``), and the worker image copies each of them."""
    import tomllib

    from setuptools import find_packages  # type: ignore[import-untyped]

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(ROOT, include=setup["packages"]["find"]["include"])
    shipped = {name.split(".")[0] for name in packages} | set(setup["py-modules"])
    assert shipped == set(ALLOWED) - {"bench"}
    assert {"bench", "tests"}.isdisjoint(name.split(".")[0] for name in packages)
    assert all((ROOT / p.replace(".", "/") / "__init__.py").is_file() for p in packages)
    dockerfile = (ROOT / "Dockerfile").read_text()
    for name in {name.split(".")[0] for name in packages}:
        assert f"COPY {name} {name}\n" in dockerfile, name


# ------------------------------------------------------------------- one way in

APP_NAMES = (
    # clients, plugins, bootstrap
    "ConversationHistory HistoryRetention connect Settings AgentTasksPlugin "
    "AgentTasksWorkerPlugin DATA_CONVERTER build_worker open_graph open_services "
    # results and rows
    "WriteResult GetTaskResult EventsResult StepsResult DecisionsResult RedactResult "
    "DeleteResult TaskView Event StepView TaskRow EventRow StepRow DecisionRow TreeRow "
    "ToolFailures "
    # enums and inputs
    "EventKind Role StepKind StepState TaskStatus ResultValidity ErrorCode EventInput StepWrite "
    # agent code and tools
    "agent AgentContext AgentSpec ModelSpec Budgets StepOutcome ChildOutcome tool Tool "
    "ToolContext ScriptedModel ModelTurn ToolCall TokenUsage "
    # errors
    "TaskServiceUnavailable GraphNotConfigured GraphIncomplete Neo4jPasswordMissing "
    "BudgetExceeded InputTimeout SpawnRefused ChildFailed"
).split()
"""What an app, an agent author and an operator's script use (issue 21: one way in)."""


def test_starter_is_the_one_way_in() -> None:
    import starter
    import worker

    assert set(APP_NAMES) <= set(starter.__all__)
    for name in starter.__all__:
        assert getattr(starter, name) is not None, name
    assert starter.build_worker is worker.build_worker  # served from worker when first used


# ------------------------------------------------------------------- rooms of one job

MAX_FILE_LINES = 500
"""Lines a file of the project may have (outside ``tests/`` and data), unless ``LONG_FILES``
gives the reason it holds more."""

LONG_FILES = {
    "workflows/task.py": "TaskWorkflow is one @workflow.defn class: its update, query and "
    "signal handlers, their validators' admission rules and the run loop (mirror calls, "
    "continue-as-new, cancellation) are the workflow's interface to Temporal and stay in the "
    "class; what they call lives in the ledger and its rooms, workflows.mirroring and "
    "workflows.agents",
}
"""Files over ``MAX_FILE_LINES`` lines, each with the reason."""

DATA = (".json", ".traj", ".lock")
"""Suffixes of data and generated files (trajectories, JSON Schemas, pinned locks)."""


def test_no_file_is_over_500_lines_without_a_reason() -> None:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    files = [
        name
        for name in listed
        if not name.startswith(("tests/", "examples/")) and not name.endswith(DATA)
    ]
    lines = {name: len((ROOT / name).read_bytes().splitlines()) for name in files}
    long = {name for name, count in lines.items() if count > MAX_FILE_LINES}
    assert long == set(LONG_FILES), {name: lines.get(name) for name in long ^ set(LONG_FILES)}
