"""Append-path benchmark: the session writer against a fair raw produce of the same run.

    PYTHONPATH=. python bench/bench_producer.py [--events 20000] [--sessions 200]
        [--rounds 2] [--append auto|native|python|both] [--batch 50] [--icount N]

For one session and for ``--sessions`` sessions appending round-robin in one process (a
fleet agent: every writer shares the process's one librdkafka producer), with content
encryption off and on (on is the default for a tenant, ``sessionstream.governance``):
``--events`` ~1 KiB chunk events appended through ``SessionWriter`` (validated, sealed
when encrypted, Avro-encoded, produced, then one ``flush()`` per writer: acknowledged
and proven admitted) against the fair raw baseline: a bare confluent-kafka producer
sending the writer's own records (the very events, sealed the same way, encoded by the
same codec), with the same keys in the same order and the writer's producer config
(``PRODUCER_DEFAULTS``: idempotent, acks=all, lz4, linger 5 ms), no delivery callback,
then ``flush()``. Both sides are warm when the clock starts: the writers have flushed
their opening events, and the raw producer has had its first record acknowledged (a
fresh idempotent producer can wait ~500 ms for its producer id and first ack, which
once made raw windows of ~100 ms read 250-580 ms). Each configuration runs
``--rounds`` times (writer, then raw); printed: median (min-max) over the rounds, and
the ratio writer / raw (target >= 0.7x). Beside
the wall-clock ratio: the CPU time of the producing thread per event (``thread_time``,
librdkafka's own threads excluded: they do the same work for both), which stays steady
on a loaded machine where wall-clock rates swing 3x.

``--append`` picks the writer's append path (producers/native_append.py); ``both`` runs
the native path and the Python reference in each round, so their figures are of the same
run. ``--batch B`` adds the batch append (``SessionWriter.append_many``, native path):
the same chunks in calls of B drafts each (one session's B consecutive chunks per call,
sessions round-robin per call), against the raw produce of its own records in its own
produce order; ``--batch 0`` leaves it out.

``--icount N`` adds instruction counts per append, stable on a noisy machine: the bench
runs itself under ``valgrind --tool=callgrind --separate-threads=yes`` appending 0 and N
chunks to one session (native path, Python path) or raw-producing the writer's records
of them, and reports the producing thread's instructions per record (librdkafka's own
threads excluded, as in the CPU figure) and the ratio raw / writer.

Then the flush latency at a steady 1000 appends/s (flush every 50) against raw produce +
``Producer.flush`` of the same records at the same rate. The resume benchmark is
``bench/bench_resume.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.results import Result, Spread, record
from sessionstream.core.events import Event
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore, TenantKeys
from sessionstream.producers.kafka_clients import PRODUCER_DEFAULTS
from sessionstream.producers.writer import SessionWriter, WriterConfig


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


def warm_producer(cfg: WriterConfig, record: tuple[bytes, bytes]) -> Producer:
    """A raw producer with the writer's config whose first record is acknowledged: its
    producer id fetched and its connections up before any clock starts, as the
    writer's pooled producer is after the opening flush."""
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cfg.bootstrap})
    p.produce(cfg.topic, record[1], record[0])
    if p.flush(30):
        raise SystemExit(f"the raw producer's warm-up record was not acknowledged in 30 s "
                         f"({cfg.bootstrap}, topic {cfg.topic})")
    return p


def raw_produce(cfg: WriterConfig, records: list[tuple[bytes, bytes]]) -> tuple[float, float]:
    """The baseline: the writer's records and keys, its config, nothing else.
    Returns (records/s, CPU seconds of the producing thread per record)."""
    p = warm_producer(cfg, records[0])
    produce, poll = p.produce, p.poll
    t0 = time.perf_counter()
    c0 = time.thread_time()
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
    return len(records) / (time.perf_counter() - t0), (time.thread_time() - c0) / len(records)


def wire_bytes(w: SessionWriter, events: tuple[Event, ...]) -> list[bytes]:
    """What the writer produced for ``events``: sealed as the writer seals (fresh nonces,
    the same sizes and the same work), encoded by the writer's codec."""
    cipher = w._e.cfg.cipher
    return [w._e.encode(e if cipher is None else cipher.seal_event(e)) for e in events]


class Run:
    """One round: rates (events/s), CPU µs per event of the producing thread, sizes."""

    def __init__(self, writer: float, raw: float, writer_cpu: float, raw_cpu: float,
                 size: int) -> None:
        self.writer, self.raw, self.size = writer, raw, size
        self.writer_cpu, self.raw_cpu = writer_cpu * 1e6, raw_cpu * 1e6

    @property
    def ratio(self) -> float:
        return self.writer / self.raw

    @property
    def cpu_ratio(self) -> float:
        """Raw produce's thread CPU per record over the writer's per append: the same
        comparison as ``ratio``, counted in CPU time (steadier on a loaded machine)."""
        return self.raw_cpu / self.writer_cpu


def bench_throughput(cfg: WriterConfig, n: int, sessions: int, batch: int = 0) -> Run:
    """The writer and the fair raw produce for ``n`` chunks appended round-robin over
    ``sessions`` writers of one process (``batch``: in ``append_many`` calls of that
    many chunks, one session per call)."""
    writers = [SessionWriter.create(cfg) for _ in range(sessions)]
    for w in writers:
        open_step(w)
        w.flush(30)
    marks = [len(w.session.events) for w in writers]
    data = [chunk(i) for i in range(n)]
    # Which session appends which chunk, in append order.
    if batch:
        order = [(b % sessions, i) for b in range(-(-n // batch))
                 for i in range(b * batch, min(n, (b + 1) * batch))]
    else:
        order = [(i % sessions, i) for i in range(n)]
    t0 = time.perf_counter()
    c0 = time.thread_time()
    if batch:
        for b in range(0, n, batch):
            writers[(b // batch) % sessions].append_many(
                [("assistant/chunk", d) for d in data[b:b + batch]])
    else:
        for i in range(n):
            writers[i % sessions].append("assistant/chunk", data[i])
    for w in writers:
        w.flush(60)
    writer_rate = n / (time.perf_counter() - t0)
    writer_cpu = (time.thread_time() - c0) / n
    # The writer's records, in the order it produced them.
    per = [iter([(w.session_id.encode(), v) for v in wire_bytes(w, w.session.events[m:])])
           for w, m in zip(writers, marks, strict=True)]
    records = [next(per[s]) for s, _ in order]
    size = sum(len(v) for _, v in records) // n
    for w in writers:
        w.close()
    raw_rate, raw_cpu = raw_produce(cfg, records)
    return Run(writer_rate, raw_rate, writer_cpu, raw_cpu, size)


def bench_flush(cfg: WriterConfig, rate: int, every: int, flushes: int
                ) -> tuple[list[float], list[bytes], bytes]:
    w = SessionWriter.create(cfg)
    open_step(w)
    w.flush(30)
    mark = len(w.session.events)
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
    values = wire_bytes(w, w.session.events[mark:])
    w.close()
    return lat, values, w.session_id.encode()


def bench_flush_raw(cfg: WriterConfig, rate: int, every: int, values: list[bytes],
                    key: bytes) -> list[float]:
    """The baseline of the flush latency: raw produce + ``Producer.flush`` of the
    writer's records at the same rate, with the writer's producer config."""
    p = warm_producer(cfg, (key, values[0]))
    lat = []
    gap = 1.0 / rate
    nxt = time.perf_counter()
    for f in range(len(values) // every):
        for i in range(every):
            nxt += gap
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            p.produce(cfg.topic, values[f * every + i], key)
            p.poll(0)
        t0 = time.perf_counter()
        p.flush(30)
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


def cipher_in(directory: Path) -> ContentCipher:
    """The tenant's content cipher over a key store of its own (data keys cached per
    session, as in a running writer)."""
    return ContentCipher(FileKeyStore(directory, TenantKeys(directory / "tenants",
                                                              create=True)), "default")


def report(path: str, sessions: int, encrypted: bool, events: int, runs: list[Run],
           results: str | None) -> None:
    writer, raw = Spread.of(r.writer for r in runs), Spread.of(r.raw for r in runs)
    ratio, cpu_ratio = Spread.of(r.ratio for r in runs), Spread.of(r.cpu_ratio for r in runs)
    wcpu, rcpu = Spread.of(r.writer_cpu for r in runs), Spread.of(r.raw_cpu for r in runs)
    print(f"append ({path} path), {sessions} session(s), encryption "
          f"{'on' if encrypted else 'off'}, {events} events of {runs[0].size} B: writer "
          f"{writer.show(',.0f', '/s')}, fair raw produce {raw.show(',.0f', '/s')}, ratio "
          f"{ratio.show()} (target >= 0.7x); thread CPU per event: writer "
          f"{wcpu.show('.1f', ' us')}, raw {rcpu.show('.1f', ' us')}, CPU ratio "
          f"{cpu_ratio.show()}", flush=True)
    what = (f"append, {path}, {sessions} session{'s' if sessions > 1 else ''}, "
            f"{'encrypted' if encrypted else 'clear'}")
    base = f"fair raw produce {raw.median:,.0f}/s, {rcpu.median:.1f} us CPU"
    # append_many's target is by CPU (issue 25: >= 0.5x); a single append's by wall clock
    if "batch" in path:
        record(results, Result("producer", what + " (CPU)", base,
                               f"{wcpu.median:.1f} us/event", cpu_ratio.median, ">= 0.5x",
                               f"min-max {cpu_ratio.low:.2f}-{cpu_ratio.high:.2f}"))
    else:
        record(results, Result("producer", what, base, f"{writer.median:,.0f}/s",
                               ratio.median, ">= 0.7x",
                               f"min-max {ratio.low:.2f}-{ratio.high:.2f}; CPU ratio "
                               f"{cpu_ratio.median:.2f}"))


def report_encryption(path: str, sessions: int, clear: list[Run], sealed: list[Run],
                      results: str | None) -> None:
    """Encrypted against clear on the same path, by the producing thread's CPU per event
    (the wall clock of two separate windows swings with the load)."""
    c, e = Spread.of(r.writer_cpu for r in clear), Spread.of(r.writer_cpu for r in sealed)
    ratio = c.median / e.median
    print(f"append ({path} path), {sessions} session(s): encrypted / clear by thread CPU "
          f"per event {ratio:.2f}x ({e.median:.1f} us against {c.median:.1f} us; target "
          f">= 0.8x)", flush=True)
    record(results, Result("producer", f"append encrypted / clear, {path}, {sessions} "
                           f"session{'s' if sessions > 1 else ''} (CPU)",
                           f"clear {c.median:.1f} us/event", f"{e.median:.1f} us/event",
                           ratio, ">= 0.8x"))


def icount_child(args: argparse.Namespace) -> None:
    """One callgrind run: ``args.icount_n`` appends (or raw produces) on one session."""
    s = Settings.from_env()
    mode, n = args.icount_run, args.icount_n
    keys = Path(tempfile.mkdtemp(prefix="ssbench-keys-"))
    cfg = WriterConfig(bootstrap=s.kafka_bootstrap, topic=args.icount_topic,
                       redis_url=s.redis_url, key_prefix=f"ssbench-{uuid.uuid4().hex[:8]}",
                       cipher=cipher_in(keys) if args.icount_enc else None,
                       append="python" if mode == "python" else "native")
    w = SessionWriter.create(cfg)
    open_step(w)
    w.flush(30)
    data = [chunk(i) for i in range(args.icount_max + 10)]  # the same work for every n
    for d in data[:10]:  # warm: plans, data keys, caches
        w.append("assistant/chunk", d)
    if mode == "raw":
        records = wire_bytes(w, w.session.events[-10:]) * (n // 10 + 1)
        p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cfg.bootstrap})
        p.list_topics(cfg.topic, timeout=10)
        produce, poll, topic, key = p.produce, p.poll, cfg.topic, w.session_id.encode()
        for i in range(n):
            produce(topic, records[i], key)
            if i % 1000 == 0:
                poll(0)
        p.flush(30)
    elif mode == "batch":
        b = args.icount_batch
        for i in range(10, 10 + n, b):
            w.append_many([("assistant/chunk", d) for d in data[i:min(i + b, 10 + n)]])
    else:
        for d in data[10:10 + n]:
            w.append("assistant/chunk", d)
    w.abandon()


def instructions(args: argparse.Namespace, topic: str, mode: str, encrypted: bool,
                 n: int) -> int | None:
    """The producing (main) thread's instructions, counted by callgrind."""
    out = Path(tempfile.mkdtemp(prefix="callgrind-"))
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
           f"--callgrind-out-file={out / 'cg'}", sys.executable, __file__,
           "--icount-run", mode, "--icount-topic", topic, "--icount-n", str(n),
           "--icount-max", str(args.icount), "--icount-batch", str(args.batch or 50)
           ] + (["--icount-enc"] if encrypted else [])
    subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    main_thread = out / "cg-01"
    text = main_thread.read_text() if main_thread.exists() else ""
    shutil.rmtree(out, ignore_errors=True)
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    return int(m.group(1)) if m else None


def icount(args: argparse.Namespace, topic: str) -> None:
    if shutil.which("valgrind") is None:
        print("instruction count: skipped (valgrind is not installed: apt-get install valgrind)")
        return
    modes = ("native", "batch", "python", "raw")
    specs = [(mode, enc, n) for enc in (False, True) for mode in modes for n in (0, args.icount)]
    with ThreadPoolExecutor(max_workers=6) as pool:  # the runs are independent
        counts = dict(zip(specs, pool.map(lambda sp: instructions(args, topic, *sp), specs),
                          strict=True))
    for encrypted in (False, True):
        per: dict[str, float] = {}
        for mode in modes:
            base, full = counts[(mode, encrypted, 0)], counts[(mode, encrypted, args.icount)]
            if base is not None and full is not None:
                per[mode] = (full - base) / args.icount
        if len(per) < len(modes):
            print("instruction count: skipped (callgrind printed no total)")
            return
        print(f"instructions per append of the producing thread, encryption "
              f"{'on' if encrypted else 'off'} (callgrind, {args.icount} chunks, one "
              f"session): native path {per['native']:,.0f}, native batch append_many "
              f"({args.batch or 50} per call) {per['batch']:,.0f}, python path "
              f"{per['python']:,.0f}, fair raw produce {per['raw']:,.0f}; ratio raw / "
              f"writer: native {per['raw'] / per['native']:.3f}x, native batch "
              f"{per['raw'] / per['batch']:.3f}x, python "
              f"{per['raw'] / per['python']:.3f}x (target >= 0.7x)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--sessions", type=int, default=200,
                    help="sessions appending round-robin in the many-session figure")
    ap.add_argument("--rounds", type=int, default=5,
                    help="runs per figure (median, min and max)")
    ap.add_argument("--results", help="append the result rows (JSON lines) to this file")
    ap.add_argument("--no-flush", action="store_true", help="skip the flush latency")
    ap.add_argument("--append", choices=("auto", "native", "python", "both"), default="both",
                    help="the writer's append path (both: native and python, same run)")
    ap.add_argument("--batch", type=int, default=50, metavar="B",
                    help="also bench append_many in calls of B chunks (native; 0: skip)")
    ap.add_argument("--no-throughput", action="store_true", help="skip the throughput")
    ap.add_argument("--icount", type=int, default=0, metavar="N",
                    help="also count instructions per append over N chunks (callgrind)")
    ap.add_argument("--icount-batch", type=int, default=50, help=argparse.SUPPRESS)
    ap.add_argument("--icount-run", choices=("native", "batch", "python", "raw"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--icount-topic", help=argparse.SUPPRESS)
    ap.add_argument("--icount-n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--icount-max", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--icount-enc", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.icount_run:
        icount_child(args)
        return
    s = Settings.from_env()
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    prefix = f"ssbench-{uuid.uuid4().hex[:8]}"
    topic = make_topic(admin, 12)
    keys = Path(tempfile.mkdtemp(prefix="ssbench-keys-"))
    try:
        appends = ("native", "python") if args.append == "both" else (args.append,)
        # (label, append setting, batch size)
        paths = [(a, a, 0) for a in appends]
        if args.batch and args.append in ("both", "native", "auto"):
            paths.insert(1, (f"{appends[0]} batch of {args.batch}", appends[0], args.batch))
        by: dict[tuple[bool, int, str], list[Run]] = {}
        for encrypted in (False, True) if not args.no_throughput else ():
            for sessions in (1, args.sessions):
                for _ in range(args.rounds):
                    for label, path, batch in paths:
                        cfg = WriterConfig(bootstrap=s.kafka_bootstrap, topic=topic,
                                           redis_url=s.redis_url, key_prefix=prefix,
                                           cipher=cipher_in(keys) if encrypted else None,
                                           append=path)
                        by.setdefault((encrypted, sessions, label), []).append(
                            bench_throughput(cfg, args.events, sessions, batch))
                for label, _, _ in paths:
                    report(label, sessions, encrypted, args.events,
                           by[(encrypted, sessions, label)], args.results)
        for (encrypted, sessions, label), runs in by.items():
            if encrypted and "python" not in label:
                report_encryption(label, sessions, by[(False, sessions, label)], runs,
                                  args.results)
        if args.icount:
            icount(args, topic)
        if not args.no_flush:
            cfg = WriterConfig(bootstrap=s.kafka_bootstrap, topic=topic,
                               redis_url=s.redis_url, key_prefix=prefix)
            lat, values, key = bench_flush(cfg, rate=1000, every=50, flushes=100)
            raw = bench_flush_raw(cfg, 1000, 50, values, key)
            q, qr = statistics.quantiles(lat, n=100), statistics.quantiles(raw, n=100)
            print(f"flush latency at 1000 appends/s, flush every 50: writer p50 {q[49]:.1f} "
                  f"ms, p99 {q[98]:.1f} ms; raw produce+flush of the same records p50 "
                  f"{qr[49]:.1f} ms, p99 {qr[98]:.1f} ms; ratio p50 "
                  f"{q[49] / max(qr[49], 1e-3):.2f}x")
    finally:
        admin.delete_topics([topic])


if __name__ == "__main__":
    main()
