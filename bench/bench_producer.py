"""Producer benchmarks (run by hand against the local stack; ratios from the same run).

    PYTHONPATH=. python bench/bench_producer.py [--events 20000] [--others 990000]
        [--sessions 200]

1. append throughput: validated, Avro-encoded ~1 KiB events through SessionWriter vs a
   fair raw confluent-kafka produce() baseline of the same run: the very records the
   writer encoded (kept, not one repeated payload), the same keys in the same order
   (one session; then ``--sessions`` sessions appending round-robin) and the writer's
   own producer config (``PRODUCER_DEFAULTS``: idempotent, acks=all, lz4, linger 5 ms),
   with no per-record delivery callback (the writer's bookkeeping is what is measured);
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

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from producers.kafka_clients import PRODUCER_DEFAULTS
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


def raw_produce(cfg: WriterConfig, records: list[tuple[bytes, bytes]]) -> float:
    """The baseline: the writer's records and keys, its config, nothing else."""
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cfg.bootstrap})
    p.list_topics(cfg.topic, timeout=10)  # connected before the clock starts
    produce, poll = p.produce, p.poll
    t0 = time.perf_counter()
    for i, (key, value) in enumerate(records):
        while True:
            try:
                produce(cfg.topic, value, key)
                break
            except BufferError:
                poll(0.01)
        if i % 1000 == 0:
            poll(0)
    p.flush(60)
    return len(records) / (time.perf_counter() - t0)


def bench_throughput(cfg: WriterConfig, n: int, sessions: int = 1
                     ) -> tuple[float, float, int]:
    """(writer events/s, fair raw produce events/s, mean record bytes) for ``n`` chunks
    appended round-robin over ``sessions`` writers of one process."""
    writers = [SessionWriter.create(cfg) for _ in range(sessions)]
    for w in writers:
        open_step(w)
        w.flush(30)
    marks = [len(w.session.events) for w in writers]
    t0 = time.perf_counter()
    for i in range(n):
        writers[i % sessions].append("assistant/chunk", chunk(i))
    for w in writers:
        w.flush(60)
    writer_rate = n / (time.perf_counter() - t0)
    # The exact records the writer produced, in the order it produced them.
    per = [[(w.session_id.encode(), w._e.encode(ev)) for ev in w.session.events[m:]]
           for w, m in zip(writers, marks, strict=True)]
    records = [per[i % sessions][i // sessions] for i in range(n)]
    size = sum(len(v) for _, v in records) // n
    for w in writers:
        w.close()
    return writer_rate, raw_produce(cfg, records), size


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


def bench_flush_raw(cfg: WriterConfig, rate: int, every: int, flushes: int) -> list[float]:
    """The baseline of the flush latency: raw produce + ``Producer.flush`` of the same
    sizes at the same rate, with the writer's producer config."""
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cfg.bootstrap})
    p.list_topics(cfg.topic, timeout=10)
    key = uuid.uuid4().hex.encode()
    lat = []
    gap = 1.0 / rate
    nxt = time.perf_counter()
    for f in range(flushes):
        for i in range(every):
            nxt += gap
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            p.produce(cfg.topic, str(chunk(f * every + i)).encode(), key)
            p.poll(0)
        t0 = time.perf_counter()
        p.flush(30)
        lat.append((time.perf_counter() - t0) * 1000)
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


def raw_read(cfg: WriterConfig, partition: int, start: int, n: int) -> float:
    """Seconds a bare confluent consumer takes to read ``n`` records from ``start``."""
    c = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False, "log_level": 3})
    t0 = time.perf_counter()
    c.assign([TopicPartition(cfg.topic, partition, start)])
    got = 0
    while got < n:
        got += sum(1 for m in c.consume(min(10_000, n - got), timeout=1) if m.error() is None)
    dt = time.perf_counter() - t0
    c.close()
    return dt


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
    out: dict[str, float] = {"raw read of the session's records (baseline)":
                             raw_read(cfg, w.partition or 0, w._idx_lo or 0, session_events)}
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
    ap.add_argument("--others", type=int, default=990_000)
    ap.add_argument("--session-events", type=int, default=10_000)
    ap.add_argument("--sessions", type=int, default=200,
                    help="sessions appending round-robin in the many-session figure")
    args = ap.parse_args()
    s = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    prefix = f"ssbench-{uuid.uuid4().hex[:8]}"
    base = {"bootstrap": s.kafka_bootstrap, "redis_url": s.redis_url, "key_prefix": prefix}

    cfg = WriterConfig(topic=make_topic(admin, 12), **base)  # type: ignore[arg-type]
    for sessions in (1, args.sessions):
        w_rate, raw_rate, size = bench_throughput(cfg, args.events, sessions)
        print(f"append throughput, {sessions} session(s), {args.events} events of {size} B: "
              f"writer {w_rate:,.0f}/s, fair raw produce {raw_rate:,.0f}/s, ratio "
              f"{w_rate / raw_rate:.2f}x (target >= 0.7x)")

    lat = bench_flush(cfg, rate=1000, every=50, flushes=100)
    raw = bench_flush_raw(cfg, rate=1000, every=50, flushes=100)
    q, qr = statistics.quantiles(lat, n=100), statistics.quantiles(raw, n=100)
    print(f"flush latency at 1000 appends/s, flush every 50: writer p50 {q[49]:.1f} ms, "
          f"p99 {q[98]:.1f} ms; raw produce+flush p50 {qr[49]:.1f} ms, p99 {qr[98]:.1f} ms; "
          f"ratio p99 {q[98] / max(qr[98], 1e-3):.2f}x")

    cfg1 = WriterConfig(topic=make_topic(admin, 1), **base)  # type: ignore[arg-type]
    res = bench_resume(cfg1, args.session_events, args.others)
    base_s = next(iter(res.values()))
    for name, sec in res.items():
        print(f"resume of a {args.session_events}-event session in a partition of "
              f"{args.others + args.session_events} records, {name}: {sec:.3f} s "
              f"({sec / base_s:.1f}x the raw read; target < 0.5 s)")
    admin.delete_topics([cfg.topic, cfg1.topic])


if __name__ == "__main__":
    main()
