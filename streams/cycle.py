"""The batch cycle: one owner of a worker's batch lifecycle, whatever folds the batches.

``BatchCycle.process(records)`` takes the records of one poll of a topic and drives a
folder (the port, :mod:`~sessionstream.streams.fold`) through it:

1. the generation the batch is written to (read once and followed: the one-call batch
   write refuses a moved pointer, and the batch is folded again for the new one);
2. the partition progress kept in Redis (records at or below it are skipped);
3. the fold (on the folder's tentative state), dead letters (sent before progress passes
   them; a letter that cannot be sent holds its partition's progress just below it);
4. the write: every touched session with one idempotent script call, compare-and-set
   on the offset its fold started from (ADR 0014: one call for the whole batch where the
   sink can), then the tenant writes (session index, change feed, progress);
5. the outcomes: a stale write (another pass wrote these records) forgets the session,
   a conflict (another worker moved it) refolds it from the stored row, up to
   ``MAX_CONFLICT_RETRIES`` times.

The kafka engine overlaps the batches (:meth:`BatchCycle.pipelined`): N+1 is folded while
N's write is in flight; N is finished before anything of N+1 is written, and N+1's writes
of sessions N could not write are dropped and refolded from the stored rows. Replay folds
in memory (:meth:`BatchCycle.fold`), writes once per :meth:`BatchCycle.flush` (ADR 0015).

Idempotency: a session row stores ``as_of_offset``; a write whose last offset is not
past it is refused, so a redelivered batch changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from sessionstream.core.pipeline import Record
from sessionstream.streams.fold import Batch, Folder, SessionFold, highest_offsets, partition_heads
from sessionstream.streams.ports import (
    BatchOutcome,
    BatchReport,
    DeadLetter,
    DeadLetters,
    SessionWrite,
    Sink,
    WriteOutcome,
)

log = logging.getLogger("sessionstream.streams")

#: Conflicting writes (another worker moved a session under us) are refolded from the
#: stored row up to this many times in one batch before the session is left to the next.
MAX_CONFLICT_RETRIES = 5
#: Sessions per slice of a deferred flush (sealed on a thread while Redis applies the last).
FLUSH_SLICE = 256


@dataclass(eq=False)
class InFlight:
    """A live batch folded, its session writes built and (``task``) its one call sent:
    :meth:`BatchCycle.complete` (or the next :meth:`BatchCycle.pipelined`) finishes it."""

    batch: Batch
    report: BatchReport
    writes: list[SessionFold]
    #: ``topic:partition`` -> the batch's highest offset (its progress once written)
    high: dict[str, int]
    task: asyncio.Future[BatchOutcome | None] | None = None
    #: finished (its outcomes read): the caller may commit its offsets
    done: bool = False

    @property
    def records(self) -> Sequence[Record]:
        return self.batch.records


class PreviousBatch:
    """The batch in flight while the next one is folded: finished once, at the first
    :meth:`settle` (which returns the sessions whose write did not apply, or True when
    the generation moved and it was folded again)."""

    def __init__(self, flight: InFlight | None) -> None:
        self.flight = flight
        self.report: BatchReport | None = None
        self.refused: set[str] | bool = set()

    async def settle(self, cycle: BatchCycle) -> set[str] | bool:
        if self.flight is not None:
            flight, self.flight = self.flight, None
            self.report, self.refused = await cycle._finish(flight)
        return self.refused


class BatchCycle:
    """Drives ``folder`` over the batches of one tenant's topic, into ``sink``."""

    def __init__(self, folder: Folder, *, sink: Sink, group: str,
                 dead_letters: DeadLetters | None = None, generation: int | None = None
                 ) -> None:
        self.folder = folder
        self.sink = sink
        self.group = group
        self.dead_letters = dead_letters
        self._dlq_backlog: list[DeadLetter] = []  # letters not produced yet
        self._pinned = generation  # replay's: written whatever the pointer says
        self._gen: int | None = None
        self._progress: dict[str, int] = {}  # topic:partition -> last offset written
        # process(), fold()/flush() and the folder's users between batches share the
        # folder's state: never interleave them
        self._lock = asyncio.Lock()
        #: Called with "folded" / "written" as a batch passes those stages (streams.trace).
        self.on_stage: Callable[[str], None] | None = None
        #: Called with the sessions each deferred fold folded (replay reads their row
        #: keys ahead of the flush).
        self.on_folded: Callable[[list[str]], None] | None = None
        # deferred (replay): progress folded but not written, the sessions folded since
        # the last flush, the sessions earlier flushes wrote, a flush in the background
        self._unflushed: dict[str, int] = {}
        self._folded: dict[str, None] = {}
        self._flushed: set[str] = set()
        self._flushing: asyncio.Future[BatchReport] | None = None

    @property
    def lock(self) -> asyncio.Lock:
        """Held by every batch (and by whatever uses the folder's state between them)."""
        return self._lock

    def forget(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Drop what is kept of sessions and progress (all, or of these (topic,
        partition)s): a rebalance, a restart's assignment, a new generation."""
        parts = None if partitions is None else list(partitions)
        self.folder.forget(parts)
        if parts is None:
            self._progress.clear()
            return
        gone = set(parts)
        for key in [k for k in self._progress if _split_tp(k) in gone]:
            del self._progress[key]

    # -- upkeep between batches: none here (streams.processor rebuilds bumped units) ----
    def schedule_converge(self, topic: str, partitions: Iterable[int]) -> None:
        """After an assignment: the upkeep of ``partitions`` (:meth:`converge_step`)."""

    @property
    def converging(self) -> bool:
        return False

    async def converge_step(self, limit: int = 64, concurrency: int = 4) -> int:
        return 0  # rows rewritten

    async def generation(self) -> int:
        """The generation to write (pinned, or the pointer's: read now); a new one
        forgets every session kept (states are the same fold, offsets guard per
        generation)."""
        gen = self._pinned if self._pinned is not None else await self.sink.generation()
        if gen != self._gen:
            if self._gen is not None:
                self.forget()
            self._gen = gen
        return gen

    # -- the live batch ------------------------------------------------------------------
    async def process(self, records: Sequence[Record]) -> BatchReport:
        """Fold ``records``, write them, then the tenant writes and the progress."""
        if not records:
            return BatchReport()
        async with self._lock:
            return await self._process(records)

    async def pipelined(self, records: Sequence[Record], previous: InFlight | None
                        ) -> tuple[BatchReport | None, InFlight | BatchReport]:
        """Fold ``records`` while ``previous``'s write is in flight (ADR 0014); finish
        ``previous`` before anything of this batch is written (a refused session is
        refolded from its row, this batch's records of it too; a moved generation folds
        both again). Returns ``previous``'s report (None: none) and this batch in
        flight, or its report when written here (dead letters, no one-call write). The
        caller commits ``previous`` now, this batch after its :meth:`complete`."""
        async with self._lock:
            flight = PreviousBatch(previous)
            current = await self._begin(records, flight) if records else BatchReport()
            await flight.settle(self)  # (done already unless the batch ended early)
            return flight.report, current

    async def complete(self, flight: InFlight) -> BatchReport:
        """Wait for ``flight``'s write and finish its batch (outcomes, refolds, the
        progress): after this its offsets may be committed."""
        async with self._lock:
            report, _ = await self._finish(flight)
            return report

    async def _process(self, records: Sequence[Record]) -> BatchReport:
        current = await self._begin(records, PreviousBatch(None))
        if isinstance(current, BatchReport):
            return current
        report, _ = await self._finish(current)
        return report

    async def _begin(self, records: Sequence[Record], previous: PreviousBatch
                     ) -> InFlight | BatchReport:
        if self._folded:
            raise RuntimeError("flush() the folded sessions before process()")
        report = BatchReport(records=len(records))
        # The generation is read once and then checked where the batch is written: in
        # the one-call batch write (the script refuses a moved pointer and writes
        # nothing), else by a read before the first write. Either check runs after the
        # batch was consumed, as a read per batch would, so a replay that switched the
        # pointer meanwhile reads these records in its catch-up (streams.replay).
        gen = self._gen if self._gen is not None else await self.generation()
        batch = await self._batch(records, gen, deferred=False, concurrent=True)
        folded = await self.folder.fold(batch)
        report.skipped += folded.skipped
        report.dead_letters += folded.dead
        if self.on_stage is not None:
            self.on_stage("folded")
        refused = await previous.settle(self)
        if refused is True:  # the generation moved: both batches are folded again
            return await self._process(records)
        writes, later = folded.writes, list(folded.later)
        if refused:
            # folded on a state whose write was refused: refolded from the stored row
            back = [f.write.session_id for f in writes if f.write.session_id in refused]
            if back:
                writes = [f for f in writes if f.write.session_id not in refused]
                later += back
        if later:
            more = await self.folder.fold_later(batch, later)
            report.skipped += more.skipped
            report.dead_letters += more.dead
            writes = [*writes, *more.writes]
        high = {f"{batch.topic}:{p}": off for p, off in highest_offsets(records).items()}
        flight = InFlight(batch, report, writes, high)
        one_call = getattr(self.sink, "write_batch", None)
        if (one_call is not None and not report.dead_letters and not self._dlq_backlog
                and self._pinned is None):
            flight.task = asyncio.ensure_future(
                one_call(gen, [f.write for f in writes], self.group, high))
            return flight
        if await self._generation_moved(gen):
            return await self._moved(records)
        report, _ = await self._finish(flight)
        return report

    async def _finish(self, flight: InFlight) -> tuple[BatchReport, set[str] | bool]:
        """Wait for the batch's write, then its outcomes: the sessions whose write did
        not apply (returned; True: the generation moved and the batch was folded again)
        are forgotten, the conflicting ones refolded; then the tenant writes and the
        progress."""
        flight.done = True
        report, gen, high = flight.report, flight.batch.generation, flight.high
        batch: BatchOutcome | None = None
        if flight.task is not None:
            task, flight.task = flight.task, None
            batch = await task
            if batch is not None and batch.moved:
                return await self._moved(flight.records), True
            if batch is None and await self._generation_moved(gen):
                return await self._moved(flight.records), True
        writes = flight.writes
        outcomes: Sequence[WriteOutcome] = (
            batch.outcomes if batch is not None
            else await self.sink.write_sessions(gen, [f.write for f in writes]) if writes
            else [])
        applied, refused, conflicts = self._outcomes(report, writes, outcomes)
        redone = await self._refold(flight, conflicts)
        if batch is None:
            await self._send_dead_letters(report, high)
            await self.sink.write_tenant(gen, [*applied, *redone], self.group, high)
        elif not batch.progress_written:
            # a conflict held the progress back: the refolded sessions' index and feed
            # entries and the progress now (the applied ones' went with the batch)
            await self.sink.write_tenant(gen, redone, self.group, high)
        self.folder.settled()
        if self.on_stage is not None:
            self.on_stage("written")
        for tp, off in high.items():
            self._progress[tp] = max(self._progress.get(tp, -1), off)
        return report, refused

    def _outcomes(self, report: BatchReport, writes: Sequence[SessionFold],
                  outcomes: Sequence[WriteOutcome]
                  ) -> tuple[list[SessionWrite], set[str], list[str]]:
        """Count each write's outcome: (the writes applied, the sessions refused, the
        ones of them that conflicted). A refused session is forgotten by the folder."""
        applied: list[SessionWrite] = []
        refused: set[str] = set()
        conflicts: list[str] = []
        for f, outcome in zip(writes, outcomes, strict=True):
            sid = f.write.session_id
            if outcome.status == "applied":
                report.sessions_written += 1
                for verdict, n in f.verdicts.items():
                    report.verdicts[verdict] = report.verdicts.get(verdict, 0) + n
                if f.quarantined:
                    report.quarantined.append(sid)
                if f.rebuilt:
                    report.rebuilt[sid] = f.rebuilt
                applied.append(f.write)
                continue
            refused.add(sid)
            report.sessions_noop += 1
            self.folder.refused(sid)
            if outcome.status == "stale":
                # At or past our last offset: another pass (a worker that took the
                # partition over meanwhile) wrote these records and emitted their feed
                # entry. No second entry: this write came from a state that may have
                # missed that pass, so its as_of_seq need not be the stored one. (A
                # retry whose lost reply had applied is "applied": the sink says so.)
                continue
            report.conflicts += 1
            conflicts.append(sid)
        return applied, refused, conflicts

    async def _refold(self, flight: InFlight, conflicts: list[str]) -> list[SessionWrite]:
        """Refold the conflicting sessions from their stored rows and write them, again
        while they keep changing (up to ``MAX_CONFLICT_RETRIES`` writes in all)."""
        redone: list[SessionWrite] = []
        report, gen = flight.report, flight.batch.generation
        for _ in range(MAX_CONFLICT_RETRIES - 1):
            if not conflicts:
                break
            again = await self.folder.fold_later(flight.batch, conflicts)
            report.skipped += again.skipped
            outcomes = (await self.sink.write_sessions(gen, [f.write for f in again.writes])
                        if again.writes else [])
            applied, _, conflicts = self._outcomes(report, again.writes, outcomes)
            redone += applied
        if conflicts:
            log.warning("%d sessions kept changing under this worker; left for the next "
                        "batch", len(conflicts))
        return redone

    async def _generation_moved(self, gen: int) -> bool:
        """Whether the tenant's generation pointer moved from ``gen`` (one read)."""
        if self._pinned is not None:
            return False
        return await self.generation() != gen

    async def _moved(self, records: Sequence[Record]) -> BatchReport:
        """The pointer moved to another generation (a replay switched it) before this
        batch was written: nothing of it was written there; everything folded is
        forgotten and the batch is folded again for the new generation."""
        self._gen = None
        self.forget()
        return await self._process(records)

    # -- folding in memory, writing once (replay) ----------------------------------------
    async def fold(self, records: Sequence[Record]) -> BatchReport:
        """Fold a batch WITHOUT writing sessions; :meth:`flush` writes each session
        folded since the last flush with one script call, progress after them.

        For replay into a new generation nobody else writes: a long session costs one
        encode of its views instead of one per batch. Dead letters are sent per batch.
        """
        if not records:
            return BatchReport()
        async with self._lock:
            report = BatchReport(records=len(records))
            gen = await self.generation()
            batch = await self._batch(records, gen, deferred=True,
                                      concurrent=self._flushing is not None)
            folded = await self.folder.fold(batch)
            if folded.later:
                await self._settle_into(report)  # they move with their rows as written
                folded.add(await self.folder.fold_later(batch, folded.later))
            report.skipped += folded.skipped
            report.dead_letters += folded.dead
            self._folded.update(dict.fromkeys(folded.sessions))
            if self.on_folded is not None:
                self.on_folded(folded.sessions)
            high = {f"{batch.topic}:{p}": off for p, off in highest_offsets(records).items()}
            await self._send_dead_letters(report, high)
            for tp, off in high.items():
                self._unflushed[tp] = max(self._unflushed.get(tp, -1), off)
                self._progress[tp] = max(self._progress.get(tp, -1), off)
            return report

    @property
    def unflushed_sessions(self) -> int:
        """Sessions folded since the last flush."""
        return len(self._folded)

    def settled_sessions(self) -> list[str]:
        """The sessions an earlier flush wrote that nothing folded since (replay: once
        the log's end is read, their rows in the new generation are final). After
        :meth:`settle_flush`: a background flush's sessions are not written yet."""
        if self._flushing is not None:
            raise RuntimeError("settled_sessions during a background flush: settle it first")
        return [sid for sid in self._flushed if sid not in self._folded]

    async def flush(self, background: bool = False) -> BatchReport:
        """Write every session folded since the last flush (one script call each), then
        the tenant writes and the progress; a session another writer moved meanwhile is
        counted as a conflict. ``background``: sealing and writing go on while the
        caller folds on (ADR 0015); :meth:`settle_flush` (and the next flush, or a fold
        that moves a session to another folder) waits for them."""
        async with self._lock:
            report = await self.settle_flush()
            writes = self.folder.take()
            if not writes and not self._unflushed:
                return report
            gen = self._gen if self._gen is not None else await self.generation()
            progress, self._unflushed = self._unflushed, {}
            self._folded = {}
            self._flushing = asyncio.ensure_future(self._send(gen, writes, progress))
            if not background:
                await self._settle_into(report)
            return report

    async def settle_flush(self) -> BatchReport:
        """Wait for a background flush (none: an empty report); its report."""
        task, self._flushing = self._flushing, None
        return BatchReport() if task is None else await task

    def abandon_flush(self) -> None:
        """Cancel a background flush (the caller failed and stops)."""
        task, self._flushing = self._flushing, None
        if task is not None:
            task.cancel()

    async def _settle_into(self, report: BatchReport) -> None:
        """Settle a flush in flight (if any) and add what it wrote to ``report``."""
        if self._flushing is not None:
            done = await self.settle_flush()
            report.sessions_written += done.sessions_written
            report.conflicts += done.conflicts

    async def _send(self, gen: int, writes: list[SessionFold], progress: Mapping[str, int]
                    ) -> BatchReport:
        """Seal ``writes`` and write them, slice by slice: Redis applies one slice while a
        thread seals the next; then the tenant writes and the progress. Touches no
        folder state but through :meth:`Folder.flushed`."""
        report = BatchReport()
        done: list[SessionWrite] = []
        threaded = any(f.seal is not None for f in writes)

        def seal(part: list[SessionFold]) -> list[SessionFold]:
            return [f if f.seal is None else replace(f, write=f.seal(f.write)) for f in part]

        async def sealed(part: list[SessionFold]) -> list[SessionFold]:
            return await asyncio.to_thread(seal, part) if threaded and part else seal(part)

        current = await sealed(writes[:FLUSH_SLICE])
        for i in range(0, len(writes), FLUSH_SLICE):
            sending = asyncio.ensure_future(
                self.sink.write_sessions(gen, [f.write for f in current]))
            try:
                upcoming = await sealed(writes[i + FLUSH_SLICE:i + 2 * FLUSH_SLICE])
            except BaseException:
                sending.cancel()
                raise
            for f, outcome in zip(current, await sending, strict=True):
                sid = f.write.session_id
                if outcome.status == "applied":
                    report.sessions_written += 1
                    done.append(f.write)
                    self._flushed.add(sid)
                else:
                    report.conflicts += 1
                    self._flushed.discard(sid)
                self.folder.flushed(f, outcome)
            current = upcoming
        await self.sink.write_tenant(gen, done, self.group, progress)
        return report

    # -- the parts every batch shares ----------------------------------------------------
    async def _batch(self, records: Sequence[Record], gen: int, *, deferred: bool,
                     concurrent: bool) -> Batch:
        """The batch as a folder gets it, with the progress of its partitions (read from
        the sink once per partition)."""
        topic = records[0].topic
        tps = sorted({_tp(r.topic, r.partition) for r in partition_heads(records)})
        missing = [tp for tp in tps if tp not in self._progress]
        if missing:
            self._progress.update(await self.sink.load_progress(self.group, missing))
        progress = {p: off for tp, off in self._progress.items()
                    if (p := _partition_of(tp, topic)) is not None}
        return Batch(records, topic, gen, progress, deferred, concurrent)

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


def _tp(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _split_tp(key: str) -> tuple[str, int]:
    topic, _, part = key.rpartition(":")
    return topic, int(part)


def _partition_of(tp: str, topic: str) -> int | None:
    """The partition of a ``topic:partition`` name when it is of ``topic``."""
    t, _, p = tp.rpartition(":")
    return int(p) if t == topic else None


__all__ = ["FLUSH_SLICE", "MAX_CONFLICT_RETRIES", "BatchCycle", "InFlight"]
