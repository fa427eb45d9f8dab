"""``python -m bench peers``: the pure parts (the ledger's counting, the model's script, a
fault's runs combined, the table), and one quick run of the whole (``load``: minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.peers.faults import combine
from bench.peers.ledger import Effect, Ledger, count
from bench.peers.measures import Cell, Measure, better
from bench.peers.rows import MEASURES
from bench.peers.script import answer, parse, prompt
from bench.peers.table import render

ROOT = Path(__file__).resolve().parents[2]


def effect(key: str | None) -> Effect:
    return Effect("ours", "t", "charge", key, {"amount": 5})


def test_effects_are_counted_raw_and_by_their_keys() -> None:
    counted = count([effect("k1"), effect("k1"), effect("k2"), effect(None), effect(None)])
    assert (counted.raw, counted.deduplicated) == (5, 4)
    assert count([]).raw == 0


def test_the_ledger_keeps_effects_per_task_and_tool_and_its_holds(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.record("ours", "a", "charge", "a/1", {"amount": 5})
    ledger.record("ours", "a", "lookup", None, {"item": 0})
    ledger.record("langgraph", "b", "charge", None, {"amount": 5})
    again = Ledger(tmp_path / "ledger.sqlite")  # another process's view of the same file
    assert again.effects("a", "charge") == [Effect("ours", "a", "charge", "a/1", {"amount": 5})]
    assert [e.tool for e in again.effects("a")] == ["charge", "lookup"]
    ledger.hold("a", "charge")
    assert again.held("a", "charge") and not again.held("b", "charge")
    ledger.release("a", "charge")
    assert not again.held("a", "charge")


def test_the_script_asks_for_lookups_then_charge_then_answers() -> None:
    def call(tools: int) -> dict[str, Any]:
        messages = [{"role": "system", "content": "Pay."}, {"role": "user", "content": goal}]
        messages += [{"role": "tool", "content": "x"}] * tools
        task, turns, amount, done = parse({"messages": messages})
        assert done == tools
        return answer(task, turns, amount, done)

    goal = prompt("t-1", 3, 500)
    asked = [call(done)["choices"][0]["message"] for done in range(4)]
    names = [m["tool_calls"][0]["function"]["name"] if "tool_calls" in m else None for m in asked]
    assert names == ["lookup", "lookup", "charge", None]
    assert json.loads(asked[2]["tool_calls"][0]["function"]["arguments"]) == {
        "order": "t-1",
        "amount": 500,
    }
    assert asked[3]["content"] == "paid order t-1"


def test_a_prompt_given_as_parts_is_read_too() -> None:
    parts = [{"type": "text", "text": prompt("t-2", 1)}]
    assert parse({"messages": [{"role": "user", "content": parts}]}) == ("t-2", 1, 5, 0)


def test_runs_of_a_fault_combine_into_one_cell() -> None:
    right = Cell("1 effects", 2.0, good=True)
    wrong = Cell("2 effects", 4.0, good=False)
    combined = combine([right, right, wrong])
    assert combined.good is False
    assert combined.text == "2/3 runs: 1 effects (x2); 2 effects"
    assert combined.value == 2.0
    assert combine([Cell("no cancel", offered=False)]).offered is False


def test_a_peer_is_better_by_a_margin_on_costs_and_by_being_right_on_faults() -> None:
    ours = Cell("10", 10.0)
    assert better(ours, Cell("8", 8.0), "cost")
    assert not better(ours, Cell("9.5", 9.5), "cost")  # within the 10 % margin
    assert not better(Cell("x", good=True), Cell("y", good=True), "fault")
    assert better(Cell("x", good=False), Cell("y", good=True), "fault")
    assert not better(ours, Cell("n/a", 1.0, offered=False), "cost")


def test_the_table_has_a_row_per_measure_a_column_per_runtime_and_says_why() -> None:
    measures = [
        Measure("task", "a whole task", "cost", {"peer": "no server between."}),
        Measure("kill", "a kill", "fault"),
    ]
    titles = {"ours": "Ours", "peer": "Peer", "other": "Other"}
    results = {
        "task": {"ours": Cell("30 ms", 30.0), "peer": Cell("10 ms", 10.0), "other": Cell("40", 40)},
        "kill": {
            "ours": Cell("1 effect", good=True),
            "peer": Cell("2 effects", good=False),
            "other": Cell("no kill", offered=False),
        },
    }
    page = render(measures, titles, results, {"date": "today"}, "python -m bench peers")
    assert "| measure | Ours | Peer | Other |" in page
    assert "| a whole task | 30 ms | 10 ms | 40 |" in page
    assert "| a kill | yes: 1 effect | **no**: 2 effects | not offered: no kill |" in page
    assert "- a whole task: Peer does better. no server between." in page
    assert "Other does better" not in page
    assert "- date: today" in page and "`python -m bench peers`" in page
    assert "- a whole task: ours trails 1 of 2 peers; 3.0 times the best (Peer)." in page
    assert "- a kill: ours right where Peer is not." in page


def test_a_missing_cell_says_not_measured_and_every_measure_has_a_kind() -> None:
    page = render(MEASURES, {"ours": "Ours"}, {}, {}, "c")
    assert page.count("not measured") == len(MEASURES)
    assert {m.kind for m in MEASURES} == {"cost", "fault"}


@pytest.mark.skipif(
    not os.environ.get("AGENT_TASKS_PEERS"),
    reason="installs four peer runtimes (minutes) and runs them: set AGENT_TASKS_PEERS=1",
)
def test_a_quick_run_writes_a_cell_for_every_measure_and_runtime(tmp_path: Path) -> None:
    """The whole command, quick (about 20 minutes on 2 busy cores: the Temporal peers wait
    out a 60 s activity timeout after each kill)."""
    out = tmp_path / "comparison.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "peers", "--quick", "--out", str(out),
         "--raw", str(tmp_path / "results.json")],
        cwd=ROOT, env=os.environ, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    page = out.read_text()
    assert "not measured" not in page
    assert page.count("\n| ") == 4 + len(MEASURES)  # two tables: a header and a rule each


def test_the_table_is_written_again_from_a_run_s_raw_results(tmp_path: Path) -> None:
    from dataclasses import asdict

    from bench.peers.command import rerender

    cells = {"task": {"ours": Cell("30 ms (p95 31)", 30.0, samples=[30.0, 31.0])}}
    raw = tmp_path / "raw.json"
    document = {
        "command": "python -m bench peers --quick",
        "machine": {"load": "1.00 1.00 1.00"},
        "results": {m: {k: asdict(c) for k, c in row.items()} for m, row in cells.items()},
        "broke": ["the phase long broke: TimeoutError"],
    }
    raw.write_text(json.dumps(document))
    out = tmp_path / "comparison.md"
    rerender(raw, out)
    page = out.read_text()
    assert "`python -m bench peers --quick`" in page and "- load: 1.00 1.00 1.00" in page
    assert "| a whole task (N turns), end to end | 30 ms (p95 31) |" in page
    assert "- the phase long broke: TimeoutError" in page
