"""In-process throughput of the projection processor over an in-memory sink (run by hand).

    PYTHONPATH=. python bench/bench_processor.py [--events 40000] [--batch 500] [--profile [MODE]]
        [--icount N]

Records are encoded events of ``simulate_session`` sessions (as bench_streams produces
them), interleaved over 4 partitions like a topic; the processor folds them in batches
of ``--batch`` into the dict-backed sink of the unit tests, so the number is pure
Python CPU per event (decode, admission, units, JSON) with no network. The baseline of
the same run is a bare fastavro decode of the same records (the least any reader does),
and the ratio is printed. ``--profile [process|fold-python|fold-native]`` prints the top
of a cProfile of one run of that path.
``--icount N`` adds an instruction count per event, stable on a noisy machine: the bench
runs itself twice under ``valgrind --tool=callgrind`` (making the records, then making
them and folding the first N) and divides the difference by N; skipped when valgrind is
not installed (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

from fastavro import schemaless_reader

from sessionstream.core.codec import HEADER_LEN, default_codec, encode
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.simulate import simulate_session
from sessionstream.streams import fold_native
from sessionstream.streams.memory import MemorySink
from sessionstream.streams.processor import Processor

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


async def run_fold(records: list[Record], batch: int, native: bool) -> float:
    """Replay's path: fold in memory, flush once (Python processor or native fold)."""
    proc = Processor(pipeline=ReaderPipeline.default(), sink=MemorySink(), group="bench",
                     fold="native" if native else "python")
    t0 = time.perf_counter()
    for i in range(0, len(records), batch):
        await proc.fold(records[i:i + batch])
    await proc.flush()
    return len(records) / (time.perf_counter() - t0)


def raw_decode(records: list[Record]) -> float:
    """The baseline: events/s of a bare fastavro decode of the same records."""
    schema = default_codec().reader.parsed
    t0 = time.perf_counter()
    for r in records:
        assert r.value is not None
        body = io.BytesIO(r.value)
        body.seek(HEADER_LEN)
        schemaless_reader(body, schema, None)
    return len(records) / (time.perf_counter() - t0)


def instructions(args: argparse.Namespace, fold: int, mode: str) -> int | None:
    """Instructions callgrind counts for a run of this script folding ``fold`` records."""
    out = tempfile.mktemp(prefix="callgrind-")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
           __file__, "--events", str(args.events), "--live", str(args.live),
           "--batch", str(args.batch), "--fold-only", str(fold), "--mode", mode]
    res = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    if os.path.exists(out):
        os.unlink(out)
    m = re.search(r"Collected : (\d+)", res.stderr)
    return int(m.group(1)) if m else None


def icount(args: argparse.Namespace) -> None:
    if shutil.which("valgrind") is None:
        print("instruction count: skipped (valgrind is not installed: apt-get install valgrind)")
        return
    modes = ["process", "fold-python"] + (["fold-native"] if fold_native.available() else [])
    base = instructions(args, 0, "process")
    if base is None:
        print("instruction count: skipped (callgrind printed no total)")
        return
    per: dict[str, float] = {}
    for mode in modes:
        full = instructions(args, args.icount, mode)
        if full is not None:
            per[mode] = (full - base) / args.icount
            print(f"instructions per event, {mode} (callgrind, {args.icount} records): "
                  f"{per[mode]:,.0f}")
    if "fold-native" in per and "fold-python" in per:
        print(f"instruction ratio fold-python / fold-native: "
              f"{per['fold-python'] / per['fold-native']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--live", type=int, default=100, help="sessions appending at once")
    ap.add_argument("--profile", nargs="?", const="process",
                    choices=["process", "fold-python", "fold-native"],
                    help="print a cProfile of one run of this path (default: process)")
    ap.add_argument("--icount", type=int, default=0, metavar="N",
                    help="also count instructions per event over N records (callgrind)")
    ap.add_argument("--fold-only", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="process", help=argparse.SUPPRESS)
    args = ap.parse_args()
    records = make_records(args.events, live=args.live)
    if args.fold_only is not None:  # one run under callgrind (see icount)
        sub = records[:args.fold_only]
        if args.fold_only and args.mode == "process":
            asyncio.run(run(sub, args.batch))
        elif args.fold_only:
            asyncio.run(run_fold(sub, args.batch, args.mode == "fold-native"))
        return
    sessions = len({r.key for r in records})
    print(f"{len(records)} records, {sessions} sessions ({args.live} live at once), "
          f"batches of {args.batch}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        if args.profile == "process":
            asyncio.run(run(records, args.batch))
        else:
            asyncio.run(run_fold(records, args.batch, args.profile == "fold-native"))
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    rates = sorted(asyncio.run(run(records, args.batch)) for _ in range(args.runs))
    raws = sorted(raw_decode(records) for _ in range(args.runs))
    med, raw = rates[len(rates) // 2], raws[len(raws) // 2]
    print(f"bare fastavro decode (baseline): {raw:,.0f} events/s median of {args.runs}")
    print(f"processor in-process: {med:,.0f} events/s median of "
          f"{args.runs} (min {rates[0]:,.0f}, max {rates[-1]:,.0f}); ratio to the bare "
          f"decode {med / raw:.2f}x")
    folds = sorted(asyncio.run(run_fold(records, args.batch, False)) for _ in range(args.runs))
    fold_py = folds[len(folds) // 2]
    print(f"in-memory fold + one flush (replay's path), Python: {fold_py:,.0f} events/s; "
          f"ratio to the bare decode {fold_py / raw:.2f}x")
    if fold_native.available():
        nats = sorted(asyncio.run(run_fold(records, args.batch, True))
                      for _ in range(args.runs))
        fold_na = nats[len(nats) // 2]
        print(f"in-memory fold + one flush, native: {fold_na:,.0f} events/s; ratio to the "
              f"bare decode {fold_na / raw:.2f}x, to the Python fold {fold_na / fold_py:.2f}x")
    else:
        print("native fold: skipped (the extension is not built: make install)")
    if args.icount:
        icount(args)


if __name__ == "__main__":
    main()
