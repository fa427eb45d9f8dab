"""``python -m bench``: every row gets a number (no timing is asserted), and the pure parts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.harness import Row, cpu_seconds, in_turn
from bench.suite import FULL, QUICK, make_rows

ROOT = Path(__file__).resolve().parents[2]


def python_m(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m ARGS`` in the repository, its output captured (5 minutes at most)."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_quick_run_with_tiny_sizes_fills_every_row() -> None:
    done = python_m("bench", "--quick", "--scale", "0.05", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    names = [row["row"] for row in report["rows"]]
    assert names == [row.name for row in make_rows(QUICK.scaled(0.05)).values()]
    for row in report["rows"]:
        for key in ("ours_p50", "ours_p95", "base_p50", "base_p95", "ratio"):
            assert isinstance(row[key], float) and row[key] > 0, (row["row"], key, row[key])
    mirrored = [row["row"] for row in report["rows"] if row["mirror_ratio"] is not None]
    assert mirrored == [  # every write row against bare with the minimal mirror too
        row.name
        for key, row in make_rows(QUICK.scaled(0.05)).items()
        if key not in ("floor", "list", "replay", "step")
    ]
    profiled = {row["row"]: row["cpu_ms"] for row in report["rows"] if row["cpu_ms"]}
    assert sorted(profiled) == sorted(
        row.name
        for key, row in make_rows(QUICK.scaled(0.05)).items()
        if key in ("cpu", "batch", "writers", "batch_apart", "writers_apart")
    )
    for name, sides in profiled.items():  # this process and the bench's own Temporal server
        # (CPU time counts in clock ticks: a tiny block may spend none in one process)
        apart = ["worker"] if "apart" in name else []
        assert sorted(sides) == ["bare", "mirror", "ours"]
        for spent in sides.values():
            assert {"bench", "temporal", *apart} <= spent.keys() and min(spent.values()) >= 0
        assert sum(sides["ours"].values()) > 0, name
    assert report["command"] == "python -m bench --quick --scale 0.05 --json"
    assert {"cpu", "memory", "temporal server", "neo4j server"} <= report["machine"].keys()


def test_summary_is_medians_p95_and_their_ratios() -> None:
    row = Row("r", "ms", "", ours=[4.0, 1.0, 3.0, 2.0], base=[1.0, 1.0, 2.0], mirror=[5.0, 1.0])
    summary = row.summary()
    # median of 1..4 is 2.5; nearest-rank p95 of 4 values is the 4th; ratio of the medians
    assert (summary["ours_p50"], summary["ours_p95"]) == (2.5, 4.0)
    assert (summary["base_p50"], summary["base_p95"]) == (1.0, 2.0)
    assert summary["ratio"] == 2.5
    assert (summary["mirror_p50"], summary["mirror_p95"], summary["mirror_ratio"]) == (
        3,
        5,
        2.5 / 3,
    )
    assert Row("empty", "ms", "").summary()["ratio"] is None
    assert Row("no mirror", "ms", "", ours=[1.0]).summary()["mirror_ratio"] is None


def test_sides_take_turns_first_second_and_last() -> None:
    ran: list[str] = []

    def side(name: str) -> Any:
        async def run() -> None:
            ran.append(name)

        return run

    for turn in range(3):
        asyncio.run(in_turn(turn, side("ours"), side("bare"), side("mirror")))
    assert ran == [
        *("ours", "bare", "mirror"),
        *("bare", "mirror", "ours"),
        *("mirror", "ours", "bare"),
    ]


def test_scaled_sizes_keep_rounds_and_at_least_two_of_each() -> None:
    tiny = FULL.scaled(0.0001)
    assert tiny.rounds == FULL.rounds and tiny.pause_s == FULL.pause_s
    assert tiny.writes == 2 and tiny.list_tasks == 2 and tiny.lag_s == 1.0
    assert FULL.scaled(0.5).batch_events == 5_000


def test_cpu_seconds_of_this_process_and_of_a_process_gone() -> None:
    spent = cpu_seconds({"gone": 2**22 + 1})  # above the kernel's highest pid_max
    assert spent["gone"] == 0.0
    assert spent["bench"] > 0 and list(spent) == ["bench", "gone"]


def test_decompose_runs_the_writes_with_the_mirror_switched_off() -> None:
    # the write path alone: no follower polls, queries or writes, and the CPU row, which
    # waits for the mirror in the product, still ends (it hung before Bench.mirrored was
    # switched off too)
    done = python_m(
        *("bench.decompose", "none", "--quick", "--scale", "0.05"),
        *("--only", "writes", "--only", "writers", "--json"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)  # the JSON alone: the SDK core's warnings go to stderr
    rows = {row["row"]: row for row in report["rows"]}
    quick = make_rows(QUICK.scaled(0.05))
    for key in ("quiet", "b2b", "cpu", "writers"):
        assert rows[quick[key].name]["ratio"] > 0, key
    assert rows[quick["batch"].name]["ratio"] is None  # not asked for
    assert report["command"] == (
        "python -m bench.decompose none --quick --scale 0.05 --only writes --only writers --json"
    )


def test_decompose_refuses_an_unknown_variant_and_a_follow_age_not_in_ms() -> None:
    done = python_m("bench.decompose", "most", "--quick")
    assert done.returncode == 1
    assert "the variant is one of full, query, poll, none, not 'most'" in done.stderr
    done = python_m("bench.decompose", "full", "--follow-age", "soon", "--quick")
    assert done.returncode == 1
    assert "--follow-age takes a whole number of milliseconds, not ['soon']" in done.stderr
