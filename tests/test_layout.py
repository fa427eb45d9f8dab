"""The layout's rules: arrows point one way, and importing a package loads only what it needs.

The allowed arrows (docs/concepts.md, "Layout"): contract (the models, error vocabulary, search
attributes and answer checks the workflow shares with its callers) <- workflows <- activities <-
worker <- starter (the client SDK) <- server (the HTTP API and the page) <- cli; sealing (the event
text's keys) is used by the graph store and everything above it; taskgraph (the graph store's port,
with an adapter folder per store) by tasklog, activities, worker and the rest; trajectories is pure;
devstack serves the CLI, tests and tools; config is read by worker, starter, server, cli and
devstack; telemetry (OpenTelemetry, loaded only when configured) by config and worker; codec (the
payload codec) and plugin (the client plugin) by config, worker and starter; broker (the pub/sub of
tokens and of a log's growth) by activities, worker and starter. Outside the package: tools (the
production cluster and the history capture) use the product as the tests do; bench measures it all
and nothing imports it but its own tests. Nothing imports up, no import (of a part or of a module,
``TYPE_CHECKING`` ones included) runs in a circle, and the wheel ships the runtime parts only.

Every part is imported through the one import root, ``agent_tasks`` (``agent_tasks.workflows``,
``agent_tasks.config``): never by its bare name, which a user's own ``config.py`` or
``worker.py`` would shadow. ``tests``, ``tools`` and ``bench`` stay outside the package.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "agent_tasks"
"""The one import root: the folder ``agent_tasks/`` at the repository's top."""
PACKAGE_DIR = ROOT / PACKAGE

_BELOW_THE_SDK = {
    "contract",
    "workflows",
    "sealing",
    "taskgraph",
    "tasklog",
    "activities",
    "config",
    "worker",
    "telemetry",
    "codec",
    "plugin",
    "broker",
}
"""What the client SDK (``starter``) may import, and with it the server and the CLI."""

ALLOWED: dict[str, set[str]] = {
    "contract": set(),
    "sealing": {"contract"},
    "workflows": {"contract"},
    "trajectories": {"contract"},
    "taskgraph": {"contract", "sealing"},
    "tasklog": {"contract", "sealing", "taskgraph"},
    "activities": {"contract", "workflows", "sealing", "taskgraph", "tasklog", "broker"},
    "telemetry": set(),
    "codec": set(),
    "plugin": {"codec"},
    "broker": {"contract"},
    "config": {"contract", "telemetry", "codec", "plugin"},
    "worker": {
        "contract",
        "workflows",
        "taskgraph",
        "activities",
        "config",
        "telemetry",
        "codec",
        "plugin",
        "broker",
    },
    "devstack": {"contract", "config"},
    "starter": _BELOW_THE_SDK,
    "server": _BELOW_THE_SDK | {"starter"},
    "cli": _BELOW_THE_SDK | {"starter", "server", "devstack", "trajectories"},
    "tools/cluster": {"contract", "config", "devstack"},
    "tools/capture_histories": _BELOW_THE_SDK | {"starter", "server", "cli", "devstack"},
    "bench": _BELOW_THE_SDK
    | {"starter", "server", "cli", "devstack", "trajectories", "tools/cluster"},
}
"""Each top-level part of the project -> the parts it may import (besides itself)."""

TOOLS = {"tools/cluster", "tools/capture_histories"}
"""The repository's tools, each a part of its own: the production cluster (the production suite
and the bench start it) and the capture of saved histories (it drives the tests' agents)."""

PRODUCT = set(ALLOWED) - {"bench"} - TOOLS
"""The parts the wheel ships, each ``agent_tasks.<part>``."""


def part_of(name: str) -> str | None:
    """The part a dotted module name belongs to: ``agent_tasks.workflows.task`` ->
    ``workflows``, ``bench.rows`` -> ``bench``, ``tests.x`` -> ``tests``, ``tools.cluster`` ->
    ``tools/cluster``; None for others
    (and for a product part named without the root, which ``test_no_part_is_imported_bare``
    refuses)."""
    first, _, rest = name.partition(".")
    if first == PACKAGE:
        part = rest.split(".")[0]
        return part if part in PRODUCT else None
    if first == "tools":
        tool = f"tools/{rest.split('.')[0]}"
        return tool if tool in TOOLS else None
    return first if first in {"bench", "tests"} else None


def part_dir(part: str) -> Path:
    """The folder that holds ``part``: the package's for a product part, else the top's."""
    return PACKAGE_DIR if part in PRODUCT else ROOT


def part_files(part: str) -> list[Path]:
    single = part_dir(part) / f"{part}.py"
    return [single] if single.is_file() else sorted((part_dir(part) / part).rglob("*.py"))


def imported_names(path: Path) -> list[str]:
    """The dotted names ``path`` imports (absolute imports only; the project has no relative
    ones): ``import a.b`` -> ``a.b``; ``from a import b, c`` -> ``a.b``, ``a.c``."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def imported_parts(path: Path) -> set[str]:
    """The project parts (``ALLOWED``'s keys) that ``path`` imports."""
    return {part for name in imported_names(path) if (part := part_of(name)) in ALLOWED}


def test_no_part_is_imported_bare() -> None:
    """``import config`` or ``from workflows.x import y`` anywhere in the repository would
    load a user's own ``config.py`` or ``workflows.py`` instead of ours."""
    bare = {
        f"{path.relative_to(ROOT)}: {name}"
        for part in [*ALLOWED, "tests"]
        for path in part_files(part)
        for name in imported_names(path)
        if name.split(".")[0] in PRODUCT
    }
    assert not bare


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_imports_point_one_way(part: str) -> None:
    files = part_files(part)
    assert files, part
    for path in files:
        upward = imported_parts(path) - ALLOWED[part] - {part}
        assert not upward, f"{path.relative_to(ROOT)} imports {sorted(upward)}"


def loaded_top_level(statement: str) -> set[str]:
    """The top-level modules a fresh interpreter has loaded after ``statement``, our parts
    named as parts (``agent_tasks.workflows.task`` counts as ``workflows``)."""
    listing = (
        "print(' '.join(sorted({(m.split('.') + [''])[m.startswith('agent_tasks.')] "
        "for m in sys.modules})))"
    )
    code = f"{statement}; import sys; {listing}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(done.stdout.split())


def test_loaded_top_level_names_parts_by_the_root() -> None:
    loaded = loaded_top_level("import agent_tasks.codec")
    assert {"codec", "temporalio"} <= loaded
    assert "agent_tasks" in loaded  # the root package itself, loaded first


CLIENT_NEVER_LOADS = (
    "agent_tasks.workflows",
    "agent_tasks.activities",
    "agent_tasks.worker",
    "agent_tasks.broker",
    "agent_tasks.server",
    "agent_tasks.cli",
    "agent_tasks.taskgraph.neo4j.driver",
    "agent_tasks.taskgraph.neo4j.graph",
    "agent_tasks.taskgraph.falkordb.graph",
    "neo4j",
    "falkordb",
    "redis",
    "fastapi",
    "uvicorn",
)
"""What importing the client SDK (``agent_tasks.starter.client``, and ``agent_tasks.starter``)
must not load: workflow, activity, worker and server code, and no graph store's driver."""


def loaded_modules(statement: str) -> tuple[int, list[str]]:
    """How many modules a fresh interpreter holds before ``statement``, and the names it holds
    after it."""
    code = (
        "import sys, json; before = len(sys.modules); "
        f"{statement}; print(json.dumps([before, sorted(sys.modules)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    before, after = json.loads(done.stdout)
    return before, after


def never_loaded(names: list[str]) -> list[str]:
    """The names of ``names`` that are, or are below, one of ``CLIENT_NEVER_LOADS``."""
    return [n for n in names if any(n == p or n.startswith(f"{p}.") for p in CLIENT_NEVER_LOADS)]


def test_never_loaded_finds_a_module_below_a_refused_package() -> None:
    names = [
        "agent_tasks.workflows.task",
        "agent_tasks.workflowsx",
        "neo4j",
        "agent_tasks.contract",
    ]
    assert never_loaded(names) == ["agent_tasks.workflows.task", "neo4j"]


@pytest.mark.parametrize("module", ["agent_tasks.starter.client", "agent_tasks.starter"])
def test_the_client_sdk_loads_no_workflow_activity_server_or_driver(module: str) -> None:
    """An app imports the client SDK (tasks, events, steps, input, reads, retention) alone: the
    workflow's contract (``agent_tasks.contract``) and the graph store's rows, none of the
    workflow's, the activities', the worker's or the servers' code and no driver."""
    before, after = loaded_modules(f"import {module}")
    assert not never_loaded(after)
    ours = [name for name in after if name.startswith(f"{PACKAGE}.")]
    assert {f"{PACKAGE}.starter.client", f"{PACKAGE}.contract.handlers"} <= set(ours)
    print(f"import {module}: {before} -> {len(after)} modules, {len(ours)} of ours")


def test_the_client_sdk_imports_without_the_server_and_driver_packages() -> None:
    """The kind of PrefectHQ/fastmcp#4883 (``from fastmcp import Client`` fails without uvicorn:
    a client module imports a server's package at module scope): with the server's and the
    drivers' packages made unimportable, the client SDK still imports."""
    blocked = ("fastapi", "uvicorn", "starlette", "neo4j", "falkordb", "redis")
    statement = (
        f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); "
        "import agent_tasks.starter.client, agent_tasks.starter"
    )
    _, after = loaded_modules(statement)
    assert "agent_tasks.starter.client" in after


def test_the_agent_api_and_the_bootstrap_are_served_when_first_used() -> None:
    """``starter``'s agent, tool and worker names are the defining modules' own, imported
    when first named."""
    statement = (
        "import agent_tasks.starter as s; a = s.AgentContext; t = s.tool; w = s.build_worker; "
        "from agent_tasks.workflows.agents import AgentContext; "
        "from agent_tasks.activities.tools import tool; "
        "from agent_tasks.worker import build_worker; "
        "assert (a, t, w) == (AgentContext, tool, build_worker)"
    )
    _, after = loaded_modules(statement)
    assert {"agent_tasks.workflows.agents", "agent_tasks.worker"} <= set(after)


def test_workflows_load_no_neo4j_no_settings_no_starter() -> None:
    loaded = loaded_top_level(
        "import agent_tasks.workflows.task, agent_tasks.workflows.ledger, agent_tasks.contract"
    )
    assert not loaded & {"neo4j", "starter", "activities", "config", "pydantic_settings"}


def test_no_opentelemetry_is_loaded_unless_configured() -> None:
    """The ``otel`` extra is optional: with no exporter named, bootstrapping a worker's pieces
    (settings, the Temporal client's options, the task graph) imports no OpenTelemetry."""
    statement = (
        "from agent_tasks import worker, starter, telemetry; "
        "from agent_tasks.config import Settings; "
        "s = Settings(otel_traces_exporter='none', otel_metrics_exporter='none'); "
        "assert telemetry.setup(s.exporters()) == telemetry.Telemetry()"
    )
    loaded = loaded_top_level(statement)
    assert "worker" in loaded
    assert "opentelemetry" not in loaded


# ------------------------------------------------------------------- the import graph


def module_name(path: Path) -> str:
    """``agent_tasks/a/b.py`` -> ``agent_tasks.a.b``; ``a/b/__init__.py`` -> ``a.b``: every
    module is named by its path from the repository's top."""
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
    return {"tests"} & {part_of(name) for name in imported_names(path)}


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
    """contract <- workflows <- activities <- worker <- starter and the CLI: the part graph,
    computed from the code, against the order of the house (each part imports only parts
    before it)."""
    order = [
        "contract",
        "workflows",
        "sealing",
        "taskgraph",
        "tasklog",
        "activities",
        "worker",
        "starter",
        "server",
        "cli",
    ]
    graph = part_graph()
    for rank, part in enumerate(order):
        assert not graph[part] & set(order[rank:]), (part, graph[part])


def test_tools_stay_tools() -> None:
    """Nothing of the product imports ``bench``, no benchmark imports ``tests``, and the CLI
    loads no benchmark."""
    graph = part_graph()
    assert [part for part, imported in graph.items() if "bench" in imported] == ["tests"]
    assert "tests" not in graph["bench"]
    assert "bench" not in loaded_top_level("import agent_tasks.cli")


def test_the_wheel_ships_the_runtime_and_the_image_copies_it() -> None:
    """pyproject finds the packages under ``agent_tasks/`` and nothing else (no ``bench``, no
    ``tests``), the package is a real folder with its ``__init__.py``, and the worker image
    copies that one folder."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup["packages"]["find"]["include"] == [f"{PACKAGE}*"]
    data = set(setup["package-data"])  # folders of the page's files, and the ATIF schema
    assert all((ROOT / name.replace(".", "/")).is_dir() for name in data)
    assert (PACKAGE_DIR / "__init__.py").is_file() and not PACKAGE_DIR.is_symlink()
    assert not (ROOT / "__init__.py").exists()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"COPY {PACKAGE} {PACKAGE}\n" in dockerfile


def ancestor_links(top: Path) -> list[str]:
    """The directory links under ``top`` (``.git`` and ``.venv`` aside) that point at their own
    folder or one of its ancestors: each makes the checkout a loop for anything that follows links
    (``find -L``, ``os.walk(followlinks=True)``, ``shutil.copytree``, pytest's collection)."""
    found: list[str] = []
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in {".git", ".venv"}]
        for name in dirs + files:
            path = Path(folder, name)
            if path.is_symlink() and path.is_dir():
                if Path(folder).resolve().is_relative_to(path.resolve()):
                    found.append(str(path.relative_to(top)))
    return found


def test_the_link_finder_finds_a_link_to_an_ancestor(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "up").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "self").symlink_to(".")
    (tmp_path / "a" / "side").symlink_to(tmp_path / "a" / "b")  # not an ancestor: allowed
    assert sorted(ancestor_links(tmp_path)) == ["a/b/up", "a/self"]


def test_the_checkout_has_no_link_to_an_ancestor() -> None:
    assert ancestor_links(ROOT) == []


def test_pytest_collects_the_suite_once_from_the_top() -> None:
    """``pytest --collect-only .`` from the top (not only ``tests/``) collects each test once,
    without a collection error."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids and len(ids) == len(set(ids))
    assert all(line.startswith("tests/") for line in ids)


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
    from agent_tasks import starter, worker

    assert set(APP_NAMES) <= set(starter.__all__)
    for name in starter.__all__:
        assert getattr(starter, name) is not None, name
    assert starter.build_worker is worker.build_worker  # served from worker when first used


# ------------------------------------------------------------------- rooms of one job

MAX_FUNCTION_LINES = 60
"""Lines a function of the product (outside ``tests/`` and ``examples/``) may span, its
docstrings not counted, without a reason written next to it."""

MAX_CLASS_LINES = 300
"""Lines a class of the product may span, its docstrings not counted, without a reason
written next to it."""

LONG = "# Long: "
"""How the reason starts: a comment (of one or more lines) directly above the ``def`` or
``class`` (or its decorators) saying why it is one thing, or why it has not been split yet."""


def product_files() -> list[str]:
    """The product's, the benchmarks' and the cluster tool's Python files that git knows."""
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    # the history capture drives the tests' agents: test code, kept as the tests are
    test_code = ("tests/", "examples/", "tools/capture_histories.py")
    return [name for name in listed if not name.startswith(test_code)]


def docstring_lines(node: ast.AST) -> int:
    """The lines of the docstrings inside ``node``: its own, its functions' and classes', and
    the attribute docstrings (a string statement after an assignment) of its body."""
    count = 0
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if not isinstance(body, list):
            continue
        for statement in body:
            if (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            ):
                assert statement.end_lineno is not None
                count += statement.end_lineno - statement.lineno + 1
    return count


def long_definitions(source: str) -> list[tuple[str, int, bool]]:
    """``(name, lines, has_reason)`` for each function over ``MAX_FUNCTION_LINES`` and each class
    over ``MAX_CLASS_LINES`` lines of code (docstrings not counted) in ``source``."""
    lines = source.splitlines()
    found: list[tuple[str, int, bool]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            limit = MAX_FUNCTION_LINES
        elif isinstance(node, ast.ClassDef):
            limit = MAX_CLASS_LINES
        else:
            continue
        assert node.end_lineno is not None
        span = node.end_lineno - node.lineno + 1 - docstring_lines(node)
        if span > limit:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            block = first - 1  # the comment block directly above, read upward
            while block >= 1 and lines[block - 1].lstrip().startswith("#"):
                block -= 1
            comments = [line.strip() for line in lines[block : first - 1]]
            starts = [i for i, line in enumerate(comments) if line.startswith(LONG)]
            said = " ".join(comments[starts[-1] :]) if starts else ""
            found.append((node.name, span, said.startswith(LONG) and len(said) > len(LONG) + 10))
    return found


def test_long_definitions_are_found_with_and_without_their_reason() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"def short():\n    pass\n\n\ndef bare():\n{body}\n\n"
    reason = f"# a comment first\n{LONG}one computation whose steps\n# share every local\n"
    source += f"{reason}@decorated\ndef told():\n{body}\n\n# a comment, no reason\n"
    source += f"def unsaid():\n{body}\n\n"
    docstring = '    """A docstring of\n    three lines\n    does not count."""\n'
    shorter = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    source += f"def documented():\n{docstring}{shorter}"  # 63 lines, 60 of them code
    assert long_definitions(source) == [
        ("bare", MAX_FUNCTION_LINES + 1, False),
        ("told", MAX_FUNCTION_LINES + 1, True),
        ("unsaid", MAX_FUNCTION_LINES + 1, False),
    ]


def test_every_long_function_and_class_says_why() -> None:
    """Rooms follow seams, not a line budget: a long function or class is fine when it is one
    thing, and says so next to it."""
    silent = [
        f"{name}: {definition} ({span} lines)"
        for name in product_files()
        for definition, span, told in long_definitions((ROOT / name).read_text(encoding="utf-8"))
        if not told
    ]
    assert not silent


def test_the_wheel_holds_one_import_root_that_an_apps_own_modules_never_shadow(
    tmp_path: Path,
) -> None:
    """The wheel, built as pip builds it, installs ``agent_tasks`` and nothing else at the top;
    run from a folder holding an app's own ``config.py``, ``worker.py``, ``starter.py``,
    ``workflows.py`` and ``activities.py`` (each fails when imported), its face, its worker and
    its CLI import ours."""
    import zipfile

    source = tmp_path / "source"  # what the image copies; a build leaves no build/ in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignored = shutil.ignore_patterns("__pycache__", "target")
    shutil.copytree(PACKAGE_DIR, source / PACKAGE, ignore=ignored)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {PACKAGE}
    assert f"{PACKAGE}/server/page/task.html" in names
    assert f"{PACKAGE}/trajectories/schemas/atif-v1.7.schema.json" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    app = tmp_path / "app"
    app.mkdir()
    for name in ("config", "worker", "starter", "workflows", "activities", "plugin", "codec"):
        text = f"raise ImportError('the app\\'s own {name}.py was imported')\n"
        (app / f"{name}.py").write_text(text, encoding="utf-8")
    code = (
        "import agent_tasks.starter, agent_tasks.worker, agent_tasks.cli, sys; "
        "print(agent_tasks.starter.__file__); "
        "print(sorted(m for m in sys.modules if m in {'config', 'worker', 'starter', 'workflows'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=app, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(site / PACKAGE / "starter" / "__init__.py"), "[]"]
