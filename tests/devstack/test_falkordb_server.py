"""``devstack.up``/``down`` start and stop FalkorDB when it is the graph store
(``AGENT_TASKS_GRAPH=falkordb``): the package's ``redis-server`` with the graph module, beside
the session's Temporal (external to the stack under test), and a store built on it answers;
Neo4j is neither probed nor started then."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from agent_tasks import devstack
from agent_tasks.config import Settings
from agent_tasks.devstack import BIND_HOST, free_port, port_is_open
from agent_tasks.worker import build_graph_store


async def test_dev_up_starts_falkordb_when_it_is_the_graph_store(
    tmp_path: Path, settings: Settings
) -> None:
    port = free_port()
    local = settings.model_copy(
        update={
            "data_dir": tmp_path,
            "broker_url": "",
            "graph": "falkordb",
            "falkordb_url": SecretStr(f"falkor://127.0.0.1:{port}"),
            # a Neo4j on another host that does not answer: `up` would refuse it, were it asked
            "neo4j_uri": "bolt://10.255.255.1:7687",
        }
    )
    try:
        services = await devstack.up(local, probe_timeout_s=0.5)
        assert [(s.name, s.external) for s in services] == [
            ("temporal", True),
            ("falkordb", False),
        ]
        falkordb = services[1]
        assert falkordb.pid is not None and falkordb.detail.startswith("started in")
        store = build_graph_store(settings=local)
        await store.connect()
        try:
            assert store.kind == "falkordb" and await store.reads.counts("nobody") == {}
        finally:
            await store.close()
        assert (tmp_path / "falkordb" / "appendonlydir").is_dir()  # every write logged
        status = await devstack.status(local, timeout_s=0.5)
        assert [(s.name, s.answering, s.pid) for s in status] == [
            ("temporal", True, None),
            ("falkordb", True, falkordb.pid),
        ]
    finally:
        stopped = await devstack.down(local)
    assert [(s.name, s.pid) for s in stopped] == [("temporal", None), ("falkordb", falkordb.pid)]
    assert not port_is_open(BIND_HOST, port)


async def test_status_and_up_never_show_a_password_of_the_urls(
    tmp_path: Path, settings: Settings
) -> None:
    """A password in AGENT_TASKS_FALKORDB_URL or AGENT_TASKS_BROKER_URL stays out of the
    report and out of an error (dbos-inc/dbos-transact-ts#1180's kind: a connection URL's
    password written to the output)."""
    falkor_port, broker_port = free_port(), free_port()
    local = settings.model_copy(
        update={
            "data_dir": tmp_path,
            "broker_url": f"redis://user:s3cret-b@10.255.255.1:{broker_port}",
            "graph": "falkordb",
            "falkordb_url": SecretStr(f"falkor://user:s3cret-f@127.0.0.1:{falkor_port}"),
            "neo4j_password": SecretStr(settings.neo4j_auth()[1]),
        }
    )
    report = await devstack.status(local, timeout_s=0.5)
    shown = {s.name: s.address for s in report}
    assert shown["falkordb"] == f"redis://127.0.0.1:{falkor_port}"
    assert shown["broker"] == f"redis://10.255.255.1:{broker_port}"
    assert "s3cret" not in repr(report)
    with pytest.raises(devstack.DevStackError) as refused:  # the broker's host is not ours
        await devstack.up(local, probe_timeout_s=0.5)
    assert "s3cret" not in str(refused.value) and "10.255.255.1" in str(refused.value)
    assert not port_is_open(BIND_HOST, falkor_port)  # nothing was started
