"""Producer benchmarks (run by hand against the local stack; ratios from the same run).

    PYTHONPATH=. python bench/bench_producer.py [--events 20000] [--others 300000]

1. append throughput: validated, Avro-encoded ~1 KiB events through SessionWriter vs raw
   confluent-kafka produce() of pre-encoded bytes of the same size (same producer config);
2. flush latency p50/p99 at a steady append rate;
3. resume time of a 10k-event session in a partition that also holds ``--others`` records
   of other sessions: with the index (clean close), with a stale index (unclean: read to
   the end), and without the index (full partition scan).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from producers.kafka import PRODUCER_DEFAULTS
from producers.writer import SessionWriter, WriterConfig
from sessionstream.core.settings import Settings


def make_topic(admin: AdminClient, partitions: int) -> str:
    name = f"ssbench.{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    time.sleep(0.5)
    return name


def open_step(w: SessionWriter) -> None:
    w.append("turn/start", {})
    w.append("step/start", {})
    w.append("request/header", {"provider": "bench", "model": "m"})


def chunk(i: int) -> dict[str, object]:
    return {"text": ("lorem ipsum dolor sit amet " * 36)[:950] + f"{i:08d}", "index": i}


def bench_throughput(cfg: WriterConfig, n: int) -> tuple[float, float, int]:
    w = SessionWriter.create(cfg)
    open_step(w)
    w.flush(30)
    t0 = time.perf_counter()
    for i in range(n):
        w.append("assistant/chunk", chunk(i))
    w.flush(60)
    writer_rate = n / (time.perf_counter() - t0)
    size = len(w._e.encode(w.session.events[-1]))
    payload = w._e.encode(w.session.events[-1])
    w.close()
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cfg.bootstrap})
    key = uuid.uuid4().hex.encode()
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(cfg.topic, payload, key, on_delivery=lambda e, m: None)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(60)
    raw_rate = n / (time.perf_counter() - t0)
    return writer_rate, raw_rate, size


def bench_flush(cfg: WriterConfig, rate: int, every: int, flushes: int) -> list[float]:
    w = SessionWriter.create(cfg)
    open_step(w)
    w.flush(30)
    lat = []
    gap = 1.0 / rate
    nxt = time.perf_counter()
    for f in range(flushes):
        for i in range(every):
            nxt += gap
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            w.append("assistant/chunk", chunk(f * every + i))
        t0 = time.perf_counter()
        w.flush(30)
        lat.append((time.perf_counter() - t0) * 1000)
    w.close()
    return lat


def fill_others(bootstrap: str, topic: str, n: int, payload: bytes) -> None:
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap})
    keys = [f"other-{i}".encode() for i in range(1000)]
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, keys[i % 1000])
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)


def bench_resume(cfg: WriterConfig, session_events: int, others: int) -> dict[str, float]:
    w = SessionWriter.create(cfg)
    open_step(w)
    for i in range(session_events - 4):
        w.append("assistant/chunk", {"text": "x" * 150, "index": i})
    w.flush(60)
    payload = w._e.encode(w.session.events[-1])
    sid = w.session_id
    fill_others(cfg.bootstrap, cfg.topic, others // 2, payload)  # after the session's start
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})
    w.close(confirm=True)  # clean close: the index bounds the next read
    fill_others(cfg.bootstrap, cfg.topic, others // 2, payload)  # after its last record
    out: dict[str, float] = {}
    for name, kwargs in (("index, clean close", {}), ("no index (partition scan)",
                                                      {"use_index": False})):
        t0 = time.perf_counter()
        r = SessionWriter.open(cfg, sid, **kwargs)  # type: ignore[arg-type]
        out[name] = time.perf_counter() - t0
        assert r.next_seq > session_events
        r.close()  # unclean: the next open reads to the end of the partition
        if name.startswith("index"):
            t0 = time.perf_counter()
            r = SessionWriter.open(cfg, sid)
            out["index, unclean (read to end)"] = time.perf_counter() - t0
            r.close(confirm=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--others", type=int, default=300_000)
    ap.add_argument("--session-events", type=int, default=10_000)
    args = ap.parse_args()
    s = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    prefix = f"ssbench-{uuid.uuid4().hex[:8]}"
    base = {"bootstrap": s.kafka_bootstrap, "redis_url": s.redis_url, "key_prefix": prefix}

    cfg = WriterConfig(topic=make_topic(admin, 4), **base)  # type: ignore[arg-type]
    w_rate, raw_rate, size = bench_throughput(cfg, args.events)
    print(f"append throughput ({args.events} events, {size} B records): writer "
          f"{w_rate:,.0f}/s, raw produce {raw_rate:,.0f}/s, ratio {w_rate / raw_rate:.2f}x "
          "(target >= 0.7x)")

    lat = bench_flush(cfg, rate=1000, every=50, flushes=100)
    q = statistics.quantiles(lat, n=100)
    print(f"flush latency at 1000 appends/s, flush every 50: p50 {q[49]:.1f} ms, "
          f"p99 {q[98]:.1f} ms, max {max(lat):.1f} ms")

    cfg1 = WriterConfig(topic=make_topic(admin, 1), **base)  # type: ignore[arg-type]
    res = bench_resume(cfg1, args.session_events, args.others)
    for name, sec in res.items():
        print(f"resume of a {args.session_events}-event session among {args.others} other "
              f"records, {name}: {sec:.2f} s")
    admin.delete_topics([cfg.topic, cfg1.topic])


if __name__ == "__main__":
    main()
