"""SessionWriter: the fenced, validated writer of one session's log in Kafka.

Every append goes through the core :class:`~sessionstream.core.session.Session` first (schema,
lossless JSON, write-time invariants): what it refuses never reaches Kafka. The event is
stamped with this writer's id, lease epoch and the id of the event it follows, Avro-encoded,
size-checked against the topic's max message size and produced keyed by session id.
``flush()`` is the durability barrier: it returns only when every event is acknowledged
*and* admitted by the readers' rule (docs/adr/0001); ``confirm()`` reads the log back and
says which of our events readers admit.

Lifecycle::

    w = SessionWriter.create(WriterConfig.from_settings(s))   # new session, lease epoch 1
    w.append("turn/start", {}) ... w.flush()                 # durable and admitted
    w.close()                                                # hand-off next seq, release
    w2 = SessionWriter.open(cfg, sid)                        # any node: epoch+1, recover,
                                                             # end-seed, proven admitted

Started or not is decided by the log: an id with an admitted event is started (create()
raises SessionExists, open() resumes it); an id without one — new, or leased by a
create() that died before its ``session/start`` was admitted — is not (create() starts
it at a new epoch, which fences the dead attempt; open() raises SessionNotFound naming
create()).

Beside this module: :mod:`producers.config` (WriterConfig), :mod:`producers.edges` (the
clients), :mod:`producers.append_path` (the append path: stamp, record, produce),
:mod:`producers.limits` (record size), :mod:`producers.resume` (read-back, proofs).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.admission import WINDOW, AdmissionState
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
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.sealed import DataClass
from sessionstream.core.session import Session
from sessionstream.governance.opener import SealedAttachmentStore
from sessionstream.producers.append_path import AppendPath, append_path
from sessionstream.producers.attachments import AttachmentStore
from sessionstream.producers.config import WriterConfig, default_writer_id
from sessionstream.producers.edges import WriterEdges
from sessionstream.producers.errors import (
    Fenced,
    LeaseExpired,
    LeaseUnavailable,
    ProducerError,
    RedisUnavailable,
    ResumeRaceLost,
    SessionExists,
    SessionNotFound,
    UnconfirmedEvents,
    WriterClosed,
)
from sessionstream.producers.lease import Lease, Settled
from sessionstream.producers.readback import ReadBack, Rejection, read_session
from sessionstream.producers.resume import AdmissionProof, read_back, read_log
from sessionstream.producers.views import ViewWrite

log = logging.getLogger(__name__)

#: While the lease cannot be renewed (Redis away), retry at most this often per append
#: so that a dead Redis does not add a connection attempt to every append.
RENEW_RETRY_S = 0.5
#: open(): how many times a resumer whose first events lost the race to an older
#: epoch's re-reads the session and writes them again before ResumeRaceLost. Each
#: retry is at the newest epoch, so an older writer can beat it only while its own
#: events are in flight; a newer writer ends the retries at once.
RESUME_ATTEMPTS = 4

#: Writers holding a lease in this process: an exiting process gives them up (atexit),
#: so the next request of a conversation, on any node, does not wait out the lease.
_HOLDING: weakref.WeakSet[SessionWriter] = weakref.WeakSet()
_HOLDING_LOCK = threading.Lock()
#: How long the exit hook waits, for all writers together, before it lets the rest of
#: the leases lapse (a broker away must not hold a process's exit for long).
EXIT_FLUSH_S = 5.0


def _release_at_exit() -> None:
    """Close every writer still holding a lease (flush, hand off, release). A writer
    that cannot finish (a broker away) keeps nothing: its lease lapses after its TTL."""
    with _HOLDING_LOCK:
        writers = list(_HOLDING)
    deadline = time.monotonic() + EXIT_FLUSH_S
    for w in writers:
        left = deadline - time.monotonic()
        try:
            if left <= 0.05:
                w.abandon()  # no time left: the lease lapses after its TTL
                continue
            w.close(min(left, 2.0))
        except Exception as exc:  # the process is exiting: say what, never raise
            log.warning("session %s: lease not released at exit (%s)", w.session_id,
                        type(exc).__name__)


atexit.register(_release_at_exit)
# A fork()ed child holds none of its parent's leases: its exit must not release them.
os.register_at_fork(after_in_child=_HOLDING.clear)


def flush_durably(w: Any, *, attempts: int = 3, timeout: float = 30.0) -> None:
    """What a harness does at a durability barrier: wait, and on a timeout wait again.

    A barrier that times out has not failed: the records may still be delivered (a
    broker stalled, a leader moved). Records reported failed are resent with their
    event ids (readers drop duplicates). The last UnconfirmedEvents propagates.
    """
    for attempt in range(attempts):
        try:
            w.flush(timeout)
            return
        except UnconfirmedEvents:
            if attempt == attempts - 1:
                raise
            if any(state != "pending" for state in w.unconfirmed().values()):
                w.resend_unconfirmed()  # failed or possibly persisted: send the same ids


def release_durably(w: SessionWriter, views: Sequence[ViewWrite] = (), *,
                    attempts: int = 3, timeout: float = 30.0) -> tuple[str, ...]:
    """:meth:`SessionWriter.release` with :func:`flush_durably`'s patience: a barrier
    that times out is waited for again, records reported failed are resent."""
    for attempt in range(attempts):
        try:
            return w.release(timeout, views)
        except UnconfirmedEvents:
            if attempt == attempts - 1:
                raise
            if any(state != "pending" for state in w.unconfirmed().values()):
                w.resend_unconfirmed()
    raise AssertionError("unreachable")


class NotHandedOver(ProducerError):
    """retake(): the session was not handed over cleanly since this writer released it
    (a writer died or lost its lease mid-write, or one still holds it): resume it with
    :meth:`SessionWriter.open`, which reads the log and closes what was left open."""


@dataclass(frozen=True)
class Confirmation:
    """What readers make of this writer's events (read back up to its last offset)."""

    admitted: list[str]
    rejected: list[Rejection]
    missing: list[str]  # produced but not found in the log (not persisted)

    @property
    def ok(self) -> bool:
        return not self.rejected and not self.missing


class _LostRace(Exception):
    """Internal: the first events of this writer were refused (open() retries)."""

    def __init__(self, refused: list[Rejection], admitted: list[Event]) -> None:
        self.refused = refused
        self.admitted = admitted  # events admitted meanwhile (someone else's)
        super().__init__(f"{len(refused)} first event(s) refused")


def _unstarted(edges: WriterEdges, sid: str, lease: Lease,
               timeout: float) -> AdmissionProof | None:
    """Check that ``sid`` was never started (no admitted event), else SessionExists.

    Epoch 1 and no index: nobody ever held the id, nothing to read (None: the proof
    starts at our first record). A later epoch: an earlier holder may have started it,
    so the log decides — read back (a partition scan without an index); nothing
    admitted, and the proof of our ``session/start`` continues from the end of that
    read, so a dead attempt's record landing before ours is seen there.
    """
    cfg = edges.cfg
    if edges.index.get(cfg.tenant, sid) is not None:  # it records admitted offsets only
        raise SessionExists(sid)
    if lease.epoch == 1:
        return None
    rb = read_back(edges, sid, False, False, timeout)
    if rb.admitted:
        raise SessionExists(sid, f"its log holds {len(rb.admitted)} admitted event(s)")
    log.info("session %s: leased before (epoch %d) but never started; starting it at "
             "epoch %d (%d records scanned, %d refused)", sid, lease.epoch - 1, lease.epoch,
             rb.records_scanned, len(rb.rejections))
    return AdmissionProof.after(rb)


def _lost_start(sid: str, lost: _LostRace) -> ProducerError:
    """The error of a create/fork whose ``session/start`` was refused."""
    if lost.admitted:  # another start (e.g. a dead attempt's, landing late) came first
        return SessionExists(sid, "another writer's session/start was admitted before this "
                                  "one")
    return ProducerError(
        f"session {sid!r}: this create()'s session/start is not in the log after its "
        "acknowledgement (nothing was started); create() it again")


class SessionWriter:
    """Append-only writer of one session, holding its lease (fencing epoch).

    Starting: :meth:`create` starts an id whose log holds no admitted event — a new
    id, or one a dead create() leased without getting its ``session/start`` admitted
    (taken over at a new epoch, which fences the dead attempt). :meth:`open` resumes
    an id whose log holds one; on a never-started id its SessionNotFound names
    create(). The log decides, not the lease: both read it the same way.
    """

    def __init__(
        self,
        session: Session,
        lease: Lease,
        edges: WriterEdges,
        *,
        seeded: Sequence[Event] = (),
        readback: ReadBack | None = None,
        proof: AdmissionProof | None = None,
        origins: Mapping[int, tuple[str, str]] | None = None,
        fault: Callable[[str], None] | None = None,
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
        store: AttachmentStore | None = edges.store
        cipher = edges.cfg.cipher
        if cipher is not None and cipher.enabled and edges.cfg.attachment_dir is not None:
            store = SealedAttachmentStore(edges.cfg.attachment_dir, cipher, session.session_id)
        #: The append path, chosen once (native or the Python reference): every append
        #: and produce goes through it, with the records until acknowledged, the events
        #: produced (``mine``) and the sender (producers.append_path).
        self._path: AppendPath = append_path(
            edges.cfg.append, edges.encode, cipher, session, edges.sender, edges.limit(),
            self._origins, store, edges.cfg.spill_threshold)
        stats = edges.cfg.stats
        if stats is not None:
            edges.sender.on_error = lambda d: stats.delivery_error(d.state.value)
        self._mine = self._path.mine  # every event this writer produced, in seq order
        self._offsets: dict[str, int] = {}  # acknowledged event_id -> offset
        self._partition: int | None = readback.partition if readback else None
        #: The highest offset of the session's admitted records this writer knows (its
        #: own acknowledged ones, what it read): where a catch-up (retake) reads from.
        self._last_offset: int | None = (max(readback.offsets.values(), default=None)
                                         if readback else None)
        self._idx_lo: int | None = None
        self._idx_hi: int | None = None
        self._closed: str | None = None
        self._fenced = False
        #: Whether this writer holds the session's lease now (release() gives it up,
        #: retake() takes it again at a new epoch).
        self._held = True
        self._last_renew = time.monotonic()
        self._renew_retry_at = 0.0
        self._first_offset_hint = readback.start if readback else None
        # Admission of our events: _proof folds the partition on from where it last
        # stopped; _proven counts our events known admitted (a prefix of _mine);
        # _established: one of our events was proven admitted, so no older epoch can
        # be admitted after it and an unchanged lease epoch proves the rest.
        self._proof = proof if proof is not None else (
            AdmissionProof.after(readback) if readback is not None
            else AdmissionProof(session.session_id, None, None, None))
        self._proven = 0
        self._established = False
        #: How many times open() wrote this lifecycle's first events (1 unless it lost
        #: a race to an older writer and wrote them again).
        self.start_attempts = 1
        #: How open() found the session's records ("index": the verified runs of the
        #: session index; "scan": the partition) and how many records it read.
        self.read_via: str | None = readback.via if readback is not None else None
        self.records_read = readback.records_scanned if readback is not None else 0
        #: Fault injection (create's ``fault``): called with each step of the start.
        self._fault = fault
        for event in seeded:
            self._path.produce(event)
        if seeded and fault is not None:
            fault("produced")
        if seeded:
            if cipher is not None:
                # Made in one batch while the broker acknowledges the start: the first
                # sealed append of each class then finds its key cached, not to be made.
                cipher.prefetch_keys([session.session_id])
            # A new lifecycle's first events (session/start, or the repairs and the
            # end-seed of a resume) are made durable and proven admitted before the
            # writer is handed out: from here on any zombie of an older epoch is
            # rejected as stale, and a lost race is known now, not at the next flush.
            self._start(edges.cfg.flush_timeout_s)
        with _HOLDING_LOCK:
            _HOLDING.add(self)

    def _start(self, timeout: float) -> None:
        """Flush the seeded events and read back to their offsets: were they admitted?"""
        try:
            self._flush_acks(timeout)
        except UnconfirmedEvents as exc:
            raise ProducerError(
                f"session {self.session_id!r}: the broker did not confirm this writer's "
                f"first {len(exc.states)} event(s) within {timeout:g}s, so it was not "
                "handed out; they may still land. Start it again: create() raises "
                "SessionExists if they did (then open() it), open() resumes either way"
            ) from exc
        if self._fault is not None:
            self._fault("acknowledged")
        fresh = self._proof.end is None  # a new id at epoch 1: read from our first record
        verdicts = self._proof.read(self._e, self._mine, self._offsets,
                                    self._partition_or_raise(), timeout)
        if fresh and not (verdicts.mine_refused or verdicts.mine_missing) \
                and not self._epoch_unchanged():
            # Another writer took the id after our lease and may have written before our
            # first record (we were paused): only the whole partition can say.
            self._proof = AdmissionProof(self.session_id, None, 0, None)
            verdicts = self._proof.read(self._e, self._mine, self._offsets,
                                        self._partition_or_raise(), timeout)
        if verdicts.mine_refused or verdicts.mine_missing:
            raise _LostRace(verdicts.mine_refused, verdicts.admitted)
        self._proven = len(self._mine)
        self._established = True
        self._update_index_quietly()  # proven admitted: now they may be indexed
        self._hand_off()

    def _epoch_unchanged(self) -> bool:
        """Is the session's epoch still ours (False when Redis cannot say)? Every other
        writer takes the lease (a new epoch) before writing, so while it is unchanged
        nothing of another writer lies before our acknowledged records."""
        try:
            return self._e.leases.current_epoch(self._e.cfg.tenant,
                                                self.session_id) == self.lease.epoch
        except RedisUnavailable:
            return False

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
        steal: bool = False,
        fault: Callable[[str], None] | None = None,
    ) -> SessionWriter:
        """Start a new session (``session/start``); SessionExists if the id was started.

        An id is started once its log holds an admitted event. An id whose lease was
        taken but whose log holds none (a create() that died before its
        ``session/start`` was admitted) was never started: create() takes it over at a
        new epoch, so a late record of the dead attempt is refused as stale where it
        lands (or, landing first, makes the id started: SessionExists, open() it).
        ``steal`` takes over a lease still live (its holder crashed).
        ``start_extra``: further ``session/start`` fields (``log publish`` keeps a
        file's, e.g. an imported session's provenance). ``fault``: fault injection,
        called with ``"leased"``, ``"produced"`` and ``"acknowledged"`` as the start
        passes each step (tests and the fleet simulator kill the process there).
        """
        sid = session_id or str(uuid.uuid4())
        edges = WriterEdges(cfg)
        lease: Lease | None = None
        try:
            edges.connect()
            try:
                lease = edges.leases.acquire(
                    cfg.tenant, sid, writer_id or default_writer_id(), cfg.lease_ttl_ms,
                    steal=steal,
                )
            except LeaseUnavailable:
                # A started id whose holder is away: SessionExists now (open() it), not
                # a wait for the lease only to learn that.
                if edges.index.get(cfg.tenant, sid) is not None:
                    raise SessionExists(sid) from None
                raise
            if fault is not None:
                fault("leased")
            proof = _unstarted(edges, sid, lease, cfg.flush_timeout_s)
            return cls._start_new(edges, lease, proof, lineage=lineage, catalog=catalog,
                                  clock=clock, ids=ids, start_extra=start_extra,
                                  fault=fault)
        except BaseException:
            edges.abort(lease, (lease.next_seq_hint or 0) if lease is not None else 0)
            raise

    @classmethod
    def _start_new(cls, edges: WriterEdges, lease: Lease, proof: AdmissionProof | None, *,
                   lineage: Mapping[str, Any] | None = None, catalog: Catalog | None = None,
                   clock: Clock = system_clock, ids: IdSource = uuid4_ids,
                   start_extra: Mapping[str, Any] | None = None,
                   fault: Callable[[str], None] | None = None) -> SessionWriter:
        """Write the ``session/start`` of an unstarted id under ``lease`` and prove it."""
        sid = lease.session_id
        session = Session.create(
            sid,
            tenant=edges.cfg.tenant,
            lineage=lineage,
            catalog=catalog,
            clock=clock,
            ids=ids,
            writer=Writer(lease.writer_id, lease.epoch),
            start_extra=start_extra,
        )
        try:
            return cls(session, lease, edges, seeded=session.events, proof=proof,
                       fault=fault)
        except _LostRace as lost:
            raise _lost_start(sid, lost) from lost

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
        edges = WriterEdges(cfg)
        lease: Lease | None = None
        try:
            edges.connect()
            lease = edges.leases.acquire(
                cfg.tenant, session_id, writer_id or default_writer_id(), cfg.lease_ttl_ms,
                steal=steal,
            )
            rb = read_back(edges, session_id, lease.index_was_clean, use_index, timeout,
                           next_seq_hint=lease.next_seq_hint, repair=True)
            if not rb.admitted:
                # Leased before (epoch > 1 now): a create() died before its start was
                # admitted. The error names create(), which takes such an id over.
                raise SessionNotFound(session_id, lease.epoch - 1)
            return cls._resume(edges, lease, rb, catalog=catalog, clock=clock, ids=ids,
                               repair=repair)
        except BaseException:
            edges.abort(lease, (lease.next_seq_hint or 0) if lease is not None else 0)
            raise

    @classmethod
    def take(
        cls,
        cfg: WriterConfig,
        session_id: str,
        *,
        writer_id: str | None = None,
        catalog: Catalog | None = None,
        clock: Clock = system_clock,
        ids: IdSource = uuid4_ids,
        timeout: float = 30.0,
    ) -> SessionWriter:
        """Take ``session_id`` for a write, whatever state it is in (docs/adr/0024): the
        one call of a stateless handler, which does not know whether the conversation is
        new, was last written by another node, or was left mid-write by a crashed one.

        One lease acquire decides: an id nobody started is started (``session/start``);
        one handed over cleanly is continued as it is, read from its index, with no
        repair and no end-seed (a turn left open by the last request stays open for
        this one); anything else is resumed as :meth:`open` does (read back, close what
        a dead writer left open, end-seed). LeaseUnavailable: another writer holds it.
        """
        edges = WriterEdges(cfg)
        lease: Lease | None = None
        try:
            edges.connect()
            lease = edges.leases.acquire(
                cfg.tenant, session_id, writer_id or default_writer_id(), cfg.lease_ttl_ms)
            indexed = edges.index.get(cfg.tenant, session_id) is not None
            if not indexed and lease.epoch == 1:
                return cls._start_new(edges, lease, None, catalog=catalog, clock=clock,
                                      ids=ids)
            rb = read_back(edges, session_id, lease.index_was_clean, True, timeout,
                           next_seq_hint=lease.next_seq_hint, repair=True)
            if not rb.admitted:  # a create() died before its start was admitted
                return cls._start_new(edges, lease, AdmissionProof.after(rb),
                                      catalog=catalog, clock=clock, ids=ids)
            last = rb.admitted[-1]
            if (lease.handed_over and rb.next_seq == lease.next_seq_hint
                    and last.event_id == lease.last_event_id):
                session = Session.from_events(rb.admitted, catalog=catalog, clock=clock,
                                              ids=ids)
                session.set_writer(Writer(lease.writer_id, lease.epoch))
                w = cls(session, lease, edges, readback=rb, proof=AdmissionProof.after(rb))
                w._established = True  # a clean hand-off: see retake()
                return w
            return cls._resume(edges, lease, rb, catalog=catalog, clock=clock, ids=ids)
        except BaseException:
            edges.abort(lease, (lease.next_seq_hint or 0) if lease is not None else 0)
            raise

    @classmethod
    def _resume(cls, edges: WriterEdges, lease: Lease, rb: ReadBack, *,
                catalog: Catalog | None, clock: Clock, ids: IdSource,
                repair: bool = True) -> SessionWriter:
        """Resume the history ``rb`` read under ``lease``: recover, end-seed, prove."""
        from sessionstream.core.recovery import recover, seed_boundary

        cfg, session_id = edges.cfg, lease.session_id
        writer = Writer(lease.writer_id, lease.epoch)
        admitted = list(rb.admitted)
        proof = AdmissionProof.after(rb)
        for attempt in range(1, RESUME_ATTEMPTS + 1):
            session = Session.from_events(admitted, catalog=catalog, clock=clock, ids=ids)
            if session.max_epoch > lease.epoch:  # a newer writer wrote while we read
                raise ResumeRaceLost(
                    session_id, lease.epoch,
                    f"epoch {session.max_epoch} took the session and wrote before this "
                    "resume could")
            session.set_writer(writer)
            if not repair:
                return cls(session, lease, edges, readback=rb, proof=proof)
            before = session.next_seq
            for draft in recover(session):
                session.append(draft)
            session.append(seed_boundary("resume", session.next_seq))
            try:
                w = cls(session, lease, edges, seeded=session.events[before:],
                        readback=rb, proof=proof)
            except _LostRace as lost:
                edges.sender.forget([e.event_id for e in session.events[before:]])
                admitted.extend(lost.admitted)
                newest = edges.leases.current_epoch(cfg.tenant, session_id)
                why = ", ".join(sorted({r.verdict.value for r in lost.refused})) or "missing"
                if newest > lease.epoch:
                    raise ResumeRaceLost(
                        session_id, lease.epoch,
                        f"epoch {newest} took the session meanwhile; this resume's "
                        f"first events were refused ({why})") from None
                log.info("session %s epoch %d: resume lost a race to an older writer "
                         "(%s); re-reading and writing the repairs again (attempt %d)",
                         session_id, lease.epoch, why, attempt)
                continue
            log.info(
                "resumed session %s at epoch %d: %d events read (%d records scanned, "
                "via %s), %d rejected, %d repair events, attempt %d",
                session_id, lease.epoch, before, rb.records_scanned, rb.via,
                len(rb.rejections), session.next_seq - before - 1, attempt,
            )
            w.start_attempts = attempt
            return w
        raise ResumeRaceLost(
            session_id, lease.epoch,
            f"older writers kept winning the next seq for {RESUME_ATTEMPTS} attempts")

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
        edges = WriterEdges(cfg)
        lease: Lease | None = None
        try:
            edges.connect()
            lease = edges.leases.acquire(
                cfg.tenant, child_id, writer_id or self.lease.writer_id, cfg.lease_ttl_ms
            )
            proof = _unstarted(edges, child_id, lease, cfg.flush_timeout_s)
            child = core_fork(
                self.session,
                child_id,
                at=at,
                catalog=self.session.catalog,
                clock=self.session.clock,
                ids=self.session.ids,
                writer=Writer(lease.writer_id, lease.epoch),
                tenant=cfg.tenant,
                inherit=(DataClass.SURFACE, DataClass.BUSINESS, DataClass.REASONING)
                + ((DataClass.RAW,) if inherit_raw else ()),
            )
            seed = child.events[1:-1]  # the parent's events, re-stamped (fork.py)
            origins = {e.seq: self._origins.get(e.seq, (self.session_id,
                                                         self.session.events[e.seq].event_id))
                       for e in seed}
            try:
                return SessionWriter(child, lease, edges, seeded=child.events, origins=origins,
                                     proof=proof)
            except _LostRace as lost:
                raise _lost_start(child_id, lost) from lost
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

    @property
    def held(self) -> bool:
        """Whether this writer takes appends now, as far as it knows (no Redis call):
        it holds the lease it took, unreleased, not fenced, not closed."""
        return self._held and not self._fenced and self._stopped is None

    def holds_lease(self) -> bool:
        """Whether this writer still holds the session's lease, live (one Redis read):
        while it does, no other writer can be admitted, so its session is the history.
        False when fenced, closed, released, or Redis cannot say."""
        if self._fenced or self._stopped is not None or not self._held:
            return False
        try:
            return self._e.leases.check(self.lease)
        except RedisUnavailable:
            return False

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
        return self._path.append(type_or_draft, data, surface_op, source_event_seqs, turn_id,
                                 step_id)

    def append_many(self, items: Sequence[Draft | tuple[str, JsonValue]]) -> list[Event]:
        """Append ``items`` in order, each a :class:`Draft` or a ``(type, data)`` pair;
        returns the stamped events. Atomic: the whole batch passes the rules (and the
        record limit) before any record of it is sent; an item refused raises and leaves
        the session, the writer and the log as they were before the batch (the same
        rules, events, records and errors as ``append`` of each; ``flush()`` is still the
        barrier). The lease is checked once for the batch.

        On the native path one call of the extension validates, stamps, encodes (seals)
        and hands over every item whose type's rules it holds (docs/adr/0016); what it
        declines takes ``append``'s way, in order.
        """
        self._check_usable()
        self._maybe_renew()
        path = self._path
        mine, waiting, broken = len(path.mine), len(path.waiting), path.broken
        savepoint = self.session.savepoint()
        path.sender.hold()
        try:
            events = path.append_many(items)
        except BaseException:
            path.sender.discard()
            self.session.rollback(savepoint)
            for event in path.mine[mine:]:
                path.records.pop(event.event_id, None)
            del path.mine[mine:]
            del path.waiting[waiting:]
            path.broken = broken  # the session no longer holds what broke it
            raise
        self.session.release(savepoint)
        try:
            path.sender.release()
        except BaseException:
            # The batch is in the session, part of it may not be with the producer:
            # flush() reports what was not sent; resend_unconfirmed() sends it again.
            path.broken = "the producer refused part of an appended batch (resend it)"
            raise
        return events

    @property
    def _sender(self) -> Any:
        """The Kafka sender (the append path holds it)."""
        return self._path.sender

    def _mark_fenced(self, reason: str) -> None:
        if not self._fenced and self._e.cfg.stats is not None:
            self._e.cfg.stats.fenced(reason)
        self._fenced = True

    def _harvest(self) -> list[str]:
        """Take in the acknowledgements reported since the last call: offsets, partition,
        the index range; returns the event ids taken in (done here, once per flush, rather
        than in a callback per record)."""
        path = self._path
        taken, waiting, partition, lo, hi = path.sender.harvest(
            path.waiting, self._offsets, path.records)
        if partition is not None:
            self._partition = partition
        if lo is not None and (self._idx_lo is None or lo < self._idx_lo):
            self._idx_lo = lo
        if hi is not None and (self._idx_hi is None or hi > self._idx_hi):
            self._idx_hi = hi
        if hi is not None and (self._last_offset is None or hi > self._last_offset):
            self._last_offset = hi
        path.waiting = waiting
        return taken

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
            self._mark_fenced("lease_renewal")
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

    @property
    def _stopped(self) -> str | None:
        """Why this writer takes no more appends (closed, abandoned, broken), or None."""
        return self._closed if self._closed is not None else self._path.broken

    def _check_usable(self) -> None:
        if self._fenced:
            raise Fenced(self.session_id, self.lease.epoch, "fenced earlier")
        stopped = self._stopped
        if stopped is not None:
            raise WriterClosed(self.session_id, stopped)

    # -- durability -----------------------------------------------------------------------
    def flush(self, timeout: float = 30.0) -> None:
        """Durability barrier: return only when every appended event is acknowledged
        by the broker *and* admitted by the readers' rule.

        What it promises: on return, every event this writer appended is in the log and
        every reader admits it (it is part of the session). It never reports an event
        that readers reject. What it costs: the broker round trip (acks=all, linger
        bypassed), then one Redis read — the session's lease epoch. If the epoch is
        still this writer's, no other writer can have been admitted before these events
        (older epochs are stale once this writer's first events were admitted, which
        create/open/fork prove by reading back). If it changed, or Redis cannot say, or
        nothing of this writer was proven admitted yet (``open(repair=False)``), it
        reads the partition back to its last offset (from where the previous proof
        stopped) — a Kafka read of the records written meanwhile.

        Raises UnconfirmedEvents naming each event_id not acknowledged (pending, failed
        or possibly persisted: resend_unconfirmed() and flush again), and Fenced, with
        ``not_admitted``, when readers refused some of them (another writer took the
        session: those events are not part of it; the writer is fenced). On success the
        session index and the lease's next-seq hand-off are updated.
        """
        stopped = self._stopped
        if stopped is not None and stopped != "closed":
            raise WriterClosed(self.session_id, stopped)
        if not self._held:
            return  # released: everything was flushed and handed off then
        self._flush_acks(timeout)
        if self._settled_here(self._settle()):
            return
        self._prove_admitted(timeout)
        self._hand_off()

    def _settle(self, *, release: bool = False,
                views: Sequence[ViewWrite] = ()) -> Settled | None:
        """The common end of a flush in one Redis round trip (index, epoch, hand-off of
        the next seq and the last event id, the inline ``views``; with ``release`` the
        index marked clean and the lease given up).

        None when it could not ask (nothing of ours was proven yet, or Redis cannot say),
        else what Redis said: if the epoch is still ours (:meth:`_settled_here`) every
        event flushed is admitted too (see flush); if not, the caller proves by reading
        the log.
        """
        if self._fenced or not self._established:
            return None
        offsets = None
        if self._idx_lo is not None and self._idx_hi is not None and self._partition is not None:
            offsets = (self._partition, self._idx_lo, self._idx_hi)
        last = self.session.last_event
        try:
            settled = self._e.leases.settle(
                self.lease, self.next_seq, offsets,
                last_id=last.event_id if last is not None else "", release=release,
                views=views)
        except RedisUnavailable:
            return None  # the index offsets are kept for a later flush
        if settled.epoch != self.lease.epoch:
            return settled
        self._proven = len(self._mine)
        if settled.done:
            self._idx_lo = self._idx_hi = None
            if release:
                self._let_go()
        else:
            self._mark_fenced("hand_off")  # the lease hash is not ours at our epoch any more
        return settled

    def _settled_here(self, settled: Settled | None) -> bool:
        """The settle found the epoch still ours: every event flushed is admitted."""
        return settled is not None and settled.epoch == self.lease.epoch

    def _let_go(self) -> None:
        self._held = False
        with _HOLDING_LOCK:
            _HOLDING.discard(self)

    # -- one write at a time: release and retake ---------------------------------------------
    def release(self, timeout: float = 30.0,
                views: Sequence[ViewWrite] = ()) -> tuple[str, ...]:
        """Flush, hand the session off and give the lease up, keeping this writer's
        session and clients: :meth:`retake` continues it at a new epoch without reading
        the log if nobody wrote meanwhile (docs/adr/0024). What a stateless handler does
        after each write: nobody waits for this lease to expire.

        ``views``: inline view writes applied in the same call (producers.views), only if
        the flushed events are admitted. Returns the names of those views that were not
        where the write expected them (the caller rebuilds them whole). Raises what
        flush() raises; a Fenced writer's views are not written.
        """
        stopped = self._stopped
        if stopped is not None:
            raise WriterClosed(self.session_id, stopped)
        if not self._held:
            return ()
        self._flush_acks(timeout)
        settled = self._settle(release=True, views=views)
        if not self._settled_here(settled):
            self._prove_admitted(timeout)  # raises Fenced if another writer took it
            settled = self._settle(release=True, views=views)
        if settled is None:
            # Proven admitted, but Redis cannot record the hand-off: the lease lapses
            # after its TTL (the next writer reads the log: nothing was handed over).
            log.warning("session %s: flushed, but the hand-off was not recorded (Redis "
                        "unreachable); the lease expires in at most %d ms",
                        self.session_id, self.lease.ttl_ms)
            self._let_go()
            return ()
        if not settled.done:
            # Proven admitted, but the lease moved on meanwhile: nothing to hand off.
            log.info("session %s epoch %d: flushed and admitted; the session was taken "
                     "over meanwhile (epoch %d), so nothing is handed off",
                     self.session_id, self.lease.epoch, settled.epoch)
            self._let_go()
            return ()
        self._trim_proven()
        return settled.stale_views

    def _trim_proven(self) -> None:
        """Forget the events proven admitted and acknowledged (a long-lived writer's
        bookkeeping stays the size of one write, not of the session)."""
        done = self._proven
        if done and not self._path.waiting:
            del self._mine[:done]
            self._proven = 0
            self._offsets.clear()

    def retake(self, *, steal: bool = False) -> None:
        """Take the lease again after :meth:`release`, at a new epoch, and continue.

        If the session was handed over cleanly since (every holder released after proving
        what it wrote), this writer continues at once: its own history if nobody wrote
        meanwhile, else the others' events read from the log after its last record (the
        index's runs) and admitted into its session. Otherwise NotHandedOver (the lease
        is given back): resume with :meth:`open`. LeaseUnavailable: another writer holds
        the session now.
        """
        if self._held:
            return
        if self._closed is not None:
            raise WriterClosed(self.session_id, self._closed)
        e = self._e
        lease = e.leases.acquire(e.cfg.tenant, self.session_id, self.lease.writer_id,
                                 e.cfg.lease_ttl_ms, steal=steal)
        try:
            self._continue(lease)
        except BaseException:
            try:
                e.leases.release(lease, lease.next_seq_hint or 0, lease.last_event_id)
            except RedisUnavailable:
                log.warning("session %s: lease not given back (Redis unreachable)",
                            self.session_id)
            raise
        self.lease = lease
        self.session.set_writer(Writer(lease.writer_id, lease.epoch))
        self._established = True
        self._fenced = False
        self._held = True
        self._last_renew = time.monotonic()
        self._renew_retry_at = 0.0
        with _HOLDING_LOCK:
            _HOLDING.add(self)

    def _continue(self, lease: Lease) -> None:
        """Bring the session to where ``lease``'s hand-off says the log ends."""
        s = self.session
        if not lease.handed_over:
            raise NotHandedOver(f"session {self.session_id!r} was not handed over cleanly "
                                f"(epoch {lease.epoch - 1}); open() resumes it")
        hint, last = lease.next_seq_hint, lease.last_event_id
        end = s.last_event
        if hint == s.next_seq and end is not None and end.event_id == last:
            return  # nobody wrote since our release
        if hint is None or hint < s.next_seq:
            raise NotHandedOver(f"session {self.session_id!r}: the hand-off (seq {hint}) "
                                f"is behind this writer's session ({s.next_seq})")
        self._catch_up(hint, last)

    def _catch_up(self, hint: int, last: str) -> None:
        """Admit what other writers added since this writer's last record: the index's
        runs after it (clean: nothing lies past the index's last offset)."""
        e, s = self._e, self.session
        idx = e.index.get(e.cfg.tenant, self.session_id)
        mine = self._last_offset
        if idx is None or mine is None or idx.partition != self._partition:
            raise NotHandedOver(f"session {self.session_id!r}: no index to catch up from")
        ranges = [(max(lo, mine + 1), hi + 1) for lo, hi in idx.runs if hi > mine]
        recent = s.events_since(max(s.next_seq - WINDOW, 0))
        state = AdmissionState(
            self.session_id, s.next_seq, s.max_epoch,
            tuple((ev.event_id, ev.seq) for ev in recent), WINDOW,
            recent[-1].event_id, recent[-1].prev_event_id is not None)
        rb = read_session(e.cfg.bootstrap, e.cfg.topic, self.session_id, decode=e.decode,
                          partition=idx.partition, ranges=ranges,
                          timeout=e.cfg.flush_timeout_s,
                          consumer_config=dict(e.cfg.kafka_security),
                          state=state, decode_many=e.decode_many)
        savepoint = s.savepoint()
        try:
            for ev in rb.admitted:
                s.admit(ev)
        except BaseException:
            s.rollback(savepoint)
            raise
        s.release(savepoint)
        end = s.last_event
        if s.next_seq != hint or end is None or end.event_id != last:
            raise NotHandedOver(f"session {self.session_id!r}: the log after this writer "
                                f"ends at seq {s.next_seq}, the hand-off says {hint}")
        self._last_offset = max(rb.offsets.values(), default=self._last_offset)

    def _update_index_quietly(self) -> None:
        try:
            self._update_index()
        except RedisUnavailable:
            # The index is a hint for resume speed; the barrier is about Kafka. The
            # offsets are kept and folded in on a later flush.
            log.warning("session %s: session index not updated (Redis unreachable)",
                        self.session_id)

    def _flush_acks(self, timeout: float) -> None:
        """The broker half of the barrier: every record acknowledged, else raise.

        Acknowledged is not admitted: the offsets go into the session index only once
        the records are proven admitted (flush's settlement or proof, open's proof)."""
        self._sender.flush(timeout)
        taken = self._harvest()
        unconfirmed = self._sender.unconfirmed()
        if unconfirmed:
            raise UnconfirmedEvents(unconfirmed, timeout=timeout)
        self._sender.forget(taken)

    def _prove_admitted(self, timeout: float) -> None:
        """The admission half of the barrier (see flush)."""
        todo = self._mine[self._proven:]
        if not todo:
            return
        if self._established and not self._fenced:
            try:
                epoch = self._e.leases.current_epoch(self._e.cfg.tenant, self.session_id)
            except RedisUnavailable:
                epoch = None  # cannot tell: read back instead
            if epoch == self.lease.epoch:
                self._proven = len(self._mine)
                self._update_index_quietly()
                return
        verdicts = self._proof.read(self._e, todo, self._offsets,
                                    self._partition_or_raise(), timeout)
        got = set(verdicts.mine_admitted)
        refused = [e.event_id for e in todo if e.event_id not in got]
        if refused:
            self._mark_fenced("not_admitted")
            first = next(e for e in todo if e.event_id not in got)
            kinds = sorted({r.verdict.value for r in verdicts.mine_refused})
            log.warning("session %s epoch %d: %d event(s) from seq %d not admitted (%s)",
                        self.session_id, self.lease.epoch, len(refused), first.seq,
                        ", ".join(kinds) or "missing")
            raise Fenced(
                self.session_id, self.lease.epoch,
                f"another writer took the session; {len(refused)} of the events flushed "
                f"(from seq {first.seq}) were refused by readers "
                f"({', '.join(kinds) or 'not in the log'}) and are not part of it: "
                f"{', '.join(refused[:5])}{' …' if len(refused) > 5 else ''}",
                not_admitted=refused,
            )
        self._proven = len(self._mine)
        self._established = True
        self._update_index_quietly()

    def _partition_or_raise(self) -> int:
        if self._partition is None:  # every record acknowledged carries one
            raise WriterClosed(self.session_id, "no acknowledged record to read back from")
        return self._partition

    def _hand_off(self) -> None:
        if not self._fenced:
            try:
                end = self.session.last_event
                if not self._e.leases.hand_off(self.lease, self.next_seq, release=False,
                                               last_id=end.event_id if end else ""):
                    self._mark_fenced("hand_off")
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
        return self._path.resend()

    def unconfirmed(self) -> dict[str, str]:
        return self._sender.unconfirmed()

    def confirm(self, timeout: float = 30.0) -> Confirmation:
        """Read the log back up to our last offset; which of our events are admitted?"""
        self._flush_acks(timeout)
        if not self._offsets:
            return Confirmation([], [], [e.event_id for e in self._mine])
        last = max(self._offsets.values())
        idx = self._e.index.get(self._e.cfg.tenant, self.session_id)
        start = idx.first_offset if idx is not None else None
        rb = read_session(
            self._e.cfg.bootstrap, self._e.cfg.topic, self.session_id,
            decode=self._e.decode, partition=self._partition, start=start, end=last + 1,
            timeout=timeout, consumer_config=dict(self._e.cfg.kafka_security),
            decode_many=self._e.decode_many,
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

        Once the flush proved every event admitted (and, with ``confirm``, the log read
        back says so too) the index is marked clean, so the next resume reads no further
        than our last offset.
        """
        if self._closed == "closed":
            return None
        result: Confirmation | None = None
        try:
            if not self._fenced and self._held:
                if confirm:
                    self.flush(timeout)
                    result = self.confirm(timeout)
                if result is None or result.ok:
                    self.release(timeout)
                else:  # readers disagree with the flush: hand off without marking clean
                    try:
                        end = self.session.last_event
                        self._e.leases.release(self.lease, self.next_seq,
                                               end.event_id if end else "")
                    except RedisUnavailable:
                        log.warning("session %s: lease not released (Redis unreachable); "
                                    "it expires in at most %d ms", self.session_id,
                                    self.lease.ttl_ms)
        finally:
            self._closed = "closed"
            self._let_go()
            self._sender.close(0 if self._fenced else timeout)
            self._e.redis.close()
        return result

    def _mark_clean(self) -> None:
        """After a flush that proved every event admitted, with the lease still ours: no
        record a reader would admit lies beyond the index's last offset (a newer writer
        must acquire first, which the script sees and acquiring resets), so the next
        resume reads no further than that offset."""
        try:
            self._e.index.mark_clean(self._e.cfg.tenant, self.session_id,
                                     self.lease.writer_id, self.lease.epoch)
        except Fenced:
            log.info("session %s epoch %d: lease taken before close; index left unclean",
                     self.session_id, self.lease.epoch)
        except RedisUnavailable:
            log.warning("session %s: index not marked clean (Redis unreachable)",
                        self.session_id)

    def abandon(self) -> None:
        """Drop this writer without flushing or releasing (tests: a crashed process).

        Records already handed to the shared producer may still be delivered.
        """
        self._closed = "abandoned"
        self._let_go()
        self._sender.close(0)
        self._e.redis.close()

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "Confirmation",
    "NotHandedOver",
    "ProducerError",
    "SessionWriter",
    "WriterConfig",
    "default_writer_id",
    "flush_durably",
    "read_log",
]

