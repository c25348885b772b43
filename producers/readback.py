"""Read one session's records back from its partition and apply the admission rule.

:func:`scan_session` is the one reader of a session's records from Kafka: resume
(``SessionWriter.open``), ``confirm()``, ``diagnose`` and the stream processor's
state_version rebuilds (``streams.kafka_io.KafkaLogReader``) all use it. Records of
other sessions are skipped by key before decoding. It reads one offset range, or several
(the session index's runs, seeking from one to the next); without either the whole
partition is scanned (the partition follows from the key hash).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from sessionstream.core.admission import AdmissionState, Verdict, admit
from sessionstream.core.codec import event_from_envelope, schema_fingerprints
from sessionstream.core.errors import InvalidData
from sessionstream.core.events import FORMAT_VERSION, Event
from sessionstream.core.pipeline import Decoded, Record, Undecodable, decode_record
from sessionstream.native import ext as _native  # reads the Avro envelope; absent: fastavro
from sessionstream.producers.errors import (
    BrokerUnavailable,
    ReadBackError,
    TopicNotFound,
    map_kafka_error,
)
from sessionstream.producers.kafka import _DOWN_CODES, FAIL_FAST_S
from sessionstream.producers.kafka_clients import consumer_config, private_group
from sessionstream.producers.partition import partition_for

#: Watermark errors of a partition whose leader is not (yet) known: retried.
_LEADER_CODES = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}
)

#: A function decoding a read's record values (each an event, or what decode_record
#: says of it); see :class:`NativeDecoder`.
DecodeMany = Callable[[Sequence[Record]], list[Decoded]]


class NativeDecoder:
    """Decodes a read's records with the native extension's Avro reader, the Python
    codec (``decode``, with its opener) deciding each record the extension does not take.

    Same events as ``decode_record(decode, ...)`` record by record (the data text parsed
    by the codec's lossless rules), at a fraction of fastavro's cost per record; a
    sealed record, a newer format, a malformed or foreign one go through ``decode``.
    Only for the shipped single-object codec (``available``).
    """

    def __init__(self, decode: Callable[[bytes], Event],
                 opener: Callable[[Event], Event] | None = None) -> None:
        assert _native is not None, "NativeDecoder needs the native extension"
        self._native = _native.Decoder(schema_fingerprints(), FORMAT_VERSION)
        self._decode = decode
        self._open = opener

    @staticmethod
    def available() -> bool:
        return _native is not None

    def __call__(self, records: Sequence[Record]) -> list[Decoded]:
        tuples = self._native.decode([r.value for r in records])
        out: list[Decoded] = []
        for record, t in zip(records, tuples, strict=True):
            event: Decoded | None = None
            if t is not None and (record.key is None or record.key == t[0].encode()):
                try:
                    event = event_from_envelope(t)
                except (InvalidData, ValueError, RecursionError):
                    event = None  # not lossless: the codec names the error
                if event is not None and self._open is not None:
                    event = self._open(event)  # unsealed: learns a session/start's lineage
            out.append(event if event is not None
                       else decode_record(self._decode, record.key, record.value))
        return out


#: How many records one consume() call asks for.
BATCH = 10_000
#: A read that seeks from range to range: small fetches, a short prefetch queue. With
#: the sequential defaults librdkafka prefetched tens of MiB past each range (records of
#: other sessions that the next seek throws away): measured 2.9 s instead of 0.16 s for
#: a 10k-event session's three runs in a 1M-record partition. Smaller still is faster:
#: a fetch returns whole record batches (up to the producer's 1 MiB each) from the range's
#: first offset on, so every KiB past the range's end is read, decompressed and thrown
#: away; the same three runs read by a bare consumer took 0.28 s with 1 MiB fetches,
#: 0.16 s with 512 KiB, 0.08-0.10 s with 64-256 KiB (bench/bench_resume.py). A record
#: batch larger than the limit is still returned whole (the broker's rule), so a large
#: record never stalls the read.
SEEKING: dict[str, Any] = {
    "fetch.max.bytes": 131_072,
    "max.partition.fetch.bytes": 131_072,
    # librdkafka refuses a fetch.max.bytes below message.max.bytes (a producer-side
    # limit; a consumer sends no large requests)
    "message.max.bytes": 131_072,
    "queued.max.messages.kbytes": 512,
    "queued.min.messages": 10_000,
    "fetch.wait.max.ms": 50,
    # With the queue full at a seek, the next fetch waited out this backoff (1 s by
    # default): a resume's last run took 1.0 s to arrive.
    "fetch.queue.backoff.ms": 5,
}


@dataclass(frozen=True)
class Rejection:
    """An event the admission rule did not admit (duplicates included, with their reason)."""

    offset: int
    event_id: str
    seq: int
    epoch: int
    writer_id: str
    verdict: Verdict
    reason: str
    type: str | None = None  # the refused event's type (the dashboard's timeline shows it)


@dataclass
class Scan:
    """The records of one session found in ``[start, end)`` of its partition."""

    topic: str
    partition: int
    start: int
    end: int  # exclusive: the first offset not read
    records: list[Record] = field(default_factory=list)
    scanned: int = 0  # records of every session read on the way


@dataclass
class ReadBack:
    session_id: str
    partition: int
    start: int
    end: int  # exclusive: the first offset not read
    admitted: list[Event] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)  # admitted event_id -> offset
    rejections: list[Rejection] = field(default_factory=list)
    corrupt: list[tuple[int, str]] = field(default_factory=list)  # (offset, why) undecodable
    records_scanned: int = 0
    #: How the records were found: "scan" (the partition, or a range of it) or "index"
    #: (the session index's runs, verified; see producers.resume.read_back).
    via: str = "scan"
    #: The admission state after ``end`` (continue a later read from ``end`` with it).
    state: AdmissionState | None = None
    #: Sealed parts the reader could not open (shredded or missing keys), with their seq
    #: and class: what is no longer reconstructable (``sessionstream.core.privacy``).
    unopened: list[Any] = field(default_factory=list)

    @property
    def next_seq(self) -> int:
        return len(self.admitted)


class _Down:
    """error_cb of a read-back consumer: since when librdkafka reports every broker down."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.last: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if err.code() in _DOWN_CODES:
            self.last = err
            if self.since is None:
                self.since = time.monotonic()

    def answered(self) -> None:
        """A broker answered: an earlier all-down report was a blip, not an outage."""
        self.since = None

    def check(self, bootstrap: str, t0: float) -> None:
        """BrokerUnavailable once every broker was down for FAIL_FAST_S (as create's probe)."""
        if self.since is not None and time.monotonic() - self.since >= FAIL_FAST_S:
            cause = f": {self.last.name()}: {self.last.str()}" if self.last is not None else ""
            raise BrokerUnavailable(
                f"no Kafka broker at {bootstrap} answered within "
                f"{time.monotonic() - t0:.1f}s{cause}", retriable=True,
            )


def _consumer(bootstrap: str, config: dict[str, Any] | None = None,
              down: _Down | None = None) -> Consumer:
    extra: dict[str, Any] = {
        "enable.partition.eof": True,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
    }
    if down is not None:
        extra["error_cb"] = down
    extra.update(config or {})
    # assign() only, never subscribe: no group membership, no commits.
    return Consumer(consumer_config(bootstrap, private_group("readback"), extra))


class _Route:
    """The error_cb of a pooled consumer: reports go to the read using it now."""

    __slots__ = ("target",)

    def __init__(self) -> None:
        self.target: _Down | None = None

    def __call__(self, err: KafkaError) -> None:
        target = self.target
        if target is not None:
            target(err)


class ConsumerPool:
    """Read-back consumers kept per process between reads (assign() only: no group, no
    commits, so one serves any read). A writer that takes a session over reads a few
    records (a catch-up, a proof): creating and connecting a consumer for each read cost
    more than the read. A consumer goes back unassigned; one whose read failed is closed
    instead. Reset in a fork()ed child (a consumer's threads do not survive a fork)."""

    #: Idle consumers kept per configuration.
    KEEP = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[Any, ...], list[tuple[Consumer, _Route]]] = {}
        self._pid = os.getpid()
        #: A fork()ed child's inherited consumers: kept, never used nor closed (their
        #: librdkafka threads did not survive the fork; destroying them would crash).
        self._inherited: list[Any] = []
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._inherited.append(self._idle)
        self._idle, self._pid = {}, os.getpid()
        self._lock = threading.Lock()

    def take(self, bootstrap: str, config: dict[str, Any],
             down: _Down) -> tuple[tuple[Any, ...], Consumer, _Route]:
        key = (bootstrap, tuple(sorted((k, str(v)) for k, v in config.items())))
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                consumer, route = idle.pop()
                route.target = down
                return key, consumer, route
        route = _Route()
        route.target = down
        return key, _consumer(bootstrap, {**config, "error_cb": route}), route

    def give(self, key: tuple[Any, ...], consumer: Consumer, route: _Route,
             ok: bool) -> None:
        route.target = None
        if ok:
            try:
                consumer.unassign()
            except KafkaException:
                ok = False
        if ok:
            with self._lock:
                idle = self._idle.setdefault(key, [])
                if self._pid == os.getpid() and len(idle) < self.KEEP:
                    idle.append((consumer, route))
                    return
        consumer.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for consumers in idle.values():
            for consumer, _ in consumers:
                consumer.close()


#: The process's read-back consumers.
CONSUMERS = ConsumerPool()
atexit.register(CONSUMERS.close)


def partition_count(consumer: Consumer, topic: str, timeout: float = 10.0,
                    down: _Down | None = None, bootstrap: str = "") -> int:
    """The topic's partition count; with ``down``, fails fast when every broker is down."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            # short slices so that error_cb (served by poll) can say "all brokers down"
            meta = consumer.list_topics(topic, timeout=max(min(0.5, left), 0.05)).topics.get(topic)
            break
        except KafkaException as exc:
            if down is None or time.monotonic() >= deadline:
                raise BrokerUnavailable(f"metadata for {topic} from {bootstrap}: {exc}") from exc
        consumer.poll(0.01)
        down.check(bootstrap, t0)
    if meta is not None and meta.error is not None and meta.error.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
        # The authorizer hides a topic this principal may not describe: say which.
        raise map_kafka_error(meta.error, what=f"reading {topic}")
    if meta is None or meta.error is not None or not meta.partitions:
        raise TopicNotFound(f"topic {topic!r} not found")
    return len(meta.partitions)


def scan_session(
    bootstrap: str,
    topic: str,
    session_id: str,
    *,
    partition: int | None = None,
    start: int | None = None,
    end: int | None = None,
    timeout: float = 30.0,
    consumer_config: dict[str, Any] | None = None,
    ranges: Sequence[tuple[int, int | None]] | None = None,
) -> Scan:
    """The records keyed ``session_id`` in ``[start, end)`` of its partition, in order.

    ``ranges``: read only these ``[start, end)`` offset ranges (end None: the high
    watermark), sorted, seeking from one to the next (``start``/``end`` are ignored);
    resume reads the runs of the session index this way.

    The one reader of a session's records from Kafka (resume, confirm, diagnose and the
    stream processor's state_version rebuilds). ``partition`` None: computed from the
    key (murmur2). ``start`` None: the beginning. ``end`` None: the partition's high
    watermark now. Timeout policy: metadata and watermark queries wait at most
    ``timeout``; the read fails with :class:`ReadBackError` once it has made no
    progress for ``timeout`` seconds (a long read that keeps moving is not cut off).
    With every broker down it raises BrokerUnavailable in about FAIL_FAST_S (as the
    writers' probe), not after ``timeout``.
    """
    key = session_id.encode()
    down = _Down()
    t0 = time.monotonic()
    slot, consumer, route = CONSUMERS.take(
        bootstrap, {**(SEEKING if ranges is not None else {}), **(consumer_config or {})},
        down)
    ok = False
    try:
        if partition is None:
            partition = partition_for(
                key, partition_count(consumer, topic, timeout, down, bootstrap))
            down.answered()
        deadline = time.monotonic() + timeout
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition),
                    timeout=max(min(0.5, deadline - time.monotonic()), 0.05),
                )
                break
            except KafkaException as exc:
                # A topic created a moment ago may have no partition leader yet
                # (NOT_LEADER_FOR_PARTITION, retriable): retry within the timeout.
                err = exc.args[0]
                # _TIMED_OUT: one short slice expired (a busy broker); the deadline and
                # the all-brokers-down check decide when to give up.
                # _ALL_BROKERS_DOWN and friends: connections dropped for a moment on a
                # loaded machine; down.check raises once they stay down FAIL_FAST_S.
                transient = (err.retriable() or err.code() in _LEADER_CODES
                             or err.code() == KafkaError._TIMED_OUT
                             or err.code() in _DOWN_CODES)
                if not transient or time.monotonic() > deadline:
                    raise BrokerUnavailable(
                        f"watermarks of {topic}[{partition}] from {bootstrap}: {exc}",
                        code=exc.args[0].code(), retriable=exc.args[0].retriable(),
                    ) from exc
                consumer.poll(0.05)
                down.check(bootstrap, t0)
        wanted = [(start, end)] if ranges is None else list(ranges)
        spans = _clip(wanted, low, high)
        if not spans:
            first = low if start is None else max(start, low)
            return Scan(topic, partition, first, max(first, high if end is None
                                                      else min(end, high)))
        scan = Scan(topic, partition, spans[0][0], spans[-1][1])
        for first, stop in spans:
            _read_span(consumer, scan, key, session_id, first, stop, timeout,
                       down, bootstrap, t0)
        ok = True
        return scan
    finally:
        CONSUMERS.give(slot, consumer, route, ok)


def _clip(ranges: Sequence[tuple[int | None, int | None]], low: int,
          high: int) -> list[tuple[int, int]]:
    """``[start, end)`` ranges within the partition's ``[low, high)``, sorted, merged
    where they touch or overlap, empty ones dropped."""
    spans: list[tuple[int, int]] = []
    for a, b in sorted(((low if a is None else max(a, low)), (high if b is None else min(b, high)))
                       for a, b in ranges):
        if a >= b:
            continue
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b))
        else:
            spans.append((a, b))
    return spans


def _read_span(consumer: Consumer, scan: Scan, key: bytes, session_id: str, first: int,
               stop: int, timeout: float, down: _Down, bootstrap: str, t0: float) -> None:
    """Append the records keyed ``key`` in ``[first, stop)`` to ``scan`` (assign, consume)."""
    topic, partition = scan.topic, scan.partition
    begin = first if first > 0 else OFFSET_BEGINNING
    consumer.assign([TopicPartition(topic, partition, begin)])
    position = first
    records = scan.records
    # consume(n, t) waits until n records or t elapse: keep t short so the tail of a
    # small read does not wait; stall detection runs on the wall clock instead.
    last_progress = time.monotonic()
    while position < stop:
        msgs = consumer.consume(min(BATCH, stop - position), timeout=0.05)
        if not msgs:
            down.check(bootstrap, t0)  # the broker went away mid-read: say so now
            if time.monotonic() - last_progress > timeout:
                raise ReadBackError(
                    f"reading session {session_id!r} from {topic}[{partition}] stalled at "
                    f"offset {position} (want {stop}); is the broker up?"
                )
            continue
        last_progress = time.monotonic()
        down.since = None  # a broker answered
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise ReadBackError(
                    f"reading {topic}[{partition}] at {position}: {err.str()}"
                )
            off = msg.offset()
            assert off is not None  # a fetched record always has an offset
            if off < position:
                continue  # fetched for an earlier assignment of a pooled consumer
            if off >= stop:
                position = stop
                break
            position = off + 1
            scan.scanned += 1
            if msg.key() != key:
                continue
            records.append(Record(topic, partition, off, key, msg.value(),
                                  msg.timestamp()[1]))


def read_session(
    bootstrap: str,
    topic: str,
    session_id: str,
    *,
    decode: Callable[[bytes], Event],
    partition: int | None = None,
    start: int | None = None,
    end: int | None = None,
    timeout: float = 30.0,
    consumer_config: dict[str, Any] | None = None,
    state: AdmissionState | None = None,
    ranges: Sequence[tuple[int, int | None]] | None = None,
    decode_many: DecodeMany | None = None,
) -> ReadBack:
    """Read ``session_id``'s records in ``[start, end)`` (:func:`scan_session`) and apply
    the reader pipeline's first two stages: decode, then the admission rule — from
    ``state``, the state before ``start`` (default: an empty session). ``ReadBack.state``
    is the state after ``end``, to continue a later read from there. ``decode_many``
    (a :class:`NativeDecoder` over ``decode``): decodes the records in one call."""
    scan = scan_session(bootstrap, topic, session_id, partition=partition, start=start,
                        end=end, timeout=timeout, consumer_config=consumer_config,
                        ranges=ranges)
    rb = ReadBack(session_id, scan.partition, scan.start, scan.end,
                  records_scanned=scan.scanned)
    if state is None:
        state = AdmissionState(session_id)
    records = [r for r in scan.records if r.value is not None]
    decoded = (decode_many(records) if decode_many is not None
               else [decode_record(decode, r.key, r.value) for r in records])
    for record, event in zip(records, decoded, strict=True):
        if not isinstance(event, Event):
            # Recorded, not fatal: the stream processor dead-letters or quarantines it too.
            detail = event.detail if isinstance(event, Undecodable) else str(event)
            rb.corrupt.append((record.offset, detail))
            continue
        decision = admit(state, event)
        if decision.admitted:
            state = decision.state
            rb.admitted.append(event)
            rb.offsets[event.event_id] = record.offset
        else:
            rb.rejections.append(
                Rejection(
                    record.offset, event.event_id, event.seq, event.writer.epoch,
                    event.writer.id, decision.verdict, decision.reason, event.type,
                )
            )
    rb.state = state
    return rb
