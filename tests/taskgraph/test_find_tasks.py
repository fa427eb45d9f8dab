"""``find_tasks`` reads one page from an index: the plan seeks the composite index in name
order (no sort, no scan of the project's tasks), and the pages are the right ones, against
the real Neo4j."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent_tasks.taskgraph.models import TaskFilter
from agent_tasks.taskgraph.neo4j.graph import TaskGraph
from agent_tasks.taskgraph.reads import tasks_statement

STATUSES = ("open", "done", "failed")


@pytest.fixture
async def seeded(graph: TaskGraph) -> AsyncIterator[str]:
    """300 task nodes (a third of each status, two agents) and one placeholder (no status)."""
    await graph.init_schema()
    project = f"t-{uuid.uuid4().hex[:12]}"
    rows = [
        {
            "key": f"agent-task/{project}/n{n:03d}",
            "project_id": project,
            "name": f"n{n:03d}",
            "status": STATUSES[n % 3],
            "agent_id": f"a{n % 2}",
            "runs": 1,
            "last_seq": 0,
        }
        for n in range(300)
    ]
    await graph.driver.execute_query(
        "CREATE (:Task {key: $placeholder, project_id: $p, name: 'n000x'}) "
        "WITH 1 AS one UNWIND $rows AS row CREATE (t:Task) SET t = row",
        rows=rows,
        placeholder=f"agent-task/{project}/n000x",
        p=project,
        database_=graph.database,
    )
    await graph.driver.execute_query("CALL db.awaitIndexes(60)", database_=graph.database)
    yield project
    await graph.wipe_project(project)


def operators(plan: Any) -> list[str]:
    """Operator names of a plan tree, depth first."""
    found = [plan["operatorType"].split("@")[0]]
    for child in plan.get("children", []):
        found += operators(child)
    return found


def test_statement_names_only_the_given_filters() -> None:
    assert tasks_statement(TaskFilter()) == (
        "MATCH (t:Task) WHERE t.project_id = $p AND t.name > $after AND t.status IS NOT NULL"
        " RETURN t ORDER BY t.project_id, t.name LIMIT $limit"
    )
    both = tasks_statement(TaskFilter(status="done", parent="x"))
    assert "t.status = $status" in both and "t.parent = $parent" in both
    assert "$agent" not in both and "$session" not in both and "IS NULL" not in both


@pytest.mark.parametrize(
    ("where", "index"),
    [
        (TaskFilter(status="done", limit=10), "Task(project_id, status, name)"),
        (TaskFilter(limit=10), "Task(project_id, name)"),
        (TaskFilter(agent_id="a1", status="open", limit=10), "Task(project_id, status, name)"),
    ],
)
async def test_a_page_is_read_in_index_order(
    graph: TaskGraph, seeded: str, where: TaskFilter, index: str
) -> None:
    _, summary, _ = await graph.driver.execute_query(
        "EXPLAIN " + tasks_statement(where),
        p=seeded,
        after="",
        status=None if where.status is None else where.status.value,
        agent=where.agent_id,
        session=None,
        parent=None,
        limit=10,
        database_=graph.database,
    )
    plan = operators(summary.plan)
    assert plan[-1] == "NodeIndexSeek" and index in str(summary.plan), plan
    assert not {"Sort", "PartialSort", "Top", "NodeByLabelScan"} & set(plan), plan


async def test_pages_follow_name_order_per_filter(graph: TaskGraph, seeded: str) -> None:
    done = [f"n{n:03d}" for n in range(300) if STATUSES[n % 3] == "done"]
    first = await graph.reads.find_tasks(seeded, TaskFilter(status="done", limit=40))
    second = await graph.reads.find_tasks(
        seeded, TaskFilter(status="done", limit=40, after_name=first[-1].name)
    )
    assert [t.name for t in first + second] == done[:80]
    agent = await graph.reads.find_tasks(
        seeded, TaskFilter(agent_id="a1", status="open", limit=200)
    )
    assert [t.name for t in agent] == [f"n{n:03d}" for n in range(300) if n % 6 == 3]
    everything = await graph.reads.find_tasks(seeded, TaskFilter(limit=200))
    assert [t.name for t in everything] == [f"n{n:03d}" for n in range(200)]  # no placeholder


async def test_workers_creating_the_schema_at_once_all_succeed(graph: TaskGraph) -> None:
    """``IF NOT EXISTS`` does not cover a race: the session that loses it is told the rule
    exists (``EquivalentSchemaRuleAlreadyExists``); ``init_schema`` takes that as done."""
    for _ in range(3):
        await graph.driver.execute_query(
            "DROP INDEX task_project_status_name IF EXISTS", database_=graph.database
        )
        graphs = [TaskGraph(graph.driver, graph.database) for _ in range(6)]
        await asyncio.gather(*(g.init_schema() for g in graphs))
        assert all(g.schema_ready for g in graphs)
    records, _, _ = await graph.driver.execute_query(
        "SHOW INDEXES YIELD name WHERE name = 'task_project_status_name' RETURN count(*) AS n",
        database_=graph.database,
    )
    assert records[0]["n"] == 1
