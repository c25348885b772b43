"""SessionWriter: the fenced, validated writer of one session's log in Kafka.

Every append goes through the core :class:`~sessionstream.core.session.Session` first (schema,
lossless JSON, write-time invariants): what it refuses never reaches Kafka. The event is
stamped with this writer's id and lease epoch, Avro-encoded, size-checked against the
topic's max message size and produced keyed by session id. ``flush()`` is the durability
barrier; ``confirm()`` reads the log back and says which of our events readers admit.

Lifecycle::

    w = SessionWriter.create(WriterConfig.from_settings(s))   # new session, lease epoch 1
    w.append("turn/start", {}) ... w.flush()                 # durable
    w.close()                                                # hand-off next seq, release
    w2 = SessionWriter.open(cfg, sid)                        # any node: epoch+1, recover, end-seed
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from producers.attachments import (
    DEFAULT_SPILL_THRESHOLD,
    AttachmentStore,
    LocalAttachmentStore,
    spill_tool_result,
)
from producers.errors import (
    Fenced,
    LeaseExpired,
    MessageTooLarge,
    ProducerError,
    RedisUnavailable,
    SessionExists,
    SessionNotFound,
    UnconfirmedEvents,
    WriterClosed,
    map_kafka_error,
)
from producers.index import SessionIndex
from producers.kafka import Delivery, DeliveryState, KafkaSender, client_config
from producers.lease import DEFAULT_TTL_MS, Lease, LeaseStore
from producers.readback import ReadBack, Rejection, read_session
from sessionstream import redisconn
from sessionstream.core.catalog import Catalog
from sessionstream.core.events import (
    Clock,
    Draft,
    Event,
    IdSource,
    SurfaceOp,
    Writer,
    system_clock,
    uuid4_ids,
)
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps
from sessionstream.core.rows import DEFAULT_PREFIX as DEFAULT_KEY_PREFIX
from sessionstream.core.rows import KeySpace
from sessionstream.core.sealed import DataClass
from sessionstream.core.session import Session
from sessionstream.governance import ContentCipher
from sessionstream.governance.opener import SealedAttachmentStore, SealedContentOpener

log = logging.getLogger(__name__)

#: Bytes an envelope adds around ``data`` (ids, type, writer, Avro framing), generously.
ENVELOPE_OVERHEAD = 2048
#: Bytes a Kafka record adds around key + value (record header, batch share).
RECORD_OVERHEAD = 512
#: Client-side cap on one record; the topic's max.message.bytes is the real limit.
CLIENT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

#: Redis calls of a writer: fail within seconds, not minutes, when Redis is away.
REDIS_CONNECT_TIMEOUT_S = 2.0
REDIS_TIMEOUT_S = 5.0
#: While the lease cannot be renewed (Redis away), retry at most this often per append
#: so that a dead Redis does not add a connection attempt to every append.
RENEW_RETRY_S = 0.5

_topic_limits: dict[tuple[str, str], int] = {}


@dataclass(frozen=True)
class WriterConfig:
    """Where and how a writer writes (built from Settings once, passed down)."""

    bootstrap: str
    topic: str
    redis_url: str
    tenant: str = "default"
    redis_cluster: bool = False  # redis_url names one node of a Redis Cluster
    key_prefix: str = DEFAULT_KEY_PREFIX
    lease_ttl_ms: int = DEFAULT_TTL_MS
    attachment_dir: Path | None = None
    spill_threshold: int = DEFAULT_SPILL_THRESHOLD
    max_message_bytes: int | None = None  # None: read the topic's max.message.bytes
    flush_timeout_s: float = 30.0  # the flush that ends create/open/fork
    connect_timeout_s: float = 10.0  # the Kafka probe of create/open/fork (fails fast
    # in about a second when librdkafka reports every broker down)
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    #: Seals event content and attachments with the session's data keys (None: clear).
    cipher: ContentCipher | None = None

    @property
    def keys(self) -> KeySpace:
        """The tenant's Redis key space (``sessionstream.core.rows``)."""
        return KeySpace(self.tenant, self.key_prefix)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> WriterConfig:
        """From ``sessionstream.core.settings.Settings`` (duck-typed: no import cycle)."""
        base: dict[str, Any] = {
            "bootstrap": settings.kafka_bootstrap,
            "topic": settings.events_topic,
            "redis_url": settings.redis_url,
            "redis_cluster": getattr(settings, "redis_cluster", False),
            "tenant": settings.tenant,
            "key_prefix": getattr(settings, "key_prefix", DEFAULT_KEY_PREFIX),
            "attachment_dir": getattr(settings, "attachment_dir", None),
        }
        base.update(overrides)
        return cls(**base)


def default_writer_id() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def topic_max_message_bytes(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
    """The topic's ``max.message.bytes`` (cached per process)."""
    cached = _topic_limits.get((bootstrap, topic))
    if cached is not None:
        return cached
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(client_config({"bootstrap.servers": bootstrap, "log_level": 3}))
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + timeout
    while True:
        try:
            entries = admin.describe_configs([res], request_timeout=timeout)[res].result()
            limit = int(entries["max.message.bytes"].value)
            break
        except KafkaException as exc:
            # A topic created a moment ago may not be in every broker's metadata yet.
            if time.monotonic() > deadline:
                raise map_kafka_error(
                    exc.args[0], what=f"reading max.message.bytes of {topic}"
                ) from exc
            time.sleep(0.2)
    _topic_limits[(bootstrap, topic)] = limit
    return limit


@dataclass(frozen=True)
class Confirmation:
    """What readers make of this writer's events (read back up to its last offset)."""

    admitted: list[str]
    rejected: list[Rejection]
    missing: list[str]  # produced but not found in the log (not persisted)

    @property
    def ok(self) -> bool:
        return not self.rejected and not self.missing


class _Edges:
    """The writer's clients: Kafka sender, Redis leases + index, attachments, codec.

    No network here: the Kafka producer comes from the process pool on first use and
    the Redis client connects on its first command. :meth:`connect` probes Kafka;
    :meth:`close` gives everything back (also when create/open/fork fail half-way).
    """

    def __init__(self, cfg: WriterConfig) -> None:
        from sessionstream.core import codec  # the Avro codec; imported at the edge

        self.cfg = cfg
        self.encode = codec.encode
        self.decode: Callable[[Any], Event] = codec.decode
        self.opener: SealedContentOpener | None = None
        if cfg.cipher is not None:
            self.opener = SealedContentOpener(cfg.cipher)
            self.decode = self.opener.decoder(codec.decode)
        self.redis = redisconn.sync_redis(
            cfg.redis_url,
            cluster=cfg.redis_cluster,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            socket_timeout=REDIS_TIMEOUT_S,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        )
        self.leases = LeaseStore(self.redis, cfg.key_prefix, cfg.redis_url)
        self.index = SessionIndex(self.redis, cfg.key_prefix, cfg.redis_url)
        self.store: AttachmentStore | None = (
            LocalAttachmentStore(cfg.attachment_dir) if cfg.attachment_dir is not None else None
        )
        self.sender = KafkaSender(
            cfg.bootstrap,
            cfg.topic,
            config={"message.max.bytes": CLIENT_MAX_MESSAGE_BYTES, **cfg.producer_config},
        )

    def connect(self) -> None:
        """Probe Kafka (bounded): BrokerUnavailable / TopicNotFound before any lease."""
        self.sender.connect(self.cfg.connect_timeout_s)

    def close(self, timeout: float = 0.0) -> None:
        """Give the producer back to the pool and close the Redis connections."""
        try:
            self.sender.close(timeout)
        finally:
            self.redis.close()

    def abort(self, lease: Lease | None, next_seq: int = 0) -> None:
        """Undo a half-done create/open/fork: release the lease, close the clients."""
        try:
            if lease is not None:
                self.leases.release(lease, next_seq)
        except RedisUnavailable:
            log.warning("session %s: lease not released (Redis unreachable); it expires "
                        "in %d ms", lease.session_id if lease else "?", self.cfg.lease_ttl_ms)
        finally:
            self.close(0)

    def limit(self) -> int:
        topic_limit = self.cfg.max_message_bytes or topic_max_message_bytes(
            self.cfg.bootstrap, self.cfg.topic
        )
        return min(topic_limit, CLIENT_MAX_MESSAGE_BYTES) - RECORD_OVERHEAD


class SessionWriter:
    """Append-only writer of one session, holding its lease (fencing epoch)."""

    def __init__(
        self,
        session: Session,
        lease: Lease,
        edges: _Edges,
        *,
        seeded: Sequence[Event] = (),
        readback: ReadBack | None = None,
        origins: Mapping[int, tuple[str, str]] | None = None,
    ) -> None:
        """Use :meth:`create`, :meth:`open` or :meth:`fork`; this only wires parts."""
        self.session = session
        self.lease = lease
        self._e = edges
        #: seq → (key session, origin event id) of the seed content a fork inherited.
        self._origins: dict[int, tuple[str, str]] = dict(origins or {})
        if edges.opener is not None and readback is not None:
            sid = session.session_id
            self._origins.update({seq: o for (s, seq), o in edges.opener.origins.items()
                                  if s == sid})
        self._store: AttachmentStore | None = edges.store
        if edges.cfg.cipher is not None and edges.cfg.attachment_dir is not None:
            self._store = SealedAttachmentStore(edges.cfg.attachment_dir, edges.cfg.cipher,
                                                session.session_id)
        self._limit = edges.limit()
        self._sender = edges.sender
        self._sender.on_delivery = self._delivered
        self._key = session.session_id.encode()
        self._bytes: dict[str, bytes] = {}  # event_id -> record, until acknowledged
        self._mine: list[Event] = []  # every event this writer produced, in seq order
        self._offsets: dict[str, int] = {}  # acknowledged event_id -> offset
        self._partition: int | None = readback.partition if readback else None
        self._idx_lo: int | None = None
        self._idx_hi: int | None = None
        self._closed: str | None = None
        self._fenced = False
        self._last_renew = time.monotonic()
        self._renew_retry_at = 0.0
        self._first_offset_hint = readback.start if readback else None
        for event in seeded:
            self._produce(event)
        if seeded:
            # A new lifecycle's first events (session/start, or the repairs and the
            # end-seed of a resume) are made durable before the writer is handed out:
            # from here on any zombie of an older epoch is rejected as stale.
            self.flush(edges.cfg.flush_timeout_s)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        cfg: WriterConfig,
        session_id: str | None = None,
        *,
        lineage: Mapping[str, Any] | None = None,
        writer_id: str | None = None,
        catalog: Catalog | None = None,
        clock: Clock = system_clock,
        ids: IdSource = uuid4_ids,
        start_extra: Mapping[str, Any] | None = None,
    ) -> SessionWriter:
        """Start a new session (``session/start``); SessionExists if the id is taken.

        ``start_extra``: further ``session/start`` fields (``log publish`` keeps a
        file's, e.g. an imported session's provenance).
        """
        sid = session_id or str(uuid.uuid4())
        edges = _Edges(cfg)
        lease: Lease | None = None
        try:
            edges.connect()
            lease = edges.leases.acquire(
                cfg.tenant, sid, writer_id or default_writer_id(), cfg.lease_ttl_ms
            )
            if lease.epoch > 1 or edges.index.get(cfg.tenant, sid) is not None:
                raise SessionExists(sid)
            session = Session.create(
                sid,
                tenant=cfg.tenant,
                lineage=lineage,
                catalog=catalog,
                clock=clock,
                ids=ids,
                writer=Writer(lease.writer_id, lease.epoch),
                start_extra=start_extra,
            )
            return cls(session, lease, edges, seeded=session.events)
        except BaseException:
            edges.abort(lease, (lease.next_seq_hint or 0) if lease is not None else 0)
            raise

    @classmethod
    def open(
        cls,
        cfg: WriterConfig,
        session_id: str,
        *,
        writer_id: str | None = None,
        steal: bool = False,
        use_index: bool = True,
        catalog: Catalog | None = None,
        clock: Clock = system_clock,
        ids: IdSource = uuid4_ids,
        timeout: float = 30.0,
        repair: bool = True,
    ) -> SessionWriter:
        """Resume a session on this node: lease (epoch+1), read back, recover, end-seed.

        ``repair=False`` takes the lease and reads back without writing anything: for a
        writer that only adds to a live session between its owner's leases (the
        compaction agent), which must not close the owner's open turn.
        """
        from sessionstream.core.recovery import recover, seed_boundary

        edges = _Edges(cfg)
        lease: Lease | None = None
        try:
            edges.connect()
            lease = edges.leases.acquire(
                cfg.tenant, session_id, writer_id or default_writer_id(), cfg.lease_ttl_ms,
                steal=steal,
            )
            rb = _read_back(edges, session_id, lease.index_was_clean, use_index, timeout)
            if not rb.admitted:
                raise SessionNotFound(session_id)
            session = Session.from_events(rb.admitted, catalog=catalog, clock=clock, ids=ids)
            session.set_writer(Writer(lease.writer_id, lease.epoch))
            if not repair:
                return cls(session, lease, edges, readback=rb)
            before = session.next_seq
            for draft in recover(session):
                session.append(draft)
            session.append(seed_boundary("resume", session.next_seq))
            log.info(
                "resumed session %s at epoch %d: %d events read (%d records scanned), "
                "%d rejected, %d repair events",
                session_id, lease.epoch, before, rb.records_scanned, len(rb.rejections),
                session.next_seq - before - 1,
            )
            return cls(session, lease, edges, seeded=session.events[before:], readback=rb)
        except BaseException:
            edges.abort(lease, (lease.next_seq_hint or 0) if lease is not None else 0)
            raise

    def fork(
        self,
        session_id: str | None = None,
        at: int | None = None,
        *,
        writer_id: str | None = None,
        inherit_raw: bool = False,
    ) -> SessionWriter:
        """A new session seeded from a stable prefix of this one, with its lineage.

        The child inherits the parent's ``surface`` and ``business`` content, and its
        ``raw`` content only with ``inherit_raw`` (seed §4.13); the lineage records
        ``inherited_classes``. With encryption the inherited content stays sealed with
        the parent's data keys: deleting the parent makes the child's seed unreadable.
        """
        from sessionstream.core.fork import fork as core_fork

        cfg = self._e.cfg
        child_id = session_id or str(uuid.uuid4())
        edges = _Edges(cfg)
        lease: Lease | None = None
        try:
            edges.connect()
            lease = edges.leases.acquire(
                cfg.tenant, child_id, writer_id or self.lease.writer_id, cfg.lease_ttl_ms
            )
            if lease.epoch > 1 or edges.index.get(cfg.tenant, child_id) is not None:
                raise SessionExists(child_id)
            child = core_fork(
                self.session,
                child_id,
                at=at,
                catalog=self.session.catalog,
                clock=self.session.clock,
                ids=self.session.ids,
                writer=Writer(lease.writer_id, lease.epoch),
                tenant=cfg.tenant,
                inherit=(DataClass.SURFACE, DataClass.BUSINESS)
                + ((DataClass.RAW,) if inherit_raw else ()),
            )
            seed = child.events[1:-1]  # the parent's events, re-stamped (fork.py)
            origins = {e.seq: self._origins.get(e.seq, (self.session_id,
                                                         self.session.events[e.seq].event_id))
                       for e in seed}
            return SessionWriter(child, lease, edges, seeded=child.events, origins=origins)
        except BaseException:
            edges.abort(lease, 0)
            raise

    # -- properties -----------------------------------------------------------------------
    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def next_seq(self) -> int:
        return self.session.next_seq

    @property
    def partition(self) -> int | None:
        return self._partition

    # -- writing --------------------------------------------------------------------------
    def append(
        self,
        type_or_draft: str | Draft,
        data: JsonValue = None,
        *,
        surface_op: SurfaceOp | str | None = None,
        source_event_seqs: Sequence[int] = (),
        turn_id: str | None = None,
        step_id: str | None = None,
    ) -> Event:
        """Validate through the core session, then produce; returns the stamped event.

        Raises the core's InvalidData / SchemaViolation / InvariantViolation (nothing
        produced, session unchanged), MessageTooLarge (nothing produced), Fenced.
        """
        self._check_usable()
        self._maybe_renew()
        if isinstance(type_or_draft, Draft):
            draft = type_or_draft
        else:
            draft = Draft(
                type=type_or_draft,
                data={} if data is None else data,
                surface_op=SurfaceOp(surface_op) if surface_op is not None else None,
                source_event_seqs=tuple(source_event_seqs),
                turn_id=turn_id,
                step_id=step_id,
            )
        draft = self._spill(draft)
        self._precheck_size(draft)
        event = self.session.append(draft)
        self._produce(event)
        return event

    def _spill(self, draft: Draft) -> Draft:
        store = self._store
        if draft.type != "tool/result" or store is None or not isinstance(draft.data, Mapping):
            return draft
        spilled = spill_tool_result(draft.data, store, self._e.cfg.spill_threshold)
        if spilled is None:
            return draft
        return Draft(
            draft.type, spilled, draft.surface_op, draft.source_event_seqs,
            draft.turn_id, draft.step_id,
        )

    def _precheck_size(self, draft: Draft) -> None:
        # A cheap upper bound first (~1 µs for a chunk): most events are far below the
        # limit, and the codec serializes data anyway. The check after encoding in
        # _produce stays the authority.
        if _size_bound(draft.data) + ENVELOPE_OVERHEAD <= self._limit:
            return
        try:
            size = len(canonical_dumps(draft.data).encode())
        except Exception:
            return  # not lossless JSON: the session's own check names the path
        if size + ENVELOPE_OVERHEAD > self._limit:
            raise MessageTooLarge(
                f"{draft.type} data of session {self.session_id} is {size} bytes; the "
                f"topic accepts at most {self._limit} per record",
            )

    def _produce(self, event: Event) -> None:
        cipher = self._e.cfg.cipher
        wire = event if cipher is None else cipher.seal_event(
            event, origin=self._origins.get(event.seq))
        value = self._e.encode(wire)
        if len(value) + len(self._key) > self._limit:
            # The session already holds the event: this writer cannot continue safely.
            self._closed = f"event seq {event.seq} encoded to {len(value)} bytes (over the limit)"
            raise MessageTooLarge(
                f"{event.type} seq {event.seq} of session {self.session_id} encodes to "
                f"{len(value)} bytes; the topic accepts at most {self._limit}"
            )
        self._bytes[event.event_id] = value
        self._mine.append(event)
        self._sender.produce(self._key, value, event.event_id)

    def _delivered(self, d: Delivery) -> None:
        if d.state is DeliveryState.OK and d.offset is not None:
            self._bytes.pop(d.event_id, None)
            self._offsets[d.event_id] = d.offset
            self._partition = d.partition
            self._idx_lo = d.offset if self._idx_lo is None else min(self._idx_lo, d.offset)
            self._idx_hi = d.offset if self._idx_hi is None else max(self._idx_hi, d.offset)

    def _maybe_renew(self) -> None:
        # Renew when a third of the TTL has passed: a writer paused past its TTL finds
        # out here (Fenced), one that keeps writing never lets the lease lapse.
        now = time.monotonic()
        held_ms = (now - self._last_renew) * 1000
        ttl = self.lease.ttl_ms
        if held_ms < ttl / 3:
            return
        if now < self._renew_retry_at:
            # Redis was just unreachable: don't retry on every append.
            if held_ms >= ttl:
                raise LeaseExpired(self.session_id, self.lease.epoch, int(held_ms), ttl,
                                   self._e.cfg.redis_url)
            return
        try:
            self._e.leases.renew(self.lease)
        except Fenced:
            self._fenced = True
            raise
        except RedisUnavailable as exc:
            # Safety never depends on Redis (readers apply the admission rule), but the
            # lease is only ours for its TTL after the last renewal: within it we keep
            # writing; past it another writer may hold the session, so appends stop
            # (LeaseExpired) until a renewal succeeds again or says Fenced.
            self._renew_retry_at = now + RENEW_RETRY_S
            if held_ms >= ttl:
                raise LeaseExpired(self.session_id, self.lease.epoch, int(held_ms), ttl,
                                   self._e.cfg.redis_url) from exc
            log.warning(
                "session %s: lease renewal failed (Redis unreachable); writing on for "
                "another %d ms of its TTL", self.session_id, int(ttl - held_ms),
            )
            return
        self._last_renew = now
        self._renew_retry_at = 0.0

    def _check_usable(self) -> None:
        if self._fenced:
            raise Fenced(self.session_id, self.lease.epoch, "fenced earlier")
        if self._closed is not None:
            raise WriterClosed(self.session_id, self._closed)

    # -- durability -----------------------------------------------------------------------
    def flush(self, timeout: float = 30.0) -> None:
        """Durability barrier: return only when every appended event is acknowledged.

        Raises UnconfirmedEvents naming each event_id not acknowledged (pending, failed
        or possibly persisted). On success the session index and the lease's next-seq
        hand-off are updated.
        """
        if self._closed is not None and self._closed != "closed":
            raise WriterClosed(self.session_id, self._closed)
        self._sender.flush(timeout)
        unconfirmed = self._sender.unconfirmed()
        try:
            self._update_index()
        except RedisUnavailable:
            # The index is a hint for resume speed; the barrier is about Kafka. The
            # offsets are kept and folded in on a later flush.
            log.warning("session %s: session index not updated (Redis unreachable)",
                        self.session_id)
        if unconfirmed:
            raise UnconfirmedEvents(unconfirmed, timeout=timeout)
        self._sender.forget([e for e in list(self._offsets) if self._sender.delivery(e)])
        if not self._fenced:
            try:
                if not self._e.leases.hand_off(self.lease, self.next_seq, release=False):
                    self._fenced = True
            except RedisUnavailable:
                log.warning("session %s: could not record next-seq hand-off", self.session_id)

    def _update_index(self) -> None:
        if self._idx_lo is None or self._idx_hi is None or self._partition is None:
            return
        self._e.index.record(
            self._e.cfg.tenant, self.session_id, self._partition, self._idx_lo, self._idx_hi
        )
        self._idx_lo = self._idx_hi = None

    def resend_unconfirmed(self) -> list[str]:
        """Produce again, in seq order, every event not acknowledged (same event_id).

        Safe after a delivery timeout: if the first copy did land, readers drop the
        second as a duplicate. Returns the event_ids resent.
        """
        if self._fenced:
            raise Fenced(self.session_id, self.lease.epoch, "fenced earlier")
        todo = [e for e in self._mine if e.event_id in self._bytes]
        for event in todo:
            self._sender.produce(self._key, self._bytes[event.event_id], event.event_id)
        return [e.event_id for e in todo]

    def unconfirmed(self) -> dict[str, str]:
        return self._sender.unconfirmed()

    def confirm(self, timeout: float = 30.0) -> Confirmation:
        """Read the log back up to our last offset; which of our events are admitted?"""
        self.flush(timeout)
        if not self._offsets:
            return Confirmation([], [], [e.event_id for e in self._mine])
        last = max(self._offsets.values())
        idx = self._e.index.get(self._e.cfg.tenant, self.session_id)
        start = idx.first_offset if idx is not None else None
        rb = read_session(
            self._e.cfg.bootstrap, self._e.cfg.topic, self.session_id,
            decode=self._e.decode, partition=self._partition, start=start, end=last + 1,
            timeout=timeout,
        )
        mine = {e.event_id for e in self._mine}
        admitted = [eid for eid in rb.offsets if eid in mine]
        rejected = [r for r in rb.rejections if r.event_id in mine]
        seen = set(admitted) | {r.event_id for r in rejected}
        missing = [e.event_id for e in self._mine if e.event_id not in seen]
        if rejected:
            log.warning(
                "session %s epoch %d: %d of our events rejected by the admission rule",
                self.session_id, self.lease.epoch, len(rejected),
            )
        return Confirmation(admitted, rejected, missing)

    def close(self, timeout: float = 30.0, *, confirm: bool = False) -> Confirmation | None:
        """Flush, hand the next seq to the next holder, release the lease.

        With ``confirm`` the log is read back first; if every event of ours is admitted
        the index is marked clean, so the next resume reads no further than our last
        offset.
        """
        if self._closed == "closed":
            return None
        result: Confirmation | None = None
        try:
            if not self._fenced:
                self.flush(timeout)
                if confirm:
                    result = self.confirm(timeout)
                    if result.ok:
                        self._e.index.mark_clean(
                            self._e.cfg.tenant, self.session_id, self.lease.writer_id,
                            self.lease.epoch,
                        )
                try:
                    self._e.leases.release(self.lease, self.next_seq)
                except RedisUnavailable:
                    # Every event is flushed; the lease just lapses after its TTL
                    # (the next writer waits for it or takes it with steal=True).
                    log.warning("session %s: lease not released (Redis unreachable); it "
                                "expires in at most %d ms", self.session_id,
                                self.lease.ttl_ms)
        finally:
            self._closed = "closed"
            self._sender.close(0 if self._fenced else timeout)
            self._e.redis.close()
        return result

    def abandon(self) -> None:
        """Drop this writer without flushing or releasing (tests: a crashed process).

        Records already handed to the shared producer may still be delivered.
        """
        self._closed = "abandoned"
        self._sender.close(0)
        self._e.redis.close()

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SCALARS = frozenset({int, float, bool, type(None)})


def _size_bound(value: Any) -> int:
    """An upper bound of the canonical JSON size of ``value`` in bytes.

    Canonical JSON is UTF-8 (``ensure_ascii=False``): a code point takes at most 6
    bytes (``\\u001f``). Exact types first, with dict/str inlined: this runs on every
    append; anything unusual takes the generic path.
    """
    t = type(value)
    if t is str:
        return 6 * len(value) + 2
    if t is dict:
        n = 2
        for k, x in value.items():
            tx = type(x)
            if tx is str:
                n += 6 * len(x) + 2
            elif tx in _SCALARS:
                n += 32 + (x.bit_length() // 3 if tx is int else 0)
            else:
                n += _size_bound(x)
            n += 6 * len(k) + 4 if type(k) is str else _size_bound(k) + 2
        return n
    if t is list or t is tuple:
        return 2 + sum(_size_bound(x) + 1 for x in value)
    if t in _SCALARS:
        return 32 + (value.bit_length() // 3 if t is int else 0)
    if isinstance(value, str):
        return 6 * len(value) + 2
    if isinstance(value, Mapping):
        return 2 + sum(_size_bound(k) + _size_bound(v) + 2 for k, v in value.items())
    if isinstance(value, list | tuple):
        return 2 + sum(_size_bound(v) + 1 for v in value)
    return 32 + (int(value).bit_length() // 3 if isinstance(value, int) else 0)


def _read_back(
    edges: _Edges, session_id: str, was_clean: bool, use_index: bool, timeout: float
) -> ReadBack:
    cfg = edges.cfg
    idx = edges.index.get(cfg.tenant, session_id) if use_index else None
    if idx is not None:
        end = idx.last_offset + 1 if was_clean else None
        return read_session(
            cfg.bootstrap, cfg.topic, session_id, decode=edges.decode,
            partition=idx.partition, start=idx.first_offset, end=end, timeout=timeout,
        )
    # No index: scan the whole partition the key hashes to.
    return read_session(cfg.bootstrap, cfg.topic, session_id, decode=edges.decode, timeout=timeout)


def read_log(cfg: WriterConfig, session_id: str, *, use_index: bool = True,
             timeout: float = 30.0) -> ReadBack:
    """Read a session's admitted log (and rejections) as every reader would derive it."""
    edges = _Edges(cfg)
    try:
        return _read_back(edges, session_id, False, use_index, timeout)
    finally:
        edges.redis.close()


__all__ = [
    "Confirmation",
    "ProducerError",
    "SessionWriter",
    "WriterConfig",
    "read_log",
]

