"""Replay by rewinding: rebuild every projection from the topic into a NEW Redis generation.

A plain confluent-kafka consumer (no faust, no consumer group commits) reads the tenant's
events topic from the beginning (or from a time) and drives the same ``Processor`` as the
worker, pinned to the new generation. Up to the end offsets measured at the start it folds
in memory (``Processor.fold``) and writes each session once (``Processor.flush``: at the
end, and every ``flush_every`` records or ``flush_sessions`` folded sessions to bound
memory), so a long session's views are encoded once, not once per poll. Once it reached
the end offsets it compares every
session with the live generation at the same ``as_of_seq``, switches readers to the new
generation atomically (one SET of the tenant's generation pointer), then reads on to the
end offsets measured after the switch, so events the live worker applied to the old
generation meanwhile are in the new one too (the worker follows the pointer per batch).

A reader thread consumes ahead of the fold (the native fold releases the GIL, so the
two use both cores), another reads each folded session's row keys ahead of the flush,
and with the native fold the compare opens only the live row of a sealed pair: the
fold kept digests of what it sealed in the new one (ADR 0015).

Replay only folds projections: it never executes a tool or any other side effect.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from redis.asyncio import Redis

from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.rows import FIRST_GENERATION, KeySpace, SessionRow
from sessionstream.producers.kafka_clients import consumer_config, private_group
from sessionstream.streams.errors import GenerationError
from sessionstream.streams.kafka_io import KafkaLogReader
from sessionstream.streams.processor import Processor
from sessionstream.streams.replay_compare import compare
from sessionstream.streams.replay_read import KeysAhead, Reader
from sessionstream.streams.sink import RedisSink, Retry, Script

#: The cyclic collector's first threshold while a replay runs (Python's default: 700):
#: its per-session bookkeeping lives to the end, and the passes over it were ~7% of the
#: process's CPU (perf, 200k events).
GC_THRESHOLD = 20_000
#: The interpreter's thread switch interval while a replay runs (Python's default:
#: 5 ms). Five threads take the GIL in turns (the loop, the fold, the background seal,
#: the reader, the key reads); a thread that wants it back waits for the holder's
#: interval, and the background flush's many short steps waited most (ADR 0015).
SWITCH_INTERVAL = 0.001

# A new generation, allocated atomically: KEYS the tenant's generation counter and
# pointer (one hash tag), ARGV[1] the first generation. Returns {live, new}: new is past
# both the counter and the live generation, and the counter is left at new, so two
# replays never share a generation and the counter never moves back (a deletion purges
# every generation up to it).
ALLOCATE_GENERATION_LUA = """
local live = tonumber(redis.call('GET', KEYS[2]) or '') or tonumber(ARGV[1])
local new = redis.call('INCR', KEYS[1])
if new <= live then
  new = live + 1
  redis.call('SET', KEYS[1], new)
end
return {live, new}
"""
_ALLOCATE = Script(ALLOCATE_GENERATION_LUA)


@dataclass
class ReplayReport:
    topic: str
    live_generation: int
    generation: int
    start: str
    events: int = 0
    seconds: float = 0.0
    sessions: int = 0
    equal: int = 0
    different: list[str] = field(default_factory=list)
    not_comparable: list[str] = field(default_factory=list)  # live at another as_of_seq
    dead_letters: int = 0
    switched: bool = False
    caught_up_after_switch: int = 0
    fold: str = "python"  # the in-memory fold's path: native or python
    #: of ``equal``: sealed pairs shown equal by the digests of the new rows' sealed
    #: fields (only the live row opened, ADR 0015)
    by_digest: int = 0
    #: wall seconds per phase: read (consume), fold, flush (the fold stopped to take
    #: rows out, and the last flush), flush_wait (the fold waiting for a background
    #: flush to be written, ADR 0015), keys_wait (the end waiting for the keys read
    #: ahead), compare, catch_up (after the switch, all of its phases)
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def equals_live(self) -> bool:
        return not self.different

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["rate"] = round(self.rate, 1)
        out["phases"] = {k: round(v, 3) for k, v in self.phases.items()}
        out["equals_live"] = self.equals_live
        return out


Progress = Callable[[ReplayReport], None]


async def replay(
    *, bootstrap: str, redis: Redis, keys: KeySpace, topic: str,
    from_time_ms: int | None = None, switch: bool = True, batch: int = 1000,
    progress: Progress | None = None, progress_every: float = 1.0,
    pipeline: ReaderPipeline | None = None,
    rows: Any = None,
    flush_every: int = 100_000, flush_sessions: int = 50_000, fold: str = "auto",
    security: Mapping[str, str] | None = None,
) -> ReplayReport:
    """Rebuild into a new generation; switch to it when it is a full rebuild and ``switch``.

    ``fold`` (``Settings.fold``): ``auto``/``native``/``python``, the folder of the
    in-memory fold (``streams.processor.folder_for``); the catch-up after the switch is
    the live path. ``flush_every``/``flush_sessions``: a flush after that many records
    or folded sessions (bounds memory). ``security`` (``Settings.kafka_security()``):
    the principal its consumers use.
    """
    live, new = await allocate_generation(redis, keys)
    report = ReplayReport(topic, live, new,
                          "earliest" if from_time_ms is None else f"time:{from_time_ms}")
    pipeline = pipeline or ReaderPipeline.default()
    proc = Processor(pipeline=pipeline, sink=RedisSink(redis, keys, retry=Retry(attempts=20)),
                     group=f"replay-g{new}", generation=new, rows=rows, fold=fold,
                     log_reader=KafkaLogReader(bootstrap, security=security))
    report.fold = proc.folder.name
    run = _Replay(proc, report, bootstrap, security, batch, progress, progress_every)
    digests = None
    if rows is not None:
        run.keys_ahead = KeysAhead(rows, pipeline.registry.unit_keys())
        proc.on_folded = run.keys_ahead.add
        # the compare then opens only the live rows of sealed pairs (ADR 0015)
        digests = proc.folder.keep_digests()
    views = [SessionRow.view(k) for k in pipeline.registry.unit_keys()]
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
    try:
        run.assign(from_time_ms)
        compared: set[str] = set()

        async def compare_settled(sids: list[str]) -> None:
            await compare(redis, keys, live, new, report, views, rows, digests, only=sids)
            compared.update(sids)

        await run.fold_to_end((flush_every, flush_sessions), compare_settled)
        t0 = time.monotonic()
        await compare(redis, keys, live, new, report, views, rows, digests, skip=compared)
        _took(report, "compare", t0)
        if switch and from_time_ms is None:
            await redis.set(keys.generation(), new)
            report.switched = True
            before = report.events
            t0 = time.monotonic()
            await run.process_to_end()
            _took(report, "catch_up", t0)
            report.caught_up_after_switch = report.events - before
    except KafkaException as exc:
        raise GenerationError(f"replay of {topic} failed reading Kafka: {exc}; the readers "
                              f"stay on generation {live}") from exc
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        sys.setswitchinterval(interval)
        run.close()
    report.seconds = time.monotonic() - run.started
    if progress:
        progress(report)
    return report


async def allocate_generation(redis: Redis, keys: KeySpace) -> tuple[int, int]:
    """(the live generation, a new one for this replay alone), in one script call."""
    live, new = await _ALLOCATE(redis, [keys.generation_counter(), keys.generation()],
                                [FIRST_GENERATION])
    return int(live), int(new)


class _Replay:
    """One replay's reading of the topic: its consumers and where each partition is, the
    processor it drives, the report it fills."""

    def __init__(self, proc: Processor, report: ReplayReport, bootstrap: str,
                 security: Mapping[str, str] | None, batch: int, progress: Progress | None,
                 progress_every: float) -> None:
        self.proc, self.report, self.topic = proc, report, report.topic
        self.batch, self.progress, self.every = batch, progress, progress_every
        self.started = time.monotonic()
        self.keys_ahead: KeysAhead | None = None
        group = private_group("replay")
        self.consumer = Consumer(consumer_config(bootstrap, group, {
            "enable.partition.eof": False, "fetch.max.bytes": 64 * 1024 * 1024,
            # A full fetch queue makes librdkafka wait 1 s (its default) before the next
            # fetch; a fold that drains the queue faster than one refill then sat in
            # empty consume() calls (as the kafka engine did, ADR 0003).
            "fetch.queue.backoff.ms": 5}, security=security))
        # Offsets are asked on a consumer that fetches nothing: on the reading one each
        # watermark query waits behind its fetches (~140 ms each, measured).
        self.meta = Consumer(consumer_config(bootstrap, group, {"enable.partition.eof": False},
                                             security=security))
        self.parts: list[int] = []
        self.position: dict[int, int] = {}  # partition -> the last offset read

    def assign(self, from_time_ms: int | None) -> None:
        """Start at the beginning of every partition, or at ``from_time_ms``."""
        self.parts = _partitions(self.meta, self.topic)
        starts = _start_offsets(self.meta, self.topic, self.parts, from_time_ms)
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
        self.position = {p: o - 1 for p, o in starts.items()}

    def close(self) -> None:
        if self.keys_ahead is not None:
            self.keys_ahead.close()
        self.consumer.close()
        self.meta.close()

    async def fold_to_end(self, every: tuple[int, int],
                          compare_settled: Callable[[list[str]], Awaitable[None]]) -> None:
        """Fold in memory up to the current end offsets, and flush after ``every``
        (records, folded sessions) and at the end; ``compare_settled`` gets the sessions
        an earlier flush wrote and nothing folded since (final once the end is read) and
        compares them while the last flush writes the others."""
        proc, report, keys_ahead = self.proc, self.report, self.keys_ahead
        since_flush = 0
        try:
            async for records in self._batches(phases=True):
                t0 = time.monotonic()
                result = await proc.fold(records)
                _took(report, "fold", t0)
                report.events += len(records)
                report.dead_letters += len(result.dead_letters)
                since_flush += len(records)
                if since_flush >= every[0] or proc.unflushed_sessions >= every[1]:
                    # the writes leave the folder now, sealed and written while the next
                    # batches fold (the next flush waits for it first); the keys read
                    # ahead are not waited for: that seal runs on a thread too
                    t0 = time.monotonic()
                    if keys_ahead is not None:
                        keys_ahead.rewind()
                    await proc.settle_flush()
                    _took(report, "flush_wait", t0)
                    t0 = time.monotonic()
                    await proc.flush(background=True)
                    # what survived so far (the fold's per-session bookkeeping) is not
                    # scanned by the collector again (replay() unfreezes)
                    gc.freeze()
                    _took(report, "flush", t0)
                    since_flush = 0
        except BaseException:
            proc.abandon_flush()
            raise
        t0 = time.monotonic()
        if keys_ahead is not None:
            await keys_ahead.drain()
            _took(report, "keys_wait", t0)
        t0 = time.monotonic()
        await proc.settle_flush()  # an earlier flush's rows are final once written
        _took(report, "flush_wait", t0)
        t0 = time.monotonic()
        settled = proc.settled_sessions()
        early = asyncio.ensure_future(compare_settled(settled)) if settled else None
        try:
            await proc.flush()
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        _took(report, "flush", t0)
        if early is not None:
            t0 = time.monotonic()
            await early
            _took(report, "compare", t0)

    async def process_to_end(self) -> None:
        """Fold and write batch by batch (the live path) up to the current end offsets."""
        async for records in self._batches(phases=False):
            result = await self.proc.process(records)
            self.report.events += len(records)
            self.report.dead_letters += len(result.dead_letters)

    async def _batches(self, *, phases: bool) -> AsyncIterator[Sequence[Record]]:
        """The batches up to the end offsets measured now, read on a thread of their
        own; the report's progress is handed on as they go."""
        meta, topic, report = self.meta, self.topic, self.report
        ends = {p: meta.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] - 1
                for p in self.parts}
        reader = Reader(self.consumer, topic, self.parts, self.position, ends, self.batch)
        last_report = time.monotonic()
        try:
            while True:
                t0 = time.monotonic()
                records = await reader.next()
                if phases:
                    _took(report, "read", t0)
                if records is None:
                    return
                yield records
                if self.progress and time.monotonic() - last_report >= self.every:
                    report.seconds = time.monotonic() - self.started
                    self.progress(report)
                    last_report = time.monotonic()
        finally:
            reader.close()


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise GenerationError(f"topic {topic!r} does not exist; run `sessionstream topics "
                              "ensure` or pass the right tenant")
    return sorted(meta.partitions)


def _start_offsets(consumer: Consumer, topic: str, parts: list[int],
                   from_time_ms: int | None) -> dict[int, int]:
    lows = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0]
            for p in parts}
    if from_time_ms is None:
        return lows
    found = consumer.offsets_for_times([TopicPartition(topic, p, from_time_ms) for p in parts],
                                       timeout=30)
    out = {}
    for tp in found:
        high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=30)[1]
        out[tp.partition] = tp.offset if tp.offset >= 0 else high
    return out


def _took(report: ReplayReport, phase: str, t0: float) -> None:
    report.phases[phase] = report.phases.get(phase, 0.0) + time.monotonic() - t0
