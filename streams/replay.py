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
import json
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from sessionstream import native
from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.privacy import UNAVAILABLE_TEXT
from sessionstream.core.rows import (
    FIRST_GENERATION,
    SEALED_PREFIX,
    KeySpace,
    SessionRow,
    assemble,
    lua,
)
from sessionstream.producers.kafka_clients import consumer_config, private_group
from sessionstream.streams.batch import MessageBatch
from sessionstream.streams.errors import GenerationError
from sessionstream.streams.kafka_io import KafkaLogReader
from sessionstream.streams.native_fold import NativeFold, fold_driver
from sessionstream.streams.native_seal import SEALED_REF, field_digest
from sessionstream.streams.processor import Processor
from sessionstream.streams.sink import RedisSink, Retry, Script

#: The extension reads a batch's messages in one pass (streams.batch) and opens sealed row
#: fields (the compare); None without it.
_scan = native.member("scan_messages")
_open_row = native.member("open_row")

#: Sessions compared per script call (and per round trip on a Redis Cluster).
COMPARE_CHUNK = 200
#: Consumed batches the reader thread may hold ahead of the fold (bounds memory).
READ_AHEAD = 8
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

# The compare of each session's new row with its live row, in Redis (ADR 0015): KEYS per
# session the new row and the live row (one hash tag, so one slot); ARGV[1] the prefix
# of a sealed value and ARGV[2] a marker, to hand the new row's sealed values back as the
# marker and their SHA-1 ('' and '': whole), then the prefixes of the fields compared
# (views, chunk manifests, chunks). Per session: 0 when exactly one row
# has an as_of_seq or the two differ (not comparable); 1 when every compared field is
# byte-identical in both rows (so are their views, however assembled or opened); else
# both rows' compared fields and as_of_seq (field/value lists) for the caller's exact
# compare of the views, the new row's sealed values as the marker and their SHA-1 when
# ARGV[1] is not '' (the caller holds the digests of their clear texts,
# streams.native_seal.sealed_ref); then, when both rows hold the same field names, only
# the fields whose stored values differ come back. Sealed fields use random nonces: such
# rows always come back.
COMPARE_ROWS_LUA = lua("""
local sealed, marker = ARGV[1], ARGV[2]
local function pick(row)
  local t, n = {}, 0
  for i = 1, #row, 2 do
    local k = row[i]
    for j = 3, #ARGV do
      if string.sub(k, 1, #ARGV[j]) == ARGV[j] then
        t[k] = row[i + 1]
        n = n + 1
        break
      end
    end
  end
  return t, n
end
local function flat(t, seq, hash)
  local f = {}
  for k, v in pairs(t) do
    f[#f + 1] = k
    if hash and string.sub(v, 1, #sealed) == sealed then
      f[#f + 1] = marker .. redis.sha1hex(v)
    else
      f[#f + 1] = v
    end
  end
  if seq then
    f[#f + 1] = $AS_OF_SEQ
    f[#f + 1] = seq
  end
  return f
end
local out = {}
for s = 1, #KEYS, 2 do
  local sa = redis.call('HGET', KEYS[s], $AS_OF_SEQ)
  local sb = redis.call('HGET', KEYS[s + 1], $AS_OF_SEQ)
  if (not sa) ~= (not sb) or (sa and tonumber(sa) ~= tonumber(sb)) then
    out[#out + 1] = 0
  else
    local ta, na = pick(redis.call('HGETALL', KEYS[s]))
    local tb, nb = pick(redis.call('HGETALL', KEYS[s + 1]))
    local names = na == nb
    local same = names
    if names then
      for k, v in pairs(ta) do
        local w = tb[k]
        if w == nil then
          names, same = false, false
          break
        elseif w ~= v then
          same = false
        end
      end
    end
    if same then
      out[#out + 1] = 1
    elseif names and sealed ~= '' then
      -- the same field names: only the fields whose stored values differ
      local da, db = {}, {}
      for k, v in pairs(ta) do
        if tb[k] ~= v then
          da[k], db[k] = v, tb[k]
        end
      end
      out[#out + 1] = {flat(da, sa, true), flat(db, sb, false)}
    else
      out[#out + 1] = {flat(ta, sa, sealed ~= ''), flat(tb, sb, false)}
    end
  end
end
return out
""")


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

    ``fold`` (``Settings.fold``): ``auto``/``native``/``python``, the in-memory fold's
    path (``streams.native_fold``); the catch-up after the switch is the live path.
    ``security`` (``Settings.kafka_security()``): the principal its consumers use.
    """
    live, new = await allocate_generation(redis, keys)
    report = ReplayReport(topic, live, new,
                          "earliest" if from_time_ms is None else f"time:{from_time_ms}")
    sink = RedisSink(redis, keys, retry=Retry(attempts=20))
    pipeline = pipeline or ReaderPipeline.default()
    proc = Processor(pipeline=pipeline, sink=sink, group=f"replay-g{new}",
                     log_reader=KafkaLogReader(bootstrap, security=security),
                     generation=new, rows=rows)
    driver = fold_driver(proc, fold)
    report.fold = "native" if isinstance(driver, NativeFold) else "python"
    digests = None
    keys_ahead = _KeysAhead(rows, pipeline.registry.unit_keys())
    if isinstance(driver, NativeFold) and rows is not None:
        driver.keep_digests = True  # the compare then opens only the live rows
        digests = driver.digests
        driver.on_folded = keys_ahead.add
    group = private_group("replay")
    consumer = Consumer(consumer_config(bootstrap, group, {
        "enable.partition.eof": False, "fetch.max.bytes": 64 * 1024 * 1024,
        # A full fetch queue makes librdkafka wait 1 s (its default) before the next
        # fetch; a fold that drains the queue faster than one refill then sat in empty
        # consume() calls (as the kafka engine did, ADR 0003).
        "fetch.queue.backoff.ms": 5}, security=security))
    # Offsets are asked on a consumer that fetches nothing: on the reading one each
    # watermark query waits behind its fetches (~140 ms each, measured).
    meta = Consumer(consumer_config(bootstrap, group, {"enable.partition.eof": False},
                                    security=security))
    views = [SessionRow.view(k) for k in pipeline.registry.unit_keys()]
    started = time.monotonic()
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
    try:
        parts = _partitions(meta, topic)
        starts = _start_offsets(meta, topic, parts, from_time_ms)
        consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        position = {p: o - 1 for p, o in starts.items()}
        compared: set[str] = set()

        async def compare_settled(sids: list[str]) -> None:
            await _compare(redis, keys, live, new, report, views, rows, digests, only=sids)
            compared.update(sids)

        await _read_to_end(consumer, meta, proc, topic, parts, position, report, batch,
                           progress, progress_every, started,
                           deferred=(flush_every, flush_sessions), folder=driver,
                           keys_ahead=keys_ahead, compare_settled=compare_settled,
                           freeze=True)
        t0 = time.monotonic()
        await _compare(redis, keys, live, new, report, views, rows, digests, skip=compared)
        _took(report, "compare", t0)
        if switch and from_time_ms is None:
            await redis.set(keys.generation(), new)
            report.switched = True
            before = report.events
            t0 = time.monotonic()
            await _read_to_end(consumer, meta, proc, topic, parts, position, report, batch,
                               progress, progress_every, started, phases=False)
            _took(report, "catch_up", t0)
            report.caught_up_after_switch = report.events - before
    except KafkaException as exc:
        raise GenerationError(f"replay of {topic} failed reading Kafka: {exc}; the readers "
                              f"stay on generation {live}") from exc
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        sys.setswitchinterval(interval)
        keys_ahead.close()
        consumer.close()
        meta.close()
    report.seconds = time.monotonic() - started
    if progress:
        progress(report)
    return report


async def allocate_generation(redis: Redis, keys: KeySpace) -> tuple[int, int]:
    """(the live generation, a new one for this replay alone), in one script call."""
    live, new = await _ALLOCATE(redis, [keys.generation_counter(), keys.generation()],
                                [FIRST_GENERATION])
    return int(live), int(new)


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


async def _read_to_end(consumer: Consumer, meta: Consumer, proc: Processor, topic: str,
                       parts: list[int],
                       position: dict[int, int], report: ReplayReport, batch: int,
                       progress: Progress | None, every: float, started: float,
                       deferred: tuple[int, int] | None = None,
                       folder: Processor | NativeFold | None = None,
                       phases: bool = True, keys_ahead: _KeysAhead | None = None,
                       compare_settled: Callable[[list[str]], Awaitable[None]] | None = None,
                       freeze: bool = False) -> None:
    """Read to the current end offsets; ``deferred=(records, sessions)``: fold in memory
    and flush after that many records or folded sessions, and at the end.
    ``compare_settled``: given the sessions an earlier flush wrote and nothing folded
    since (final once the end is read), it compares them while the last flush writes
    the others (Redis compares while this process builds rows)."""
    fold = folder or proc
    took = _took if phases else (lambda report, phase, t0: None)
    ends = {p: meta.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] - 1
            for p in parts}
    last_report = time.monotonic()
    since_flush = 0
    reader = _Reader(consumer, topic, parts, position, ends, batch)
    try:
        while True:
            t0 = time.monotonic()
            records = await reader.next()
            took(report, "read", t0)
            if records is None:
                break
            if deferred is None:
                result = await proc.process(records)
                report.events += len(records)
                report.dead_letters += len(result.dead_letters)
            else:
                t0 = time.monotonic()
                result = await fold.fold(records)
                took(report, "fold", t0)
                report.events += len(records)
                report.dead_letters += len(result.dead_letters)
                since_flush += len(records)
                if since_flush >= deferred[0] or fold.unflushed_sessions >= deferred[1]:
                    t0 = time.monotonic()
                    if isinstance(fold, NativeFold):
                        # the rows leave the extension now; sealed and written while
                        # the next batches fold (the next flush waits for it first);
                        # the keys read ahead are not waited for: that seal runs on a
                        # thread too
                        if keys_ahead is not None:
                            keys_ahead.rewind()
                        await fold.settle_flush()
                        took(report, "flush_wait", t0)
                        t0 = time.monotonic()
                        await fold.flush(background=True)
                    else:
                        if keys_ahead is not None:
                            await keys_ahead.drain()
                        await fold.flush()
                    if freeze:
                        # what survived so far (the fold's per-session bookkeeping) is
                        # not scanned by the collector again (replay() unfreezes)
                        gc.freeze()
                    took(report, "flush", t0)
                    since_flush = 0
            if progress and time.monotonic() - last_report >= every:
                report.seconds = time.monotonic() - started
                progress(report)
                last_report = time.monotonic()
    except BaseException:
        if isinstance(fold, NativeFold):
            fold.abandon_flush()
        raise
    finally:
        reader.close()
    if deferred is not None:
        t0 = time.monotonic()
        if keys_ahead is not None:
            await keys_ahead.drain()
            took(report, "keys_wait", t0)
        if isinstance(fold, NativeFold):
            t1 = time.monotonic()
            await fold.settle_flush()  # an earlier flush's rows are final once written
            took(report, "flush_wait", t1)
            t0 = time.monotonic()
        early = None
        if compare_settled is not None and isinstance(fold, NativeFold):
            settled = fold.settled_sessions()
            if settled:
                early = asyncio.ensure_future(compare_settled(settled))
        try:
            await fold.flush()
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        took(report, "flush", t0)
        if early is not None:
            t0 = time.monotonic()
            await early
            took(report, "compare", t0)


class _KeysAhead:
    """Reads the row keys of the sessions folded (each data class its rows are sealed
    with) on a thread of its own while the fold runs, so the flush finds them in the
    key store's cache; the first lookup of a session's key (key files read and
    unwrapped, or the key created) cost the flush the most. Sessions are asked once
    between two flushes. No-op without a row sealer that has keys."""

    def __init__(self, rows: Any, units: Sequence[str]) -> None:
        from sessionstream.core.privacy import unit_class

        self._row_key: Callable[..., Any] | None = getattr(rows, "row_key", None)
        cipher = getattr(rows, "cipher", None)
        self._classes = sorted({c for u in units if (c := unit_class(u)) is not None},
                               key=lambda c: c.value)
        #: whose ContentCipher.prefetch_keys warms many sessions' keys in one batch (new
        #: keys made together: one sync, not one each; an error is left to the flush)
        self._cipher: Any = cipher if cipher is not None and cipher.enabled else None
        self._seen: set[str] = set()
        self._pool: Any = None
        self._pending: list[Any] = []
        #: sessions asked and not yet taken by the thread: it takes all there are at
        #: once, so batches folded while it worked share one key batch (one sync)
        self._queued: list[str] = []
        self._queue_lock = threading.Lock()

    def add(self, sids: list[str]) -> None:
        if self._row_key is None or not self._classes:
            return
        new = [sid for sid in sids if sid not in self._seen]
        if not new:
            return
        self._seen.update(new)
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="replay-keys")
        if self._cipher is not None:
            with self._queue_lock:
                self._queued.extend(new)
            self._pending.append(self._pool.submit(self._read_queued))
        else:
            self._pending.append(self._pool.submit(self._read, new))

    def _read_queued(self) -> None:
        with self._queue_lock:
            sids, self._queued = self._queued, []
        if sids:
            self._cipher.prefetch_keys(sids, self._classes)

    def _read(self, sids: list[str]) -> None:
        assert self._row_key is not None
        for sid in sids:
            for cls in self._classes:
                try:
                    self._row_key(sid, cls)
                except Exception:  # the flush asks again and reports it
                    return

    def rewind(self) -> None:
        """Ask again for the sessions folded from now on (their keys stay warm in the
        store's cache for the next flush), without waiting for the reads asked so far."""
        self._seen.clear()
        self._pending = [f for f in self._pending if not f.done()]

    async def drain(self) -> None:
        """Wait for the keys asked so far (the flush then seals from the cache)."""
        pending, self._pending = self._pending, []
        for f in pending:
            await asyncio.wrap_future(f)
        self._seen.clear()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class _Reader:
    """Consumes on a thread of its own up to ``ends`` while the caller folds: the native
    fold releases the GIL, so the consume and the fold run on two cores. Batches come in
    order through a bounded queue (``READ_AHEAD``); ``position`` moves as batches are
    read (the caller reads it once :meth:`close` returned). A Kafka error is raised by
    :meth:`next`."""

    _END = object()

    def __init__(self, consumer: Consumer, topic: str, parts: list[int],
                 position: dict[int, int], ends: dict[int, int], batch: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(READ_AHEAD)
        self._stop = threading.Event()
        self._args = (consumer, topic, parts, position, ends, batch)
        self._thread = threading.Thread(target=self._run, name="replay-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer, topic, parts, position, ends, batch = self._args
        try:
            while not self._stop.is_set() and any(position[p] < ends[p] for p in parts):
                records = _records(consumer.consume(batch, timeout=0.5), topic, position)
                if records:
                    self._put(records)
            self._put(self._END)
        except BaseException as exc:  # handed to the folding side
            self._put(exc)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    async def next(self) -> Sequence[Record] | None:
        """The next batch, or None at the end offsets."""
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            item = await asyncio.to_thread(self._wait)
        if item is self._END:
            return None
        if isinstance(item, BaseException):
            raise item
        records: Sequence[Record] = item
        return records

    def _wait(self) -> Any:
        while True:  # in steps, so a thread left behind by a cancelled caller ends
            try:
                return self._queue.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return self._END

    def close(self) -> None:
        """Stop reading (batches not taken are dropped: the caller stops too)."""
        self._stop.set()
        self._thread.join()


def _records(msgs: list[Any], topic: str, position: dict[int, int]) -> Sequence[Record]:
    """A consumed batch as records (with the extension, the messages themselves: a
    Record is built only for one Python reads, streams.batch); ``position`` moves to
    each partition's highest offset. A message carrying an error raises it."""
    if _scan is not None:
        good, errors, high, first = _scan(msgs)
        if errors:
            raise KafkaException(msgs[errors[0]].error())
        for p, hi in high.items():
            position[p] = max(position[p], hi)
        return MessageBatch(msgs if len(good) == len(msgs) else [msgs[i] for i in good],
                            high, first)
    records = []
    for m in msgs:
        if m.error() is not None:
            raise KafkaException(m.error())
        part: int = m.partition() or 0
        off: int = m.offset() or 0
        records.append(Record(topic, part, off, m.key(), m.value(), m.timestamp()[1]))
        position[part] = max(position[part], off)
    return records


def _took(report: ReplayReport, phase: str, t0: float) -> None:
    report.phases[phase] = report.phases.get(phase, 0.0) + time.monotonic() - t0


async def _compare(redis: Redis, keys: KeySpace, live: int, new: int,
                   report: ReplayReport, views: list[str], sealed: Any = None,
                   digests: Mapping[str, Mapping[str, tuple[str, bytes]]] | None = None,
                   only: list[str] | None = None, skip: Collection[str] = ()) -> None:
    """Each session of the new generation against the live one at the same as_of_seq.

    Redis compares the two rows' stored view fields (chunked views, ADR 0013, span
    several fields) and answers equal / not comparable without sending them; a pair
    whose stored texts differ (always so when sealed: random nonces) comes back and its
    ``views`` are opened, assembled and compared here (ADR 0015). With ``digests`` (the
    native fold's, of the new rows' sealed fields as it wrote them), only the fields
    whose stored values differ come back (when both rows hold the same names), the new
    row's sealed values as their SHA-1, and only the live row's are opened: equal when
    every such text matches, a sealed one by the digest kept for that very stored value;
    any other pair is read again whole and compared exactly.

    ``only``: these sessions (of the index) and no others; else every session of the
    new generation's index but ``skip`` (compared already)."""
    wanted = {SessionRow.AS_OF_SEQ, *views}
    if only is not None:
        ids = only
    else:
        every = [s.decode() if isinstance(s, bytes) else str(s)
                 for s in await redis.zrange(keys.sessions_index(new), 0, -1)]
        report.sessions = len(every)
        ids = [sid for sid in every if sid not in skip]
    script = Script(COMPARE_ROWS_LUA)
    prefixes = [SessionRow.VIEW, SessionRow.PARTS, SessionRow.PART]
    cluster = isinstance(redis, RedisCluster)

    async def call(chunk: list[str], hashed: bool) -> list[Any]:
        pairs = [[keys.session_row(sid, new), keys.session_row(sid, live)] for sid in chunk]
        args = [*((SEALED_PREFIX, SEALED_REF) if hashed else ("", "")), *prefixes]
        if cluster:  # one call per session, each in its session's slot
            return [r for rs in await asyncio.gather(
                *(script(redis, ks, args) for ks in pairs)) for r in rs]
        return list(await script(redis, [k for ks in pairs for k in ks], args))

    def judge(chunk: list[str], got: list[Any], by_digest: bool) -> list[str]:
        """Count each verdict; the sessions to read again whole (digest path only)."""
        again: list[str] = []
        for sid, verdict in zip(chunk, got, strict=True):
            if verdict == 0:
                report.not_comparable.append(sid)
                continue
            if verdict == 1:
                report.equal += 1
                continue
            if by_digest:
                if _equal_by_digest(verdict, sid, sealed, digests.get(sid) if digests else None):
                    report.equal += 1
                    report.by_digest += 1
                else:
                    again.append(sid)
                continue
            # opened, the same texts are the same views (sealed rows that are equal)
            opened = [_opened(_pairs(v), sid, sealed) for v in verdict]
            if opened[0] == opened[1]:
                report.equal += 1
                continue
            a = {k: v for k, v in _views({}, opened=opened[0]).items() if k in wanted}
            b = {k: v for k, v in _views({}, opened=opened[1]).items() if k in wanted}
            if a.get(SessionRow.AS_OF_SEQ) != b.get(SessionRow.AS_OF_SEQ):
                report.not_comparable.append(sid)
            elif a == b:
                report.equal += 1
            else:
                report.different.append(sid)
        return again

    async def settle(chunk: list[str], got: list[Any], by_digest: bool) -> None:
        if any(v not in (0, 1) for v in got):
            again = await asyncio.to_thread(judge, chunk, got, by_digest)
        else:
            again = judge(chunk, got, by_digest)
        if again:  # a digest did not settle it: both rows whole, the exact compare
            await settle(again, await call(again, False), False)

    hashed = digests is not None
    chunks = [ids[i:i + COMPARE_CHUNK] for i in range(0, len(ids), COMPARE_CHUNK)]
    got = await call(chunks[0], hashed) if chunks else []
    for n, chunk in enumerate(chunks):
        # Redis compares the next chunk while this process opens this one's pairs
        nxt = (asyncio.ensure_future(call(chunks[n + 1], hashed)) if n + 1 < len(chunks)
               else None)
        try:
            await settle(chunk, got, hashed)
        except BaseException:
            if nxt is not None:
                nxt.cancel()
            raise
        if nxt is not None:
            got = await nxt


def _equal_by_digest(verdict: list[Any], sid: str, sealed: Any,
                     kept: Mapping[str, tuple[str, bytes]] | None) -> bool:
    """Whether the new row (sealed values as :func:`sealed_ref` gives them) and the live
    row hold the same texts in every field the script handed back (the rest are
    byte-identical): a clear field byte for byte, a sealed one by the digest the fold
    kept of what it sealed in that very value.
    False: not shown equal this way (the caller compares them exactly)."""
    fresh = _text(_pairs(verdict[0]))
    old = _text(_pairs(verdict[1]))
    if fresh.keys() != old.keys():
        return False
    opened = _opened(old, sid, sealed)
    if opened.keys() != fresh.keys():
        return False
    for name, value in fresh.items():
        if value.startswith(SEALED_PREFIX):
            d = kept.get(name) if kept is not None else None
            if d is None or d[0] != value or d[1] != field_digest(opened[name]):
                return False
        elif value != opened[name]:
            return False
    return True


def _text(row: dict[Any, Any]) -> dict[str, str]:
    return {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
            for k, v in row.items() if v is not None}


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _opened(row: dict[Any, Any], sid: str = "", sealed: Any = None) -> dict[str, str]:
    """A row's fields as text, sealed values opened (they use random nonces)."""
    clear: dict[str, str] = {}
    for k, v in row.items():
        if v is not None:
            clear[k.decode() if isinstance(k, bytes) else k] = (
                v.decode() if isinstance(v, bytes) else v)
    if any(v.startswith(SEALED_PREFIX) for v in clear.values()):
        from sessionstream.governance.rows import open_fields

        fast = _open_natively(sealed, sid, clear)
        clear = fast if fast is not None else open_fields(
            sealed, sid, clear, SessionRow.VIEW, SessionRow.STATE)
    return clear


def _open_natively(sealed: Any, sid: str, fields: dict[str, str]) -> dict[str, str] | None:
    """``fields`` opened by the extension (AES-GCM there, the GIL released) when the
    cipher is the governance row cipher and every sealed field opens; else None, and
    the Python opener decides (placeholders for what does not open)."""
    if _open_row is None:
        return None
    from sessionstream.core.privacy import DataClass, unit_class
    from sessionstream.governance.rows import RowCipher

    if type(sealed) is not RowCipher:
        return None
    units = {SessionRow.part_unit(k) if k.startswith(SessionRow.PART) else
             k.split(":", 1)[1] for k in fields
             if k.startswith((SessionRow.PART, SessionRow.VIEW, SessionRow.STATE))}
    classes = {u: None if (c := unit_class(u)) is None else c.value for u in units}
    store, tenant = sealed.cipher.store, sealed.tenant

    def key_of(cls: str) -> bytes | None:
        key = store.lookup(tenant, sid, DataClass(cls)).key
        return None if key is None else bytes(key)
    opened: dict[str, str] | None = _open_row(tenant, sid, fields, classes, key_of)
    return opened


def _views(row: dict[Any, Any], sid: str = "", sealed: Any = None,
           opened: dict[str, str] | None = None) -> dict[str, Any]:
    """The views of a row (``opened``: its fields as :func:`_opened` gave them)."""
    out: dict[str, Any] = {}
    clear = _opened(row, sid, sealed) if opened is None else opened
    clear = assemble(clear, unavailable=canonical_dumps({"unavailable": UNAVAILABLE_TEXT}),
                     sides=("view",))
    for k, v in clear.items():
        if k.startswith(SessionRow.VIEW):
            out[k] = json.loads(v)
        elif k == SessionRow.AS_OF_SEQ:
            out[k] = int(v)
    return out
