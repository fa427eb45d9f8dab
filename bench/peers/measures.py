"""What one cell of the comparison holds, and the rows' order: pure, for the table writer and
its tests."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Cell:
    """One runtime's result of one measure."""

    text: str
    """What the table shows."""
    value: float | None = None
    """The number compared across the row (lower is better), for the cost rows."""
    good: bool | None = None
    """For the fault rows: did the runtime do the right thing (None: not offered)."""
    offered: bool = True
    """False: the runtime cannot express the measure (``text`` says why)."""
    samples: list[float] = field(default_factory=list)
    """The measured values behind ``text`` (in its unit), for the raw results."""


@dataclass(frozen=True)
class Measure:
    """One row."""

    key: str
    title: str
    kind: str
    """``cost`` (compared by ``Cell.value``, lower is better) or ``fault`` (by ``Cell.good``)."""
    why: dict[str, str] = field(default_factory=dict)
    """Runtime key -> why that peer does better than ours here, shown under the row when it
    did in this run."""


def p50(values: list[float]) -> float:
    return statistics.median(values)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(len(ordered) * 0.95) - 1)]


def spread(values: list[float], unit: str, scale: float = 1.0, digits: int = 0) -> Cell:
    """A cost cell of ``values``: ``p50 (p95)`` times ``scale`` in ``unit``."""
    if not values:
        return Cell("no sample", None)
    low, high = p50(values) * scale, p95(values) * scale
    text = f"{low:,.{digits}f} {unit} (p95 {high:,.{digits}f})"
    return Cell(text, low, samples=[v * scale for v in values])


def better(ours: Cell, peer: Cell, kind: str, margin: float = 0.1) -> bool:
    """Does ``peer`` do better than ``ours`` (by more than ``margin`` of ours, for costs)?"""
    if not peer.offered:
        return False
    if kind == "cost":
        if peer.value is None:
            return False
        return ours.value is None or peer.value < ours.value * (1 - margin)
    return bool(peer.good) and not ours.good
