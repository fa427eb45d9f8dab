"""The local stack's broker: a real ``redis-server`` started, probed, reported and stopped
(``devstack.redis_server``), and ``devstack.up``/``down`` with it beside the session's
Temporal and Neo4j (external to the stack under test)."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from agent_tasks import devstack
from agent_tasks.config import Settings
from agent_tasks.devstack import BIND_HOST, free_port, port_is_open
from agent_tasks.devstack.redis_server import RedisServer, probe_redis


async def test_a_redis_server_starts_answers_and_stops(tmp_path: Path) -> None:
    port = free_port()
    server = RedisServer(tmp_path, port)
    assert not (await probe_redis(server.url, timeout_s=1)).answering
    pid, took = await server.start_ready()
    try:
        assert server.running_pid() == pid and took < 20
        assert await probe_redis(server.url) == (True, "")
    finally:
        assert await server.stop()
    assert server.running_pid() is None and not port_is_open(BIND_HOST, port)
    assert not await server.stop()  # nothing left to stop


async def test_dev_up_starts_the_broker_and_down_stops_only_it(
    tmp_path: Path, settings: Settings
) -> None:
    port = free_port()
    local = settings.model_copy(
        update={
            "data_dir": tmp_path,
            "broker_url": f"redis://127.0.0.1:{port}",
            "neo4j_password": SecretStr(settings.neo4j_auth()[1]),
        }
    )
    try:
        services = await devstack.up(local)
        assert [(s.name, s.external) for s in services] == [
            ("temporal", True),
            ("neo4j", True),
            ("broker", False),
        ]
        broker = services[2]
        assert broker.pid is not None and broker.detail.startswith("started in")
        again = await devstack.up(local)
        assert again[2].pid == broker.pid and again[2].detail == "already running"
        status = await devstack.status(local)
        assert [(s.name, s.answering, s.pid) for s in status][2] == ("broker", True, broker.pid)
    finally:
        stopped = await devstack.down(local)
    assert [(s.name, s.pid) for s in stopped if s.pid is not None] == [("broker", broker.pid)]
    assert not port_is_open(BIND_HOST, port)
