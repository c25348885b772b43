"""Fold every default projection unit over one ~100k-event session (run by hand).

Prints events/s of the default registry, of the registry driving one unit, of the
default registry with a dump/load between batches of 500 (what the stream processor
does), and of a trivial baseline fold (count events per type) over the same events,
all measured in this run.

    PYTHONPATH=. python bench/bench_projections.py [--events 100000]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.projections import Registry, default_registry
from sessionstream.core.projections.index import IndexUnit
from tests.unit.strategies import random_log


def make_log(n: int) -> list[Event]:
    seed, actions = 1, 64
    events = random_log(seed, actions)
    while len(events) < n:
        actions *= 2
        events = random_log(seed, actions)
    return events[:n]


def baseline(events: list[Event]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in events:
        counts[e.type] = counts.get(e.type, 0) + 1
    return counts


def registry_overhead(events: list[Event]) -> Any:
    """The registry driving only the index unit (touches every event): dispatch cost."""
    return Registry([IndexUnit()]).fold(events)


def fold_all(events: list[Event]) -> Any:
    return default_registry().fold(events)


def fold_batched(events: list[Event], batch: int = 500) -> Any:
    reg = default_registry()
    snap = reg.fold([])
    for i in range(0, len(events), batch):
        dumped = json.loads(json.dumps(snap.dump()))
        snap = reg.fold(events[i:i + batch], reg.snapshot(dumped, snap.as_of_seq))
    return snap


def timed(fn: Any, events: list[Event], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(events)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    events = make_log(args.events)
    n = len(events)
    base = timed(baseline, events, args.repeat)
    full = timed(fold_all, events, args.repeat)
    print(f"events: {n}  units: {len(default_registry().units)}")
    print(f"baseline fold (count per type): {n / base:12,.0f} events/s")
    one = timed(registry_overhead, events, args.repeat)
    print(f"registry with the index unit:   {n / one:12,.0f} events/s  "
          f"ratio vs baseline {base / one:.3f}")
    print(f"default registry, one fold:     {n / full:12,.0f} events/s  "
          f"ratio vs baseline {base / full:.3f}, vs index-only {one / full:.3f}")
    small = events[: max(1, n // 10)]
    batched = timed(fold_batched, small, 1)
    print(f"batches of 500 + dump/load:     {len(small) / batched:12,.0f} events/s "
          f"(first {len(small)} events; dump/load cost grows with the session)")


if __name__ == "__main__":
    main()
