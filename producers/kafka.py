"""A thin confluent-kafka Producer wrapper that tracks every record's delivery.

No network in ``__init__`` (the librdkafka handle is taken from the process pool on first
use); the caller's config is copied; ``poll(0)`` after each produce serves delivery
callbacks; a full local queue is retried a bounded number of times; delivery errors are
mapped to :mod:`producers.errors`. Each record is tracked by ``event_id``:
pending → ok (partition, offset) | failed | possibly-persisted.

One librdkafka Producer per (bootstrap, config) is shared by every writer of a process
(:class:`ProducerPool`): a handshake per ``open()`` cost ~0.5 s, and one producer batches
all sessions' records together. Each record's delivery report goes to its own
:class:`Delivery` (the callback *is* the Delivery: no closure per record), so writers
sharing a producer never see each other's reports. librdkafka's log lines go to the
``sessionstream.producers.librdkafka`` logger, rate-limited, instead of raw stderr (the
configs, defaults and that logger live in :mod:`producers.kafka_clients`).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sessionstream.producers.errors import (
    BrokerUnavailable,
    KafkaProducerError,
    PossiblyPersisted,
    ProducerFatal,
    QueueFull,
    TopicNotFound,
    map_kafka_error,
)
from sessionstream.producers.kafka_clients import BOOTSTRAP, client_config, producer_config

#: How often a full local queue (BufferError) is retried, serving callbacks in between.
QUEUE_FULL_RETRIES = 50
QUEUE_FULL_WAIT_S = 0.1
#: connect(): once librdkafka reports every broker down (or a transport failure), how
#: long the probe keeps trying before it raises BrokerUnavailable. Short: a wrong
#: bootstrap or a stopped broker is reported in about a second, yet a broker that is
#: mid-restart (up again within this window) does not fail an open().
FAIL_FAST_S = 1.0
#: connect(): how long a topic missing from the metadata is retried (a topic created a
#: moment ago may not be in the metadata yet) before TopicNotFound.
UNKNOWN_TOPIC_GRACE_S = 3.0
#: produce() serves delivery reports (poll(0)) once per this many records.
POLL_EVERY = 16
#: flush()/close() of one sender on a shared producer serve callbacks in slices this
#: long, so one writer's barrier never waits for another writer's backlog.
FLUSH_SLICE_S = 0.005

#: Error codes in error_cb meaning "no broker reachable right now".
_DOWN_CODES = frozenset(
    {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE}
)

#: This process's id, kept current across os.fork() (produce() compares it on every
#: record, and os.getpid() is a system call).
_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


class DeliveryState(StrEnum):
    PENDING = "pending"
    OK = "ok"
    FAILED = "failed"
    POSSIBLY_PERSISTED = "possibly-persisted"


class Delivery:
    """What we know about one produced record; also its delivery callback.

    Passing the Delivery itself as ``on_delivery`` gives librdkafka one bound object per
    record (the opaque) instead of a closure built on every produce.
    """

    __slots__ = ("_sender", "error", "event_id", "offset", "partition", "state")

    def __init__(self, event_id: str, sender: KafkaSender | None = None) -> None:
        self.event_id = event_id
        self.state = DeliveryState.PENDING
        self.partition: int | None = None
        self.offset: int | None = None
        self.error: KafkaProducerError | None = None
        self._sender = sender

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        sender = self._sender
        if sender is None:
            return
        if err is None and sender._plain and sender._up():
            # The common case, inline (this runs once per record): acknowledged, no
            # listener, no resent copy to reconcile, the producer known to be up.
            sender._inflight -= 1
            self.state = DeliveryState.OK
            self.partition = msg.partition()
            self.offset = msg.offset()
            return
        sender._settle(self, err, msg)

    def __repr__(self) -> str:
        return (f"Delivery({self.event_id!r}, {self.state.value}, partition={self.partition}, "
                f"offset={self.offset})")


DeliveryListener = Callable[[Delivery], None]


class _Pooled:
    """One shared librdkafka Producer, its users and what its error_cb has seen."""

    def __init__(self, key: tuple[Any, ...], config: Mapping[str, Any]) -> None:
        self.key = key
        self.bootstrap = str(config.get(BOOTSTRAP, ""))
        self.pid = os.getpid()
        self.refs = 0
        self.fatal: KafkaProducerError | None = None
        self.down_since: float | None = None  # first "all brokers down" since last success
        self.last_down: KafkaError | None = None
        self.verified = False  # a metadata probe succeeded at least once
        cfg = client_config(config)
        cfg["error_cb"] = self._on_error
        try:
            self.producer = Producer(cfg)
        except KafkaException as exc:
            raise map_kafka_error(exc.args[0], what="creating the producer") from exc

    def _on_error(self, err: KafkaError) -> None:
        # Global errors: transient ones (broker down) are retried by librdkafka and show
        # up as delivery errors later; a fatal one ends this producer instance.
        if err.fatal():
            self.fatal = map_kafka_error(err, what="idempotent producer")
        elif err.code() in _DOWN_CODES:
            self.last_down = err
            if self.down_since is None:
                self.down_since = time.monotonic()

    def up(self) -> None:
        self.down_since = None
        self.last_down = None
        self.verified = True

    def close(self, timeout: float) -> None:
        p = self.producer
        try:
            if len(p) and timeout > 0:
                p.flush(timeout)
        finally:
            p.close()


class ProducerPool:
    """Process-wide shared producers: one per (bootstrap, config), ref-counted.

    An idle producer stays open for the next writer (a fleet agent opens session after
    session) unless it never reached a broker or hit a fatal error; all are flushed and
    closed at interpreter exit. Fork-safe: a child process never touches its parent's
    producers (librdkafka's threads do not survive fork()); it builds its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[Any, ...], _Pooled] = {}
        self._pid = os.getpid()
        # The parent's handles, unusable in a child: kept referenced so that no
        # destructor runs rd_kafka_destroy() on threads that do not exist here.
        self._orphans: list[_Pooled] = []
        self._hooked = False  # process hooks installed (on first use, not at import)

    @staticmethod
    def key(config: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(sorted((k, repr(v)) for k, v in config.items()))

    def _check_pid(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            self._orphans.extend(self._entries.values())
            self._entries = {}
            self._pid = pid

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._check_pid()

    def _install_hooks(self) -> None:
        """On first use: close this pool's producers at exit; reset it in a forked child.

        Installed here rather than at import, so importing the package has no process-wide
        side effects; a pool never used before a fork has nothing the child could touch.
        """
        if not self._hooked:
            self._hooked = True
            atexit.register(self.close_all)
            os.register_at_fork(after_in_child=self.after_fork_in_child)

    def acquire(self, config: Mapping[str, Any]) -> _Pooled:
        """A shared producer for this config (created on first use: no network yet)."""
        with self._lock:
            self._install_hooks()
            self._check_pid()
            k = self.key(config)
            entry = self._entries.get(k)
            if entry is not None and entry.fatal is not None:
                del self._entries[k]  # its users keep their reference and see .fatal
                entry = None
            if entry is None:
                entry = _Pooled(k, config)
                self._entries[k] = entry
            entry.refs += 1
            return entry

    def release(self, entry: _Pooled, *, timeout: float = 0.0) -> None:
        """One user fewer; a broken or never-connected idle producer is closed now."""
        with self._lock:
            if entry.pid != os.getpid():
                return  # the parent's: never touch it here
            entry.refs = max(entry.refs - 1, 0)
            broken = entry.fatal is not None or not entry.verified
            if entry.refs > 0 or not broken:
                return
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
        entry.close(timeout)

    def __len__(self) -> int:
        with self._lock:
            self._check_pid()
            return len(self._entries)

    def in_use(self) -> int:
        """How many senders of this process hold a pooled producer now."""
        with self._lock:
            self._check_pid()
            return sum(e.refs for e in self._entries.values())

    def bootstraps(self) -> list[str]:
        with self._lock:
            self._check_pid()
            return [e.bootstrap for e in self._entries.values()]

    def close_all(self, timeout: float = 5.0) -> None:
        """Flush (bounded) and close every producer of this process."""
        with self._lock:
            self._check_pid()
            entries = list(self._entries.values())
            self._entries = {}
        for entry in entries:
            try:
                entry.close(timeout)
            except Exception:  # at exit: close the others regardless
                logging.getLogger(__name__).exception("closing a pooled producer")


#: The process's pool (closed at exit and reset in a forked child, once it was used).
POOL = ProducerPool()


class KafkaSender:
    """Produce keyed records to one topic; remember how each one's delivery ended."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        config: Mapping[str, Any] | None = None,
        on_delivery: DeliveryListener | None = None,
        pool: ProducerPool | None = None,
    ) -> None:
        self.topic = topic
        self.bootstrap = bootstrap
        self._config: dict[str, Any] = producer_config(bootstrap, config, route_logs=False)
        self._pool = pool if pool is not None else POOL
        self._entry: _Pooled | None = None
        self._producer: Producer | None = None
        self._deliveries: dict[str, Delivery] = {}
        self._inflight = 0  # our records produced and not yet reported
        self._resent = False  # some event was produced twice (reports to reconcile)
        self._since_poll = 0  # records produced since the last poll(0)
        self._on_delivery = on_delivery
        #: Called with the Delivery of each record reported failed or possibly persisted
        #: (failures never take the inline path, so this costs nothing per success).
        self.on_error: DeliveryListener | None = None
        #: Delivery reports may take the inline path (see Delivery.__call__).
        self._plain = False
        #: A native delivery log (use_log): the callback of every record, in place of a
        #: Delivery per record; then _sent holds the event ids produced and not
        #: forgotten (in produce order, a resent one twice) and _produced counts records.
        self._log: Any = None
        self._sent: list[str] = []
        self._produced = 0
        #: While a batch is held (hold()): its records, (key, value, event id), in order.
        self._held: list[tuple[bytes, bytes, str]] | None = None

    def use_log(self, log: Any) -> bool:
        """Track deliveries with a native log (``Appender.delivery_log()``: it reads the
        event id from each record's value) rather than a Delivery per record. Only on a
        sender with no delivery listener that produced nothing yet; returns whether it
        took it. Outcomes are the same: acknowledged (partition, offset), failed or
        possibly persisted per event id, a failure mapped and listened to at once."""
        if self._log is not None or self._on_delivery is not None or self._deliveries:
            return False
        log.set_on_error(self._log_error)
        self._log = log
        return True

    def _log_error(self, event_id: str, err: KafkaError) -> Delivery:
        """A failed report from the native log: the Delivery it keeps for the event."""
        d = Delivery(event_id)
        d.error = map_kafka_error(err, what=f"delivering event {event_id}")
        d.state = (DeliveryState.POSSIBLY_PERSISTED if isinstance(d.error, PossiblyPersisted)
                   else DeliveryState.FAILED)
        if self.on_error is not None:
            self.on_error(d)
        return d

    def _outstanding(self) -> int:
        """Our records produced and not yet reported."""
        log = self._log
        return self._inflight if log is None else self._produced - log.reported

    @property
    def on_delivery(self) -> DeliveryListener | None:
        """Called with each record's Delivery once it is reported (None: nobody)."""
        return self._on_delivery

    @on_delivery.setter
    def on_delivery(self, listener: DeliveryListener | None) -> None:
        if listener is not None and self._log is not None:
            raise ValueError("a sender tracking deliveries in a native log has no "
                             "per-record listener")
        self._on_delivery = listener
        self._replan()

    def _replan(self) -> None:
        entry = self._entry
        self._plain = (self._on_delivery is None and not self._resent and entry is not None
                       and entry.verified)

    def _up(self) -> bool:
        """No "all brokers down" seen since the last success (else _settle clears it)."""
        entry = self._entry
        return entry is not None and entry.down_since is None

    @property
    def config(self) -> Mapping[str, Any]:
        return dict(self._config)

    def _handle(self) -> Producer:
        entry = self._entry
        if entry is None or entry.pid != os.getpid():
            # First use, or a fork()ed child using its parent's sender: take our own.
            entry = self._entry = self._pool.acquire(self._config)
            self._producer = entry.producer
            self._inflight = 0
            if self._log is not None:
                self._produced = self._log.reported
            self._replan()
        return entry.producer

    def connect(self, timeout: float = 10.0) -> None:
        """Bounded metadata probe: a broker answers and the topic exists.

        Raises BrokerUnavailable (naming the bootstrap servers) about FAIL_FAST_S after
        librdkafka reports every broker down, or when ``timeout`` passes; TopicNotFound
        when the topic stays absent from the metadata.
        """
        p = self._handle()
        entry = self._entry
        assert entry is not None
        t0 = time.monotonic()
        deadline = t0 + max(timeout, 0.1)
        last: KafkaError | None = None
        while True:
            if entry.fatal is not None:
                raise entry.fatal
            left = deadline - time.monotonic()
            try:
                md = p.list_topics(self.topic, timeout=max(min(0.5, left), 0.05))
            except KafkaException as exc:
                last = exc.args[0]
            else:
                t = md.topics.get(self.topic)
                if t is not None and t.error is None and t.partitions:
                    entry.up()
                    self._replan()
                    return
                entry.down_since = None  # a broker answered: only the topic is missing
                if t is not None and t.error is not None and t.error.code() in (
                        KafkaError.TOPIC_AUTHORIZATION_FAILED,
                        KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                    # The authorizer hides the topic from this principal: say so, now.
                    raise map_kafka_error(t.error, what=f"describing {self.topic}")
                left = deadline - time.monotonic()
                if time.monotonic() - t0 >= UNKNOWN_TOPIC_GRACE_S or left <= 0.06:
                    raise TopicNotFound(
                        f"topic {self.topic!r} is not in the metadata of {self.bootstrap}",
                        code=t.error.code() if t is not None and t.error else None,
                    )
            p.poll(0.01)  # serves error_cb: is every broker down?
            now = time.monotonic()
            down = entry.down_since is not None and now - entry.down_since >= FAIL_FAST_S
            if down or now >= deadline:
                cause = entry.last_down or last
                detail = f": {cause.name()}: {cause.str()}" if cause is not None else ""
                raise BrokerUnavailable(
                    f"no Kafka broker at {self.bootstrap} answered within "
                    f"{now - t0:.1f}s{detail}",
                    code=cause.code() if cause is not None else None,
                    retriable=True,
                )

    def _settle(self, d: Delivery, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of ``d`` (served by whichever thread polls the producer)."""
        self._inflight -= 1
        if err is None:
            d.state = DeliveryState.OK
            d.partition = msg.partition()
            d.offset = msg.offset()
            entry = self._entry
            if entry is not None and (entry.down_since is not None or not entry.verified):
                entry.up()
            self._replan()
        elif d.state is not DeliveryState.OK:
            self._plain = False  # the next success re-checks whether the producer is up
            d.error = map_kafka_error(err, what=f"delivering event {d.event_id}")
            d.state = (
                DeliveryState.POSSIBLY_PERSISTED
                if isinstance(d.error, PossiblyPersisted)
                else DeliveryState.FAILED
            )
            if self.on_error is not None:
                self.on_error(d)
        current = self._deliveries.get(d.event_id)
        if current is not None and current is not d and d.state is DeliveryState.OK:
            # An earlier copy of a resent record landed: the event is in the log.
            current.state, current.partition, current.offset = d.state, d.partition, d.offset
            current.error = None
            d = current
        if self._on_delivery is not None:
            self._on_delivery(d)

    # -- held batches: a batch validated whole before any record of it leaves -------------
    def hold(self) -> None:
        """Keep the records produced from now on here, unsent, until :meth:`release`
        sends them in order or :meth:`discard` drops them (an atomic batch: the writer
        holds while it validates, stamps and encodes, so a batch refused at its n-th
        event sends nothing)."""
        if self._held is not None:
            raise RuntimeError("a batch is already held")
        self._held = []

    def release(self) -> None:
        """Send the held records, in order (as :meth:`produce` would have)."""
        held, self._held = self._held, None
        for key, value, event_id in held or ():
            self.produce(key, value, event_id)

    def discard(self) -> list[str]:
        """Drop the held records unsent; returns their event ids."""
        held, self._held = self._held, None
        return [eid for _, _, eid in held or ()]

    def produce(
        self,
        key: bytes,
        value: bytes,
        event_id: str,
        headers: Iterable[tuple[str, bytes]] | None = None,
    ) -> Delivery | None:
        """Queue one record (tracked by ``event_id``); raises QueueFull or a mapped error.
        Returns the record's Delivery (None with a native log: see delivery()).
        While a batch is held (:meth:`hold`) the record waits for its release."""
        if self._held is not None and headers is None:
            self._held.append((key, value, event_id))
            return None
        entry = self._entry
        p = self._producer
        if entry is None or p is None or entry.pid != _PID[0]:
            p = self._handle()
            entry = self._entry
        if entry is not None and entry.fatal is not None:
            raise entry.fatal
        log = self._log
        if log is not None:
            # One native callback for every record (see use_log): no object per record.
            self._send(p, key, value, log, headers)
            self._produced += 1
            self._sent.append(event_id)
            self._since_poll += 1
            if self._since_poll >= POLL_EVERY:
                self._since_poll = 0
                p.poll(0)
            return None
        d = Delivery(event_id, self)
        self._send(p, key, value, d, headers)
        self._inflight += 1
        if event_id in self._deliveries:
            self._resent, self._plain = True, False  # _settle reconciles the copies
        self._deliveries[event_id] = d
        # Serve delivery reports every few records rather than after each one: a poll
        # costs about as much as the rest of produce(), flush() serves them anyway and
        # the local queue holds far more than POLL_EVERY records.
        self._since_poll += 1
        if self._since_poll >= POLL_EVERY:
            self._since_poll = 0
            p.poll(0)
        return d

    def produce_native(self, run: Callable[..., tuple[Any, int]]) -> tuple[bool, Any]:
        """Let ``run`` hand records straight to the producer, as ``produce`` would with
        a native log (the writer's batch append: ``Appender.append_many``).

        ``run(produce, poll, topic, log, sent, since_poll)`` produces each record with
        ``produce(topic, value, key, -1, log)``, appends its event id to ``sent`` and
        polls once per POLL_EVERY records; it returns (result, since_poll). Returns
        (True, result), or (False, None) without calling it when this sender keeps no
        native log (then the caller produces one record at a time). The records
        counted as produced are those ``run`` put on ``sent``, even when it raises.
        """
        log = self._log
        if log is None:
            return False, None
        if self._held is not None:
            return True, self._run_held(run, log)
        entry = self._entry
        p = self._producer
        if entry is None or p is None or entry.pid != _PID[0]:
            p = self._handle()
            entry = self._entry
        if entry is not None and entry.fatal is not None:
            raise entry.fatal
        sent = self._sent
        before = len(sent)
        try:
            result, self._since_poll = run(p.produce, p.poll, self.topic, log, sent,
                                           self._since_poll)
        finally:
            self._produced += len(sent) - before
        return True, result

    def _run_held(self, run: Callable[..., tuple[Any, int]], log: Any) -> Any:
        """``run`` of produce_native while a batch is held: its records join the held
        ones (in order, with the event ids it reports) instead of the producer."""
        held = self._held
        assert held is not None
        values: list[tuple[bytes, bytes]] = []
        sent: list[str] = []

        def keep(topic: str, value: bytes, key: bytes, *_: Any) -> None:
            values.append((key, value))

        try:
            result, _ = run(keep, lambda *_: 0, self.topic, log, sent, 0)
        finally:
            held.extend((k, v, eid) for (k, v), eid in zip(values, sent, strict=False))
        return result

    def _send(self, p: Producer, key: bytes, value: bytes,
              d: Callable[[KafkaError | None, Message], None],
              headers: Iterable[tuple[str, bytes]] | None) -> None:
        """Hand one record to the producer, waiting for room when its queue is full."""
        try:
            if headers is None:
                p.produce(self.topic, value, key, on_delivery=d)
            else:
                p.produce(self.topic, value, key, on_delivery=d, headers=list(headers))
        except BufferError:
            self._produce_when_room(p, key, value, d, headers)
        except KafkaException as exc:
            raise map_kafka_error(exc.args[0], what="produce") from exc

    def _produce_when_room(self, p: Producer, key: bytes, value: bytes,
                           d: Callable[[KafkaError | None, Message], None],
                           headers: Iterable[tuple[str, bytes]] | None) -> None:
        hdrs: list[Any] | None = list(headers) if headers is not None else None
        for _ in range(QUEUE_FULL_RETRIES):
            p.poll(QUEUE_FULL_WAIT_S)
            try:
                if hdrs is None:
                    p.produce(self.topic, value, key, on_delivery=d)
                else:
                    p.produce(self.topic, value, key, on_delivery=d, headers=hdrs)
                return
            except BufferError:
                continue
            except KafkaException as exc:
                raise map_kafka_error(exc.args[0], what="produce") from exc
        raise QueueFull(
            f"local queue of the producer for {self.bootstrap} full after "
            f"{QUEUE_FULL_RETRIES} retries",
            code=KafkaError._QUEUE_FULL,
            retriable=True,
        )

    def poll(self, timeout: float = 0.0) -> int:
        return self._handle().poll(timeout) if self._entry is not None else 0

    def flush(self, timeout: float) -> int:
        """Wait for *our* outstanding deliveries; returns how many are still unreported.

        The producer may be shared: it is flushed in short slices (flushing bypasses
        linger.ms and serves callbacks) until our own records are all reported.
        """
        entry = self._entry
        if entry is None or entry.pid != os.getpid():
            return self._outstanding()
        p = entry.producer
        deadline = time.monotonic() + timeout
        while self._outstanding() > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            p.flush(min(left, FLUSH_SLICE_S))
        log = self._log
        if (log is not None and log.take_ok_seen()
                and (entry.down_since is not None or not entry.verified)):
            entry.up()  # what _settle does on a success
            self._replan()
        if entry.fatal is not None:
            raise entry.fatal
        return self._outstanding()

    def delivery(self, event_id: str) -> Delivery | None:
        log = self._log
        if log is None:
            return self._deliveries.get(event_id)
        got = log.get(event_id)
        if isinstance(got, Delivery):
            return got
        if got is None:
            if event_id not in self._sent:
                return None
            return Delivery(event_id)  # pending
        d = Delivery(event_id)
        d.state, (d.partition, d.offset) = DeliveryState.OK, got
        return d

    def harvest(self, event_ids: list[str], offsets: dict[str, int],
                records: dict[str, bytes]
                ) -> tuple[list[str], list[str], int | None, int | None, int | None]:
        """Take in the acknowledgements of ``event_ids``: each acknowledged one gets its
        offset in ``offsets`` and leaves ``records``. Returns (taken, waiting: neither
        acknowledged nor in ``offsets``, partition, lowest and highest offset taken)."""
        log = self._log
        if log is not None:
            result: tuple[list[str], list[str], int | None, int | None, int | None] = (
                log.harvest(event_ids, offsets, records))
            return result
        taken: list[str] = []
        waiting: list[str] = []
        partition = lo = hi = None
        for eid in event_ids:
            d = self._deliveries.get(eid)
            if d is None or d.state is not DeliveryState.OK or d.offset is None:
                if eid not in offsets:
                    waiting.append(eid)
                continue
            off = d.offset
            offsets[eid] = off
            records.pop(eid, None)
            partition = d.partition
            lo = off if lo is None or off < lo else lo
            hi = off if hi is None or off > hi else hi
            taken.append(eid)
        return taken, waiting, partition, lo, hi

    def pending(self) -> list[str]:
        if self._log is not None:
            return [e for e, s in self.unconfirmed().items() if s == DeliveryState.PENDING]
        return [e for e, d in self._deliveries.items() if d.state is DeliveryState.PENDING]

    def unconfirmed(self) -> dict[str, str]:
        """event_id -> state of every record that is not (yet) acknowledged."""
        if self._log is not None:
            states: dict[str, str] = self._log.unconfirmed(self._sent)
            return states
        return {
            e: d.state.value for e, d in self._deliveries.items()
            if d.state is not DeliveryState.OK
        }

    def forget(self, event_ids: Iterable[str]) -> None:
        """Stop tracking records (after their outcome was handled)."""
        if self._log is not None:
            self._sent = self._log.forget(self._sent, list(event_ids))
            return
        for e in event_ids:
            self._deliveries.pop(e, None)
        if self._resent and not self._deliveries:
            self._resent = False  # no copies left to reconcile
            self._replan()

    def deliveries(self) -> list[Delivery]:
        if self._log is not None:
            return [d for e in dict.fromkeys(self._sent)
                    if (d := self.delivery(e)) is not None]
        return list(self._deliveries.values())

    @property
    def fatal(self) -> KafkaProducerError | None:
        return self._entry.fatal if self._entry is not None else None

    @property
    def closed(self) -> bool:
        return self._entry is None

    def close(self, timeout: float = 5.0) -> int:
        """Wait (bounded) for our records, give the shared producer back.

        Returns how many of our records are still unreported: they stay queued in the
        shared producer and may still be written (failed ≠ not written).
        """
        entry = self._entry
        if entry is None:
            return 0
        try:
            remaining = self.flush(timeout) if timeout > 0 else self._outstanding()
        except KafkaProducerError:
            remaining = self._outstanding()
        finally:
            self._entry = None
            self._producer = None
            self._pool.release(entry)
        return remaining


__all__ = [
    "FAIL_FAST_S",
    "POOL",
    "Delivery",
    "DeliveryState",
    "KafkaSender",
    "ProducerFatal",
    "ProducerPool",
]
