"""Surface benchmarks (run by hand): per-append cost of derive_messages, full rebuild.

    python bench/bench_surface.py [--events 100000]

Prints ratios measured in the same run:
- append + derive_messages() cost per event near 100k events vs near 1k events
  (target <= 1.5x: the surface is incremental, a request never re-derives history);
- Session.from_events over a 100k-event simulated lab session (events/s), against
  the raw loop of appending the same events to a list (the floor).
"""

from __future__ import annotations

import argparse
import gc
import random
import time

from sessionstream.core.events import CountingClock, SequentialIds
from sessionstream.core.session import Session
from sessionstream.core.simulate import simulate_session


def lab_events(n: int, compact_every: int | None) -> list:  # type: ignore[type-arg]
    """A simulated lab session cut to n events (no compaction: the surface keeps growing)."""
    events: list = []  # type: ignore[type-arg]
    turns = 50
    while len(events) < n:
        events = simulate_session(
            random.Random(7), "bench", turns=turns, compact_every=compact_every
        )
        turns *= 2
    return events[:n]


def per_append(events: list, at: int, window: int, freeze: bool) -> float:  # type: ignore[type-arg]
    """Seconds per admit+derive_messages for `window` events after the first `at`.

    With ``freeze``, the loaded history is moved out of the cyclic GC's reach
    (``gc.freeze()``, what a long-lived writer can do after loading a session):
    without it, full collections walk every object of a large heap, a cost of the
    interpreter, not of the surface.
    """
    s = Session.from_events(events[:at], clock=CountingClock(), ids=SequentialIds())
    tail = events[at : at + window]
    if freeze:
        gc.collect()
        gc.freeze()
    try:
        t0 = time.perf_counter()
        for e in tail:
            s.admit(e)
            s.derive_messages()
        return (time.perf_counter() - t0) / len(tail)
    finally:
        if freeze:
            gc.unfreeze()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--window", type=int, default=2_000)
    args = p.parse_args()
    events = lab_events(args.events + args.window, None)
    for freeze in (False, True):
        small = min(per_append(events, 1_000, args.window, freeze) for _ in range(5))
        large = min(per_append(events, args.events, args.window, freeze) for _ in range(5))
        gc_mode = "gc.freeze() after load" if freeze else "default gc"
        print(f"append+derive_messages ({gc_mode}): at 1k events {small * 1e6:.1f} us, "
              f"at {args.events // 1000}k events {large * 1e6:.1f} us; "
              f"ratio {large / small:.2f}x (target <= 1.5x)")

    for label, full in (
        ("no compaction", events[: args.events]),
        ("compaction every 10 turns", lab_events(args.events, 10)),
    ):
        rebuild(label, full)


def rebuild(label: str, full: list) -> None:  # type: ignore[type-arg]
    t0 = time.perf_counter()
    s = Session.from_events(full)
    took = time.perf_counter() - t0
    t0 = time.perf_counter()
    sink = []
    for e in full:
        sink.append(e)
    floor = time.perf_counter() - t0
    print(f"full rebuild, {label}: {len(full)} events in {took:.2f} s = "
          f"{len(full) / took:,.0f} events/s ({len(s.derive_messages())} messages on the surface; "
          f"{took / floor:,.0f}x a bare list append of the same events)")


if __name__ == "__main__":
    main()
