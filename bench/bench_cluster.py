"""The cluster against the dev server, in one run: the write rows (single write, quiet and back
to back) and the 20 writers of ``python -m bench --quick --shared``, and the closed task's read
against the open one's (``bench.bench_closed_read``), each run against the local stack's dev
server (``TEMPORAL_ADDRESS`` as configured) and then against a Temporal cluster on PostgreSQL
started here (``tools.cluster``, on ``--port``, its namespace set up by ``agent-tasks
setup``), one after the other on the same Neo4j; the cluster is stopped and its folder removed
at the end. Prints each run's output under its target's name.

    python -m bench.bench_cluster [--port 7533] [--reads 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.cluster import Cluster

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "agent-tasks-bench"
"""The cluster's namespace for the bench (set up here)."""


def run_rows(target: str, env: dict[str, str], reads: int) -> None:
    """Run the write rows and the closed-read bench against ``env``'s Temporal; print both."""
    commands = [
        [sys.executable, "-m", "bench", "--quick", "--shared", "--only", "writes"],
        [sys.executable, "-m", "bench", "--quick", "--shared", "--only", "writers"],
        [sys.executable, "-m", "bench.bench_closed_read", "--reads", str(reads)],
    ]
    for command in commands:
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
        print(f"== {target}: {' '.join(command[2:])}", flush=True)
        print(done.stdout + (done.stderr[-2000:] if done.returncode else ""), flush=True)


async def main(port: int, reads: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dev = f"dev server ({env.get('TEMPORAL_ADDRESS', '127.0.0.1:7233')})"
    await asyncio.to_thread(run_rows, dev, env, reads)
    folder = Path(tempfile.mkdtemp(prefix="agent-tasks-bench-cluster-", dir="/var/tmp"))
    cluster = Cluster(folder, port)
    try:
        await cluster.up()
        cluster_env = {
            **env,
            "TEMPORAL_ADDRESS": cluster.temporal.address,
            "TEMPORAL_NAMESPACE": NAMESPACE,
        }
        setup = [sys.executable, "-m", "agent_tasks.cli", "setup", "--wait", "60"]
        await asyncio.to_thread(
            subprocess.run, setup, env=cluster_env, cwd=ROOT, check=True, capture_output=True
        )
        target = f"cluster ({cluster.temporal.address}, PostgreSQL)"
        await asyncio.to_thread(run_rows, target, cluster_env, reads)
    finally:
        await cluster.down()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=7533)
    parser.add_argument("--reads", type=int, default=30)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.port, arguments.reads))
