"""The graph store's factory and errors (``taskgraph.store``, ``contract.errors``): a kind or a
URI's scheme picks the adapter, anything else is refused by name before a connection is made,
and a store that cannot be reached or refuses the credentials raises the port's errors, never a
driver's."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import SecretStr

from agent_tasks.config import Settings
from agent_tasks.contract.errors import GraphAuthError, GraphError, GraphUnavailable
from agent_tasks.devstack import free_port
from agent_tasks.devstack.falkordb_server import FalkorDBServer
from agent_tasks.taskgraph.store import graph_kind
from agent_tasks.worker import build_graph_store
from tests.test_docs import ROOT, python_blocks, run_snippet


@pytest.mark.parametrize(
    ("given", "kind"),
    [
        ("neo4j", "neo4j"),
        ("falkordb", "falkordb"),
        ("bolt://127.0.0.1:7687", "neo4j"),
        ("neo4j+s://x.databases.neo4j.io", "neo4j"),
        ("bolt+ssc://h:1", "neo4j"),
        ("falkor://127.0.0.1:6380", "falkordb"),
        ("falkors://h:1", "falkordb"),
        ("redis://:pw@127.0.0.1:6379", "falkordb"),
        ("rediss://h:1", "falkordb"),
    ],
)
def test_a_kind_or_a_schemes_picks_the_adapter(given: str, kind: str) -> None:
    assert graph_kind(given) == kind


@pytest.mark.parametrize("given", ["postgres://h/db", "Neo4j", "", "falkordb:", "http://h"])
def test_an_unknown_store_is_refused_by_name(given: str) -> None:
    with pytest.raises(ValueError, match="unknown graph store") as refused:
        build_graph_store(given)
    assert "bolt, " in str(refused.value) and "falkor" in str(refused.value)


def test_a_refusal_does_not_show_the_password() -> None:
    with pytest.raises(ValueError) as refused:
        graph_kind("mongodb://user:s3cret@host:1")
    assert "s3cret" not in str(refused.value)


async def test_the_environment_picks_the_store_when_none_is_given(settings: Settings) -> None:
    neo4j = build_graph_store(settings=settings.model_copy(update={"graph": "neo4j"}))
    assert neo4j.kind == "neo4j"
    await neo4j.close()


async def test_an_unreachable_neo4j_raises_graph_unavailable(settings: Settings) -> None:
    store = build_graph_store(f"bolt://127.0.0.1:{free_port()}", settings=settings)
    try:
        with pytest.raises(GraphUnavailable) as raised:
            await store.connect()
    finally:
        await store.close()
    assert raised.value.__cause__ is not None  # the driver's error, kept as the cause


async def test_wrong_neo4j_credentials_raise_graph_auth_error(settings: Settings) -> None:
    wrong = settings.model_copy(update={"neo4j_password": SecretStr("not-the-password")})
    store = build_graph_store("neo4j", settings=wrong)
    try:
        with pytest.raises(GraphAuthError):
            await store.connect()
    finally:
        await store.close()


async def test_the_guides_store_connects_and_closes(settings: Settings) -> None:
    """``build_graph_store("neo4j")``, ``connect()``, a read, ``close()``, as the guide writes
    it; after ``close()`` the store answers no more."""
    store = build_graph_store("neo4j", settings=settings)
    await store.connect()
    assert await store.reads.counts("no-such-project") == {}
    await store.close()
    with pytest.raises((GraphError, RuntimeError)):
        await store.reads.counts("no-such-project")


@pytest.mark.parametrize("kind", ["neo4j", "falkordb"])
async def test_the_graph_stores_page_block_runs_on_either_store(
    kind: str,
    falkordb_server: FalkorDBServer,
    project_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/graph-stores.md's block, run as written with only its store's name changed: a
    worker mirrors into the store and a read across tasks finds the task there."""
    (block,) = python_blocks(ROOT / "docs" / "graph-stores.md")
    monkeypatch.setenv("AGENT_TASKS_FALKORDB_URL", falkordb_server.url)
    monkeypatch.setenv("AGENT_TASKS_FALKORDB_GRAPH", f"docs_{project_id}")
    queue = f"graph-demo-{project_id}"
    code = block.replace('"falkordb"', f'"{kind}"').replace('"graph-demo"', f'"{queue}"')
    names = await run_snippet(code, project_id)
    assert names["store"].kind == kind
    assert [(r.name, r.last_seq) for r in names["rows"]] == [("report", 1)]


def test_only_the_chosen_stores_driver_is_loaded() -> None:
    """Nothing outside an adapter imports a driver: importing the worker and the client loads
    neither; building a FalkorDB store loads FalkorDB's client and not Neo4j's driver, and a
    Neo4j store the other way round (a fresh interpreter each)."""
    probe = (
        "import sys; from agent_tasks import worker, starter; "
        "before = ('neo4j' in sys.modules, 'falkordb' in sys.modules); "
        "worker.build_graph_store({kind!r}, settings=worker.Settings(neo4j_password='x')); "
        "print(before, ('neo4j' in sys.modules, 'falkordb' in sys.modules))"
    )
    seen = {
        kind: subprocess.run(
            [sys.executable, "-c", probe.format(kind=kind)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.strip()
        for kind in ("falkor://127.0.0.1:1", "bolt://127.0.0.1:1")
    }
    assert seen == {
        "falkor://127.0.0.1:1": "(False, False) (False, True)",
        "bolt://127.0.0.1:1": "(False, False) (True, False)",
    }
