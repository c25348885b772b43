"""What every bench reports: a spread over rounds, and one result row per target.

A bench prints its own lines; with ``--results FILE`` it also appends one JSON line per
measure to FILE (the measure, its baseline from the same run, the ratio, the target and
whether it was met), which ``bench/run.py`` (``make bench``) gathers into one table.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Spread:
    """Min, median and max of a figure over rounds (one round is not a median)."""

    low: float
    median: float
    high: float
    rounds: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        vals = sorted(values)
        if not vals:
            raise ValueError("a spread of no rounds")
        return cls(vals[0], statistics.median(vals), vals[-1], len(vals))

    def show(self, fmt: str = ".2f", unit: str = "") -> str:
        """``median (min-max over N)``."""
        return (f"{self.median:{fmt}}{unit} ({self.low:{fmt}}-{self.high:{fmt}}{unit} over "
                f"{self.rounds})")


@dataclass(frozen=True)
class Result:
    """One row of the table: ``value`` is the measure, ``ratio`` the figure the target
    is about (a ratio to ``baseline`` when there is one, else the measure itself)."""

    bench: str
    measure: str
    baseline: str
    value: str
    ratio: float
    target: str  # a bound and its unit: ">= 0.5x", "<= 2 s", ">= 100 k/s"
    note: str = ""

    @property
    def met(self) -> bool:
        m = re.match(r"\s*(>=|<=)\s*([0-9.]+)", self.target)
        if m is None:
            raise ValueError(f"target {self.target!r} of {self.measure!r}: expected "
                             "'>= N' or '<= N' and a unit")
        limit = float(m.group(2))
        return self.ratio >= limit if m.group(1) == ">=" else self.ratio <= limit


def record(path: str | None, result: Result) -> None:
    """Append ``result`` to the results file (no file: print only)."""
    if path:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(result)) + "\n")


def load(path: Path) -> list[Result]:
    if not path.exists():
        return []
    return [Result(**json.loads(line)) for line in path.read_text().splitlines() if line]
