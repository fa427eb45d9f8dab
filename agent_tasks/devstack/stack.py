"""The local stack as a whole: ``up``, ``down``, ``status`` and their report."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_tasks.config import Settings
from agent_tasks.devstack.falkordb_server import FalkorDBServer
from agent_tasks.devstack.neo4j_server import (
    Neo4jServer,
    probe_neo4j,
)
from agent_tasks.devstack.process import (
    DevStackError,
    ManagedProcess,
    Probe,
    ServiceStatus,
    is_local_host,
    parse_host_port,
    port_is_open,
)
from agent_tasks.devstack.redis_server import RedisServer, probe_redis
from agent_tasks.devstack.temporal import (
    TemporalDevServer,
    probe_temporal,
)

# --------------------------------------------------------------------------------------------
# the stack: up, down, status


def _broker(settings: Settings) -> RedisServer:
    """The local broker of ``AGENT_TASKS_BROKER_URL``'s port."""
    return RedisServer(settings.data_dir, parse_host_port(settings.broker_url, 6379)[1])


def _redis_url(url: str) -> str:
    """A FalkorDB URL as Redis's client reads it (``falkor://`` is ``redis://``, ``falkors://``
    is ``rediss://``)."""
    scheme, sep, rest = url.partition("://")
    return {"falkor": "redis", "falkors": "rediss"}.get(scheme, scheme) + sep + rest


def _shown(url: str) -> str:
    """``url`` without its user and password, as reports and errors show it (a password in a
    URL must not reach a terminal or a log)."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    return scheme + sep + netloc.rpartition("@")[2] + slash + path


def _redis_servers(settings: Settings) -> list[tuple[str, str, RedisServer]]:
    """The servers of Redis's protocol the stack runs, as ``(name, URL, server)``: the broker
    when ``AGENT_TASKS_BROKER_URL`` names one, and FalkorDB when ``AGENT_TASKS_GRAPH`` is
    ``falkordb`` (at ``AGENT_TASKS_FALKORDB_URL``'s port)."""
    servers: list[tuple[str, str, RedisServer]] = []
    if settings.broker_url:
        servers.append(("broker", settings.broker_url, _broker(settings)))
    if settings.graph == "falkordb":
        url = _redis_url(settings.falkordb_url.get_secret_value())
        port = parse_host_port(url, 6379)[1]
        servers.append(("falkordb", url, FalkorDBServer(settings.data_dir, port)))
    return servers


def _neo4j_auth_or_none(settings: Settings) -> tuple[str, str] | None:
    try:
        return settings.neo4j_auth()
    except RuntimeError:
        return None


async def status(
    settings: Settings | None = None, *, timeout_s: float = 3.0
) -> list[ServiceStatus]:
    """Report the stack's services: address, answering, started by ``up`` (pid) or external.

    Args:
        settings: default ``Settings()`` (the environment).
        timeout_s: seconds per probe.

    Returns:
        ``[temporal, neo4j]`` (``neo4j`` only when it is the graph store), then ``broker``
        when ``AGENT_TASKS_BROKER_URL`` names one and ``falkordb`` when it is the graph store,
        as :class:`ServiceStatus`. Never starts or stops anything.
    """
    s = settings or Settings()
    temporal = TemporalDevServer(s.data_dir, parse_host_port(s.temporal.address, 7233)[1])
    checks: list[tuple[str, str, ManagedProcess, Probe]] = [
        ("temporal", s.temporal.address, temporal,
         await probe_temporal(s.temporal, namespace=s.temporal.namespace, timeout_s=timeout_s)),
    ]  # fmt: skip
    if s.graph == "neo4j":
        neo = Neo4jServer(s.data_dir, parse_host_port(s.neo4j_uri, 7687)[1])
        n_probe = await probe_neo4j(s.neo4j_uri, _neo4j_auth_or_none(s), timeout_s=timeout_s)
        checks.append(("neo4j", s.neo4j_uri, neo, n_probe))
    for name, url, redis in _redis_servers(s):
        checks.append((name, _shown(url), redis, await probe_redis(url, timeout_s=timeout_s)))
    out = []
    for name, address, server, probe in checks:
        pid = server.running_pid()
        detail = probe.detail
        if pid is not None and not probe.answering:
            detail = f"process running, not answering yet ({detail})"
        out.append(
            ServiceStatus(
                name, address, probe.answering, pid, probe.answering and pid is None, detail
            )
        )
    return out


# Long: plan every service, then start them at once; the bring-ups share the started list to stop
# all on failure
async def up(
    settings: Settings | None = None,
    *,
    extra_dynamic_config: Mapping[str, str] | None = None,
    temporal_timeout_s: float = 60.0,
    neo4j_timeout_s: float = 120.0,
    broker_timeout_s: float = 20.0,
    probe_timeout_s: float = 3.0,
) -> list[ServiceStatus]:
    """Make Temporal, the graph store (Neo4j, or FalkorDB with ``AGENT_TASKS_GRAPH=falkordb``)
    and the broker answer: start local servers where nothing answers. Neo4j is left alone
    (neither probed nor started, Java not needed) when FalkorDB is the graph store.

    For each service: a process that ``up`` started earlier and still runs is reported (and
    waited for); an address that answers is used as it is (external); a local address that
    does not answer gets a server; an address on another host that does not answer is an
    error. All services are checked, and every server to be started is prepared (its
    executable found, Java's version checked, the Neo4j launcher built), before anything is
    started. A failed start stops every server this call started. Safe to run twice.

    Args:
        settings: default ``Settings()`` (the environment).
        extra_dynamic_config: more Temporal dynamic config (key -> JSON text), used only when
            Temporal is started by this call.
        temporal_timeout_s: seconds to wait for Temporal to answer.
        neo4j_timeout_s: seconds to wait for Neo4j to answer (a first start takes longer).
        broker_timeout_s: seconds to wait for the broker (and FalkorDB) to answer.
        probe_timeout_s: seconds for the first "does it answer?" check of each address.

    Returns:
        ``[temporal, neo4j]`` (``neo4j`` only when it is the graph store; then ``broker`` when
        ``AGENT_TASKS_BROKER_URL`` names one, ``falkordb`` when it is the graph store) as
        :class:`ServiceStatus`; ``detail`` says
        what was done and, for a started server, how long it took to answer.

    Raises:
        DevStackError: a remote address does not answer or a prerequisite is missing (every
            such problem is named, and the message ends "Nothing was started."); a port is
            taken by something else, a server could not be started or did not answer in time
            (every server this call started is stopped again, and the message names them).
    """
    s = settings or Settings()
    temporal = TemporalDevServer.from_settings(s, extra_dynamic_config)
    t_host, _ = parse_host_port(s.temporal.address, 7233)
    n_host, _ = parse_host_port(s.neo4j_uri, 7687)

    # 1. plan: what runs already, what answers, what is to be started and what it needs
    t_pid = temporal.running_pid()
    t_probe = Probe(False, "")
    if t_pid is None:
        t_probe = await probe_temporal(s.temporal, timeout_s=probe_timeout_s)
    n_port = parse_host_port(s.neo4j_uri, 7687)[1]
    neo = Neo4jServer(s.data_dir, n_port, s.neo4j_password_file)
    with_neo4j = s.graph == "neo4j"  # FalkorDB as the graph store needs no Neo4j (nor Java)
    n_pid = neo.running_pid() if with_neo4j else None
    n_probe = Probe(False, "")
    if with_neo4j and n_pid is None:
        n_probe = await probe_neo4j(s.neo4j_uri, _neo4j_auth_or_none(s), timeout_s=probe_timeout_s)
    errors = []
    to_prepare: list[ManagedProcess] = []
    if t_pid is None and not t_probe.answering:
        if is_local_host(t_host):
            to_prepare.append(temporal)
        else:
            errors.append(
                f"TEMPORAL_ADDRESS={s.temporal.address} is not on this host and does not answer "
                f"({t_probe.detail})"
            )
    if with_neo4j and n_pid is None and not n_probe.answering:
        if not is_local_host(n_host):
            errors.append(
                f"NEO4J_URI={s.neo4j_uri} is not on this host and does not answer "
                f"({n_probe.detail})"
            )
        else:
            try:
                neo = Neo4jServer.from_settings(s)
                to_prepare.append(neo)
            except DevStackError as e:
                errors.append(str(e))
    redis_plans: list[tuple[str, str, RedisServer, int | None, Probe]] = []
    for name, url, redis in _redis_servers(s):
        pid = redis.running_pid()
        probe = Probe(False, "")
        if pid is None:
            probe = await probe_redis(url, timeout_s=probe_timeout_s)
            host, _ = parse_host_port(url, 6379)
            if probe.answering:
                pass
            elif is_local_host(host):
                to_prepare.append(redis)
            else:
                variable = (
                    "AGENT_TASKS_BROKER_URL" if name == "broker" else "AGENT_TASKS_FALKORDB_URL"
                )
                errors.append(
                    f"{variable}={_shown(url)} is not on this host and does not answer "
                    f"({probe.detail})"
                )
        redis_plans.append((name, url, redis, pid, probe))
    for server in to_prepare:
        try:
            await server.prepare()
        except DevStackError as e:
            errors.append(f"{server.name}: {e}")
    if errors:
        raise DevStackError("; ".join(errors) + ". Nothing was started.")

    # 2. act; every server started here is in `started` from its spawn on
    started: list[tuple[str, ManagedProcess, int]] = []

    async def start(name: str, server: ManagedProcess, timeout_s: float) -> tuple[int, float]:
        pid = await server.start()
        started.append((name, server, pid))
        return pid, await server.wait_ready(timeout_s)

    async def bring_up_temporal() -> ServiceStatus:
        if t_probe.answering:
            return ServiceStatus("temporal", s.temporal.address, True, None, True, "external")
        if t_pid is not None:
            await temporal.wait_ready(temporal_timeout_s)
            return ServiceStatus(
                "temporal", s.temporal.address, True, t_pid, False, "already running"
            )
        pid, took = await start("temporal", temporal, temporal_timeout_s)
        ui = f", UI {temporal.ui_url}" if temporal.ui_url else ""
        return ServiceStatus(
            "temporal", s.temporal.address, True, pid, False, f"started in {took:.1f} s{ui}"
        )

    async def bring_up_neo4j() -> ServiceStatus:
        if n_pid is not None:
            await neo.wait_ready(neo4j_timeout_s)
            return ServiceStatus("neo4j", s.neo4j_uri, True, n_pid, False, "already running")
        if n_probe.answering and n_probe.detail:
            raise DevStackError(
                f"a Neo4j at {s.neo4j_uri} (not started by this data folder) is {n_probe.detail}: "
                "set NEO4J_PASSWORD to its password, or stop it"
            )
        if n_probe.answering:
            return ServiceStatus("neo4j", s.neo4j_uri, True, None, True, "external")
        pid, took = await start("neo4j", neo, neo4j_timeout_s)
        return ServiceStatus("neo4j", s.neo4j_uri, True, pid, False, f"started in {took:.1f} s")

    async def bring_up_redis(
        name: str, url: str, server: RedisServer, pid: int | None, probe: Probe
    ) -> ServiceStatus:
        if probe.answering:
            return ServiceStatus(name, _shown(url), True, None, True, "external")
        if pid is not None:
            await server.wait_ready(broker_timeout_s)
            return ServiceStatus(name, _shown(url), True, pid, False, "already running")
        started_pid, took = await start(name, server, broker_timeout_s)
        took_s = f"started in {took:.1f} s"
        return ServiceStatus(name, _shown(url), True, started_pid, False, took_s)

    bring_ups = [bring_up_temporal()] + ([bring_up_neo4j()] if with_neo4j else [])
    bring_ups += [bring_up_redis(*plan) for plan in redis_plans]
    tasks = [asyncio.ensure_future(b) for b in bring_ups]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for task in tasks:
        task.cancel()  # no-op for a finished one; the first failure ends the wait for the rest
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [
        r
        for r in results
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
    ]
    if failures:
        note = await _stop_started(started)
        if not all(isinstance(f, DevStackError) for f in failures):
            failures[0].add_note(note)
            raise failures[0]
        raise DevStackError("\n".join(str(f) for f in failures) + "\n" + note)
    return [r for r in results if isinstance(r, ServiceStatus)]


async def _stop_started(started: Sequence[tuple[str, ManagedProcess, int]]) -> str:
    """Stop the servers a failed ``up`` started; return the sentences that say so."""
    if not started:
        return "No server had been started by this call."
    stopped: list[str] = []
    exited: list[str] = []
    kept: list[str] = []
    for name, server, pid in started:
        try:
            (stopped if await server.stop() else exited).append(f"{name} (pid {pid})")
        except DevStackError as e:
            kept.append(f"{name} (pid {pid}: {e})")
    said = [
        f"{what}: {', '.join(names)}."
        for what, names in (
            ("Stopped what this call had started", stopped),
            ("Started by this call and exited already", exited),
            ("Started by this call and could not be stopped", kept),
        )
        if names
    ]
    return " ".join(said)


async def down(settings: Settings | None = None, *, timeout_s: float = 60.0) -> list[ServiceStatus]:
    """Stop the servers that ``up`` started (by their pid files); leave external ones alone,
    and say so: a server that answers at the address but was not started from this data
    folder (by ``up`` with another data folder, docker compose, by hand) is reported
    ``answering`` and ``external``, its detail naming the data folder, and a folder
    ``.agent-tasks`` with pid files in the current folder or above (the data folder's
    default before it was the user's) is named with the command that stops its stack.

    Args:
        settings: default ``Settings()`` (the environment).
        timeout_s: seconds to wait for each clean exit before SIGKILL.

    Returns:
        ``[temporal, neo4j]`` (``neo4j`` when it is the graph store or a Neo4j of this data
        folder still runs; then ``broker`` and ``falkordb`` when configured) as
        :class:`ServiceStatus`:
        ``pid`` is the stopped process, or None when there was none; ``answering`` is False
        for a stopped one and for a quiet address, True for one left running.

    Raises:
        DevStackError: a process survived SIGKILL.
    """
    s = settings or Settings()
    servers: list[tuple[str, str, ManagedProcess]] = [
        ("temporal", s.temporal.address,
         TemporalDevServer(s.data_dir, parse_host_port(s.temporal.address, 7233)[1])),
    ]  # fmt: skip
    neo = Neo4jServer(s.data_dir, parse_host_port(s.neo4j_uri, 7687)[1])
    if s.graph == "neo4j" or neo.running_pid() is not None:  # one `up` started before a switch
        servers.append(("neo4j", s.neo4j_uri, neo))
    servers += [(name, _shown(url), server) for name, url, server in _redis_servers(s)]

    async def stop_one(name: str, address: str, server: ManagedProcess) -> ServiceStatus:
        pid = server.running_pid()
        if await server.stop(timeout_s):
            return ServiceStatus(name, address, False, pid, False, f"stopped (pid {pid})")
        host, port = parse_host_port(address, 0)
        if not await asyncio.to_thread(port_is_open, host, port):
            return ServiceStatus(name, address, False, None, False, "nothing to stop")
        detail = f"left running: not started by `dev up` with the data folder {s.data_dir}"
        return ServiceStatus(name, address, True, None, True, detail + _old_stack_hint(s))

    return list(await asyncio.gather(*(stop_one(*x) for x in servers)))


OLD_DATA_DIR = ".agent-tasks"
"""The data folder's default before it was the user's data folder: relative to the current
folder (``down`` still names one it finds, so a stack it started can be stopped)."""


def _old_stack_hint(settings: Settings) -> str:
    """``; ...`` naming the nearest ``.agent-tasks`` with pid files in the current folder or
    above (not the data folder itself) and the command that stops its stack; else empty."""
    here = Path.cwd()
    for folder in (here, *here.parents):
        old = folder / OLD_DATA_DIR
        if old != settings.data_dir and any(old.glob("run/*.pid")):
            return f"; {old} has pid files: AGENT_TASKS_DATA_DIR={old} agent-tasks dev down"
    return ""


def format_status(services: Sequence[ServiceStatus]) -> str:
    """Render services as aligned text lines for people (no secrets in it)."""
    lines = []
    for svc in services:
        if svc.pid is not None:
            owner = f"pid {svc.pid}"
        elif svc.external:
            owner = "external"
        else:
            owner = "-"
        answering = "answering" if svc.answering else "not answering"
        detail = f"  {svc.detail}" if svc.detail else ""
        lines.append(f"{svc.name:<9} {svc.address:<24} {answering:<14} {owner:<10}{detail}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_tasks.devstack up|down|status``: run one command and print the result.

    Returns:
        the exit status: 0 done, 1 error (printed on stderr), 2 usage.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    run: Callable[[], Coroutine[Any, Any, list[ServiceStatus]]]
    if args == ["up"]:
        run = up
    elif args == ["down"]:
        run = down
    elif args == ["status"]:
        run = status
    else:
        print("usage: python -m agent_tasks.devstack up|down|status", file=sys.stderr)
        return 2
    try:
        print(format_status(asyncio.run(run())))
    except DevStackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter finalization: see the module docstring
