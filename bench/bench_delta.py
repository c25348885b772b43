"""Write cost per batch against session length (ADR 0013), on the real Redis (run by hand).

    PYTHONPATH=. python bench/bench_delta.py [--events 100000] [--small 1000] [--batch 20]
        [--window 60] [--sessions 100] [--native-only]

One simulated lab session (no compaction: the surface, turns, tools and todo keep
growing) is folded by the processor into Redis (the settings' Redis URL, e.g. the local
stack) under a private key prefix, deleted afterwards. Near event ``--small`` and
near event ``--events`` it folds ``--window`` batches of ``--batch`` events and prints, per
batch, the bytes the session writes send (field names and values of the script calls,
summed over every write call of the batch)
and the wall time of ``process()`` (fold + encode + the Redis calls) with this
process's CPU time beside it (steadier on a busy machine), then the ratios large /
small (target <= 1.5x). The same run does it twice: chunked rows (ADR 0013) and
the whole-row baseline (every touched unit's whole view and state, as before), so the
before/after figures come from one machine state; then the native fold path (fold in
the extension, flush per batch) when it is installed.

The second part measures redis-py's per-command cost on the write path: ``--sessions``
sessions written per batch as one script call for the rows and one for the tenant's
index, feed and progress (ADR 0013) vs pipelines of one command per session (before).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
import zlib
from typing import Any

from bench.results import Result, record
from sessionstream.core.codec import encode
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.core.simulate import simulate_session
from sessionstream.redisconn import async_redis
from sessionstream.streams import fold_native
from sessionstream.streams.ports import SessionWrite
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink

TOPIC = "bench.delta"
URL = Settings.from_env().redis_url


def lab_records(n: int) -> list[Record]:
    events: list[Any] = []
    turns = 50
    while len(events) < n:
        events = simulate_session(random.Random(7), "bench", turns=turns, compact_every=None)
        turns *= 2
    return [Record(TOPIC, 0, i, b"bench", encode(e), 0) for i, e in enumerate(events[:n])]


class Counting(RedisSink):
    """The Redis sink, counting the bytes of the session writes it sends (the bench
    reads and resets ``sent`` around each batch: the native path makes two write calls
    per batch, the second empty, so a median over calls would halve the figure)."""

    sent: int = 0

    async def write_sessions(self, gen: int, writes: Any) -> Any:
        self.sent += sum(_bytes(w) for w in writes)
        return await super().write_sessions(gen, writes)


def _bytes(w: SessionWrite) -> int:
    return (sum(len(k.encode()) + len(v.encode()) for k, v in w.fields.items())
            + sum(len(k.encode()) for k in w.deletes))


async def near(records: list[Record], at: int, batch: int, window: int, chunked: bool,
               native: bool = False) -> tuple[float, float, float]:
    """(median bytes, median seconds, median CPU seconds of this process) per batch of
    the ``window`` batches after ``at``. The CPU figure leaves out the waits for Redis
    (and for other processes on a busy machine): the fold's and encode's own cost."""
    redis = async_redis(URL, decode_responses=True)
    keys = KeySpace("bench", f"bench-delta-{uuid.uuid4().hex[:8]}")
    sink = Counting(redis, keys)
    proc = Processor(pipeline=ReaderPipeline.default(), sink=sink, group="bench",
                     fold="native" if native else "python")
    proc.codec.chunked = chunked

    async def step(part: list[Record]) -> None:
        if not native:
            await proc.process(part)
        else:  # the native path: fold in the extension, flush to Redis
            await proc.fold(part)
            await proc.flush()

    try:
        for i in range(0, at, 2000):
            await step(records[i:min(at, i + 2000)])
        took, cpu, sent = [], [], []
        for b in range(window):
            part = records[at + b * batch: at + (b + 1) * batch]
            sink.sent = 0
            t0, c0 = time.perf_counter(), time.process_time()
            await step(part)
            took.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            sent.append(sink.sent)  # every write call of this batch
        return statistics.median(sent), statistics.median(took), statistics.median(cpu)
    finally:
        async for k in redis.scan_iter(match=f"{keys.prefix}:*", count=1000):
            await redis.delete(k)
        await redis.aclose()


async def per_command(sessions: int, rounds: int) -> tuple[float, float]:
    """Seconds per batch writing ``sessions`` small session rows and the tenant's index,
    feed and progress: one script call each vs a pipeline of a command per session."""
    redis = async_redis(URL, decode_responses=True)
    keys = KeySpace("bench", f"bench-delta-{uuid.uuid4().hex[:8]}")
    out = []
    try:
        for one_call in (True, False):
            sink = RedisSink(redis, keys, one_call=one_call)
            best = []
            for r in range(rounds):
                writes = [SessionWrite(f"s{one_call}{i}", 0, r - 1, r, r,
                                       {"meta": '{"n":1}', "view:index": '{"a":1}'}, ("index",),
                                       r) for i in range(sessions)]
                t0 = time.perf_counter()
                outcomes = await sink.write_sessions(1, writes)
                await sink.write_tenant(1, writes, "bench", {f"t:{p}": r for p in range(4)})
                best.append(time.perf_counter() - t0)
                assert all(o.status == "applied" for o in outcomes), outcomes[:3]
            out.append(statistics.median(best))
    finally:
        async for k in redis.scan_iter(match=f"{keys.prefix}:*", count=1000):
            await redis.delete(k)
        await redis.aclose()
    return out[0], out[1]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=1_000)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--window", type=int, default=60)
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--native-only", action="store_true",
                    help="only the native fold path (the Python paths take minutes at 100k)")
    ap.add_argument("--results", help="append the result rows (JSON lines) to this file")
    args = ap.parse_args()
    records = lab_records(args.events + args.batch * args.window)
    print(f"one lab session, {len(records)} events (crc {zlib.crc32(records[-1].value or b'')}),"
          f" batches of {args.batch}, median of {args.window} batches")
    modes = [(True, False, "chunked rows (ADR 0013)"), (False, False, "whole rows (baseline) ")]
    if args.native_only:
        modes = []
    if fold_native.available():
        modes.append((True, True, "native fold, chunked   "))
    for chunked, native, label in modes:
        sb, st, sc = await near(records, args.small, args.batch, args.window, chunked, native)
        lb, lt, lc = await near(records, args.events, args.batch, args.window, chunked, native)
        print(f"{label}: near {args.small // 1000}k events {sb / 1024:8.1f} KiB "
              f"{st * 1e3:6.2f} ms (cpu {sc * 1e3:.2f}); near {args.events // 1000}k events "
              f"{lb / 1024:8.1f} KiB {lt * 1e3:6.2f} ms (cpu {lc * 1e3:.2f}); ratio bytes "
              f"{lb / sb:5.2f}x, time {lt / st:5.2f}x, cpu {lc / sc:5.2f}x (target <= 1.5x)")
        if native or (chunked and not fold_native.available()):
            base = (f"near {args.small:,} events: {sb / 1024:.1f} KiB, "
                    f"{sc * 1e3:.2f} ms CPU per batch")
            where = label.strip()
            record(args.results, Result(
                "delta", f"write per batch near {args.events:,} events, {where} (bytes)",
                base, f"{lb / 1024:.1f} KiB", lb / sb, "<= 1.5x"))
            record(args.results, Result(
                "delta", f"write per batch near {args.events:,} events, {where} (CPU)",
                base, f"{lc * 1e3:.2f} ms", lc / sc, "<= 1.5x"))
    one, piped = await per_command(args.sessions, 30)
    print(f"{args.sessions} sessions per batch (rows, then index + feed + progress): two script "
          f"calls {one * 1e3:.2f} ms, pipelines of a command per session {piped * 1e3:.2f} ms; "
          f"{piped / one:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
