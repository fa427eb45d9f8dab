"""The ``peers`` command of ``python -m bench``: run ``bench.peers.runner`` and write the
table (``docs/comparison.md`` by default)."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from agent_tasks.cli.common import console, run
from bench.peers.measures import Cell
from bench.peers.processes import ROOT
from bench.peers.rows import MEASURES
from bench.peers.runner import FULL, QUICK, RUNTIMES, run_peers
from bench.peers.table import render

NOTES = (
    "pydantic-ai's `TemporalAgent` and `DBOSAgent` are deprecated in the pinned version in "
    "favour of the `TemporalDurability` and `DBOSDurability` capabilities; the agents here use "
    "the capabilities (the wrappers' replacements, the same activities and steps).",
    "The OpenAI Agents SDK's Temporal plugin now ships as `temporalio-openai-agents` "
    "(`temporalio.openai_agents`; `temporalio.contrib.openai_agents` forwards to it).",
    "CPU: the server is the bench's own Temporal dev server, the database PostgreSQL (DBOS, "
    "LangGraph) or Neo4j (ours: the graph mirror; Temporal's SQLite is inside the server). "
    "LangGraph has no worker apart from the app: its client CPU is in its worker's.",
    "Where ours trails, and why: a whole task, one turn and CPU per turn. Ours runs its loop "
    "in a workflow, as the two Temporal peers do, but also writes every message, tool call "
    "and result as ledger events into the history (the storage row: more history events per "
    "turn) and mirrors them to the graph store in an activity: more workflow tasks, more "
    "server CPU, and a graph-store write per batch (the CPU row's database part). The DBOS "
    "and LangGraph peers run the agent in the app's process with no server between: a turn "
    "is a few SQL statements. To lead there, ours would have to take the mirror off the "
    "turn's path (one graph transaction per turn, or after the task) and add fewer history "
    "events per turn; what the mirror buys is the cross-task reads (lists, trees, search) no "
    "peer offers. Where ours leads is the fault rows: a `charge` killed after its effect is "
    "not run again (the model is told its effect is unknown), a cancel closes the model's "
    "request, and an approval answered twice charges once.",
)


def peers_command(
    quick: Annotated[
        bool, typer.Option("--quick", help="One round, small sizes, one run of each fault.")
    ] = False,
    phase: Annotated[
        list[str] | None,
        typer.Option("--phase", help="Only: costs, faults, long, memory (repeat)."),
    ] = None,
    runtime: Annotated[
        list[str] | None, typer.Option("--runtime", help="Only these runtimes (repeat).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Where the table goes.")] = ROOT
    / "docs"
    / "comparison.md",
    raw: Annotated[
        Path | None,
        typer.Option(
            help="Where the raw results go (JSON); default bench/RESULTS-peers[-quick].json."
        ),
    ] = None,
    from_raw: Annotated[
        Path | None,
        typer.Option(help="Run nothing: write the table again from this run's raw results."),
    ] = None,
) -> None:
    """The same agent on five runtimes (ours, pydantic-ai on Temporal and on DBOS, the OpenAI
    Agents SDK on Temporal, LangGraph with PostgresSaver), side by side in cost and under
    faults; writes the table to ``out`` and the raw results to ``raw`` (or, with
    ``from_raw``, only the table, from a run's raw results)."""
    if from_raw is not None:
        rerender(from_raw, out)
        return
    sizes = QUICK if quick else FULL
    raw_out = raw or ROOT / "bench" / f"RESULTS-peers{'-quick' if quick else ''}.json"
    logs = Path(tempfile.mkdtemp(prefix="bench-peers-logs-"))
    console.print(f"logs of the runtimes' processes: {logs}", style="dim")
    chosen = None if phase is None else set(phase)
    only = None if runtime is None else set(runtime)
    command = shlex.join(["python", "-m", "bench", "peers", *sys.argv[1:]])
    titles = {r.key: r.title for r in RUNTIMES if runtime is None or r.key in runtime}

    def report(
        about: dict[str, str], results: dict[str, dict[str, Cell]], broke: list[str]
    ) -> None:
        notes = [*NOTES, f"The raw results of this run: `{_shown(raw_out)}`.", *broke]
        out.write_text(render(MEASURES, titles, results, about, command, notes))
        cells = {m: {k: asdict(c) for k, c in row.items()} for m, row in results.items()}
        document = {"command": command, "machine": about, "results": cells, "broke": broke}
        raw_out.write_text(json.dumps(document, indent=1) + "\n")
        console.print(f"wrote {out} and {raw_out}")

    run(run_peers(sizes, logs, report, chosen, only))


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (no machine path in a page)."""
    return (
        str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else path.name
    )


def rerender(raw: Path, out: Path) -> None:
    """Write the table ``out`` from the raw results ``raw`` of a run (``report``'s JSON): the
    same cells, the same machine and command."""
    document = json.loads(raw.read_text())
    results = {
        measure: {key: Cell(**cell) for key, cell in row.items()}
        for measure, row in document["results"].items()
    }
    present = {key for row in results.values() for key in row}
    titles = {r.key: r.title for r in RUNTIMES if r.key in present}
    notes = [*NOTES, f"The raw results of this run: `{_shown(raw)}`.", *document["broke"]]
    out.write_text(
        render(MEASURES, titles, results, document["machine"], document["command"], notes)
    )
    console.print(f"wrote {out} from {raw}")


app = typer.Typer(add_completion=False)
app.command()(peers_command)
