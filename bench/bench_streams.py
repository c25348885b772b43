"""Benchmark of the projection processor (run by hand against the local servers).

    PYTHONPATH=. python bench/bench_streams.py [--events 1000000] [--quick] [--rate 2000]
        [--seconds 10] [--engines kafka,faust] [--faust-variants aio,uvloop,noacks,uvloop+noacks]
        [--repeat 5] [--skip-latency] [--skip-replay] [--results FILE]
    PYTHONPATH=. python bench/bench_streams.py --replay-only --events 1000000 --folds native
        [--keep] [--topic T --prefix P]
    PYTHONPATH=. python bench/bench_streams.py --baseline ../base   # beside another commit

Prints, measured in the same run over the same topic:
1. raw confluent-kafka consume loop (events/s) — the baseline. The default topic (1M
   events) makes the raw read last >= 2 s on this kind of box: on 60k events it lasted
   0.1-0.2 s and the ratio measured the bench's start-up, not the worker. ``--quick``
   uses 100k events and 3 rounds and every figure says it is quick; so does any run
   whose raw read lasted under 2 s;
2. worker fold throughput per engine (events/s, from its first write to caught up), ratio,
   and the worker's CPU time per event over the same span (beside the raw loop's);
3. replay rate (confluent consumer + processor, events/s, in a process of its own:
   bench/replay_once.py) and the ratio, per fold path twice: cold (a fresh key store:
   every session's data keys are created, as on a first replay) and warm (a new store
   over the same keys: they exist, the cache is empty). Each replay writes its own key
   prefix; the cold one switches readers to its generation, so the warm one compares
   every session with it;
4. append -> visible in Redis latency p50/p99 at a fixed produce rate, per engine, with
   the producer in its own process (bench/lat_producer.py, the writers' producer config)
   and a per-stage breakdown (produce -> broker ack -> consumed -> folded -> Redis
   written -> feed read; the kafka engine writes its stage times when
   the trace_stages setting names a file); ratio to the log's own produce->consumed.
With ``--baseline DIR`` (a checkout of another commit, installed: ``git worktree add DIR
<commit> && make -C DIR install``) the kafka worker and the replays of that commit run on
the same topic, interleaved with this one's (``kafka@base``, ``replay@base``), and each
row of the table names both: the figures of the two commits from the same run.
Uses a fresh topic, consumer groups and Redis prefix; deletes them afterwards (``--keep``
keeps the topic and the Redis keys and prints how to reuse them: ``--topic``/``--prefix``
replay them again without producing; the bench deletes what it reused unless ``--keep``).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.results import Result, Spread, record
from sessionstream.core.codec import encode
from sessionstream.core.rows import KeySpace, SessionRow
from sessionstream.core.settings import Env, Settings
from sessionstream.core.simulate import simulate_session


def make_events(n: int, seed: int = 1) -> list:  # type: ignore[type-arg]
    rng = random.Random(seed)
    out: list = []  # type: ignore[type-arg]
    i = 0
    while len(out) < n:
        out.extend(simulate_session(rng, f"bench-{i:05d}", turns=4))
        i += 1
    return out[:n]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc; 0 elsewhere): steadier
    than wall time on a shared machine."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: A raw read shorter than this measures start-up more than reading (issue 25).
HONEST_RAW_S = 2.0


def raw_consume(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "log_level": 3})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    got, t0 = 0, 0.0
    while got < n:
        batch = sum(1 for m in c.consume(5000, timeout=1) if m.error() is None)
        if batch and not got:
            # the clock starts at the first fetched batch, as the worker's starts at its
            # first write (after its group join): neither counts connecting/joining
            t0 = time.perf_counter()
        got += batch
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


#: faust worker variants (``--faust-variants``): the event loop, and whether the events
#: topic acks each event (faust's default) or not (bench/faust_noacks.py; measured only:
#: faust then commits offsets it has read but not folded, see ADR 0003).
FAUST_VARIANTS = {
    "aio": ("aio", "sessionstream.streams.app:app"),
    "uvloop": ("uvloop", "sessionstream.streams.app:app"),
    "noacks": ("aio", "bench.faust_noacks:app"),
    "uvloop+noacks": ("uvloop", "bench.faust_noacks:app"),
}


#: kafka-engine fold paths by engine name (``--engines kafka-native,kafka-python``);
#: plain ``kafka`` uses the default (auto: native when the extension is built).
KAFKA_FOLDS = {"kafka": None, "kafka-native": "native", "kafka-python": "python"}


#: An engine name ending in this runs the baseline checkout's worker (``--baseline``).
BASE = "@base"
#: The baseline checkout (``--baseline``): its interpreter runs its own package.
BASELINE: dict[str, Path] = {}


def python_of(engine: str) -> str:
    """The interpreter of ``engine``'s checkout: this one's, or the baseline's."""
    return str(BASELINE["dir"] / ".venv" / "bin" / "python") if engine.endswith(BASE) \
        else sys.executable


def worker_env(engine: str, env: dict[str, str]) -> dict[str, str]:
    fold = KAFKA_FOLDS.get(engine.removesuffix(BASE))
    env = {**env, Env.FOLD: fold} if fold else env
    if engine.endswith(BASE):  # the baseline's package, not this checkout's
        env = {**env, "PYTHONPATH": str(BASELINE["dir"])}
    return env


def worker_cmd(engine: str, variant: str = "uvloop") -> list[str]:
    if engine.removesuffix(BASE) in KAFKA_FOLDS:
        return [python_of(engine), "-m", "sessionstream.streams.engine_kafka"]
    loop, app = FAUST_VARIANTS[variant]
    return [sys.executable, "-m", "faust", "--loop", loop, "-A", app, "worker",
            "--without-web", "-l", "warn"]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def ack_timeline(sent: list[list]) -> str:  # type: ignore[type-arg]
    """The window's produce->ack as a timeline: the max per second, and the slowest
    100 ms slots by send time (a broker or start-up stall shows as a run of slots whose
    max falls by 100 ms each: everything sent in it was acked at one instant)."""
    if not sent:
        return "produce->ack timeline: no events"
    t0 = sent[0][2]
    slots: dict[int, float] = {}
    for row in sent:
        slot = int((row[2] - t0) * 10)
        slots[slot] = max(slots.get(slot, 0.0), (row[3] - row[2]) * 1000)
    secs = [max(v for k, v in slots.items() if k // 10 == sec)
            for sec in range(max(slots) // 10 + 1) if any(k // 10 == sec for k in slots)]
    worst = sorted(slots.items(), key=lambda kv: -kv[1])[:3]
    start = time.strftime("%H:%M:%S", time.gmtime(t0)) + f".{int(t0 % 1 * 1000):03d}"
    return (f"produce->ack from {start} UTC (t=0; the broker's pauses are in its gc.log), "
            "max per second (ms): " + " ".join(f"{v:.0f}" for v in secs)
            + "; slowest 100 ms slots: "
            + ", ".join(f"t={k / 10:.1f}s {v:.0f} ms" for k, v in sorted(worst)))


def latency(s: Settings, r: redis.Redis, engine: str, topic: str, dlq: str, prefix: str,
            group: str, args: argparse.Namespace, *, seed: int, env: dict[str, str],
            procs: list[subprocess.Popen]) -> None:  # type: ignore[type-arg]
    """Append -> visible at a fixed rate on a fresh topic with a live worker, and where
    the time goes. The producer runs in its own process (bench/lat_producer.py), the
    feed reader in this one, the worker in a third; stage times are wall clock."""
    tmp = tempfile.mkdtemp(prefix="ssbench-")
    trace_path, sent_path = os.path.join(tmp, "trace.jsonl"), os.path.join(tmp, "sent.json")
    wenv = {**env, Env.EVENTS_TOPIC: topic, Env.DLQ_TOPIC: dlq,
            Env.STREAMS_GROUP: group, Env.KEY_PREFIX: prefix,
            Env.TRACE_STAGES: trace_path}
    w = subprocess.Popen(worker_cmd(engine), env=worker_env(engine, wenv),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(w)
    feed = KeySpace(s.tenant, prefix).tenant_changes(1)
    p2 = Producer({"bootstrap.servers": s.kafka_bootstrap, "linger.ms": 0, "log_level": 3})
    for ev in simulate_session(random.Random(5), f"warmup-{engine}", turns=1):
        p2.produce(topic, key=ev.session_id.encode(), value=encode(ev))
    p2.flush(10)
    while r.xlen(feed) == 0:  # the worker joined and writes
        time.sleep(0.05)
    time.sleep(1)
    seen: list[tuple[float, dict]] = []  # type: ignore[type-arg]
    stop = threading.Event()

    def reader() -> None:
        rr = redis.Redis.from_url(s.redis_url, decode_responses=True)
        last_id = "$"
        while not stop.is_set():
            for _, entries in rr.xread({feed: last_id}, block=200, count=1000) or []:
                now = time.time()
                for eid, fields in entries:
                    last_id = eid
                    seen.append((now, json.loads(fields["change"])))
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    time.sleep(0.3)
    cpu0 = _cpu_seconds(w.pid)
    prod = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "lat_producer.py"),
         s.kafka_bootstrap, topic, str(args.rate), str(args.seconds), str(seed), sent_path],
        env={**os.environ, "PYTHONPATH": os.getcwd()}, check=True)
    del prod
    time.sleep(2)
    cpu1 = _cpu_seconds(w.pid)
    stop.set()
    th.join(5)
    w.terminate()
    w.wait(30)
    with open(sent_path, encoding="utf-8") as f:
        produced = json.load(f)
    sent = produced["rows"]
    batches: dict[int, list[tuple[int, int, dict]]] = {}  # type: ignore[type-arg]
    if os.path.exists(trace_path):
        with open(trace_path, encoding="utf-8") as f:
            for line in f:
                b = json.loads(line)
                for part, (lo, hi) in b["ranges"].items():
                    batches.setdefault(int(part), []).append((lo, hi, b))
    for rows in batches.values():
        rows.sort(key=lambda x: x[0])
    los = {part: [lo for lo, _, _ in rows] for part, rows in batches.items()}
    visible: dict[str, list[tuple[int, float]]] = {}
    for t, ch in seen:
        visible.setdefault(ch["session"], []).append((ch["as_of_seq"], t))
    stages: dict[str, list[float]] = {k: [] for k in (
        "produce->ack", "produce->consumed", "consumed->folded", "folded->written",
        "written->feed read", "append->visible")}
    for sid, seq, t_sent, t_ack, part, off in sent:
        t_vis = next((t for as_of, t in visible.get(sid, []) if as_of >= seq), None)
        if t_vis is None:
            continue
        stages["append->visible"].append((t_vis - t_sent) * 1000)
        stages["produce->ack"].append((t_ack - t_sent) * 1000)
        rows = batches.get(part, [])
        i = bisect.bisect_right(los.get(part, []), off) - 1
        if i >= 0 and rows[i][0] <= off <= rows[i][1]:
            b = rows[i][2]
            if "folded" in b and "written" in b:
                stages["produce->consumed"].append((b["consumed"] - t_sent) * 1000)
                stages["consumed->folded"].append((b["folded"] - b["consumed"]) * 1000)
                stages["folded->written"].append((b["written"] - b["folded"]) * 1000)
                stages["written->feed read"].append((t_vis - b["written"]) * 1000)
    vis = stages["append->visible"]
    base_name = "produce->consumed" if stages["produce->consumed"] else "produce->ack"
    base = stages[base_name]  # the faust engine writes no stage trace: the broker ack then
    ratio = pct(vis, 0.99) / pct(base, 0.99) if base else float("nan")
    record(args.results, Result(
        "streams", f"{engine}: append -> visible p99 at {args.rate}/s (ms)",
        "-", f"{pct(vis, 0.99):.1f} ms", pct(vis, 0.99), "<= 50 ms",
        "quiet-box target"))
    record(args.results, Result(
        "streams", f"{engine}: append -> visible p99 / the log's own",
        f"{base_name} p99 {pct(base, 0.99):.1f} ms", f"{pct(vis, 0.99):.1f} ms",
        ratio, "<= 1.2x"))
    print(f"{engine}: append -> visible at {args.rate}/s over {args.seconds}s: p50 "
          f"{pct(vis, 0.5):.1f} ms, p99 {pct(vis, 0.99):.1f} ms ({len(vis)}/{len(sent)} "
          f"events seen; target p99 <= 50 ms); ratio p99 to the log's own {base_name} "
          f"p99 {pct(vis, 0.99) / pct(base, 0.99) if base else float('nan'):.1f}x")
    for name, vals in stages.items():
        if vals and name != "append->visible":
            print(f"  {name:>20}: p50 {pct(vals, 0.5):7.1f} ms  p99 {pct(vals, 0.99):7.1f} ms")
    print(f"  excluded: the producer's start-up (creation -> its warm-up event acked) "
          f"{produced['warmup_ms']:.0f} ms (ADR 0018)")
    print(f"  {ack_timeline(sent)}")
    nb = sum(len(v) for v in batches.values())
    if nb:
        print(f"  ({len({id(b) for v in batches.values() for _, _, b in v})} worker batches)")
    if cpu0 is not None and cpu1 is not None:
        print(f"  worker CPU over the window (+2 s): {cpu1 - cpu0:.2f} s = "
              f"{(cpu1 - cpu0) / len(sent) * 1e6:.0f} us/event (what a shorter batch wait "
              f"costs: {Env.BATCH_WITHIN_MS})")
    shutil.rmtree(tmp, ignore_errors=True)


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (its threads included), or None
    where /proc is not there."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true",
                    help="100k events and 3 rounds (unless given): quick figures, marked")
    ap.add_argument("--results", help="append the result rows (JSON lines) to this file")
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--engines", default="kafka",
                    help="kafka, kafka-native, kafka-python, faust (faust folds ~2k ev/s: "
                         "give it a smaller --events)")
    ap.add_argument("--faust-variants", default="uvloop",
                    help=f"faust worker variants to fold with, comma-separated: "
                         f"{', '.join(FAUST_VARIANTS)}")
    ap.add_argument("--repeat", type=int, default=5,
                    help="read raw and fold each engine/variant this many times, "
                         "interleaved; print each and median (min-max)")
    ap.add_argument("--skip-latency", action="store_true", help="no append->visible phase")
    ap.add_argument("--skip-replay", action="store_true", help="no in-process replay phase")
    ap.add_argument("--latency-only", action="store_true", help="skip throughput and replay")
    ap.add_argument("--replay-only", action="store_true",
                    help="only the raw consume and replay figures (e.g. --events 1000000)")
    ap.add_argument("--folds", default="auto",
                    help="replay fold paths to measure: auto, native, python (Settings.fold)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the events topic and the Redis keys (reuse: --topic/--prefix)")
    ap.add_argument("--topic", help="replay this existing bench topic (made by --keep) "
                                    "instead of producing one; with --replay-only")
    ap.add_argument("--prefix", help="the Redis key prefix --keep printed, with --topic")
    ap.add_argument("--baseline", type=Path,
                    help="a checkout of another commit, installed (its .venv): its worker "
                         "and replays run beside this one's, on the same topic")
    args = ap.parse_args()
    if args.baseline is not None:
        BASELINE["dir"] = args.baseline.resolve()
        if not Path(python_of(BASE)).exists():
            ap.error(f"--baseline {args.baseline}: no .venv there (make -C DIR install)")
    if args.quick:
        if "--events" not in sys.argv:
            args.events = 100_000
        if "--repeat" not in sys.argv:
            args.repeat = 3
    if args.topic and not args.replay_only:
        ap.error("--topic reuses a topic for --replay-only")
    s = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    tag = uuid.uuid4().hex[:8]
    topic, lat_topic = args.topic or f"bench.streams.{tag}", f"bench.streams.lat.{tag}"
    prefix = args.prefix or f"bench-{tag}"
    engines = args.engines.split(",")
    base_engines = [e + BASE for e in engines if e in KAFKA_FOLDS] if BASELINE else []
    lat_topics = {e: f"{lat_topic}.{e}" for e in engines}  # one each: session ids repeat
    made = [lat_topic, *lat_topics.values()] if not args.replay_only else []
    if not args.topic:
        made.insert(0, topic)
    for f in (admin.create_topics([NewTopic(t, args.partitions, 1) for t in made]).values()
              if made else []):
        f.result(30)
    r = redis.Redis.from_url(s.redis_url, decode_responses=True)
    procs: list[subprocess.Popen] = []  # type: ignore[type-arg]
    try:
        env = {**os.environ, Env.LOGLEVEL: "warning"}
        if not args.latency_only:
            if args.topic:
                n_events = topic_size(s.kafka_bootstrap, topic)
                sessions = {}
                print(f"{n_events} events in {topic} (reused)")
            else:
                events = make_events(args.events)
                p = Producer({"bootstrap.servers": s.kafka_bootstrap, "linger.ms": 20,
                              "log_level": 3})
                for ev in events:
                    p.produce(topic, key=ev.session_id.encode(), value=encode(ev))
                    p.poll(0)
                p.flush(60)
                sessions = {ev.session_id: ev.seq for ev in events}
                n_events = len(events)
                del events
                print(f"{n_events} events, {len(sessions)} sessions, {args.partitions} "
                      "partitions")
            if args.keep:
                print(f"kept: --topic {topic} --prefix {prefix}")

            raws, raw_cpus = [], []
            for _ in range(args.repeat):
                cpu_raw0 = time.process_time()
                raws.append(raw_consume(s.kafka_bootstrap, topic, n_events))
                raw_cpus.append(time.process_time() - cpu_raw0)
            raw_spread = Spread.of(raws)
            raw, raw_cpu = raw_spread.median, statistics.median(raw_cpus)
            raw_s = n_events / raw
            quick = ("" if raw_s >= HONEST_RAW_S and not args.quick else
                     f"quick: the raw read lasted {raw_s:.1f} s (< {HONEST_RAW_S:.0f} s), "
                     "so the ratio includes start-up")
            print(f"raw confluent consume loop: {raw_spread.show(',.0f', '/s')}, "
                  f"{raw_s:.1f} s per read"
                  + (f" ({quick})" if quick else ""))

            env.update({Env.EVENTS_TOPIC: topic, Env.DLQ_TOPIC: lat_topic})
            runs = [(e, v) for e in [*engines, *base_engines]
                    for v in (args.faust_variants.split(",") if e == "faust" else ["-"])]
            runs = runs * args.repeat
            folds: dict[str, list[float]] = {}
            cpus: dict[str, list[float]] = {}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(),
                                                              env.get("PYTHONPATH")]))
            # one untimed run first: the sessions' data keys exist for every timed one
            warm = [("kafka", "-", True)] if base_engines else []
            for engine, variant, *untimed in ([] if args.replay_only
                                              else [*warm, *((e, v) for e, v in runs)]):
                name = engine if variant == "-" else f"{engine}-{variant.replace('+', '-')}"
                run = len(folds.get(name, [])) + (100 if untimed else 0)
                ident = name.replace("@", "-")
                env.update({Env.STREAMS_GROUP: f"bench-{ident}-{run}-{tag}",
                            Env.KEY_PREFIX: f"{prefix}-{ident}" + (f"-{run}" if run else "")})
                w = subprocess.Popen(worker_cmd(engine, variant), env=worker_env(engine, env),
                                     cwd=BASELINE["dir"] if engine.endswith(BASE) else None,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(w)
                keys = KeySpace(s.tenant, env[Env.KEY_PREFIX])
                index = keys.sessions_index(1)
                while r.zcard(index) == 0:
                    time.sleep(0.01)
                t0 = time.perf_counter()
                cpu0 = cpu_seconds(w.pid)
                last = {sid: seq for sid, seq in sessions.items()}
                while True:
                    with r.pipeline(transaction=False) as pipe:
                        for sid in last:
                            pipe.hget(keys.session_row(sid, 1), SessionRow.AS_OF_SEQ)
                        vals = pipe.execute()
                    if all(v is not None and int(v) == last[sid]
                           for sid, v in zip(last, vals, strict=True)):
                        break
                    time.sleep(0.05)
                fold = n_events / (time.perf_counter() - t0)
                cpu = cpu_seconds(w.pid) - cpu0
                if untimed:
                    w.terminate()
                    w.wait(30)
                    continue
                folds.setdefault(name, []).append(fold)
                print(f"{name} worker fold: {fold:,.0f} events/s  (ratio to raw "
                      f"{fold / raw:.3f}, target >= 0.5); worker CPU "
                      f"{cpu * 1e6 / n_events:.1f} us/event (raw consume "
                      f"{raw_cpu * 1e6 / n_events:.1f})", flush=True)
                cpus.setdefault(name, []).append(cpu * 1e6 / n_events)
                w.terminate()
                w.wait(30)
            for n, runs_of in folds.items():
                spread = Spread.of(runs_of)
                if args.repeat > 1:
                    print(f"{n}: {spread.show(',.0f', '/s')} (ratio to raw "
                          f"{spread.median / raw:.3f})")
                record(args.results, Result(
                    "streams", f"{n} worker fold, {n_events:,} events (ratio to raw)",
                    f"raw consume {raw:,.0f}/s over {raw_s:.1f} s",
                    f"{spread.median:,.0f}/s, {statistics.median(cpus[n]):.1f} us CPU/event",
                    spread.median / raw, ">= 0.5x",
                    "; ".join(filter(None, [f"min-max {spread.low / raw:.3f}-"
                                            f"{spread.high / raw:.3f} over {spread.rounds}",
                                            quick]))))
            for n in [n for n in folds if n.endswith(BASE)]:
                new, old = statistics.median(cpus[n.removesuffix(BASE)]), statistics.median(cpus[n])
                print(f"{n.removesuffix(BASE)} worker CPU per event: {new:.2f} us, the "
                      f"baseline's {old:.2f} us ({new / old:.2f}x)")
                record(args.results, Result(
                    "streams", f"{n.removesuffix(BASE)} worker CPU per event, {n_events:,} "
                    "events (us)", f"baseline commit {old:.2f} us", f"{new:.2f} us", new,
                    "<= 4 us", f"{new / old:.2f}x the baseline's; {quick}".strip("; ")))

            def run_replay(fold: str, checkout: str, key_dir: str, where: str
                           ) -> dict[str, Any]:
                """One replay in a process of its own (bench/replay_once.py), with this
                checkout's interpreter or the baseline's (``checkout`` "@base")."""
                renv = {**os.environ, "PYTHONPATH": str(BASELINE["dir"]) if checkout
                        else os.getcwd()}
                done = subprocess.run(
                    [python_of(checkout), str(Path(__file__).parent / "replay_once.py"),
                     topic, where, fold, key_dir], env=renv, capture_output=True, text=True,
                    cwd=BASELINE["dir"] if checkout else None, check=False)
                if done.returncode:
                    raise SystemExit(f"replay{checkout} failed:\n{done.stderr[-3000:]}")
                got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
                assert got["different"] == 0, got
                return got

            checkouts = ["", BASE] if BASELINE else [""]
            for fold in ([] if args.skip_replay else args.folds.split(",")):
                rates: dict[str, dict[str, float]] = {c: {} for c in checkouts}
                path = fold
                cpu_of: dict[str, dict[str, float]] = {c: {} for c in checkouts}
                # cold: a key store of its own, empty (every session's data keys are
                # created); warm: a new store over the same keys (they exist, its
                # cache is empty). Each replays into its own prefix: the warm one
                # compares every session with the cold one's generation. The two
                # checkouts take turns.
                fresh = {c: tempfile.mkdtemp(prefix="ssbench-keys-") for c in checkouts}
                for temp in ("cold", "warm"):
                    for c in checkouts:
                        got = run_replay(fold, c, fresh[c],
                                         f"{prefix}-replay-{fold}{c.replace('@', '-')}")
                        rates[c][temp] = got["rate"]
                        path = got["fold"] if not c else path
                        cpu_of[c][temp] = got["cpu"] * 1e6 / got["events"]
                        print(f"replay{c} ({got['fold']} fold, one process, {temp} key store):"
                              f" {got['rate']:,.0f} events/s, {cpu_of[c][temp]:.1f} us CPU/"
                              f"event (ratio to raw {got['rate'] / raw:.2f}; over {n_events}"
                              f" events; {got['equal']} sessions equal to the previous "
                              f"generation, {got['not_comparable']} not comparable; seconds "
                              + ", ".join(f"{k} {v:.1f}" for k, v in got["phases"].items())
                              + ")", flush=True)
                for temp in ("cold", "warm"):
                    rate = rates[""][temp]
                    if BASELINE:
                        old = rates[BASE][temp]
                        baseline = f"baseline commit {old / 1000:,.0f} k/s"
                        note = f"{rate / old:.2f}x the baseline's"
                    else:
                        baseline, note = f"raw consume {raw:,.0f}/s", ""
                    record(args.results, Result(
                        "streams", f"replay, {path} fold, {temp} key store, "
                        f"{n_events:,} events (k events/s)", baseline,
                        f"{rate / 1000:,.0f} k/s, {cpu_of[''][temp]:.1f} us CPU/event",
                        rate / 1000, ">= 150 k/s", "; ".join(filter(None, [note, quick]))))
                print(f"replay ({path} fold): cold / warm "
                      f"{rates['']['cold'] / rates['']['warm']:.2f}x (target >= 0.9x)")
                record(args.results, Result(
                    "streams", f"replay, {path} fold, cold / warm key store",
                    f"warm {rates['']['warm']:,.0f}/s", f"cold {rates['']['cold']:,.0f}/s",
                    rates[""]["cold"] / rates[""]["warm"], ">= 0.9x", quick))
                for d in fresh.values():
                    shutil.rmtree(d, ignore_errors=True)

        for ei, engine in enumerate([] if args.replay_only or args.skip_latency
                                    else engines):
            latency(s, r, engine, lat_topics[engine], topic, f"{prefix}-lat-{engine}",
                    f"bench-lat-{engine}-{tag}", args, seed=2 + ei, env=env, procs=procs)
    finally:
        for w in procs:
            w.terminate()
            try:
                w.wait(20)
            except subprocess.TimeoutExpired:
                w.kill()
        gone = [t for t in made if t != topic] + ([] if args.keep else [topic])
        for f in (admin.delete_topics(gone).values() if gone else []):
            with contextlib.suppress(Exception):
                f.result(30)
        if not args.keep:
            for k in r.scan_iter(match=f"{prefix}*", count=1000):
                r.delete(k)


def topic_size(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (high minus low watermark over its partitions)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}",
                  "log_level": 3})
    meta = c.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None:
        raise SystemExit(f"--topic {topic}: no such topic (make one with --keep)")
    total = 0
    for p in meta.partitions:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += hi - lo
    c.close()
    return total


if __name__ == "__main__":
    main()
