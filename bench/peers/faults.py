"""The fault scripts, the same for every runtime; each returns one run's cell, and
``combine`` makes the row's cell of a runtime's runs. The effects are counted from the ledger
(``ledger.count``): ``charge`` once is right."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.peers.ledger import count
from bench.peers.measures import Cell, p50
from bench.peers.processes import Bench, RuntimeProcesses
from bench.peers.script import APPROVAL_AMOUNT

END_S = 150.0
"""How long a fault's task may take to end after the fault (seconds): a Temporal activity's
default start-to-close timeout of 60 s and its retry fit."""


async def _until(check: Callable[[], Any], within_s: float, what: str) -> Any:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        found = check()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no {what} within {within_s:.0f} s")


async def fresh(processes: RuntimeProcesses) -> None:
    """A new worker and client after a run that broke."""
    await processes.stop()
    await processes.start()


def _told(bench: Bench, task: str) -> str:
    """What the model was last told of ``charge`` (its tool message), or ``-``."""
    for request, _ in reversed(bench.script.calls(task)):
        tools = [m for m in request.get("messages", []) if m.get("role") == "tool"]
        if len(tools) >= 2:
            content = tools[1].get("content")
            text = content if isinstance(content, str) else str(content)
            return text.replace("\n", " ")[:80]
    return "-"


def _effects(bench: Bench, task: str) -> tuple[int, int]:
    counted = count(bench.ledger.effects(task, "charge"))
    return counted.raw, counted.deduplicated


async def _end(processes: RuntimeProcesses, task: str, within_s: float = END_S) -> str:
    ended = await processes.call("wait", within=within_s + 30, task=task, within_s=within_s)
    return str(ended["status"])


async def kill_charge(bench: Bench, processes: RuntimeProcesses) -> Cell:
    """SIGKILL of the worker during ``charge`` after its effect, then a new worker."""
    task = bench.task("kill-charge")
    bench.ledger.hold(task, "charge")
    await processes.call("start", task=task, turns=2)
    await _until(lambda: bench.ledger.effects(task, "charge"), 120, "charge effect")
    await processes.kill_worker()
    bench.ledger.release(task, "charge")
    await processes.restart_worker()
    await processes.call("recover", tasks=[task])
    status = await _end(processes, task)
    raw, keyed = _effects(bench, task)
    return Cell(
        f"{raw} effects ({keyed} by key), task {status}, model told: {_told(bench, task)}",
        good=raw == 1,
    )


async def kill_model(bench: Bench, processes: RuntimeProcesses) -> Cell:
    """SIGKILL of the worker during the first model call, then a new worker; ``value`` is the
    seconds from the kill to the model called again (the task running again)."""
    task = bench.task("kill-model")
    bench.script.hold(task, 0)
    await processes.call("start", task=task, turns=2)
    await _until(lambda: bench.script.calls(task), 60, "model call")
    await processes.kill_worker()
    killed = time.monotonic()
    await processes.restart_worker()
    await processes.call("recover", tasks=[task])
    await _until(lambda: len(bench.script.calls(task)) >= 2, END_S, "model call again")
    again = bench.script.calls(task)[1][1].started_at - killed
    status = await _end(processes, task)
    raw, _ = _effects(bench, task)
    return Cell(
        f"running again after {again:.1f} s, {raw} charge, task {status}",
        again,
        good=raw == 1 and status == "done",
    )


async def cancel_model(bench: Bench, processes: RuntimeProcesses) -> Cell:
    """A cancel during the first model call: does the model server see its request closed?"""
    task = bench.task("cancel-model")
    bench.script.hold(task, 0)
    await processes.call("start", task=task, turns=2)
    await _until(lambda: bench.script.calls(task), 60, "model call")
    exchange = bench.script.calls(task)[0][1]
    sent = time.monotonic()
    await processes.call("cancel", task=task)
    with contextlib.suppress(TimeoutError):
        await _until(lambda: exchange.closed_early, 20, "close")
    status = await _end(processes, task, 30)
    if exchange.closed_at is None:
        return Cell(f"request still open 20 s after the cancel, task {status}", good=False)
    return Cell(
        f"request closed {exchange.closed_at - sent:.1f} s after the cancel, task {status}",
        exchange.closed_at - sent,
        good=True,
    )


async def cancel_charge(bench: Bench, processes: RuntimeProcesses) -> Cell:
    """A cancel during ``charge`` (after its effect; the tool goes on 5 s later)."""
    task = bench.task("cancel-charge")
    bench.ledger.hold(task, "charge")
    await processes.call("start", task=task, turns=2)
    await _until(lambda: bench.ledger.effects(task, "charge"), 120, "charge effect")
    asked = len(bench.script.calls(task))
    await processes.call("cancel", task=task)
    await asyncio.sleep(5)
    bench.ledger.release(task, "charge")
    status = await _end(processes, task, 60)
    raw, _ = _effects(bench, task)
    after = len(bench.script.calls(task)) - asked
    return Cell(
        f"{raw} charge, task {status}, model called {after} times after",
        good=raw == 1 and after == 0 and status == "cancelled",
    )


async def _approval(bench: Bench, processes: RuntimeProcesses, task: str) -> dict[str, Any]:
    await processes.call("start", task=task, turns=2, amount=APPROVAL_AMOUNT)

    async def shown() -> Any:
        return await processes.call("pending", task=task)

    found: dict[str, Any] = await _until(shown, 90, "approval request")
    return found


async def approval_restart(bench: Bench, processes: RuntimeProcesses) -> Cell:
    """An approval asked before ``charge``, the worker killed and started again while it
    waits, then answered: does ``charge`` run once, on the call that was shown?"""
    task = bench.task("approval")
    shown = await _approval(bench, processes, task)
    await processes.kill_worker()
    await processes.restart_worker()
    await processes.call("recover", tasks=[task])
    await asyncio.sleep(2)
    await processes.call("approve", task=task)
    status = await _end(processes, task)
    effects = bench.ledger.effects(task, "charge")
    same = all(effect.args == shown["args"] for effect in effects)
    return Cell(
        f"{len(effects)} charge, {'the call shown' if same else 'another call'}, task {status}",
        good=len(effects) == 1 and same and status == "done",
    )


async def answer_twice(bench: Bench, processes: RuntimeProcesses) -> Cell:
    """An approval answered twice at once: ``charge`` once?"""
    task = bench.task("twice")
    await _approval(bench, processes, task)
    answers = await asyncio.gather(
        processes.call("approve", task=task),
        processes.call("approve", task=task),
        return_exceptions=True,
    )
    status = await _end(processes, task)
    raw, _ = _effects(bench, task)
    second = answers[1]
    said = f"second answer: {second}" if isinstance(second, Exception) else "both taken"
    return Cell(f"{raw} charge, task {status}; {said}"[:200], good=raw == 1 and status == "done")


SCRIPTS: dict[str, Callable[[Bench, RuntimeProcesses], Awaitable[Cell]]] = {
    "kill_charge": kill_charge,
    "kill_model": kill_model,
    "cancel_model": cancel_model,
    "cancel_charge": cancel_charge,
    "approval_restart": approval_restart,
    "answer_twice": answer_twice,
}


def combine(cells: list[Cell]) -> Cell:
    """One runtime's runs of a fault as one cell: right in every run or not, each run's text
    once (identical runs say how many)."""
    if not cells:
        return Cell("no run")
    if any(not cell.offered for cell in cells):
        return next(cell for cell in cells if not cell.offered)
    texts: dict[str, int] = {}
    for cell in cells:
        texts[cell.text] = texts.get(cell.text, 0) + 1
    text = "; ".join(t if n == 1 else f"{t} (x{n})" for t, n in texts.items())
    values = [cell.value for cell in cells if cell.value is not None]
    good = None if all(c.good is None for c in cells) else all(bool(c.good) for c in cells)
    rights = sum(1 for cell in cells if cell.good)
    return Cell(f"{rights}/{len(cells)} runs: {text}", p50(values) if values else None, good=good)
