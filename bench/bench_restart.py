"""How fast a SIGKILLed projection worker makes progress again (run by hand).

    PYTHONPATH=. python bench/bench_restart.py [--engines kafka,faust] [--rounds 5]
        [--results FILE]

For each engine: a worker projects a small fleet, is SIGKILLed, new sessions are
produced, and the worker is started again; the figure is the time from the restart to
every new session being in Redis. Measured in the same run for two memberships:

- ``dynamic``: the worker instance setting says ``dynamic`` — the dead member keeps its
  partitions until the group's session timeout expires (the baseline);
- ``default``: no worker instance setting — the id derived from the host and a slot
  (streams.membership): the restarted worker takes its own partitions back at once.

Also: the time to catch up of a worker started on a group nobody held (the cold start,
the floor: process start + join + fetch + fold), so each figure reads as a ratio to it.
Printed: median (min-max) over ``--rounds``; the target is a restart within 2 s by
default. Fresh topics, groups and Redis prefix per measurement; deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.results import Result, Spread, record
from sessionstream.core.codec import encode
from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Env, Settings
from sessionstream.core.simulate import simulate_session


def worker_cmd(engine: str) -> list[str]:
    if engine == "kafka":
        return [sys.executable, "-m", "sessionstream.streams.engine_kafka"]
    return [sys.executable, "-m", "faust", "-A", "sessionstream.streams.app:app", "worker",
            "--without-web", "-l", "warn"]


def produce(bootstrap: str, topic: str, prefix: str, n: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "log_level": 3})
    last: dict[str, int] = {}
    for i in range(n):
        sid = f"{prefix}-{i:04d}"
        for ev in simulate_session(rng, sid, turns=1):
            p.produce(topic, key=sid.encode(), value=encode(ev))
            last[sid] = ev.seq
    p.flush(30)
    return last


def caught_up(r: redis.Redis, keys: KeySpace, last: dict[str, int]) -> bool:
    with r.pipeline(transaction=False) as pipe:
        for sid in last:
            pipe.hget(keys.session_row(sid, 1), "as_of_seq")
        got = pipe.execute()
    return all(g is not None and int(g) == last[s] for s, g in zip(last, got, strict=True))


def wait(cond, timeout: float) -> float:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"not caught up within {timeout:.0f}s")
        time.sleep(0.05)
    return time.monotonic() - t0


def one(s: Settings, engine: str, static: bool, admin: AdminClient,
        r: redis.Redis) -> tuple[float, float]:
    """(seconds to catch up from a cold start, seconds to catch up after a SIGKILL)."""
    run = uuid.uuid4().hex[:8]
    topic, dlq = f"ssbench.restart.{run}", f"ssbench.restart.{run}.dlq"
    for f in admin.create_topics([NewTopic(topic, 4, 1), NewTopic(dlq, 4, 1)]).values():
        f.result(30)
    prefix = f"ssbench-{run}"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), Env.EVENTS_TOPIC: topic,
           Env.DLQ_TOPIC: dlq, Env.STREAMS_GROUP: f"g-{run}", Env.KEY_PREFIX: prefix}
    if not static:
        env[Env.WORKER_INSTANCE] = "dynamic"
    else:
        env.pop(Env.WORKER_INSTANCE, None)  # the default: derived from the host
    keys = KeySpace(s.tenant, prefix)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        first = produce(s.kafka_bootstrap, topic, "a", 40, 1)
        procs.append(subprocess.Popen(worker_cmd(engine), env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        cold = wait(lambda: caught_up(r, keys, first), 120)
        time.sleep(1.0)  # steady state: joined, heartbeating
        os.killpg(procs[-1].pid, signal.SIGKILL)
        procs[-1].wait(10)
        second = produce(s.kafka_bootstrap, topic, "b", 40, 2)
        procs.append(subprocess.Popen(worker_cmd(engine), env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        warm = wait(lambda: caught_up(r, keys, second), 120)
        return cold, warm
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        admin.delete_topics([topic, dlq])
        for k in r.scan_iter(f"{prefix}:*", count=1000):
            r.delete(k)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", default="kafka,faust")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--results", help="append the result rows (JSON lines) to this file")
    args = ap.parse_args()
    s = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap, "log_level": 3})
    r = redis.Redis.from_url(s.redis_url)
    for engine in args.engines.split(","):
        restarts: dict[bool, Spread] = {}
        colds: list[float] = []
        for static in (False, True):
            cold_of, warms = [], []
            for _ in range(args.rounds):
                cold, warm = one(s, engine, static, admin, r)
                cold_of.append(cold)
                warms.append(warm)
            colds += cold_of
            c, w = Spread.of(cold_of), Spread.of(warms)
            restarts[static] = w
            label = "default" if static else "dynamic"
            print(f"{engine:5s} {label}: cold start {c.show('.1f', ' s')}, restart after "
                  f"SIGKILL {w.show('.1f', ' s')} (x{w.median / c.median:.1f} the cold "
                  f"start) [{', '.join(f'{x:.1f}' for x in warms)}]", flush=True)
        w, dyn, cold_all = restarts[True], restarts[False], Spread.of(colds)
        record(args.results, Result(
            "restart", f"{engine} worker restart after SIGKILL -> new events folded, "
            "default membership (s)",
            f"dynamic {dyn.median:.1f} s, cold start {cold_all.median:.1f} s",
            f"{w.median / dyn.median:.2f}x dynamic, {w.median / cold_all.median:.1f}x cold",
            w.median, "<= 2 s", f"min-max {w.low:.1f}-{w.high:.1f} s over {w.rounds}"))

if __name__ == "__main__":
    main()
