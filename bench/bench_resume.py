"""Resume benchmark: a 10k-event session in a partition of 1M records.

    PYTHONPATH=. python bench/bench_resume.py [--session-events 10000]
        [--others 990000] [--rounds 5] [--drop] [--python-decode]

The partition is built once and reused (a one-partition topic named after its shape;
``--drop`` deletes it): the session's first ``--session-events - 2`` events, then half of
``--others`` records of 1,000 other sessions, the session's last events and a clean
close, then the other half. Each round times, against the same partition:

* the baseline: a bare confluent-kafka consumer reading the session's own records (the
  offset runs of its index) — the least any resume must read — with the read-back's
  own fetch settings (``producers.readback.SEEKING``); the same bare read with
  librdkafka's defaults is printed too (the baseline is the faster of the two);
* ``SessionWriter.open`` through the session index (its runs, verified; clean close);
* ``SessionWriter.open`` without the index (``use_index=False``: a scan of the whole
  partition, the fallback when the index is missing or contradicted).

Every open writes the session's resume events (the end-seed) and closes cleanly, so the
session grows by a few events per round. Printed: median (min-max) over ``--rounds``
(at least 5: with 2, two slow rounds of five hid behind a passing median) and the ratio
to the baseline (target: the indexed resume < 0.5 s, by its median; the max is printed
beside it). ``--python-decode``: the
records are decoded by fastavro instead of the native extension's Avro reader. When
the Redis index of a reused topic is gone, the first open scans and rebuilds it.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.results import Result, Spread, record
from sessionstream import redisconn
from sessionstream.core.settings import Settings
from sessionstream.producers.index import SessionIndex
from sessionstream.producers.kafka_clients import PRODUCER_DEFAULTS
from sessionstream.producers.readback import SEEKING, NativeDecoder
from sessionstream.producers.writer import SessionWriter, WriterConfig

PREFIX = "ssbench-resume"


def high_watermark(bootstrap: str, topic: str) -> int | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "log_level": 0})
    try:
        if topic not in c.list_topics(timeout=10).topics:
            return None
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    except KafkaException:
        return None
    finally:
        c.close()


def fill_others(bootstrap: str, topic: str, n: int, payload: bytes) -> None:
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap})
    keys = [f"other-{i}".encode() for i in range(1000)]
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, keys[i % 1000])
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
        if i % 100_000 == 0 and i:
            print(f"  ... {i:,} of {n:,} other records ({time.monotonic() - t0:.0f} s)",
                  flush=True)
    p.flush(120)


def build(cfg: WriterConfig, sid: str, session_events: int, others: int) -> None:
    """The session's events, the others around its last ones, a clean close."""
    w = SessionWriter.create(cfg, sid)
    w.append("turn/start", {})
    w.append("step/start", {})
    w.append("request/header", {"provider": "bench", "model": "m"})
    for i in range(session_events - 6):
        w.append("assistant/chunk", {"text": "x" * 150, "index": i})
        if i % 500 == 499:
            w.flush(60)
    w.flush(60)
    payload = w._e.encode(w.session.events[-1])
    fill_others(cfg.bootstrap, cfg.topic, others // 2, payload)  # after the session's start
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})
    w.close()  # clean: every event flushed and proven admitted
    fill_others(cfg.bootstrap, cfg.topic, others - others // 2, payload)


def raw_read(cfg: WriterConfig, runs: tuple[tuple[int, int], ...],
             settings: dict[str, Any]) -> tuple[float, int]:
    """Seconds a bare consumer with ``settings`` takes to read the records of ``runs``
    (the session's own offsets), and how many it read: no decode, no admission."""
    c = Consumer({**settings, "bootstrap.servers": cfg.bootstrap,
                  "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
                  "log_level": 3})
    got = 0
    t0 = time.perf_counter()
    for lo, hi in runs:
        c.assign([TopicPartition(cfg.topic, 0, lo)])
        pos = lo
        while pos <= hi:
            for m in c.consume(min(10_000, hi - pos + 1), timeout=1):
                if m.error() is None:
                    pos = (m.offset() or 0) + 1
                    got += 1
    dt = time.perf_counter() - t0
    c.close()
    return dt, got


def timed_open(cfg: WriterConfig, sid: str, use_index: bool = True
               ) -> tuple[float, SessionWriter]:
    t0 = time.perf_counter()
    w = SessionWriter.open(cfg, sid, use_index=use_index)
    return time.perf_counter() - t0, w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--session-events", type=int, default=10_000)
    ap.add_argument("--others", type=int, default=990_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--results", help="append the result rows (JSON lines) to this file")
    ap.add_argument("--drop", action="store_true", help="delete the benchmark topic")
    ap.add_argument("--python-decode", action="store_true",
                    help="decode the read records with fastavro (the pure-Python path)")
    args = ap.parse_args()
    s = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    topic = f"ssbench.resume.{args.session_events}.{args.others}"
    if args.drop:
        admin.delete_topics([topic])[topic].result(30)
        print(f"deleted {topic}")
        return
    sid = f"bench-resume-{args.session_events}-{args.others}"
    cfg = WriterConfig(bootstrap=s.kafka_bootstrap, topic=topic, redis_url=s.redis_url,
                       key_prefix=PREFIX, native_decode=not args.python_decode)
    index = SessionIndex(redisconn.sync_redis(s.redis_url), PREFIX)
    hw = high_watermark(s.kafka_bootstrap, topic)
    total = args.session_events + args.others
    if hw is None or hw < total:
        if hw is not None:  # a partial build: start over
            admin.delete_topics([topic])[topic].result(30)
            time.sleep(2)
        index.delete(cfg.tenant, sid)
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        time.sleep(1)
        print(f"building {topic}: {total:,} records (once; reused by later runs)", flush=True)
        build(cfg, sid, args.session_events, args.others)
    else:
        print(f"reusing {topic}: {hw:,} records")
    if index.get(cfg.tenant, sid) is None:
        dt, w = timed_open(cfg, sid)
        w.close()
        print(f"the session index was gone: open() scanned the partition ({dt:.2f} s, "
              f"via {w.read_via}) and rebuilt it")
    rows: dict[str, list[float]] = {"raw": [], "raw-defaults": [], "index": [], "scan": []}
    read: dict[str, int] = {}
    for _ in range(args.rounds):
        idx = index.get(cfg.tenant, sid)
        assert idx is not None
        for name, settings in (("raw", SEEKING), ("raw-defaults", {})):
            dt, got = raw_read(cfg, idx.runs, settings)
            rows[name].append(dt)
            read[name] = got
        for name in ("index", "scan"):
            dt, w = timed_open(cfg, sid, use_index=name == "index")
            assert w.read_via == name, (name, w.read_via)
            rows[name].append(dt)
            read[name] = w.records_read
            events = w.next_seq
            w.close()
    # The baseline is the fastest bare read: the reader's own fetch settings (SEEKING),
    # which beat librdkafka's defaults on these runs (both printed).
    base = min(statistics.median(rows["raw"]), statistics.median(rows["raw-defaults"]))
    hw = high_watermark(s.kafka_bootstrap, topic) or 0
    decoder = ("native Avro reader" if cfg.native_decode and NativeDecoder.available()
               else "fastavro")
    print(f"resume of a {events:,}-event session in a partition of {hw:,} records "
          f"(decode: {decoder}), median (min-max) over {args.rounds} rounds:")
    labels = {"raw": "bare read of the session's records, the reader's fetch settings "
                     "(baseline)",
              "raw-defaults": "bare read, librdkafka's default fetch settings",
              "index": "open() through the session index",
              "scan": "open() without the index (partition scan)"}
    for name, label in labels.items():
        spread = Spread.of(rows[name])
        target = " (target < 0.5 s)" if name == "index" else ""
        print(f"  {label}: {spread.show('.3f', ' s')}, {read[name]:,} records read, "
              f"{spread.median / base:.1f}x the baseline{target}; rounds "
              f"{', '.join(f'{x:.3f}' for x in rows[name])}")
    idx = Spread.of(rows["index"])
    record(args.results, Result(
        "resume", f"resume of a {events:,}-event session in {hw:,} records (s)",
        f"bare read of its records {base:.3f} s", f"{idx.median / base:.1f}x the bare read",
        idx.median, "<= 0.5 s", f"min-max {idx.low:.3f}-{idx.high:.3f} s"))


if __name__ == "__main__":
    main()
