"""The batch logic of the projection processor, testable without faust or Kafka.

``Processor.process(records)`` takes the records of one poll: decodes them (undecodable
→ dead letters), applies the admission rule per session, folds every unit of the
registry, and writes each touched session with ONE idempotent script call; then the
tenant-wide writes (session index, change feed, partition progress) in a second call.

Idempotency and at-least-once: every session hash stores ``as_of_offset`` (the offset of
the last record folded); records at or below it are skipped here and the script refuses
a write whose last offset is not past it, and compare-and-sets on the offset the fold
started from, so a worker with a stale cache (after a rebalance it missed) reloads
instead of overwriting. Partition progress kept in Redis skips whole re-read batches.

Domain rules stay in the core: every record goes through the core's reader pipeline
(``sessionstream.core.pipeline``: decode, admission, readability, open, fold,
quarantine decision); this module batches, caches and writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sessionstream.core.admission import REJECTIONS, Verdict
from sessionstream.core.errors import UnsupportedFormat
from sessionstream.core.events import Event
from sessionstream.core.pipeline import Outcome, ReaderPipeline, Record, Undecodable
from sessionstream.core.projections import quarantine
from sessionstream.streams.convergence import Convergence
from sessionstream.streams.ports import DeadLetter, DeadLetters, LogReader, SessionWrite, Sink
from sessionstream.streams.session_row import CachedSession, RowSealer, SessionRowCodec

log = logging.getLogger("sessionstream.streams")

#: Conflicting writes (another worker moved a session under us) are re-folded from
#: Redis this many times in one batch before the session is left to the next batch.
MAX_CONFLICT_RETRIES = 5
#: The verdicts a batch report counts (metrics): the refusals and the dropped duplicates.
_NOT_ADMITTED = tuple(sorted(v.value for v in (*REJECTIONS, Verdict.DUPLICATE)))

@dataclass
class BatchReport:
    records: int = 0
    skipped: int = 0  # at or below partition progress or a session's as_of_offset
    sessions_written: int = 0
    sessions_noop: int = 0
    conflicts: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    #: Admission verdicts other than ``admitted`` of the records written this batch
    #: (``duplicate``, ``stale_epoch``, ...), counted once per applied write.
    verdicts: dict[str, int] = field(default_factory=dict)
    rebuilt: dict[str, tuple[str, ...]] = field(default_factory=dict)


_Item = tuple[Record, "Event | UnsupportedFormat"]
#: The audit event of a deletion or retention run (sessionstream.governance.service).
SHRED_TYPE = "session/shred"


class Processor:
    """Folds batches of one tenant's events topic into a sink; owns a per-worker cache."""

    def __init__(
        self,
        *,
        pipeline: ReaderPipeline,
        sink: Sink,
        group: str,
        log_reader: LogReader | None = None,
        dead_letters: DeadLetters | None = None,
        generation: int | None = None,
        rows: RowSealer | None = None,
    ) -> None:
        self.pipeline = pipeline
        #: Seals content-bearing views/states with the session's keys (governance.rows).
        self.rows = rows
        self.sink = sink
        self.group = group
        self.log_reader = log_reader
        self.dead_letters = dead_letters
        self._dlq_backlog: list[DeadLetter] = []  # letters not produced yet (see above)
        self._pinned_gen = generation
        self._gen: int | None = None
        self._cache: dict[str, CachedSession] = {}
        self._progress: dict[str, int] = {}
        self.codec = SessionRowCodec(pipeline.registry.units, rows)
        self._units = self.codec.units
        self._versions = self.codec.versions
        # process() and converge_step() share the cache: never interleave them.
        self._lock = asyncio.Lock()
        self.convergence = Convergence()
        # fold()/flush(): session id -> (cursor as stored, units to write, touched)
        self._deferred: dict[str, tuple[CachedSession, set[str], bool]] = {}
        self._unflushed: dict[str, int] = {}  # topic:partition -> offset, not yet in Redis
        #: Called with "folded" / "written" as a batch passes those stages (streams.trace).
        self.on_stage: Callable[[str], None] | None = None
        #: Whether another fold path (streams.native_fold) holds a session in its own
        #: cache: convergence leaves such sessions alone, as it does cached ones.
        self.cached_elsewhere: Callable[[str], bool] = _nowhere

    @property
    def lock(self) -> asyncio.Lock:
        """Held by every batch and convergence step (a fold path driving this processor
        takes it too, then calls only the methods that do not)."""
        return self._lock

    # -- cache control (the faust app calls these on rebalance) ---------------------
    def forget(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Drop cached sessions and progress (all, or of these (topic, partition)s)."""
        if partitions is None:
            self._cache.clear()
            self._progress.clear()
            return
        parts = set(partitions)
        for key in [p for p in self._progress if _split_tp(p) in parts]:
            del self._progress[key]
        nums = {p for _, p in parts}
        for sid in [s for s, c in self._cache.items() if c.partition in nums]:
            del self._cache[sid]

    # -- converging state_version bumps without new traffic (streams.convergence) ----
    def schedule_converge(self, topic: str, partitions: Iterable[int]) -> None:
        """After an assignment: rebuild the bumped units of the sessions of ``partitions``,
        in bounded steps (:meth:`converge_step`) between batches."""
        self.convergence.schedule(topic, partitions)

    @property
    def converging(self) -> bool:
        return self.convergence.active

    async def converge_step(self, limit: int = 64, concurrency: int = 4) -> int:
        """One bounded convergence step; returns the number of sessions rebuilt."""
        if not self.converging:
            return 0
        async with self._lock:
            return await self.convergence.step(self, limit, concurrency)

    # what a convergence step uses of this processor (streams.convergence.ConvergenceHost)
    def is_cached(self, session_id: str) -> bool:
        return session_id in self._cache or self.cached_elsewhere(session_id)

    async def rebuild(self, cur: CachedSession, topic: str) -> CachedSession:
        return await self._rebuild(cur, topic)

    def fold_pending(self, cur: CachedSession) -> tuple[CachedSession, SessionWrite] | None:
        """Fold no record onto ``cur``: the write of its pending (rebuilt) units."""
        return self._fold(cur, [], BatchReport())

    def keep(self, cur: CachedSession) -> None:
        self._cache[cur.session_id] = cur

    def drop(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    # -- the batch ------------------------------------------------------------------
    async def process(self, records: Sequence[Record]) -> BatchReport:
        if not records:
            return BatchReport()
        async with self._lock:
            return await self._process(records)

    async def process_locked(self, records: Sequence[Record]) -> BatchReport:
        """:meth:`process` for a caller that already holds :attr:`lock`."""
        return await self._process(records) if records else BatchReport()

    async def _process(self, records: Sequence[Record]) -> BatchReport:
        if self._deferred:
            raise RuntimeError("flush() the folded sessions before process()")
        report = BatchReport(records=len(records))
        gen, by_session, high = await self._group(records, report)
        await self._ensure_cursors(gen, by_session)
        writes = await self._fold_and_write_all(gen, by_session, report)

        await self._send_dead_letters(report, high)
        await self.sink.write_tenant(gen, writes, self.group, high)
        if self.on_stage is not None:
            self.on_stage("written")
        for tp, off in high.items():
            self._progress[tp] = max(self._progress.get(tp, -1), off)
        return report

    async def _group(
        self, records: Sequence[Record], report: BatchReport
    ) -> tuple[int, dict[str, list[_Item]], dict[str, int]]:
        """The generation, the decoded records by session (past the partition progress),
        and the highest offset seen per ``topic:partition``."""
        gen = self._pinned_gen if self._pinned_gen is not None else await self.sink.generation()
        if gen != self._gen:
            self._cache.clear()  # states are the same fold, but offsets guard per generation
            self._gen = gen
        tps = sorted({_tp(r.topic, r.partition) for r in records})
        missing = [tp for tp in tps if tp not in self._progress]
        if missing:
            self._progress.update(await self.sink.load_progress(self.group, missing))

        by_session: dict[str, list[_Item]] = {}
        high: dict[str, int] = {}
        for r in records:
            tp = _tp(r.topic, r.partition)
            high[tp] = max(high.get(tp, -1), r.offset)
            if r.offset <= self._progress.get(tp, -1):
                report.skipped += 1
                continue
            item = self._decode(r, report)
            if item is not None:
                by_session.setdefault(item[0], []).append((r, item[1]))
        return gen, by_session, high

    # -- folding in memory, writing once (replay) -------------------------------------
    async def fold(self, records: Sequence[Record]) -> BatchReport:
        """Fold a batch into the cache WITHOUT writing sessions; :meth:`flush` writes each
        session folded since the last flush with one script call, progress after them.

        For replay into a new generation nobody else writes: a long session costs one
        encode of its views instead of one per batch. Dead letters are sent per batch.
        """
        if not records:
            return BatchReport()
        async with self._lock:
            report = BatchReport(records=len(records))
            gen, by_session, high = await self._group(records, report)
            await self.fold_sessions(gen, by_session, report)
            await self._send_dead_letters(report, high)
            self.note_unflushed(high)
            return report

    async def fold_sessions(self, gen: int, by_session: Mapping[str, list[_Item]],
                            report: BatchReport) -> None:
        """Fold decoded records by session into the cache for :meth:`flush` (fold's core)."""
        await self._ensure_cursors(gen, by_session)
        deferred = self._deferred
        for sid, items in by_session.items():
            cur = self._cache[sid]
            folded = self._advance(cur, items, report)
            if folded is None:
                continue
            new, changed, touched = folded
            prev = deferred.get(sid)
            if prev is None:
                deferred[sid] = (cur, changed, touched)
            else:  # still based on the stored cursor; write the union of changes
                prev[1].update(changed)
                deferred[sid] = (prev[0], prev[1], prev[2] or touched)
            self._cache[sid] = new

    def note_unflushed(self, high: Mapping[str, int]) -> None:
        """Partition progress folded in memory, written by the next :meth:`flush`."""
        for tp, off in high.items():
            self._unflushed[tp] = max(self._unflushed.get(tp, -1), off)
            self._progress[tp] = max(self._progress.get(tp, -1), off)

    # -- what the native fold (streams.native_fold) drives ------------------------------
    async def current_generation(self) -> int:
        gen = self._pinned_gen if self._pinned_gen is not None else await self.sink.generation()
        if gen != self._gen:
            self._cache.clear()
            self._gen = gen
        return gen

    async def load_progress_of(self, records: Sequence[Record]) -> None:
        tps = sorted({_tp(r.topic, r.partition) for r in records})
        missing = [tp for tp in tps if tp not in self._progress]
        if missing:
            self._progress.update(await self.sink.load_progress(self.group, missing))

    @property
    def progress(self) -> Mapping[str, int]:
        return self._progress

    @property
    def pinned_generation(self) -> int | None:
        """The generation this processor writes whatever the pointer says (replay), or
        None: it follows the tenant's generation pointer."""
        return self._pinned_gen

    @property
    def dead_letters_pending(self) -> bool:
        """Dead letters of earlier batches the topic has not taken yet."""
        return bool(self._dlq_backlog)

    async def send_dead_letters(self, report: BatchReport, high: dict[str, int]) -> None:
        await self._send_dead_letters(report, high)

    def decode_item(self, r: Record, report: BatchReport
                    ) -> tuple[str, Event | UnsupportedFormat] | None:
        return self._decode(r, report)

    def cursor_from_fields(self, sid: str, partition: int, fields: Mapping[str, str]
                           ) -> CachedSession:
        return self._cursor(sid, partition, fields)

    def adopt(self, cur: CachedSession, base: CachedSession, changed: set[str]) -> None:
        """Take over a session folded elsewhere: ``cur`` as folded, ``base`` as stored,
        ``changed`` the units to write at the next :meth:`flush`."""
        self._cache[cur.session_id] = cur
        self._deferred[cur.session_id] = (base, changed, True)

    async def fold_and_write(self, gen: int, by_session: Mapping[str, list[_Item]],
                             report: BatchReport) -> list[SessionWrite]:
        """The live batch's fold and session writes for these sessions (with the
        conflict retries of :meth:`process`); the caller holds :attr:`lock` and does the
        tenant writes and :meth:`advance_progress` after them."""
        await self._ensure_cursors(gen, by_session)
        return await self._fold_and_write_all(gen, by_session, report)

    def advance_progress(self, high: Mapping[str, int]) -> None:
        """Partition progress written to the sink by a batch's tenant writes."""
        for tp, off in high.items():
            self._progress[tp] = max(self._progress.get(tp, -1), off)

    @property
    def unflushed_sessions(self) -> int:
        return len(self._deferred)

    async def flush(self) -> BatchReport:
        """Write every session :meth:`fold` changed (one script call each), then the
        tenant writes and partition progress. A session that moved meanwhile (only
        another writer of this generation can do that) is dropped from the cache and
        counted as a conflict."""
        async with self._lock:
            report = BatchReport()
            if not self._deferred and not self._unflushed:
                return report
            gen = self._gen if self._gen is not None else await self.sink.generation()
            items = list(self._deferred.items())
            writes = [self._session_write(base, self._cache[sid], changed, touched)
                      for sid, (base, changed, touched) in items]
            outcomes = await self.sink.write_sessions(gen, writes)
            done: list[SessionWrite] = []
            for write, outcome in zip(writes, outcomes, strict=True):
                if outcome.status == "applied":
                    report.sessions_written += 1
                    done.append(write)
                else:
                    report.conflicts += 1
                    self._cache.pop(write.session_id, None)
                    log.warning("session %s moved during the in-memory fold (%s at offset "
                                "%d); it is not written", write.session_id, outcome.status,
                                outcome.stored_offset)
            await self.sink.write_tenant(gen, done, self.group, self._unflushed)
            self._deferred.clear()
            self._unflushed.clear()
            return report

    async def _send_dead_letters(self, report: BatchReport, high: dict[str, int]) -> None:
        """Send this batch's dead letters and any left over; hold progress behind the rest.

        A letter the dead-letter topic still refuses after the sender's retries keeps its
        partition's progress just below its offset (a restarted worker re-reads from
        there), is retried with the next batch, and is logged as an error each time;
        other letters, partitions and sessions go on.
        """
        if self.dead_letters is None or not (report.dead_letters or self._dlq_backlog):
            return
        unsent = list(await self.dead_letters.send([*self._dlq_backlog, *report.dead_letters]))
        self._dlq_backlog = unsent
        for d in unsent:
            tp = _tp(d.record.topic, d.record.partition)
            if tp in high:
                high[tp] = min(high[tp], d.record.offset - 1)
            log.error("dead letter of %s (offset %d, %d bytes, %s) could not be produced; "
                      "progress of %s is held at offset %d until it is (retried with every "
                      "batch; other partitions and sessions go on)", tp, d.record.offset,
                      len(d.record.value or b""), d.reason, tp, d.record.offset - 1)

    def _decode(
        self, r: Record, report: BatchReport
    ) -> tuple[str, Event | UnsupportedFormat] | None:
        decoded = self.pipeline.decode(r)
        if isinstance(decoded, Undecodable):
            report.dead_letters.append(DeadLetter(r, decoded.reason, decoded.detail))
            return None
        return decoded.session_id, decoded

    # -- loading cursors ------------------------------------------------------------
    async def _ensure_cursors(self, gen: int, by_session: Mapping[str, list[_Item]]) -> None:
        # A deletion (session/shred) destroyed data keys: what this worker folded before
        # holds content that must not be written again. Drop it and refold every unit
        # from the log, where the shredded content now opens as placeholders.
        shredded = {sid for sid, items in by_session.items()
                    if any(isinstance(e, Event) and e.type == SHRED_TYPE for _, e in items)}
        for sid in shredded:
            self._cache.pop(sid, None)
        missing = [s for s in by_session if s not in self._cache]
        if not missing:
            return
        loaded = await self.sink.load(gen, missing)
        for sid in missing:
            self._cache[sid] = self._cursor(sid, by_session[sid][0][0].partition, loaded.get(sid))
        for sid in missing:
            cur = self._cache[sid]
            if sid in shredded and cur.stored:
                cur = self._cache[sid] = replace(cur, stale=tuple(u.key for u in self._units))
            if cur.stale:
                self._cache[sid] = await self._rebuild(cur, by_session[sid][0][0].topic)

    def _cursor(self, sid: str, partition: int, stored: Mapping[str, str] | None
                ) -> CachedSession:
        return self.codec.load(sid, partition, stored)

    async def _rebuild(self, cur: CachedSession, topic: str) -> CachedSession:
        """Refold the stale units of ``cur`` from the log, up to its ``as_of_offset``.

        The other units keep their stored states; the rebuilt ones are written together
        with the next update, so readers see the old view until the new one caught up.
        """
        if self.log_reader is None:
            raise RuntimeError("a state_version changed but the processor has no log reader")
        start = cur.first_offset
        if start is None:
            start = await self.sink.writer_first_offset(cur.session_id)
        records = await self.log_reader.read_session(
            topic, cur.partition, start if start is not None else 0, cur.as_of_offset,
            cur.session_id,
        )
        reading = self.pipeline.restricted(cur.stale).start(cur.session_id)
        for r in records:
            decoded = self.pipeline.decode(r)
            if isinstance(decoded, Undecodable):
                continue  # the live fold dead-lettered it the same way
            if isinstance(decoded, Event) and decoded.session_id != cur.session_id:
                continue
            if reading.read(decoded, r.offset).outcome is Outcome.HELD:
                break  # quarantined here as in the live fold: nothing after it was read
        states = dict(reading.states)
        if "index" in states and cur.quarantine is not None:
            states["index"] = quarantine(
                states["index"], cur.quarantine.reason, cur.quarantine.seq)
        log.info("rebuilt units %s of a session from %d records", sorted(states), len(records))
        new_states = dict(cur.states)
        new_states.update(states)
        return replace(cur, states=new_states, stale=(),
                       pending=cur.pending | frozenset(states))

    # -- folding --------------------------------------------------------------------
    async def _fold_and_write_all(
        self, gen: int, by_session: Mapping[str, list[_Item]], report: BatchReport
    ) -> list[SessionWrite]:
        """Fold every session, write them all in one round trip (one script call each);
        sessions another worker moved meanwhile are reloaded and folded again."""
        out: list[SessionWrite] = []
        todo = dict(by_session)
        for attempt in range(MAX_CONFLICT_RETRIES):
            folded: list[tuple[CachedSession, CachedSession, SessionWrite]] = []
            for sid, items in todo.items():
                cur = self._cache[sid]
                result = self._fold(cur, items, report)
                if result is not None:
                    folded.append((cur, *result))
            if not folded:
                break
            if self.on_stage is not None:
                self.on_stage("folded")
            outcomes = await self.sink.write_sessions(gen, [w for _, _, w in folded])
            retry: dict[str, list[_Item]] = {}
            for (cur, new, write), outcome in zip(folded, outcomes, strict=True):
                sid = write.session_id
                if outcome.status == "applied":
                    self._cache[sid] = new
                    report.sessions_written += 1
                    _count_verdicts(report.verdicts, cur.counts, new.counts)
                    if new.quarantine is not None and cur.quarantine is None:
                        report.quarantined.append(sid)
                    if cur.pending:
                        report.rebuilt[sid] = tuple(sorted(cur.pending))
                    out.append(write)
                    continue
                report.sessions_noop += 1
                del self._cache[sid]  # someone wrote past our base: reload from the sink
                if outcome.status == "stale":
                    # At or past our last offset: another pass (a worker that took the
                    # partition over meanwhile) wrote these records and emitted their feed
                    # entry. No second entry: this write came from a cache that may have
                    # missed that pass, so its as_of_seq need not be the stored one. (A
                    # retry whose lost reply had applied is "applied": the sink says so.)
                    continue
                report.conflicts += 1
                retry[sid] = todo[sid]
            if not retry:
                break
            if attempt == MAX_CONFLICT_RETRIES - 1:
                log.warning("%d sessions kept changing under this worker; left for the next "
                            "batch", len(retry))
                break
            await self._ensure_cursors(gen, retry)
            todo = retry
        return out

    def _fold(
        self, cur: CachedSession, items: list[_Item], report: BatchReport
    ) -> tuple[CachedSession, SessionWrite] | None:
        folded = self._advance(cur, items, report)
        if folded is None:
            return None
        new, changed, touched = folded
        return new, self._session_write(cur, new, changed, touched)

    def _advance(
        self, cur: CachedSession, items: list[_Item], report: BatchReport
    ) -> tuple[CachedSession, set[str], bool] | None:
        """Fold ``items`` onto ``cur``: (new cursor, unit keys to write, whether a record
        was folded), or None when there is nothing to write. Encodes nothing."""
        reading = self.pipeline.resume(cur.admission, cur.states, cur.quarantine)
        counts = dict(cur.counts)
        changed: set[str] = set(cur.pending)
        as_of_seq, as_of_offset = cur.as_of_seq, cur.as_of_offset
        first_offset, last_time = cur.first_offset, cur.last_time
        touched = False
        for r, ev in items:
            if r.offset <= as_of_offset:
                report.skipped += 1
                continue
            step = reading.read(ev, r.offset)
            outcome = step.outcome
            if outcome is Outcome.HELD:
                counts["held"] = counts.get("held", 0) + 1
                report.skipped += 1
                continue  # not written: a quarantined session's hash stays as it stopped
            touched = True
            as_of_offset = r.offset
            changed.update(step.changed)
            decision = step.decision
            if decision is None:
                continue  # a newer envelope format: quarantined before admission
            verdict = decision.verdict.value
            counts[verdict] = counts.get(verdict, 0) + 1
            if not decision.admitted:
                continue  # refused (recorded in ``rejections``) or a duplicate (dropped)
            assert isinstance(ev, Event)
            if ev.seq == 0 and first_offset is None:
                first_offset = r.offset
            last_time = ev.time
            if outcome is Outcome.IGNORED:
                counts["ignored"] = counts.get("ignored", 0) + 1
                as_of_seq = ev.seq
            elif outcome is Outcome.FOLDED:
                as_of_seq = ev.seq
        if not touched and not cur.pending:
            return None
        new = replace(
            cur, states=dict(reading.states), admission=reading.admission, as_of_seq=as_of_seq,
            as_of_offset=as_of_offset, first_offset=first_offset, last_time=last_time,
            quarantine=reading.quarantine, counts=counts, pending=frozenset(), stored=True,
        )
        return new, changed, touched

    def _session_write(
        self, base: CachedSession, new: CachedSession, changed: set[str], touched: bool
    ) -> SessionWrite:
        """The script call taking the session from ``base`` (as stored) to ``new``."""
        return self.codec.write(base, new, changed, touched)


def _nowhere(session_id: str) -> bool:
    return False


def _count_verdicts(into: dict[str, int], before: Mapping[str, int],
                    after: Mapping[str, int]) -> None:
    for verdict in _NOT_ADMITTED:
        n = after.get(verdict, 0) - before.get(verdict, 0)
        if n > 0:
            into[verdict] = into.get(verdict, 0) + n


def _tp(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _split_tp(key: str) -> tuple[str, int]:
    topic, _, part = key.rpartition(":")
    return topic, int(part)
