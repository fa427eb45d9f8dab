"""``python -m bench``: the cost per event against Temporal's own floor (``bench.suite``);
``python -m bench peers``: the same agent on five runtimes (``bench.peers``).

A tool of the repository, not of the product: the CLI (``agent-tasks``) does not load it, and
the package (the wheel, the worker image) does not ship it.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.table import Table

from agent_tasks.cli.common import JsonOpt, console, emit, main_of, run
from agent_tasks.telemetry import log_core_through_python
from bench.suite import FULL, GROUPS, QUICK, run_bench


def bench_command(
    quick: Annotated[
        bool, typer.Option("--quick", help="Every row once with small sizes (under 2 minutes).")
    ] = False,
    rounds: Annotated[
        int | None, typer.Option(min=1, help="Rounds (each row: a block of ours, one of bare).")
    ] = None,
    scale: Annotated[
        float, typer.Option(min=0.001, help="Multiply every count by this (tests: 0.05).")
    ] = 1.0,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="Only these row groups (repeat): writes, batch, writers, apart, ledger, lag, "
            "list, step, rss.",
        ),
    ] = None,
    shared: Annotated[
        bool,
        typer.Option(
            "--shared",
            help="Use the configured Temporal server (TEMPORAL_ADDRESS), not a private dev "
            "server of the bench's own.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Measure the product against bare Temporal (and Neo4j), and against bare Temporal with
    a minimal mirror into the graph store, side by side and print one table: medians, p95 and
    the ratios of the medians. Runs on a Temporal dev server of its own
    (unless --shared) and the configured Neo4j (the local stack's by default), with its own
    workers; deletes what it wrote to Neo4j and terminates the workflows it started."""
    unknown = set(only or ()) - set(GROUPS)
    if unknown:
        console.print(f"[red]invalid arguments:[/red] unknown row groups {sorted(unknown)}")
        raise typer.Exit(2)

    sizes = QUICK if quick else FULL
    if scale != 1.0:
        sizes = sizes.scaled(scale)
    if rounds is not None:
        sizes = replace(sizes, rounds=rounds)
    report = run(run_bench(sizes, only=None if only is None else set(only), private=not shared))
    report["command"] = shlex.join(["python", *sys.orig_argv[1:]])  # as typed: bench.decompose too
    emit(report, as_json, _render)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _render(report: dict[str, Any]) -> None:
    for key, value in report["machine"].items():
        console.print(f"{key}: {value}")
    console.print(f"command: {report['command']}")
    out = Table(
        title="cost per event: ours against the floor (ratio = ours p50 / baseline p50; "
        "m = bare with the minimal mirror, the architecture's limit)"
    )
    for column in (
        "row",
        "unit",
        "ours p50",
        "ours p95",
        "baseline",
        "p50",
        "p95",
        "ratio",
        "m p50",
        "m p95",
        "m ratio",
        "goal",
    ):
        out.add_column(column)
    for row in report["rows"]:
        out.add_row(
            row["row"],
            row["unit"],
            _number(row["ours_p50"]),
            _number(row["ours_p95"]),
            row["baseline"],
            _number(row["base_p50"]),
            _number(row["base_p95"]),
            _ratio(row["ratio"]),
            _number(row.get("mirror_p50")),
            _number(row.get("mirror_p95")),
            _ratio(row.get("mirror_ratio")),
            row["goal"],
        )
    console.print(out)
    profiled = [row for row in report["rows"] if row["cpu_ms"]]
    if profiled:
        console.print(_cpu_table(profiled))


def _cpu_table(rows: list[dict[str, Any]]) -> Table:
    """CPU per event (ms, medians) by process, ours and the baseline, of the rows that
    profile it (``bench.harness.cpu_profile``)."""
    processes = sorted({name for row in rows for side in row["cpu_ms"].values() for name in side})
    out = Table(title="CPU per event by process (ms, p50): where a row's cost falls")
    for column in ("row", "side", *processes, "all"):
        out.add_column(column)
    for row in rows:
        for side, spent in row["cpu_ms"].items():
            cells = [_number(spent.get(name)) for name in processes]
            out.add_row(row["row"], side, *cells, _number(sum(spent.values())))
    return out


app = typer.Typer(add_completion=False)
app.command()(bench_command)


def main() -> None:
    """Run the bench as a command, the SDK's core logging through Python's logging to stderr
    (``telemetry.log_core_through_python``, as the CLI does): standard output is the table or
    the JSON alone (the core's warnings of activities whose workflow the bench terminated went
    there and broke ``--json``)."""
    log_core_through_python()
    if sys.argv[1:2] == ["peers"]:  # ``python -m bench peers``: the side by side with peers
        from bench.peers.command import app as peers_app

        del sys.argv[1]
        main_of(peers_app)
    main_of(app)


if __name__ == "__main__":
    main()
