"""The docs against the code: README.md stays an entrance (at most 250 lines, linking every
page of ``docs/``), every link resolves, every number the docs give for a constant of the code
equals that constant, every refusal code is listed, the configuration defaults are the code's,
and every Python block of the README and ``docs/`` runs against the local stack as written."""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client

from agent_tasks.activities.files import file_tools
from agent_tasks.config import (
    DEFAULT_TEMPORAL_ADDRESS,
    DEFAULT_TEMPORAL_NAMESPACE,
    Settings,
    default_data_dir,
)
from agent_tasks.contract import (
    AgentSpec,
    EventKind,
    ModelSpec,
    ProjectId,
    TaskStatus,
    valid_request_id,
)
from agent_tasks.contract.errors import ErrorCode
from agent_tasks.server import create_app
from agent_tasks.server.apikeys import ApiKeyStore
from agent_tasks.starter import ConversationHistory
from agent_tasks.starter.tasks import TaskManager
from agent_tasks.starter.tasks import TaskStatus as SeedStatus
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.worker import DEFAULT_RETENTION, Services, build_worker
from agent_tasks.workflows.mirroring import MIRROR_LONG_OUTAGE_FAILURES, mirror_pause
from tests.approval_tools import call_then_report, goal
from tests.servers import served

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

TASK_QUEUE = "agent-tasks"
"""The task queue the snippets' clients use (``ConversationHistory``'s default)."""

README_MAX_LINES = 250
"""The README is an entrance: what it is, the two commands, an app and an agent, where next."""

CONSTANT_MODULES = (
    "agent_tasks.contract",
    "agent_tasks.contract.human",
    "agent_tasks.contract.limits",
    "agent_tasks.contract.mirror",
    "agent_tasks.workflows.mirroring",
    "agent_tasks.workflows.mirror_calls",
    "agent_tasks.workflows.spawning",
    "agent_tasks.workflows.task",
    "agent_tasks.contract.waits",
    "agent_tasks.contract.errors",
    "agent_tasks.codec",
    "agent_tasks.config",
    "agent_tasks.worker",
    "agent_tasks.activities.mirror",
    "agent_tasks.activities.model",
    "agent_tasks.activities.retry_after",
    "agent_tasks.taskgraph.neo4j.driver",
    "agent_tasks.taskgraph.models",
    "agent_tasks.taskgraph.retention",
    "agent_tasks.sealing.seal",
    "agent_tasks.taskgraph.neo4j.writes",
    "agent_tasks.cli.importer",
    "agent_tasks.starter.lifecycle",
    "agent_tasks.starter.retention",
    "agent_tasks.starter.transport",
    "agent_tasks.server.inbox",
    "agent_tasks.trajectories.base",
    "agent_tasks.activities.http_tool",
    "agent_tasks.workflows.agents.registry",
    "agent_tasks.taskgraph.refusals",
    "agent_tasks.activities.refusals",
)
"""Where the constants the docs name are defined."""

STATED = re.compile(
    r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)((?:\s+[A-Za-z][\w-]*){0,4}?)\s+\(`([A-Za-z_][A-Za-z0-9_]*)`"
)
"""A number stated for a constant: ``32,000 characters (`MAX_PAYLOAD_CHARS`)``, the number,
up to four words (the first may be a unit), then the constant's name in backticks in
parentheses."""

SCALE = {"KiB": 1024, "MiB": 1024 * 1024}
SECONDS = {"ms": 0.001, "s": 1, "second": 1, "seconds": 1, "minute": 60, "minutes": 60}
SECONDS |= {"hour": 3_600, "hours": 3_600, "day": 86_400, "days": 86_400}


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def flat(path: Path) -> str:
    """The page with every run of white space as one space (phrases cross line breaks)."""
    return " ".join(text(path).split())


def constants() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in CONSTANT_MODULES:
        module = importlib.import_module(name)
        for key, value in vars(module).items():
            if key.strip("_").isupper() or (key[:1].isupper() and hasattr(value, "__metadata__")):
                found.setdefault(key, value)
    return found


def stated_value(value: Any, unit: str) -> float | None:
    """The constant in the unit the docs give it in (None: a constant no number measures)."""
    if isinstance(value, timedelta):
        return value.total_seconds() / SECONDS.get(unit, 1)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if unit in SCALE:
            return value / SCALE[unit]
        return float(value)
    if hasattr(value, "__metadata__"):  # an Annotated type: its length bound
        bound = TypeAdapter(value).json_schema().get("maxLength")
        return None if bound is None else float(bound)
    return None


def stated_numbers() -> list[tuple[str, str, float, str, Any]]:
    """Every ``(page, constant, number, unit, value)`` the docs state."""
    known = constants()
    found = []
    for page in PAGES:
        for match in STATED.finditer(text(page)):
            number, words, name = match.groups()
            unit = words.split()[0] if words.split() else ""
            found.append((page.name, name, float(number.replace(",", "")), unit, known.get(name)))
    return found


def test_the_readme_is_an_entrance_to_every_page() -> None:
    assert len(text(README).splitlines()) <= README_MAX_LINES
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", text(README)))
    assert linked == {f"docs/{page.name}" for page in DOCS}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text(page)):
        assert (page.parent / target).exists(), f"{page.name} links {target}"


def test_every_number_stated_for_a_constant_is_the_constant() -> None:
    stated = stated_numbers()
    assert len(stated) > 40  # the pages state the limits they name
    for page, name, number, unit, value in stated:
        if name.isupper() or name.strip("_").isupper():
            assert value is not None, f"{page}: no constant {name}"
        expected = None if value is None else stated_value(value, unit)
        if expected is not None:
            assert number == expected, f"{page}: {number:g} {unit} for {name}, the code has {value}"


def test_the_limits_without_a_name_are_the_codes() -> None:
    project_id_max = max(n for n in range(1, 100) if valid_project_id("a" * n))
    request_id_max = max(n for n in range(1, 100) if valid_request_id("a" * n))
    concepts = flat(ROOT / "docs" / "concepts.md")
    assert f"A project id is 1 to {project_id_max} characters" in concepts
    assert f"a request id must be 1 to {request_id_max} characters" in flat(
        ROOT / "docs" / "codes.md"
    )
    pauses = ", ".join(f"{mirror_pause(n).total_seconds():g} s" for n in range(1, 5))
    assert f"{pauses}, then {mirror_pause(5).total_seconds():g} s" in flat(
        ROOT / "docs" / "graph-stores.md"
    )
    long_pause = mirror_pause(MIRROR_LONG_OUTAGE_FAILURES + 1)
    assert long_pause > mirror_pause(MIRROR_LONG_OUTAGE_FAILURES)


def valid_project_id(value: str) -> bool:
    try:
        TypeAdapter(ProjectId).validate_python(value)
    except ValidationError:
        return False
    return True


def test_codes_lists_every_refusal_code() -> None:
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", text(ROOT / "docs" / "codes.md"), re.M))
    assert listed == {code.value for code in ErrorCode}


def test_the_configuration_defaults_are_the_codes() -> None:
    page = text(ROOT / "docs" / "configuration-and-deploy.md")
    rows = dict(re.findall(r"^\| `([A-Z0-9_]+)`(?: \(`\w+`\))? \| `([^`]*)`", page, re.M))
    fields = {
        (str(f.validation_alias) if f.validation_alias else name.upper()): f.default
        for name, f in Settings.model_fields.items()
    }
    from agent_tasks.telemetry import SERVICE_NAME

    expected = {
        **{var: str(default) for var, default in fields.items() if default is not None},
        "TEMPORAL_ADDRESS": DEFAULT_TEMPORAL_ADDRESS,
        "TEMPORAL_NAMESPACE": DEFAULT_TEMPORAL_NAMESPACE,
        "AGENT_TASKS_RETENTION_DAYS": str(DEFAULT_RETENTION.days),
        "OTEL_SERVICE_NAME": SERVICE_NAME,
    }
    checked = {var: value for var, value in rows.items() if var in expected}
    assert len(checked) >= 13
    assert checked == {var: expected[var] for var in checked}
    # the data folder's default is a rule, not a value: the page names the function
    assert Settings.model_fields["data_dir"].default_factory is default_data_dir
    assert "| `AGENT_TASKS_DATA_DIR` | the user's data folder (below) |" in page
    assert "(`config.default_data_dir`)" in page


# ------------------------------------------------------------------- the snippets run


def code_blocks(page: Path, language: str) -> list[str]:
    """The page's fenced blocks of ``language`` (``python``, ``bash``), in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text(page), re.M | re.S)


def python_blocks(page: Path) -> list[str]:
    return code_blocks(page, "python")


async def run_snippet(
    code: str, project_id: str, names: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run a snippet as an app would inside an async function, in project ``project_id``
    (for ``acme``), with ``names`` defined (none by default); returns its names."""
    source = code.replace('"acme"', f'"{project_id}"')
    compiled = compile(source, "snippet", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    names = {} if names is None else names
    done = eval(compiled, names)
    if done is not None:
        await asyncio.wait_for(done, 120)
    return names


async def test_the_readme_app_snippet_runs(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    app, _ = python_blocks(README)
    async with build_worker(client, graph, TASK_QUEUE):  # a query of a closed task needs one
        names = await run_snippet(app, project_id)
        reader = ConversationHistory(client, project_id, "reader", task_queue=TASK_QUEUE)
        view = (await reader.get_task("fix-42")).view
    kinds = [event.kind for event in names["page"].events]
    assert kinds == [EventKind.TOOL_CALL, EventKind.TOOL_RESULT]
    assert view is not None and view.status is TaskStatus.DONE
    assert view.result is not None and view.result.text == "fixed in abc123"


async def test_the_readme_agent_snippet_runs(project_id: str) -> None:
    _, agent = python_blocks(README)
    names = await run_snippet(agent, project_id)
    assert names["view"].status is TaskStatus.DONE
    assert names["view"].result.text == "HELLO"


async def test_the_concepts_client_snippet_runs(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    (snippet,) = python_blocks(ROOT / "docs" / "concepts.md")
    async with build_worker(client, graph, TASK_QUEUE):
        names = await run_snippet(snippet, project_id)
    assert names["decision"].recorded and names["redacted"].recorded
    assert names["redacted"].affected_decision_ids == []  # the decision cites the result only
    # the snippet wrote three events (the call, the result, the decision): all deleted
    assert names["deleted"].recorded and names["deleted"].events_deleted == 3


async def test_the_agent_tasks_demo_snippet_runs(project_id: str) -> None:
    (snippet,) = python_blocks(ROOT / "docs" / "agent-tasks.md")
    names = await run_snippet(snippet.replace('project_id="demo"', 'project_id="acme"'), project_id)
    assert names["view"].status is TaskStatus.DONE
    lines = {  # counted here, independently of the agent's tools
        p: sum("needle" in line.lower() for line in p.read_text(encoding="utf-8").splitlines())
        for p in (ROOT / "agent_tasks" / "activities").rglob("*.py")
    }
    hits = {p: n for p, n in lines.items() if n}
    said = f"{sum(hits.values())} lines mention 'needle' in {len(hits)} files"
    assert said in names["view"].result.text


async def test_the_http_pages_tasks_api_snippet_runs(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """docs/http.md's Tasks API block (the seed's calls), run as written on the local stack."""
    _, snippet = python_blocks(ROOT / "docs" / "http.md")
    async with build_worker(client, graph, TASK_QUEUE):
        names = await run_snippet(snippet, project_id)
        reader = ConversationHistory(client, project_id, "reader", graph=graph)
        task = await TaskManager(reader).get_task(names["task"].task_id)
    assert task is not None and task.status is SeedStatus.DONE
    assert task.session_id == "chat-1" and task.result == {"answer": "Redis is..."}
    said = [u.message for u in task.updates]
    assert said[:2] == ["Starting...", "Found 5 documents"]  # tokens are never stored
    assert "Redis " not in said


async def test_the_input_and_children_blocks_run(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """docs/input-and-children.md's agent and its client, one after the other as the page
    says, the agent registered under another name (the suite's ``release`` stays as it is)."""
    agent_block, client_block = python_blocks(ROOT / "docs" / "input-and-children.md")
    names = await run_snippet(
        agent_block.replace('@agent("release")', '@agent("docs_release")')
        + client_block.replace('name="release"', 'name="docs_release"'),
        project_id,
    )
    view = names["view"]
    assert view.status is TaskStatus.DONE and view.result.text == "eu: done, us: failed"
    async with build_worker(client, graph, TASK_QUEUE):  # a query of a closed task needs one
        history = ConversationHistory(client, project_id, "reader", task_queue=TASK_QUEUE)
        events = (await history.list_events("release", limit=200)).events
        child = (await history.get_task("release/eu")).view
    told = [(e.kind, e.name) for e in events if e.kind.value.startswith(("input", "child"))]
    assert told[:4] == [  # the answer sent before the question was kept for it
        (EventKind.INPUT_REQUEST, "replicas"),
        (EventKind.INPUT_RESPONSE, "replicas"),
        (EventKind.CHILD_TASK, "eu"),
        (EventKind.CHILD_TASK, "us"),
    ]
    assert sorted(told[4:]) == [(EventKind.CHILD_RESULT, "eu"), (EventKind.CHILD_RESULT, "us")]
    assert child is not None and child.goal == "deploy 3 replicas to eu"


class Bank:
    """The bank docs/page.md's ``pay`` tool pays through: it keeps what it paid."""

    def __init__(self) -> None:
        self.paid: list[tuple[str, int, str]] = []

    async def pay(self, account: str, amount: int, *, key: str) -> str:
        self.paid.append((account, amount, key))
        return f"paid {amount} to {account}"


async def test_the_page_pages_approval_blocks_run(
    client: Client, graph: TaskGraph, project_id: str
) -> None:
    """docs/page.md's ``pay`` tool (its ``bank`` the test's), called by a scripted model for
    151 to ``A-1`` in four tasks, each approval answered by one line of the page's second block
    as written (its task and request named for the one it answers)."""
    tool_block, approve_block = python_blocks(ROOT / "docs" / "page.md")
    bank = Bank()
    names = await run_snippet(tool_block, project_id, {"bank": bank})
    queue = f"docs-pay-{project_id}"
    spec = AgentSpec(tools=["pay"], model=ModelSpec(provider="scripted", model="call-then-report"))
    choices = approve_block.strip().splitlines()
    scripts = {"call-then-report": call_then_report}
    async with build_worker(client, graph, queue, tools=[names["pay"]], scripts=scripts):
        history = ConversationHistory(client, project_id, "ops", task_queue=queue)
        names["history"] = history
        views = []
        for n, line in enumerate(choices):
            task = f"pay-{n}"
            call = goal(("pay", {"account": "A-1", "amount": 151}))
            assert (await history.create_task(task, call, agent=spec)).recorded
            asked = await history.wait_task(task, until="awaiting_input")
            assert asked is not None and len(asked.pending_inputs) == 1
            request = asked.pending_inputs[0].input_id
            answer = line.replace('"pay-42"', f'"{task}"').replace('"approve-7"', f'"{request}"')
            await run_snippet(answer, project_id, names)
            views.append(await asyncio.wait_for(history.wait_task(task), 60))
    assert [(account, amount) for account, amount, _ in bank.paid] == [("A-1", 151), ("A-1", 90)]
    texts = [view.result.text if view and view.result else None for view in views]
    assert texts[:3] == [
        "the tools said: paid 151 to A-1",
        "the tools said: paid 90 to A-1",
        "the tools said: paid by hand",
    ]
    assert [view.status if view else None for view in views] == [TaskStatus.DONE] * 4


RUN_BY = {
    ("README.md", 0): "tests/test_docs.py::test_the_readme_app_snippet_runs",
    ("README.md", 1): "tests/test_docs.py::test_the_readme_agent_snippet_runs",
    ("concepts.md", 0): "tests/test_docs.py::test_the_concepts_client_snippet_runs",
    ("agent-tasks.md", 0): "tests/test_docs.py::test_the_agent_tasks_demo_snippet_runs",
    ("http.md", 1): "tests/test_docs.py::test_the_http_pages_tasks_api_snippet_runs",
    ("http.md", 0): "tests/server/test_streams.py::"
    "test_the_http_pages_follower_reconnects_and_prints_every_update_once",
    ("page.md", 0): "tests/test_docs.py::test_the_page_pages_approval_blocks_run",
    ("page.md", 1): "tests/test_docs.py::test_the_page_pages_approval_blocks_run",
    ("input-and-children.md", 0): "tests/test_docs.py::test_the_input_and_children_blocks_run",
    ("input-and-children.md", 1): "tests/test_docs.py::test_the_input_and_children_blocks_run",
    ("graph-stores.md", 0): "tests/taskgraph/test_store.py::"
    "test_the_graph_stores_page_block_runs_on_either_store",
}
"""The test that runs each Python block of the pages against the stack as written."""


def imported_names(tree: ast.AST) -> list[tuple[str, str | None]]:
    """Every ``(module, name)`` a block imports (``name`` None for ``import module``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return found


@pytest.mark.parametrize(
    ("page", "index"),
    [(page, i) for page in PAGES for i in range(len(python_blocks(page)))],
    ids=lambda value: value.name if isinstance(value, Path) else str(value),
)
def test_every_python_block_is_run_by_a_test(page: Path, index: int) -> None:
    """Every Python block of the README and docs/ is run by a test (``RUN_BY``) that reads
    it from the page; and it compiles as the body of an async function and imports only
    names that exist."""
    block = python_blocks(page)[index]
    runner = RUN_BY.get((page.name, index))
    assert runner is not None, f"no test runs {page.name}'s Python block {index}"
    path, test = runner.split("::")
    assert f"def {test}(" in text(ROOT / path) and page.name in text(ROOT / path), runner
    tree = compile(
        block, page.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT | ast.PyCF_ONLY_AST
    )
    for module, name in imported_names(tree):
        loaded = importlib.import_module(module)
        if name is not None and name != "*":
            assert hasattr(loaded, name) or importlib.util.find_spec(f"{module}.{name}"), (
                f"{page.name} block {index}: {module} has no {name}"
            )


# --------------------------------------------------------------- the shell blocks


def shell_blocks(page: Path) -> list[str]:
    return code_blocks(page, "bash")


async def run_shell(block: str, env: dict[str, str], within: float = 180) -> str:
    """Run a shell block with bash as a script (``-euo pipefail``) from the checkout's root;
    returns its output, failing on a non-zero exit."""
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        block,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), within)
    said = out.decode()
    assert process.returncode == 0, said
    return said


def lines_mentioning(word: str, folder: Path) -> str:
    """What the demo agent answers about ``word`` in ``folder``, counted here."""
    hits = {
        path: sum(word in line.lower() for line in path.read_text(encoding="utf-8").splitlines())
        for path in folder.rglob("*.py")
    }
    found = {path: n for path, n in hits.items() if n}
    return f"{sum(found.values())} lines mention '{word}' in {len(found)} files"


async def test_the_agent_tasks_pages_demo_command_runs(project_id: str) -> None:
    """docs/agent-tasks.md's command, as a newcomer types it (``./run`` and all)."""
    (block,) = shell_blocks(ROOT / "docs" / "agent-tasks.md")
    said = await run_shell(block, {"AGENT_TASKS_PROJECT": project_id})
    assert lines_mentioning("heartbeat", ROOT / "agent_tasks" / "activities") in " ".join(
        said.split()
    )


FILES = ROOT / "agent_tasks" / "activities"
"""The folder the demo's file tools read in the HTTP page's test (its ``--path``)."""


async def test_the_http_pages_agent_task_commands_run(services: Services, project_id: str) -> None:
    """docs/http.md's curl commands that start an agent task and follow its stream, run by
    bash as written against the API on uvicorn, ``API`` and ``KEY`` set as the page's first
    block sets them; the stream ends with the task."""
    (block,) = [b for b in shell_blocks(ROOT / "docs" / "http.md") if "files-demo" in b]
    assert services.graph is not None
    queue = f"docs-http-{project_id}"
    settings = services.settings.model_copy(update={"temporal_task_queue": queue})
    served_services = Services(settings, services.client, services.graph, services.broker)
    _, key = await ApiKeyStore(services.graph).create(project_id, "docs")
    async with (
        build_worker(services.client, services.graph, queue, tools=file_tools(FILES)),
        served(create_app(served_services)) as url,
    ):
        said = await run_shell(block, {"API": url, "KEY": key})
    created, end = json.JSONDecoder().raw_decode(said)  # curl prints no newline after it
    assert created["created"] and created["task"]["name"] == "find"
    stream = said[end:]
    events = re.findall(r"^event: (\w+)$", stream, re.M)
    assert events[-1] == "done" and "update" in events
    updates = [json.loads(line[5:]) for line in stream.splitlines() if line.startswith("data:")]
    kinds = {u["kind"] for u in updates if "kind" in u}
    assert kinds <= {"message", "tool_call"} and "tool_call" in kinds  # ?kinds= filtered
    answer = lines_mentioning("heartbeat", FILES)
    assert any(answer in u.get("payload", "") for u in updates), answer


SHELL_RUN_BY = {
    ("README.md", 0): ".ci/run runs `./run test`; a newcomer's check runs `./run main`",
    ("agent-tasks.md", 0): "tests/test_docs.py::test_the_agent_tasks_pages_demo_command_runs",
    ("http.md", 2): "tests/test_docs.py::test_the_http_pages_agent_task_commands_run",
}
"""The shell blocks a test (or CI itself) runs as written."""

SHELL_SESSIONS = {
    ("configuration-and-deploy.md", 0): "starts a second local stack, which stays up",
    ("http.md", 0): "`serve` runs until it is stopped",
    ("http.md", 1): "a terminal's session: `curl -N` follows the stream until the task ends",
    ("input-and-children.md", 0): "alternatives answering one request (update or signal)",
    ("page.md", 0): "alternatives answering one approval (accept, answer, ignore)",
    ("README.md", 1): "alternatives that run until Ctrl-C (a worker, or the server with one) and "
    "a run from another shell: tests/cli/test_own_agent.py runs each",
}
"""The shell blocks that are a person's terminal session, not a script, and why; what they
do runs in the Python blocks and the CLI's tests."""


@pytest.mark.parametrize(
    ("page", "index"),
    [(page, i) for page in PAGES for i in range(len(shell_blocks(page)))],
    ids=lambda value: value.name if isinstance(value, Path) else str(value),
)
def test_every_shell_block_is_run_or_is_a_terminal_session(page: Path, index: int) -> None:
    """Each shell block of the README and docs/ is run by a test, or listed as a terminal
    session with its reason: a new block is one or the other."""
    key = (page.name, index)
    assert (key in SHELL_RUN_BY) != (key in SHELL_SESSIONS), key
    runner = SHELL_RUN_BY.get(key, "")
    if runner.startswith("tests/"):
        path, test = runner.split("::")
        assert f"def {test}(" in text(ROOT / path), runner
