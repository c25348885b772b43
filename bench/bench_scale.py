"""Scale-out of the projection worker: 1 and 2 processes of one group (run by hand).

    PYTHONPATH=. python bench/bench_scale.py [--events 600000] [--quick] [--rounds 3]
        [--partitions 12] [--results FILE]

One topic of ``--partitions`` (12, the default events topic's) holding ``--events``
simulated events; per round, interleaved: one kafka-engine worker folds it all into a
fresh key prefix, then two worker processes of one fresh group (started together; the
group splits the partitions between them, 6 each) fold it into another. The time runs
from the first session row written to every session caught up; the CPU is the workers'
own (user + system, all their threads). Printed: each rate as median (min-max) over the
rounds, the speed-up 2 / 1 (bounded by the cores the box gives the two processes: on
2 cores at most 2x, less while anything else runs), and the CPU per event of each, which
is the sizing rule docs/operations.md states: cores = peak events/s x CPU per event.
Fresh topic, groups and Redis keys; deleted afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import uuid

import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.bench_streams import cpu_seconds, make_events, worker_cmd
from bench.results import Result, Spread, record
from sessionstream.core.codec import encode
from sessionstream.core.rows import KeySpace, SessionRow
from sessionstream.core.settings import Env, Settings


def fold_with(n_workers: int, s: Settings, r: redis.Redis, env: dict[str, str],
              last: dict[str, int], run: str) -> tuple[float, float]:
    """(events/s, CPU seconds per event of all workers) for ``n_workers`` of one group."""
    prefix = f"ssbench-scale-{run}"
    wenv = {**env, Env.STREAMS_GROUP: f"ssbench-scale-{run}", Env.KEY_PREFIX: prefix}
    procs = [subprocess.Popen(worker_cmd("kafka"), env=wenv, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(n_workers)]
    keys = KeySpace(s.tenant, prefix)
    try:
        index = keys.sessions_index(1)
        deadline = time.monotonic() + 120
        while r.zcard(index) == 0:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit("the workers wrote nothing within 120 s (or exited)")
            time.sleep(0.01)
        t0 = time.perf_counter()
        cpu0 = sum(cpu_seconds(p.pid) for p in procs)
        sids = list(last)
        while True:
            with r.pipeline(transaction=False) as pipe:
                for sid in sids:
                    pipe.hget(keys.session_row(sid, 1), SessionRow.AS_OF_SEQ)
                vals = pipe.execute()
            if all(v is not None and int(v) == last[sid]
                   for sid, v in zip(sids, vals, strict=True)):
                break
            time.sleep(0.05)
        took = time.perf_counter() - t0
        cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu0
        n = sum(seq + 1 for seq in last.values())
        return n / took, cpu / n
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for k in r.scan_iter(match=f"{prefix}:*", count=1000):
            r.delete(k)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=600_000)
    ap.add_argument("--quick", action="store_true",
                    help="60k events and 3 rounds (unless given): quick figures, marked")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--results", help="append the result rows (JSON lines) to this file")
    args = ap.parse_args()
    if args.quick:
        if "--events" not in sys.argv:
            args.events = 60_000
        if "--rounds" not in sys.argv:
            args.rounds = 3
    s = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap, "log_level": 3})
    tag = uuid.uuid4().hex[:8]
    topic, dlq = f"ssbench.scale.{tag}", f"ssbench.scale.{tag}.dlq"
    for f in admin.create_topics([NewTopic(topic, args.partitions, 1),
                                  NewTopic(dlq, 1, 1)]).values():
        f.result(30)
    r = redis.Redis.from_url(s.redis_url, decode_responses=True)
    try:
        events = make_events(args.events)
        p = Producer({"bootstrap.servers": s.kafka_bootstrap, "linger.ms": 20,
                      "log_level": 3})
        for ev in events:
            p.produce(topic, key=ev.session_id.encode(), value=encode(ev))
            p.poll(0)
        p.flush(60)
        last = {ev.session_id: ev.seq for ev in events}
        del events
        print(f"{args.events:,} events, {len(last):,} sessions, {args.partitions} partitions; "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
        env = {**os.environ, Env.EVENTS_TOPIC: topic, Env.DLQ_TOPIC: dlq,
               Env.LOGLEVEL: "warning",
               "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(),
                                                           os.environ.get("PYTHONPATH")]))}
        rates: dict[int, list[float]] = {1: [], 2: []}
        cpus: dict[int, list[float]] = {1: [], 2: []}
        for i in range(args.rounds):
            for n in (1, 2):
                rate, cpu = fold_with(n, s, r, env, last, f"{tag}-{n}-{i}")
                rates[n].append(rate)
                cpus[n].append(cpu)
                print(f"  round {i + 1}: {n} worker{'s' if n > 1 else ''} {rate:,.0f} "
                      f"events/s, {cpu * 1e6:.1f} us CPU/event", flush=True)
        one, two = Spread.of(rates[1]), Spread.of(rates[2])
        c1, c2 = Spread.of(cpus[1]), Spread.of(cpus[2])
        speedup = Spread.of(b / a for a, b in zip(rates[1], rates[2], strict=True))
        quick = "quick" if args.quick else ""
        print(f"1 worker: {one.show(',.0f', '/s')}, {c1.median * 1e6:.1f} us CPU/event; "
              f"2 workers of one group: {two.show(',.0f', '/s')}, {c2.median * 1e6:.1f} us "
              f"CPU/event; speed-up {speedup.show()} (at most {min(2, os.cpu_count() or 1)}x "
              f"on {os.cpu_count()} cores); sizing: {1 / c1.median:,.0f} events/s per "
              f"core busy folding")
        record(args.results, Result(
            "scale", f"2 worker processes / 1, one group, {args.partitions} partitions "
            "(speed-up)", f"1 worker {one.median:,.0f}/s", f"2 workers {two.median:,.0f}/s",
            speedup.median, f"<= {min(2, os.cpu_count() or 1)}x",
            "; ".join(filter(None, [f"min-max {speedup.low:.2f}-{speedup.high:.2f}; CPU/event "
                                    f"{c1.median * 1e6:.1f} us (1) vs {c2.median * 1e6:.1f} us "
                                    f"(2); {os.cpu_count()} cores", quick]))))
    finally:
        for f in admin.delete_topics([topic, dlq]).values():
            with contextlib.suppress(Exception):
                f.result(30)


if __name__ == "__main__":
    main()
