"""The native fold path: ``Processor.fold``/``flush`` over the Rust extension.

``sessionstream._native`` (the ``native/`` crate, built by the project's install) decodes
a batch's Avro records by schema fingerprint, applies the admission rule and folds
every built-in unit (index, turns, tools, usage, todo, plan, goal, business,
compaction, rejections and the surface, the model's message history: native/src/
surface.rs) without a Python object per event, and hands back each session's Redis
fields as text (chunked units as heads plus the item texts from the first chunk
changed, ADR 0013). With the default registry no event is decoded in Python.

:class:`NativeFold` drives the batches (replay's ``fold``/``flush``, the live worker's
``process``/``pipelined``) and is composed of one job per module:
:mod:`~sessionstream.streams.native_state` (the folder and what is kept per session),
:mod:`~sessionstream.streams.native_flush` (the writes, built and flushed, also in the
background), :mod:`~sessionstream.streams.native_handover` (custom Python units, the
hand-over to the Python processor, which stays the reference, and loads from stored
rows) and :mod:`~sessionstream.streams.native_seal` (sealing, digests, the keys sealed
content in the log opens with).

The ``fold`` setting (``Settings.fold``): ``auto`` (native when the extension is
installed and the pipeline uses the built-in units and codec, else Python), ``native`` (required:
an error names the install command when it is missing) or ``python``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from sessionstream import native
from sessionstream.core import codec
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.settings import Env
from sessionstream.native import ext as _native  # absent: the Python fold
from sessionstream.streams.batch import native_items, partition_heads
from sessionstream.streams.errors import StreamsError
from sessionstream.streams.native_flush import InFlight, PreviousBatch
from sessionstream.streams.native_handover import HandOverFold
from sessionstream.streams.native_state import NATIVE_UNITS, is_of, partition_of
from sessionstream.streams.ports import BatchOutcome, SessionWrite, WriteOutcome
from sessionstream.streams.processor import BatchReport, Processor

log = logging.getLogger("sessionstream.streams.worker")

FOLDS = ("auto", "native", "python")
INSTALL_HINT = f"{native.INSTALL_HINT}, or set {Env.FOLD}=python"


class NativeUnavailable(StreamsError):
    """The fold setting says native but the extension cannot serve this pipeline."""


def available() -> bool:
    return _native is not None


def why_not(pipeline: ReaderPipeline) -> str | None:
    """Why the native fold cannot serve ``pipeline`` (None: it can)."""
    if _native is None:
        return native.WHY_NOT or "the native extension is not available"
    if pipeline._decode is not codec.decode:
        return "the pipeline uses another codec (e.g. the confluent wire)"
    units = {u.key: u for u in pipeline.registry.units}
    for key, cls in NATIVE_UNITS.items():
        unit = units.get(key)
        if unit is None or type(unit) is not cls:
            return f"the registry's {key!r} unit is not the built-in one"
    return None


class NativeFold(HandOverFold):
    """Drives ``processor`` through the extension: ``fold()``/``flush()`` (replay) and
    ``process()`` (the live worker: fold, write, per batch)."""

    def __init__(self, processor: Processor) -> None:
        reason = why_not(processor.pipeline)
        if reason is not None:
            raise NativeUnavailable(f"native fold unavailable: {reason}; {INSTALL_HINT}")
        super().__init__(processor)

    def settled_sessions(self) -> list[str]:
        """The sessions an earlier flush wrote that nothing folded since (replay: once
        the log's end is read, their rows in the new generation are final). After
        :meth:`settle_flush`: a background flush's sessions are not written yet."""
        if self._flushing is not None:
            raise RuntimeError("settled_sessions during a background flush: settle it first")
        return [sid for sid in self._written if sid not in self._dirty
                and sid not in self._python]

    @property
    def unflushed_sessions(self) -> int:
        return len(self._dirty) + self.proc.unflushed_sessions

    async def fold(self, records: Sequence[Record]) -> BatchReport:
        proc = self.proc
        if not records:
            return BatchReport()
        report = BatchReport(records=len(records))
        gen = await proc.current_generation()
        topic = records[0].topic
        await proc.load_progress_of(partition_heads(records))
        progress = {p: off for tp, off in proc.progress.items()
                    if (p := partition_of(tp, topic)) is not None}
        items = native_items(records)
        if self._flushing is None:
            got = self.folder.fold(items, progress, self._python)
        else:  # off the event loop, so a background flush's writes go on meanwhile
            got = await asyncio.to_thread(self.folder.fold, items, progress,
                                          set(self._python))
        dead, native, handed, high, skipped, envelopes, _ = got
        report.skipped += skipped
        for i in dead:
            item = proc.decode_item(records[i], report)
            if item is not None:  # Python reads what the extension refused: Python folds all
                return await self._fold_in_python(records, native, report)
        kept = self._python_units_or_hand_over(records, native, envelopes, handed)
        for sid in kept:
            self._dirty[sid] = None
        if self.on_folded is not None:
            self.on_folded(kept)
        if handed:
            await self._hand_over(gen, records, handed, report)
        high_tp = {f"{topic}:{p}": off for p, off in high.items()}
        await proc.send_dead_letters(report, high_tp)
        proc.note_unflushed(high_tp)
        return report

    # -- the live worker: one batch folded and written before its offsets are committed --
    async def process(self, records: Sequence[Record]) -> BatchReport:
        """The live batch, as ``Processor.process``: fold natively, write each touched
        session with one script call (compare-and-set on its stored offset), then the
        dead letters, the tenant writes and the partition progress. Sessions met for
        the first time are continued from their stored row (``Folder.load``), or handed
        to the Python processor when the extension cannot continue them exactly
        (quarantined, a bumped state_version, a row it cannot re-dump byte for byte);
        a write refused because the row moved is redone by the Python processor from
        the stored row, and the session is reloaded natively with its next batch."""
        if not records:
            return BatchReport()
        async with self.proc.lock:
            return await self._process(records)

    async def pipelined(self, records: Sequence[Record], previous: InFlight | None
                        ) -> tuple[BatchReport | None, InFlight | BatchReport]:
        """Fold ``records`` while ``previous``'s batch write is in flight (ADR 0014).

        ``previous`` is finished here once this batch is folded and its session writes
        are built, and before anything of this batch is written: its outcomes decide
        (a session whose write was refused is dropped, and this batch's records of it
        are folded again by the Python processor from the stored row); a moved
        generation folds both batches again. Returns ``previous``'s report (None
        without one) and this batch in flight (its one call sent), or its report when
        it was written here (a batch with hand-overs or dead letters, a sink without
        the one-call write). The caller commits ``previous`` after this returns, this
        batch only after its :meth:`complete`."""
        async with self.proc.lock:
            flight = PreviousBatch(previous)
            current = await self._begin(records, flight) if records else BatchReport()
            await flight.settle(self)  # (done already unless the batch ended early)
            return flight.report, current

    async def complete(self, flight: InFlight) -> BatchReport:
        """Wait for ``flight``'s write and finish its batch (bookkeeping, refolds, the
        progress): after this its offsets may be committed."""
        async with self.proc.lock:
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
        proc = self.proc
        report = BatchReport(records=len(records))
        # The generation is read once and then checked where the batch is written: in
        # the one-call batch write (the script refuses a moved pointer and writes
        # nothing), else by a read before the first write. Either check runs after the
        # batch was consumed, as the read per batch did, so a replay that switched the
        # pointer meanwhile reads these records in its catch-up (streams.replay).
        gen = self._gen
        if gen is None:
            gen = await proc.current_generation()
            if gen != self._gen:
                self.forget()
                self._gen = gen
        topic = records[0].topic
        await proc.load_progress_of(partition_heads(records))
        progress = {p: off for tp, off in proc.progress.items()
                    if (p := partition_of(tp, topic)) is not None}
        items = native_items(records)  # a consumed batch's messages: no Record each
        # sessions met for the first time, by the records' keys, are loaded first: one
        # fold decodes each record once (a second fold below is for what keys miss)
        # A session whose first record here is its first event (seq 0, past the
        # progress) is started without a row load: no row can hold it yet, and if one
        # does after all (another group, a lost progress) the write's compare-and-set
        # (base offset -1) refuses it and the session is folded from the stored row.
        if hasattr(self.folder, "new_sessions"):
            ahead = self.folder.new_sessions(items, self._python, progress)
        else:  # an extension built before new_sessions: every new session is loaded
            ahead = [(sid, p, False) for sid, p in self.folder.unknown_sessions(
                items, self._python)]
        # their rows' data keys are looked up (or created: file reads, an fsync) on a
        # thread meanwhile, so the seal below finds them in the key store's cache
        keys = (asyncio.ensure_future(asyncio.to_thread(
            self.sealer.prefetch_keys, [sid for sid, _, _ in ahead]))
            if ahead and self.sealer.row_cipher is not None else None)
        if ahead:
            await self._resume(gen, [(sid, p, []) for sid, p, fresh in ahead if not fresh],
                               [(sid, p) for sid, p, fresh in ahead if fresh])
        # the fold releases the GIL: on a thread, the event loop reads the previous
        # batch's reply meanwhile (nothing else touches the folder: proc.lock is held)
        dead, native, handed, high, skipped, envelopes, unknown = await asyncio.to_thread(
            self.folder.fold, items, progress, set(self._python), True)
        report.skipped += skipped
        # with dead letters the Python reference may fold the whole batch from the
        # stored rows: the previous batch is written first
        if dead and await previous.settle(self) is True:
            return await self._process(records)
        for i in dead:
            if proc.decode_item(records[i], report) is not None:
                # Python reads what the extension refused: the batch is Python's
                for sid, _, _ in [*native, *unknown, *((a, p, ()) for a, p in ahead)]:
                    self._to_python(sid)
                return await proc.process_locked(records)
        if unknown:
            await self._resume(gen, unknown)
            sub = sorted(i for _, _, idxs in unknown for i in idxs)
            _, n2, h2, _, s2, e2, u2 = await asyncio.to_thread(
                self.folder.fold, [items[i] for i in sub], progress, set(self._python), True)
            assert not u2, "every session was started or loaded"
            report.skipped += s2
            native += [(sid, p, [sub[j] for j in idxs]) for sid, p, idxs in n2]
            handed += [(sid, [sub[j] for j in idxs]) for sid, idxs in h2]
            envelopes.update({sub[j]: t for j, t in e2.items()})
        live = self._python_units_or_hand_over(records, native, envelopes, handed)
        if proc.on_stage is not None:
            proc.on_stage("folded")
        high_tp = {f"{topic}:{p}": off for p, off in high.items()}
        # Built now (overlapping the previous batch's write); what a write needs of the
        # session's last one (its offset, chunks, Python bases) is taken as written:
        # a write that is refused drops the session, and this one with it.
        # (sessions the previous batch's write refused, when it was finished above, are
        # no longer held: they are refolded below)
        early = previous.refused if previous.flight is None else set()
        assert isinstance(early, set)  # a moved generation returned above
        if keys is not None:
            await keys
        mine = [self._write(sid) for sid in live if sid not in early]
        verdicts = {}
        for w in mine:
            sid = w.session_id
            memo = self._memo.pop(sid)
            self._written[sid] = w.last_offset
            self._py_base.setdefault(sid, {}).update(memo[0])
            self._chunks.setdefault(sid, {}).update(memo[1])
            verdicts[sid] = self.folder.verdicts(sid)
        refused = await previous.settle(self)
        if refused is True:  # the generation moved: both batches were folded again
            return await self._process(records)
        back: list[str] = []
        if refused:
            # this batch folded them on a state whose write was refused: the Python
            # processor folds their records here from the stored row, as a conflict
            mine = [w for w in mine if w.session_id not in refused]
            for sid in live:
                if sid in refused:
                    back.append(sid)
                    handed.append((sid, [i for i, r in enumerate(records)
                                         if is_of(r, sid, proc.pipeline)]))
        flight = InFlight(records, report, gen, mine, verdicts, high_tp, back)
        one_call = getattr(proc.sink, "write_batch", None)
        if (one_call is not None and not handed and not report.dead_letters
                and not proc.dead_letters_pending and proc.pinned_generation is None):
            flight.task = asyncio.ensure_future(one_call(gen, mine, proc.group, high_tp))
            return flight
        # written here: the hand-overs first (the Python processor's own writes)
        if await self._generation_moved(gen):
            return await self._moved(records)
        if handed:
            flight.handed_writes = await self._python_live(gen, records, handed, report)
        report_now, _ = await self._finish(flight)
        return report_now

    async def _finish(self, flight: InFlight) -> tuple[BatchReport, set[str] | bool]:
        """Wait for the batch's write, then its bookkeeping: the sessions whose write did
        not apply (returned; True: the generation moved and the batch was folded again)
        are dropped or refolded by the Python processor, then the tenant writes and the
        progress."""
        proc = self.proc
        flight.done = True
        report, gen, mine, high_tp = flight.report, flight.gen, flight.mine, flight.high_tp
        batch: BatchOutcome | None = None
        if flight.task is not None:
            task, flight.task = flight.task, None
            batch = await task
            if batch is not None and batch.moved:
                return await self._moved(flight.records), True
            if batch is None and await self._generation_moved(gen):
                return await self._moved(flight.records), True
        outcomes: Sequence[WriteOutcome] = (
            batch.outcomes if batch is not None
            else await proc.sink.write_sessions(gen, mine) if mine else [])
        writes: list[SessionWrite] = list(flight.handed_writes)
        redo: list[tuple[str, list[int]]] = []
        refused: set[str] = set()
        for w, outcome in zip(mine, outcomes, strict=True):
            sid = w.session_id
            if outcome.status == "applied":
                report.sessions_written += 1
                for verdict, n in flight.verdicts.get(sid, {}).items():
                    report.verdicts[verdict] = report.verdicts.get(verdict, 0) + n
                writes.append(w)
                continue
            refused.add(sid)
            report.sessions_noop += 1
            if outcome.status == "stale":
                # at or past our last offset: another pass folded these records and
                # emitted their feed entry (as in the Python processor: none again);
                # reload with the next batch
                self._drop(sid)
                continue
            report.conflicts += 1  # moved under us: Python refolds from the stored row
            redo.append((sid, [i for i, r in enumerate(flight.records)
                               if is_of(r, sid, proc.pipeline)]))
        redone: list[SessionWrite] = []
        if redo:
            redone = await self._python_live(gen, flight.records, redo, report)
            writes += redone
        for sid in [*(s for s, _ in redo), *flight.back]:  # native again from its next batch
            self._python.discard(sid)
            proc.drop(sid)
        if batch is None:
            await proc.send_dead_letters(report, high_tp)
            await proc.sink.write_tenant(gen, writes, proc.group, high_tp)
        elif not batch.progress_written:
            # a conflict held the progress back: the redone sessions' index and feed
            # entries and the progress now (the applied ones' went with the batch)
            await proc.sink.write_tenant(gen, redone, proc.group, high_tp)
        if proc.on_stage is not None:
            proc.on_stage("written")
        proc.advance_progress(high_tp)
        return report, refused

    async def _generation_moved(self, gen: int) -> bool:
        """Whether the tenant's generation pointer moved from ``gen`` (one read)."""
        if self.proc.pinned_generation is not None:
            return False
        return await self.proc.current_generation() != gen

    async def _moved(self, records: Sequence[Record]) -> BatchReport:
        """The pointer moved to another generation (a replay switched it) before this
        batch was written: nothing of it was written there; everything folded is
        forgotten and the batch is folded again for the new generation."""
        self._gen = None
        self.forget()
        return await self._process(records)


def fold_driver(processor: Processor, fold: str) -> NativeFold | Processor:
    """What replay drives: the native fold or the processor itself, per ``fold``."""
    if fold not in FOLDS:
        raise NativeUnavailable(f"{Env.FOLD}={fold!r}: use " + ", ".join(FOLDS))
    if fold == "python":
        return processor
    reason = why_not(processor.pipeline)
    if reason is None:
        return NativeFold(processor)
    if fold == "native":
        raise NativeUnavailable(f"native fold unavailable: {reason}; {INSTALL_HINT}")
    native.warn_fallback(log, "this worker/replay", f"{reason}; {INSTALL_HINT}")
    return processor


def live_driver(processor: Processor, fold: str) -> NativeFold | Processor:
    """What the live worker (kafka engine) drives, per the ``fold`` setting: both have
    ``process(records)`` and ``forget(partitions)``."""
    return fold_driver(processor, fold)


__all__ = ["FOLDS", "NativeFold", "NativeUnavailable", "available", "fold_driver",
           "live_driver", "why_not"]
