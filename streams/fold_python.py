"""The reference folder: the core's reader pipeline over a per-worker cache of sessions.

Every record goes through the core's reader pipeline (``sessionstream.core.pipeline``:
decode, admission, readability, open, fold, quarantine decision); this module keeps what
it folded per session (:class:`~sessionstream.streams.session_row.CachedSession`) and
turns it into the one script call that stores it (``SessionRowCodec.write``). Sessions
met for the first time are loaded from their stored row; units whose stored
``state_version`` differs are rebuilt from the log first (:meth:`PythonFolder.rebuild`).

It is the folder of the Python fold (``fold=python``), and the native folder's reference
for whatever the extension does not fold (:mod:`~sessionstream.streams.fold_native`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import replace

from sessionstream.core.admission import REJECTIONS, Verdict
from sessionstream.core.errors import UnsupportedFormat
from sessionstream.core.events import Event
from sessionstream.core.pipeline import Outcome, ReaderPipeline, Record, Undecodable
from sessionstream.core.projections import quarantine
from sessionstream.streams.fold import Batch, Digests, Folded, SessionFold, select_keys
from sessionstream.streams.ports import DeadLetter, LogReader, SessionWrite, Sink, WriteOutcome
from sessionstream.streams.session_row import CachedSession, SessionRowCodec

log = logging.getLogger("sessionstream.streams")

#: The audit event of a deletion or retention run (sessionstream.governance.service).
SHRED_TYPE = "session/shred"
#: The verdicts a batch report counts (metrics): the refusals and the dropped duplicates.
_NOT_ADMITTED = tuple(sorted(v.value for v in (*REJECTIONS, Verdict.DUPLICATE)))

_Item = tuple[Record, "Event | UnsupportedFormat"]


class PythonFolder:
    """Folds sessions through the reader pipeline; keeps each one's cursor between batches.

    ``sink`` is read for stored rows (never written here), ``log_reader`` for rebuilds.
    """

    name = "python"

    def __init__(self, pipeline: ReaderPipeline, sink: Sink, codec: SessionRowCodec,
                 log_reader: LogReader | None = None) -> None:
        self.pipeline = pipeline
        self.sink = sink
        self.codec = codec
        self.log_reader = log_reader
        self._cache: dict[str, CachedSession] = {}
        #: deferred: session id -> (its cursor as stored, units to write, touched)
        self._deferred: dict[str, tuple[CachedSession, set[str], bool]] = {}

    # -- the port ------------------------------------------------------------------------
    async def fold(self, batch: Batch) -> Folded:
        out = Folded()
        progress = batch.progress
        by_session: dict[str, list[_Item]] = {}
        for r in batch.records:
            if r.offset <= progress.get(r.partition, -1):
                out.skipped += 1
                continue
            decoded = self.pipeline.decode(r)
            if isinstance(decoded, Undecodable):
                out.dead.append(DeadLetter(r, decoded.reason, decoded.detail))
                continue
            by_session.setdefault(decoded.session_id, []).append((r, decoded))
        await self._fold_sessions(batch, by_session, out)
        return out

    async def fold_later(self, batch: Batch, sessions: Collection[str]) -> Folded:
        out = Folded()
        await self._fold_sessions(batch, self.select(batch, sessions), out)
        return out

    def refused(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    def settled(self) -> None:
        pass

    def take(self) -> list[SessionFold]:
        out = [SessionFold(self.codec.write(base, self._cache[sid], changed, touched))
               for sid, (base, changed, touched) in self._deferred.items()]
        self._deferred.clear()
        return out

    def flushed(self, fold: SessionFold, outcome: WriteOutcome) -> None:
        if outcome.status != "applied":
            self._cache.pop(fold.write.session_id, None)
            log.warning("session %s moved during the in-memory fold (%s at offset %d); it "
                        "is not written", fold.write.session_id, outcome.status,
                        outcome.stored_offset)

    def forget(self, partitions: Collection[tuple[str, int]] | None = None) -> None:
        if partitions is None:
            self._cache.clear()
            return
        nums = {p for _, p in partitions}
        for sid in [s for s, c in self._cache.items() if c.partition in nums]:
            del self._cache[sid]

    def holds(self, session_id: str) -> bool:
        return session_id in self._cache

    def keep_digests(self) -> Digests | None:
        return None

    # -- what the native folder and convergence use ------------------------------------
    def select(self, batch: Batch, sessions: Collection[str]) -> dict[str, list[_Item]]:
        """The batch's records of ``sessions`` past the progress, decoded, by session."""
        wanted = set(sessions)
        progress = batch.progress
        out: dict[str, list[_Item]] = {}
        for r in select_keys(batch.records, {s.encode() for s in wanted}):
            if r.offset <= progress.get(r.partition, -1):
                continue
            decoded = self.pipeline.decode(r)
            if not isinstance(decoded, Undecodable) and decoded.session_id in wanted:
                out.setdefault(decoded.session_id, []).append((r, decoded))
        return out

    def adopt(self, cur: CachedSession, base: CachedSession, changed: set[str]) -> None:
        """Take over a session folded elsewhere (deferred): ``cur`` as folded, ``base`` as
        stored, ``changed`` the units its next write stores."""
        self._cache[cur.session_id] = cur
        self._deferred[cur.session_id] = (base, changed, True)

    def keep(self, cur: CachedSession) -> None:
        self._cache[cur.session_id] = cur

    def drop(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    def fold_pending(self, cur: CachedSession) -> tuple[CachedSession, SessionWrite] | None:
        """Fold no record onto ``cur``: the write of its pending (rebuilt) units."""
        folded = self._advance(cur, [], Folded())
        if folded is None:
            return None
        new, changed, touched = folded
        return new, self.codec.write(cur, new, changed, touched)

    async def rebuild(self, cur: CachedSession, topic: str) -> CachedSession:
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

    # -- folding -------------------------------------------------------------------------
    async def _fold_sessions(self, batch: Batch, by_session: Mapping[str, list[_Item]],
                             out: Folded) -> None:
        await self._ensure_cursors(batch, by_session)
        for sid, items in by_session.items():
            cur = self._cache[sid]
            folded = self._advance(cur, items, out)
            if folded is None:
                continue
            new, changed, touched = folded
            out.sessions.append(sid)
            self._cache[sid] = new  # as folded: a write that does not apply forgets it
            if batch.deferred:
                prev = self._deferred.get(sid)
                if prev is None:
                    self._deferred[sid] = (cur, changed, touched)
                else:  # still based on the stored cursor; write the union of changes
                    prev[1].update(changed)
                    self._deferred[sid] = (prev[0], prev[1], prev[2] or touched)
                continue
            out.writes.append(SessionFold(
                self.codec.write(cur, new, changed, touched),
                verdicts=_verdicts(cur.counts, new.counts),
                quarantined=new.quarantine is not None and cur.quarantine is None,
                rebuilt=tuple(sorted(cur.pending))))

    async def _ensure_cursors(self, batch: Batch, by_session: Mapping[str, list[_Item]]
                              ) -> None:
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
        loaded = await self.sink.load(batch.generation, missing)
        for sid in missing:
            partition = by_session[sid][0][0].partition
            self._cache[sid] = self.codec.load(sid, partition, loaded.get(sid))
        units = tuple(u.key for u in self.codec.units)
        for sid in missing:
            cur = self._cache[sid]
            if sid in shredded and cur.stored:
                cur = self._cache[sid] = replace(cur, stale=units)
            if cur.stale:
                self._cache[sid] = await self.rebuild(cur, by_session[sid][0][0].topic)

    def _advance(self, cur: CachedSession, items: list[_Item], out: Folded
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
                out.skipped += 1
                continue
            step = reading.read(ev, r.offset)
            outcome = step.outcome
            if outcome is Outcome.HELD:
                counts["held"] = counts.get("held", 0) + 1
                out.skipped += 1
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


def _verdicts(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """The verdicts other than ``admitted`` a fold added to a session's counts."""
    out: dict[str, int] = {}
    for verdict in _NOT_ADMITTED:
        n = after.get(verdict, 0) - before.get(verdict, 0)
        if n > 0:
            out[verdict] = n
    return out


__all__ = ["SHRED_TYPE", "PythonFolder"]
