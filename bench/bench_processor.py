"""In-process throughput of the projection processor over an in-memory sink (run by hand).

    PYTHONPATH=. python bench/bench_processor.py [--events 40000] [--batch 500] [--profile]

Records are encoded events of ``simulate_session`` sessions (as bench_streams produces
them), interleaved over 4 partitions like a topic; the processor folds them in batches
of ``--batch`` into the dict-backed sink of the unit tests, so the number is pure
Python CPU per event (decode, admission, units, JSON) with no network. ``--profile``
prints the top of a cProfile of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import random
import time
import zlib

from sessionstream.core.codec import encode
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.simulate import simulate_session
from streams.processor import Processor
from tests.unit.test_streams_processor import MemorySink

TOPIC = "bench.processor"


def make_records(n: int, partitions: int = 4, live: int = 100, seed: int = 1) -> list[Record]:
    """Sessions of 4 turns; ``live`` sessions at a time append round-robin (a busy
    fleet), each session keyed to one partition, offsets per partition."""
    rng = random.Random(seed)
    sessions: list[tuple[str, list[bytes]]] = []
    total, i = 0, 0
    while total < n:
        sid = f"bench-{i:05d}"
        evs = simulate_session(rng, sid, turns=4)
        sessions.append((sid, [encode(e) for e in evs]))
        total += len(evs)
        i += 1
    order: list[tuple[str, bytes]] = []
    for g in range(0, len(sessions), live):
        group = sessions[g:g + live]
        for k in range(max(len(evs) for _, evs in group)):
            order.extend((sid, evs[k]) for sid, evs in group if k < len(evs))
    offsets = [0] * partitions
    records: list[Record] = []
    for sid, value in order[:n]:
        p = zlib.crc32(sid.encode()) % partitions
        records.append(Record(TOPIC, p, offsets[p], sid.encode(), value, 0))
        offsets[p] += 1
    return records


async def run(records: list[Record], batch: int) -> float:
    proc = Processor(pipeline=ReaderPipeline.default(), sink=MemorySink(), group="bench")
    t0 = time.perf_counter()
    for i in range(0, len(records), batch):
        await proc.process(records[i:i + batch])
    return len(records) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--live", type=int, default=100, help="sessions appending at once")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    records = make_records(args.events, live=args.live)
    sessions = len({r.key for r in records})
    print(f"{len(records)} records, {sessions} sessions ({args.live} live at once), "
          f"batches of {args.batch}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        asyncio.run(run(records, args.batch))
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    rates = sorted(asyncio.run(run(records, args.batch)) for _ in range(args.runs))
    print(f"processor in-process: {rates[len(rates) // 2]:,.0f} events/s median of "
          f"{args.runs} (min {rates[0]:,.0f}, max {rates[-1]:,.0f})")


if __name__ == "__main__":
    main()
