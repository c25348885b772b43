"""The native fold path: ``Processor.fold``/``flush`` over the Rust extension.

``sessionstream._native`` (the ``native/`` crate, built by the project's install) decodes
a batch's Avro records by schema fingerprint, applies the admission rule and folds
every built-in unit (index, turns, tools, usage, todo, plan, goal, business,
compaction, rejections and the surface, the model's message history: native/src/
surface.rs) without a Python object per event, and hands back each session's Redis
fields as text (chunked units as heads plus the item texts from the first chunk
changed, ADR 0013). With the default registry no event is decoded in Python. A custom
unit of the registry stays Python: the extension returns the record indices (and
envelopes) of the admitted events of the types it reads, and only those records become
Python events.

The Python processor stays the reference and takes over whatever the extension does
not fold exactly: records it cannot decode (dead letters, with the Python codec's
message; a record it refuses but Python decodes, e.g. a schema version it does not
know yet, sends the whole batch to the Python fold), and sessions whose events it
cannot fold (a quarantine, data of an unexpected shape, a compaction replace whose
range the surface refuses, a Python unit that raises, a deletion's audit event): their
state moves to the Python processor through the same fields the sink stores.

Sealed content (ADR 0011) is opened in the extension when the pipeline's opener is the
governance one (:class:`~sessionstream.governance.opener.SealedContentOpener`): the key
store and the unwrapping stay here, the extension asks :func:`_key_lookup` for each
(key session, class) and gets the unwrapped data key or "shredded" / "missing" (its
content then reads as the reference placeholders); it keeps an active or shredded key
across batches while the store's :func:`_key_epoch` stays the same (a shred anywhere
changes it, within the store's shred-feed interval) and the store's own cache would
still answer it (a missing key is asked again each batch). A part the
extension does not open on the plain success path (moved, tampered, not lossless
JSON) hands its session to the Python opener, which quarantines it with its reason.

The ``fold`` setting (``Settings.fold``): ``auto`` (native when the extension is
installed and the pipeline uses the built-in units and codec, else Python), ``native`` (required:
an error names the install command when it is missing) or ``python``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream import native
from sessionstream.core import codec
from sessionstream.core.admission import WINDOW
from sessionstream.core.events import FORMAT_VERSION
from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.pipeline import ReaderPipeline, Record, Undecodable
from sessionstream.core.privacy import DataClass, unit_class
from sessionstream.core.projections import Registry
from sessionstream.core.projections.base import ProjectionUnit
from sessionstream.core.projections.business import BusinessUnit
from sessionstream.core.projections.compaction import CompactionUnit
from sessionstream.core.projections.domain import GoalUnit, PlanUnit, TodoUnit
from sessionstream.core.projections.index import IndexUnit
from sessionstream.core.projections.rejections import RejectionsUnit
from sessionstream.core.projections.surface import SurfaceUnit
from sessionstream.core.projections.tools import ToolsUnit
from sessionstream.core.projections.turns import TurnsUnit
from sessionstream.core.projections.usage import UsageUnit
from sessionstream.core.rows import (
    CHUNK_ITEMS,
    SEALED_PREFIX,
    MetaFields,
    SessionRow,
    Stored,
    chunk_count,
    manifest,
)
from sessionstream.core.settings import Env
from sessionstream.native import ext as _native  # absent: the Python fold
from sessionstream.streams.batch import native_items, partition_heads
from sessionstream.streams.errors import StreamsError
from sessionstream.streams.ports import BatchOutcome, SessionWrite, WriteOutcome
from sessionstream.streams.processor import BatchReport, Processor
from sessionstream.streams.session_row import CachedSession, chunked_fields

#: Sealing with the digests replay keeps (an older build: hashed in Python instead).
_digested_seal = getattr(_native, "seal_row_digested", None)

#: The built-in unit classes the extension folds, by key.
NATIVE_UNITS: dict[str, type] = {
    "index": IndexUnit, "turns": TurnsUnit, "usage": UsageUnit, "plan": PlanUnit,
    "goal": GoalUnit, "rejections": RejectionsUnit, "tools": ToolsUnit, "todo": TodoUnit,
    "business": BusinessUnit, "compaction": CompactionUnit, "surface": SurfaceUnit,
}
log = logging.getLogger("sessionstream.streams.worker")

FOLDS = ("auto", "native", "python")
#: Sessions per slice of a deferred flush (the sink's call size).
FLUSH_SLICE = 256
#: Sessions whose sealed fields' digests a replay keeps (``NativeFold.keep_digests``);
#: past it the compare opens both rows of the others (ADR 0015).
DIGEST_SESSIONS = 200_000
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


schema_fingerprints = codec.schema_fingerprints


class NativeFold:
    """Drives ``processor`` through the extension: ``fold()``/``flush()`` (replay) and
    ``process()`` (the live worker: fold, write, per batch)."""

    def __init__(self, processor: Processor) -> None:
        reason = why_not(processor.pipeline)
        if reason is not None:
            raise NativeUnavailable(f"native fold unavailable: {reason}; {INSTALL_HINT}")
        assert _native is not None
        self.proc = processor
        reg = processor.pipeline.registry
        self._py_units = tuple(u for u in reg.units if u.key not in NATIVE_UNITS)
        self._py_registry = Registry(self._py_units)
        py_types: set[str] = set()
        catalog = [t.name for t in processor.pipeline.catalog]
        for u in self._py_units:
            py_types |= set(catalog) if u.types is None else set(u.types)
        self._opener = processor.pipeline.opener
        if self._opener is not None:
            # The opener learns each session's lineage from its session/start (metadata):
            # it must see them, so a sealed event handed over later opens as in Python.
            py_types.add("session/start")
        self._all_keys = frozenset(u.key for u in reg.units)
        versions = {k: v for k, v in reg.versions().items() if k in NATIVE_UNITS}
        self.folder = _native.Folder(schema_fingerprints(), FORMAT_VERSION, catalog,
                                     sorted(py_types), versions, WINDOW)
        cipher = _cipher_of(self._opener)
        if cipher is not None:
            self.folder.set_opener(cipher.tenant, _key_lookup(cipher), _placeholder(cipher),
                                   _key_epoch(cipher))
        self._py_states: dict[str, dict[str, Any]] = {}  # Python units' states per session
        self._py_changed: dict[str, set[str]] = {}
        self._written: dict[str, int] = {}  # as_of_offset last written, per session
        self._dirty: dict[str, None] = {}  # native sessions folded since the last flush
        self._python: set[str] = set()  # sessions the Python processor owns now
        self._gen: int | None = None  # the live path's generation (reset on a change)
        processor.cached_elsewhere = self.folder.has
        self._native_units = tuple(u for u in reg.units if u.key in NATIVE_UNITS)
        #: The governance row cipher, when the codec seals with it: the extension seals.
        self._row_cipher = _row_cipher_of(processor.codec.rows)
        self._unit_classes = {u.key: None if (c := unit_class(u.key)) is None else c.value
                              for u in reg.units}
        #: the classes a row's sealed fields need keys of (asked ahead for new sessions)
        self._row_classes = sorted({c for u in reg.units if (c := unit_class(u.key))
                                    is not None}, key=lambda c: c.value)
        #: sessions started without a row load (their first event was in the batch)
        self.fresh_starts = 0
        # Chunked units (ADR 0013), per session, as last written: the Python units'
        # states, every chunked unit's chunk counts. The extension hands the native
        # ones' heads and the items from the first chunk its batches changed.
        self._native_chunked = {u.key: u for u in reg.units
                                if u.key in NATIVE_UNITS and u.collections}
        self.folder.set_chunk_shapes({
            key: [(c.name, c.kind, c.view_key, c.state_key) for c in u.collections]
            for key, u in self._native_chunked.items()})
        self._py_base: dict[str, dict[str, Any]] = {}
        self._chunks: dict[str, dict[str, Stored]] = {}
        self._memo: dict[str, tuple[dict[str, Any], dict[str, Stored]]] = {}
        #: With ``keep_digests`` (replay): per session, per sealed field written by this
        #: fold, (:func:`sealed_ref` of the value stored, the digest of its clear text),
        #: so replay's compare opens only the live row (ADR 0015).
        self.keep_digests = False
        #: Called with the sessions each ``fold`` folded natively (replay reads their
        #: row keys ahead of the flush).
        self.on_folded: Callable[[list[str]], None] | None = None
        self.digests: dict[str, dict[str, tuple[str, bytes]]] = {}
        self._sealing: dict[str, dict[str, tuple[str, bytes]]] = {}  # until applied
        #: a background flush (``flush(background=True)``) and the sessions whose write
        #: in it did not apply (rewritten whole by their next write)
        self._flushing: asyncio.Future[BatchReport] | None = None
        self._rewrites: list[str] = []
        #: everything kept per session beside the extension (forgotten with it)
        self._per_session: tuple[dict[str, Any], ...] = (
            self._py_states, self._py_changed, self._written, self._dirty, self._py_base,
            self._chunks, self._memo, self.digests, self._sealing)

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
                    if (p := _partition_of(tp, topic)) is not None}
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

    def _python_units_or_hand_over(self, records: Sequence[Record], native: Any,
                                   envelopes: Any, handed: list[Any]) -> list[str]:
        """Run the Python units over each natively folded session; a session they
        cannot fold is restored in the extension and handed to the Python processor
        (appended to ``handed`` with all its records). Returns the sessions kept."""
        kept: list[str] = []
        for sid, _partition, idxs in native:
            if idxs and not self._apply_python_units(sid, idxs, envelopes):
                self.folder.restore(sid)
                handed.append((sid, [i for i, r in enumerate(records)
                                     if _is_of(r, sid, self.proc.pipeline)]))
                continue
            kept.append(sid)
        return kept

    def _apply_python_units(self, sid: str, idxs: list[int],
                            envelopes: Mapping[int, tuple[Any, ...]]) -> bool:
        states: Mapping[str, Any] = self._py_states.get(sid) or self._py_registry.init_states()
        changed = self._py_changed.setdefault(sid, set())
        new_changed: set[str] = set()
        try:
            for i in idxs:
                ev = _event(envelopes[i])  # opened by the extension when it was sealed
                if self._opener is not None and ev.type == "session/start":
                    self._opener.open(ev)  # learns the lineage (for a later hand-over)
                states, ch = self._py_registry.apply(states, ev)
                new_changed.update(ch)
        except Exception:  # ProjectionError or a bad record: the Python reference decides
            return False
        self._py_states[sid] = dict(states)
        changed |= new_changed
        return True

    async def _fold_in_python(self, records: Sequence[Record],
                              native: list[tuple[str, int, list[int]]],
                              report: BatchReport) -> BatchReport:
        await self._settle_into(report)  # the sessions move with their rows as written
        for sid, _, _ in native:
            self.folder.restore(sid)
        sids: dict[str, None] = {}
        for r in records:
            d = self.proc.pipeline.decode(r)
            if not isinstance(d, Undecodable):
                sids[d.session_id] = None
        for sid in sids:
            self._export(sid)
        self._python |= set(sids)
        return await self.proc.fold(records)

    def _export(self, sid: str) -> None:
        """Move a natively folded session to the Python processor's cache."""
        proc = self.proc
        got = self.folder.export(sid)
        self._dirty.pop(sid, None)
        self.digests.pop(sid, None)  # the Python processor writes it from now on
        if got is None:
            return
        fields, native_changed = got
        py = self._py_states.pop(sid, None) or self._py_registry.init_states()
        changed = set(native_changed) | self._py_changed.pop(sid, set())
        for unit in self._py_units:
            view, state = unit.encode(py[unit.key])
            fields[SessionRow.view(unit.key)] = view
            fields[SessionRow.state(unit.key)] = state
            fields[SessionRow.state_version(unit.key)] = str(unit.state_version)
        meta = json.loads(fields[SessionRow.META])
        cur = proc.cursor_from_fields(sid, int(meta[MetaFields.PARTITION]), fields)
        written = self._written.pop(sid, None)
        # The base is the row as written: the Python units' states as last written; the
        # native chunked units (no such state here) are rewritten whole when changed.
        py_base = self._py_base.pop(sid, {})
        chunks = self._chunks.pop(sid, {})
        base = CachedSession(sid, cur.partition, cur.admission, {**cur.states, **py_base},
                             as_of_offset=-1 if written is None else written,
                             stored=written is not None, chunks=chunks,
                             pending=frozenset(u.key for u in proc.codec.units
                                               if u.collections and u.key not in py_base))
        proc.adopt(cur, base, set(self._all_keys) if written is None else changed)

    async def _hand_over(self, gen: int, records: Sequence[Record],
                         handed: list[tuple[str, list[int]]], report: BatchReport) -> None:
        proc = self.proc
        await self._settle_into(report)  # the sessions move with their rows as written
        by_session: dict[str, list[Any]] = {}
        for sid, idxs in handed:
            if sid not in self._python:
                self._export(sid)
                self._python.add(sid)
            items = []
            for i in idxs:
                decoded = proc.decode_item(records[i], report)
                if decoded is not None:
                    items.append((records[i], decoded[1]))
            by_session[sid] = items
        await proc.fold_sessions(gen, by_session, report)

    async def flush(self, background: bool = False) -> BatchReport:
        """Write every session folded since the last flush (replay's deferred fold).

        ``background``: the rows are taken out of the extension now (the folder is not
        touched again by this flush), and sealing, digests and the Redis writes go on
        while the caller folds the next batches (ADR 0015); :meth:`settle_flush` waits
        for them, and the next flush (or a hand-over to the Python processor) does
        first. The returned report then counts only the Python processor's sessions."""
        proc = self.proc
        report = await self.settle_flush()
        if self._dirty:
            gen = await proc.current_generation()
            unsealed = [self._unsealed(sid) for sid in self._dirty]
            self._dirty.clear()
            self._flushing = asyncio.ensure_future(self._send(gen, unsealed))
            if not background:
                await self._settle_into(report)
        py = await proc.flush()
        report.sessions_written += py.sessions_written
        report.conflicts += py.conflicts
        return report

    async def settle_flush(self) -> BatchReport:
        """Wait for a background flush (none: an empty report); its report."""
        task, self._flushing = self._flushing, None
        report = BatchReport() if task is None else await task
        rewrites, self._rewrites = self._rewrites, []
        for sid in rewrites:  # its next write gives every item (this one did not apply)
            self.folder.rewrite(sid)
        return report

    async def _settle_into(self, report: BatchReport) -> None:
        """Settle a flush in flight (if any) and add what it wrote to ``report``."""
        if self._flushing is not None:
            done = await self.settle_flush()
            report.sessions_written += done.sessions_written
            report.conflicts += done.conflicts

    def abandon_flush(self) -> None:
        """Cancel a background flush (the caller failed and stops)."""
        task, self._flushing = self._flushing, None
        if task is not None:
            task.cancel()

    async def _send(self, gen: int, unsealed: list[SessionWrite]) -> BatchReport:
        """Seal (and digest) ``unsealed`` and write them, slice by slice: Redis applies
        one slice while a thread seals the next. Touches no folder state: a write that
        did not apply is noted for :meth:`settle_flush` to rewrite."""
        proc = self.proc
        report = BatchReport()
        done: list[SessionWrite] = []

        def build(part: list[SessionWrite]) -> list[SessionWrite]:
            return [self._sealed(w) for w in part]

        writes = await asyncio.to_thread(build, unsealed[:FLUSH_SLICE])
        for i in range(0, len(unsealed), FLUSH_SLICE):
            sending = asyncio.ensure_future(proc.sink.write_sessions(gen, writes))
            nxt = unsealed[i + FLUSH_SLICE:i + 2 * FLUSH_SLICE]
            try:
                upcoming = await asyncio.to_thread(build, nxt) if nxt else []
            except BaseException:
                sending.cancel()
                raise
            for w, outcome in zip(writes, await sending, strict=True):
                memo = self._memo.pop(w.session_id)
                if outcome.status == "applied":
                    report.sessions_written += 1
                    self._written[w.session_id] = w.last_offset
                    self._py_base.setdefault(w.session_id, {}).update(memo[0])
                    self._chunks.setdefault(w.session_id, {}).update(memo[1])
                    self._digested(w)
                    done.append(w)
                else:
                    report.conflicts += 1
                    self.digests.pop(w.session_id, None)
                    self._sealing.pop(w.session_id, None)
                    self._rewrites.append(w.session_id)
            writes = upcoming
        await proc.sink.write_tenant(gen, done, proc.group, {})
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
            flight = _Previous(previous)
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
        current = await self._begin(records, _Previous(None))
        if isinstance(current, BatchReport):
            return current
        report, _ = await self._finish(current)
        return report

    async def _begin(self, records: Sequence[Record], previous: _Previous
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
                    if (p := _partition_of(tp, topic)) is not None}
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
            self._prefetch_keys, [sid for sid, _, _ in ahead]))
            if ahead and self._row_cipher is not None else None)
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
                                         if _is_of(r, sid, proc.pipeline)]))
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

    def _prefetch_keys(self, sids: list[str]) -> None:
        """Look up (or create) the row keys of ``sids`` into the key store's cache, in
        one batch (the same keys the seal asks for, only earlier; a shred reaches that
        cache as it reaches any). An error is left to the seal, which asks again."""
        rows = self._row_cipher
        if not rows.cipher.enabled:
            return
        with contextlib.suppress(Exception):  # the seal asks again and raises it
            rows.cipher.store.data_keys(rows.tenant, [(sid, cls) for sid in sids
                                                      for cls in self._row_classes])

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
                               if _is_of(r, sid, proc.pipeline)]))
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

    async def _resume(self, gen: int, unknown: list[tuple[str, int, list[int]]],
                      fresh: Sequence[tuple[str, int]] = ()) -> None:
        """Start or load each session the folder met for the first time (one round trip);
        ``fresh`` ones (their first event is in this batch) are started unread."""
        proc = self.proc
        for sid, partition in fresh:
            self._forget_py(sid)
            self.folder.start(sid, partition)
        self.fresh_starts += len(fresh)
        if not unknown:
            return
        loaded = await proc.sink.load(gen, [sid for sid, _, _ in unknown])
        for sid, partition, _ in unknown:
            stored = loaded.get(sid)
            self._forget_py(sid)
            if not stored or SessionRow.AS_OF_OFFSET not in stored:
                self.folder.start(sid, partition)
                continue
            # the codec reassembles chunked rows and opens sealed fields; the native
            # units' states are handed over whole, as their encode gives them
            cur = proc.cursor_from_fields(sid, partition, stored)
            if cur.stale or cur.quarantine is not None:
                self._python.add(sid)  # the Python processor rebuilds or holds it
                continue
            fields = {k: stored[k] for k in (SessionRow.ADMISSION, SessionRow.META,
                                              SessionRow.AS_OF_OFFSET) if k in stored}
            for unit in self._native_units:
                view, state = unit.encode(cur.states[unit.key])
                fields[SessionRow.view(unit.key)] = view
                fields[SessionRow.state(unit.key)] = state
                fields[SessionRow.state_version(unit.key)] = str(unit.state_version)
            seed = getattr(self._opener, "seed_length", None)
            if self.folder.load(sid, fields, seed(sid) if seed is not None else None):
                self._py_states[sid] = {u.key: cur.states[u.key] for u in self._py_units}
                self._written[sid] = cur.as_of_offset
                self._py_base[sid] = {u.key: cur.states[u.key] for u in self._py_units
                                      if u.collections}
                # chunks per collection as stored: the next write deletes past them
                self._chunks[sid] = dict(cur.chunks)
            else:
                self._python.add(sid)  # the Python processor loads and folds it

    async def _python_live(self, gen: int, records: Sequence[Record],
                           handed: list[tuple[str, list[int]]],
                           report: BatchReport) -> list[SessionWrite]:
        """The Python processor's live fold and writes for ``handed`` sessions."""
        proc = self.proc
        by_session: dict[str, list[Any]] = {}
        for sid, idxs in handed:
            self._to_python(sid)
            items = []
            for i in idxs:
                decoded = proc.decode_item(records[i], report)
                if decoded is not None:
                    items.append((records[i], decoded[1]))
            if items:
                by_session[sid] = items
        return await proc.fold_and_write(gen, by_session, report) if by_session else []

    def _to_python(self, sid: str) -> None:
        """The Python processor owns ``sid`` from now on; a natively folded session was
        written up to its last batch, so Python continues from its stored row."""
        self._drop(sid)
        self._python.add(sid)

    def _drop(self, sid: str) -> None:
        self.folder.drop_session(sid)
        self._forget_py(sid)

    def _forget_py(self, sid: str) -> None:
        for d in self._per_session:
            d.pop(sid, None)

    def forget(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Drop cached sessions (all, or of these (topic, partition)s): a rebalance, or
        a new generation. The Python processor's cache goes too."""
        parts = None if partitions is None else list(partitions)
        self.proc.forget(parts)
        if parts is None:
            self.folder.forget()
            for d in self._per_session:
                d.clear()
            self._python.clear()
            return
        for sid in self.folder.forget_partitions({p for _, p in parts}):
            self._forget_py(sid)

    def _write(self, sid: str) -> SessionWrite:
        return self._sealed(self._unsealed(sid))

    def _unsealed(self, sid: str) -> SessionWrite:
        """The session's write with its fields in the clear: everything the folder and
        the Python units' states give (:meth:`_sealed` seals them; it touches neither)."""
        first = sid not in self._written
        codec = self.proc.codec
        deletes: list[str]
        counts: dict[str, Stored]
        if codec.chunked:
            # the native chunked units' chunk fields and manifests are built in the
            # extension (native_chunks below is the same in Python)
            got = self.folder.write_fields(sid, not first, codec.chunk,
                                           {} if first else self._chunks.get(sid, {}))
            assert got is not None
            fields, native_changed, deletes, counts = got
        else:  # every unit whole, as before ADR 0013
            whole = self.folder.fields(sid, not first)
            assert whole is not None
            fields, native_changed = whole
            fields.pop(SessionRow.AS_OF_SEQ, None)
            fields.pop(SessionRow.AS_OF_OFFSET, None)
            deletes, counts = [], {}
        py_changed = self._py_changed.pop(sid, set())
        states = self._py_states.get(sid) or self._py_registry.init_states()
        bases: dict[str, Any] = {}
        for unit in self._py_units:
            if first or unit.key in py_changed:
                state_now = states[unit.key]
                if unit.collections and codec.chunked:
                    counts[unit.key], _ = chunked_fields(
                        unit, None if first else self._py_base.get(sid, {}).get(unit.key),
                        state_now, None if first else self._chunks.get(sid, {}).get(unit.key),
                        fields, deletes, codec.chunk)
                    bases[unit.key] = state_now
                    view, state = unit.heads(state_now)
                else:
                    view, state = unit.encode(state_now)
                fields[SessionRow.view(unit.key)] = view
                fields[SessionRow.state(unit.key)] = state
                fields[SessionRow.state_version(unit.key)] = str(unit.state_version)
        self._memo[sid] = (bases, counts)
        as_of_seq, as_of_offset, last_time, partition = self.folder.position(sid)
        changed = self._all_keys if first else frozenset(native_changed) | py_changed
        return SessionWrite(
            session_id=sid, partition=partition,
            base_offset=self._written.get(sid, -1), last_offset=as_of_offset,
            as_of_seq=as_of_seq, fields=fields, changed=tuple(sorted(changed)),
            activity_ms=last_time or 0, force=False, deletes=tuple(deletes),
        )

    def _sealed(self, w: SessionWrite) -> SessionWrite:
        """``w`` with its content-bearing fields sealed in place (and, with
        ``keep_digests``, their digests noted until the write applies)."""
        fields = w.fields
        assert isinstance(fields, dict)
        if self.keep_digests and self._row_cipher is not None and _digested_seal is not None:
            # sealed and hashed in the extension, without the GIL (ADR 0015)
            got = self._seal_native(w.session_id, fields, _digested_seal)
            if w.session_id in self.digests or len(self.digests) < DIGEST_SESSIONS:
                self._sealing[w.session_id] = {name: (SEALED_REF + sha, digest)
                                               for name, sha, digest in got}
        elif self.keep_digests:
            clear = dict(fields)
            self._seal(w.session_id, fields)
            self._digest(w.session_id, clear, fields)
        else:
            self._seal(w.session_id, fields)
        return w

    def _digest(self, sid: str, clear: Mapping[str, str], sealed: Mapping[str, str]) -> None:
        """Note the digests of the fields the seal changed (replay's compare)."""
        if sid not in self.digests and len(self.digests) >= DIGEST_SESSIONS:
            return
        self._sealing[sid] = {name: (sealed_ref(value), field_digest(clear[name]))
                              for name, value in sealed.items() if value is not clear[name]
                              and value.startswith(SEALED_PREFIX)}

    def _digested(self, w: SessionWrite) -> None:
        """``w`` applied: its sealed fields' digests are the row's now."""
        sealing = self._sealing.pop(w.session_id, None)
        if sealing is None:
            return
        kept = self.digests.setdefault(w.session_id, {})
        for name in (*w.fields, *w.deletes):
            kept.pop(name, None)
        kept.update(sealing)

    def _seal_native(self, sid: str, fields: dict[str, str], seal: Any) -> Any:
        """``fields`` sealed in place by the extension with the governance row cipher
        (``seal``: ``seal_row`` or ``seal_row_digested``); what ``seal`` returns."""
        row_key, classes = self._row_cipher.row_key, _CLASSES

        def key_of(cls: str) -> bytes | None:
            return row_key(sid, classes[cls])
        return seal(self._row_cipher.tenant, sid, fields, self._unit_classes, key_of)

    def _seal(self, sid: str, fields: dict[str, str]) -> None:
        """Content-bearing fields are sealed in Redis, as the codec does: in the
        extension with the governance row cipher (byte-compatible, the Python codec
        opens them), else field by field through the codec's sealer."""
        rows = self.proc.codec.rows
        if rows is None:
            return
        if self._row_cipher is not None:
            self._seal_native(sid, fields, _native.seal_row)
            return
        for name in list(fields):
            ukey = _unit_of(name)
            if ukey is not None:
                fields[name] = rows.seal(sid, ukey, name, fields[name])


@dataclass(eq=False)
class InFlight:
    """A live batch folded, its session writes built and (``task``) its one call sent:
    :meth:`NativeFold.complete` (or the next :meth:`NativeFold.pipelined`) finishes it."""

    records: Sequence[Record]
    report: BatchReport
    gen: int
    mine: list[SessionWrite]
    verdicts: dict[str, dict[str, int]]
    high_tp: dict[str, int]
    #: sessions refolded by the Python processor because the previous batch's write
    #: of them was refused: native again from their next batch
    back: list[str]
    task: asyncio.Future[BatchOutcome | None] | None = None
    handed_writes: list[SessionWrite] = field(default_factory=list)
    #: finished (its outcomes read): the caller may commit its offsets
    done: bool = False


class _Previous:
    """The batch in flight while the next one is folded: finished once, at the first
    :meth:`settle` (which returns the sessions whose write did not apply, or True when
    the generation moved and it was folded again)."""

    def __init__(self, flight: InFlight | None) -> None:
        self.flight = flight
        self.report: BatchReport | None = None
        self.refused: set[str] | bool = set()

    async def settle(self, fold: NativeFold) -> set[str] | bool:
        if self.flight is not None:
            flight, self.flight = self.flight, None
            self.report, self.refused = await fold._finish(flight)
        return self.refused


#: How a sealed row field value starts (sessionstream.governance.rows.PREFIX).
#: How :func:`sealed_ref` starts.
SEALED_REF = SEALED_PREFIX + "sha1:"


def field_digest(text: str) -> bytes:
    """The digest a replay keeps of a field's clear text (BLAKE2b, 128 bits)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def sealed_ref(value: str) -> str:
    """A sealed value as replay's compare script hands it back instead of the value:
    the prefix, ``sha1:`` and the SHA-1 of the whole stored value (binds a kept digest
    to exactly that value)."""
    return SEALED_REF + hashlib.sha1(value.encode("utf-8")).hexdigest()


def native_chunks(unit: ProjectionUnit[Any], parts: list[tuple[str, int, int, list[str]]],
                  stored: Stored | None, fields: dict[str, str],
                  deletes: list[str], chunk: int = CHUNK_ITEMS) -> Stored:
    """The manifest and chunk fields of a native chunked unit, as
    :func:`streams.session_row.chunked_fields` writes them for a Python one. ``parts``:
    per collection (name, items, first item given, the item texts from it), the first
    given item at a chunk boundary at or before the first item changed since the
    session's last write; ``stored``: chunk size and chunks per collection in the row
    (None, or another chunk size: every chunk is written). Returns what is stored now."""
    kinds = {c.name: c.kind for c in unit.collections}
    size, had = stored if stored is not None else (0, {})
    lists: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    for name, n, start, items in parts:
        k = chunk_count(n, chunk)
        first = start // chunk if size == chunk and name in had else 0
        if start > first * chunk:
            raise AssertionError(f"native fold: {unit.key}.{name} items from {start}, the "
                                 f"row needs them from {first * chunk}")
        for i in range(first, k):
            lo, hi = i * chunk - start, min(n, (i + 1) * chunk) - start
            fields[SessionRow.part(unit.key, name, i)] = ",".join(t for t in items[lo:hi] if t)
        deletes.extend(SessionRow.part(unit.key, name, i)
                       for i in range(k, had.get(name, 0)))
        lists[name] = (kinds[name], n)
        counts[name] = k
    fields[SessionRow.parts(unit.key)] = manifest(
        lists, {c.view_key: c.name for c in unit.collections if c.view_key is not None},
        {c.state_key: c.name for c in unit.collections if c.state_key is not None}, chunk)
    return chunk, counts


#: The Python event of an envelope tuple of ``Folder.fold`` (data checked lossless
#: there, with the codec's rules).
_event = codec.event_from_envelope
_CLASSES = {c.value: c for c in DataClass}


def _cipher_of(opener: Any) -> Any:
    """The governance opener's cipher (None: no opener, or another kind of opener,
    whose sealed sessions the extension hands back)."""
    try:
        from sessionstream.governance.opener import SealedContentOpener
    except ImportError:  # pragma: no cover - the governance extra is part of the install
        return None
    return opener.cipher if isinstance(opener, SealedContentOpener) else None


def _row_cipher_of(rows: Any) -> Any:
    """The codec's sealer when it is the governance row cipher (whose format the
    extension writes), else None."""
    if rows is None or not hasattr(_native, "seal_row"):
        return None
    try:
        from sessionstream.governance.rows import RowCipher
    except ImportError:  # pragma: no cover - the governance extra is part of the install
        return None
    return rows if type(rows) is RowCipher else None


def _key_lookup(cipher: Any) -> Any:
    """What the extension asks per (key session, class): (state, unwrapped key), and
    until when it may keep the answer (with :func:`_key_epoch`), when the store says."""
    from sessionstream.core.privacy import DataClass, KeyState

    store, tenant = cipher.store, cipher.tenant
    classes = {c.value: c for c in DataClass}
    until = getattr(store, "lookup_until", None)

    def lookup(key_session: str, data_class: str) -> tuple[Any, ...]:
        cls = classes.get(data_class) or DataClass(data_class)
        if until is None:
            found, at = store.lookup(tenant, key_session, cls), None
        else:
            found, at = until(tenant, key_session, cls)
        if found.state is KeyState.ACTIVE and found.key is not None:
            return "active", bytes(found.key), at
        return found.state.value, None, at
    return lookup


def _key_epoch(cipher: Any) -> Any:
    """The store's (epoch, now) the extension checks its kept keys against at each batch
    (None: a store without one; keys are then asked again each batch)."""
    epoch = getattr(cipher.store, "cache_epoch", None)
    if epoch is None:
        return None
    tenant = cipher.tenant

    def current() -> tuple[int, float]:
        e, now = epoch(tenant)
        return int(e), float(now)
    return current


def _placeholder(cipher: Any) -> Any:
    """The reference placeholder at a path, as canonical JSON text."""
    from sessionstream.core.privacy import placeholder_at

    def placeholder(type_name: str, path: str, text: str) -> str:
        return canonical_dumps(placeholder_at(type_name, path, text, cipher.catalog))
    return placeholder


def _unit_of(field: str) -> str | None:
    """The unit owning a view, state or chunk field (the codec's sealing rule)."""
    if field.startswith(SessionRow.PART):
        return SessionRow.part_unit(field)
    for prefix in (SessionRow.VIEW, SessionRow.STATE):
        if field.startswith(prefix):
            return field[len(prefix):]
    return None


def _partition_of(tp: str, topic: str) -> int | None:
    t, _, p = tp.rpartition(":")
    return int(p) if t == topic else None


def _is_of(r: Record, sid: str, pipeline: ReaderPipeline) -> bool:
    d = pipeline.decode(r)
    return not isinstance(d, Undecodable) and d.session_id == sid


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
