"""The native folder: a batch folded by the Rust extension, the reference for the rest.

``sessionstream._native`` (the ``native/`` crate) decodes a batch's Avro records by
schema fingerprint, applies the admission rule and folds every built-in unit without a
Python object per event, and hands back each session's Redis fields as text (chunked
units as heads plus the items from the first chunk changed, ADR 0013).

What it does not fold exactly goes to the reference folder this folder holds
(:class:`~sessionstream.streams.fold_python.PythonFolder`): a custom unit's events (the
extension hands their envelopes over, and only those become Python events); a record it
cannot decode (dead-lettered with the Python codec's message; one Python decodes sends
the whole batch to the reference); a session it cannot fold (a quarantine, data of an
unexpected shape, a refused compaction replace, a Python unit that raises, a deletion's
audit event), owned by the reference from then on; and a session whose write was
refused, refolded by the reference from its stored row just that once (lent, and taken
back by :meth:`NativeFolder.settled`). A session met for the first time is started, or
loaded from its stored row. Sealing and digests: :mod:`~sessionstream.streams.native_seal`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sessionstream import native
from sessionstream.core import codec
from sessionstream.core.admission import WINDOW
from sessionstream.core.events import FORMAT_VERSION
from sessionstream.core.pipeline import ReaderPipeline, Record, Undecodable
from sessionstream.core.projections import Registry
from sessionstream.core.projections.business import BusinessUnit
from sessionstream.core.projections.compaction import CompactionUnit
from sessionstream.core.projections.domain import GoalUnit, PlanUnit, TodoUnit
from sessionstream.core.projections.index import IndexUnit
from sessionstream.core.projections.rejections import RejectionsUnit
from sessionstream.core.projections.surface import SurfaceUnit
from sessionstream.core.projections.tools import ToolsUnit
from sessionstream.core.projections.turns import TurnsUnit
from sessionstream.core.projections.usage import UsageUnit
from sessionstream.core.rows import MetaFields, SessionRow, Stored
from sessionstream.native import ext as _native  # absent: the Python fold
from sessionstream.streams.errors import StreamsError
from sessionstream.streams.fold import Batch, Digests, Folded, SessionFold, native_items
from sessionstream.streams.fold_python import PythonFolder
from sessionstream.streams.native_seal import WriteSealer, opener_args
from sessionstream.streams.ports import DeadLetter, SessionWrite, WriteOutcome
from sessionstream.streams.session_row import CachedSession, chunked_fields

#: The built-in unit classes the extension folds, by key.
NATIVE_UNITS: dict[str, type] = {
    "index": IndexUnit, "turns": TurnsUnit, "usage": UsageUnit, "plan": PlanUnit,
    "goal": GoalUnit, "rejections": RejectionsUnit, "tools": ToolsUnit, "todo": TodoUnit,
    "business": BusinessUnit, "compaction": CompactionUnit, "surface": SurfaceUnit,
}

T = TypeVar("T")

#: The Python event of an envelope tuple of ``Folder.fold`` (data checked lossless
#: there, with the codec's rules).
_event = codec.event_from_envelope


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


class NativeFolder:
    """Folds batches through the extension; ``reference`` folds what it does not."""

    name = "native"

    def __init__(self, reference: PythonFolder) -> None:
        reason = why_not(reference.pipeline)
        if reason is not None:
            raise NativeUnavailable(f"native fold unavailable: {reason}")
        assert _native is not None
        self.reference = reference
        self._codec = reference.codec
        pipeline = reference.pipeline
        reg = pipeline.registry
        self._py_units = tuple(u for u in reg.units if u.key not in NATIVE_UNITS)
        self._py_registry = Registry(self._py_units)
        self._native_units = tuple(u for u in reg.units if u.key in NATIVE_UNITS)
        self._all_keys = frozenset(u.key for u in reg.units)
        catalog = [t.name for t in pipeline.catalog]
        py_types: set[str] = set()
        for u in self._py_units:
            py_types |= set(catalog) if u.types is None else set(u.types)
        self._opener = pipeline.opener
        if self._opener is not None:
            # The opener learns each session's lineage from its session/start (metadata):
            # it must see them, so a sealed event handed over later opens as in Python.
            py_types.add("session/start")
        versions = {k: v for k, v in reg.versions().items() if k in NATIVE_UNITS}
        #: the extension's folder: the native units' state per session
        self.extension = _native.Folder(codec.schema_fingerprints(), FORMAT_VERSION, catalog,
                                     sorted(py_types), versions, WINDOW)
        opening = opener_args(self._opener)
        if opening is not None:
            self.extension.set_opener(*opening)
        # Chunked units (ADR 0013): the extension builds the native ones' chunk fields
        self.extension.set_chunk_shapes({
            u.key: [(c.name, c.kind, c.view_key, c.state_key) for c in u.collections]
            for u in self._native_units if u.collections})
        #: Seals the rows' content-bearing fields (and keeps their digests for replay).
        self.sealer = WriteSealer(self._codec.rows, (u.key for u in reg.units))
        self._seals = self._codec.rows is not None
        # Per session, beside the extension: the Python units' states and the units they
        # changed, the offset last written, the Python units' states and the chunk
        # counts as last written, a write's bookkeeping until it applies.
        self._py_states: dict[str, dict[str, Any]] = {}
        self._py_changed: dict[str, set[str]] = {}
        self._written: dict[str, int] = {}
        self._py_base: dict[str, dict[str, Any]] = {}
        self._chunks: dict[str, dict[str, Stored]] = {}
        self._memo: dict[str, tuple[dict[str, Any], dict[str, Stored]]] = {}
        self._dirty: dict[str, None] = {}  # deferred: folded since the last take
        self._per_session: tuple[dict[str, Any], ...] = (
            self._py_states, self._py_changed, self._written, self._dirty, self._py_base,
            self._chunks, self._memo, self.sealer.digests, self.sealer.pending,
            self.sealer.keys)
        self._python: set[str] = set()  # sessions the reference owns now
        self._lent: set[str] = set()  # ... just for this batch's refold
        self._rewrites: list[str] = []  # deferred writes refused: rewritten whole
        #: sessions started without a row load (their first event was in the batch)
        self.fresh_starts = 0
        self._thread: ThreadPoolExecutor | None = None  # the fold's own (started on use)

    # -- the port ------------------------------------------------------------------------
    async def fold(self, batch: Batch) -> Folded:
        items = native_items(batch.records)  # a consumed batch's messages: no Record each
        if batch.deferred:
            return await self._fold_deferred(batch, items)
        return await self._fold_live(batch, items)

    async def fold_later(self, batch: Batch, sessions: Collection[str]) -> Folded:
        for sid in sessions:
            if sid in self._python:
                continue
            self._python.add(sid)
            if batch.deferred:
                self._export(sid)  # it moves with its state as folded so far
            else:
                self._drop(sid)  # refolded from its stored row
                self.reference.drop(sid)
                self._lent.add(sid)
        return await self.reference.fold_later(batch, sessions)

    def refused(self, session_id: str) -> None:
        self._drop(session_id)
        self.reference.refused(session_id)

    def settled(self) -> None:
        for sid in self._lent:  # native again from its next batch (loaded from its row)
            self._python.discard(sid)
            self.reference.drop(sid)
        self._lent.clear()

    def take(self) -> list[SessionFold]:
        for sid in self._rewrites:  # its next write gives every item (the last did not apply)
            self.extension.rewrite(sid)
        self._rewrites.clear()
        seal = self.sealer.sealed if self._seals else None
        out = [SessionFold(self._unsealed(sid), seal=seal) for sid in self._dirty]
        self._dirty.clear()
        if self._python:  # the reference folds (and defers) only the sessions it owns
            out += self.reference.take()
        return out

    def flushed(self, fold: SessionFold, outcome: WriteOutcome) -> None:
        w = fold.write
        memo = self._memo.pop(w.session_id, None)
        if memo is None:
            self.reference.flushed(fold, outcome)
        elif outcome.status == "applied":
            self._wrote(w, memo)
            if self.sealer.keep_digests:
                self.sealer.digested(w)
        else:
            if self.sealer.keep_digests:
                self.sealer.refused(w.session_id)
            self._rewrites.append(w.session_id)

    def forget(self, partitions: Collection[tuple[str, int]] | None = None) -> None:
        parts = None if partitions is None else list(partitions)
        self.reference.forget(parts)
        if parts is None:
            self.extension.forget()
            for d in self._per_session:
                d.clear()
            self._python.clear()
            self._lent.clear()
            return
        for sid in self.extension.forget_partitions({p for _, p in parts}):
            self._forget_py(sid)

    def holds(self, session_id: str) -> bool:
        return self.extension.has(session_id) or self.reference.holds(session_id)

    def keep_digests(self) -> Digests | None:
        self.sealer.keep_digests = True
        return self.sealer.digests

    # -- a live batch --------------------------------------------------------------------
    async def _fold_live(self, batch: Batch, items: list[Any]) -> Folded:
        out = Folded()
        records, progress = batch.records, batch.progress
        # Sessions met for the first time (by the records' keys) are loaded first; one
        # whose first record here is its seq 0 past the progress is started unread (if a
        # row exists after all, the compare-and-set on base offset -1 refuses the write
        # and the session is refolded from the stored row).
        ahead = self.extension.new_sessions(items, self._python, progress)
        # their rows' keys are looked up (or created) on a thread meanwhile
        keys = (asyncio.ensure_future(asyncio.to_thread(
            self.sealer.prefetch_keys, [sid for sid, _, _ in ahead]))
            if ahead and self.sealer.row_cipher is not None else None)
        if ahead:
            await self._resume(batch.generation,
                               [(sid, p, []) for sid, p, fresh in ahead if not fresh],
                               [(sid, p) for sid, p, fresh in ahead if fresh])
        # off the event loop (the GIL released): the previous batch's reply is read
        got = await self._on_fold_thread(self.extension.fold, items, progress,
                                         set(self._python), True)
        out.skipped += got.skipped
        native_s: list[tuple[str, int, list[int]]] = list(got.native)
        handed: list[tuple[str, list[int]]] = list(got.handed)
        envelopes: dict[int, tuple[Any, ...]] = dict(got.envelopes)
        unknown: list[tuple[str, int, list[int]]] = list(got.unknown)
        out.dead, readable = self._dead_letters(records, got.dead)
        if readable:  # Python reads what the extension refused: the batch is Python's
            out.later = self._sessions_of(records)
            folded_here = (s for s, _, _ in [*native_s, *unknown, *ahead])
            for sid in dict.fromkeys([*out.later, *folded_here]):
                if sid not in self._python:
                    self._to_python(sid)
            if keys is not None:
                await keys
            return out
        if unknown:
            await self._resume(batch.generation, unknown)
            sub = sorted(i for _, _, idxs in unknown for i in idxs)
            again = await self._on_fold_thread(self.extension.fold, [items[i] for i in sub],
                                               progress, set(self._python), True)
            assert not again.unknown, "every session was started or loaded"
            out.skipped += again.skipped
            native_s += [(sid, p, [sub[j] for j in idxs]) for sid, p, idxs in again.native]
            handed += [(sid, [sub[j] for j in idxs]) for sid, idxs in again.handed]
            envelopes.update({sub[j]: t for j, t in again.envelopes.items()})
        live = self._python_units_or_hand_over(native_s, envelopes, handed)
        if keys is not None:
            await keys
        for sid in live:
            # built now, overlapping the previous write, taken as written (a refusal
            # drops the session)
            w = self._unsealed(sid)
            if self._seals:
                w = self.sealer.sealed(w)
            self._wrote(w, self._memo.pop(sid))
            out.writes.append(SessionFold(w, verdicts=self.extension.verdicts(sid)))
        out.sessions = live
        out.later = list(dict.fromkeys(sid for sid, _ in handed))
        for sid in out.later:  # the reference owns them from now on
            if sid not in self._python:
                self._to_python(sid)
        return out

    async def _resume(self, gen: int, unknown: Sequence[tuple[str, int, list[int]]],
                      fresh: Sequence[tuple[str, int]] = ()) -> None:
        """Start ``fresh`` sessions unread, load the others (one round trip)."""
        for sid, partition in fresh:
            self._forget_py(sid)
            self.extension.start(sid, partition)
        self.fresh_starts += len(fresh)
        if not unknown:
            return
        loaded = await self.reference.sink.load(gen, [sid for sid, _, _ in unknown])
        for sid, partition, _ in unknown:
            stored = loaded.get(sid)
            self._forget_py(sid)
            if not stored or SessionRow.AS_OF_OFFSET not in stored:
                self.extension.start(sid, partition)
                continue
            # reassembled and opened by the codec, handed over as encode gives them
            cur = self._codec.load(sid, partition, stored)
            if cur.stale or cur.quarantine is not None:
                self._python.add(sid)  # the reference rebuilds or holds it
                continue
            fields = {k: stored[k] for k in (SessionRow.ADMISSION, SessionRow.META,
                                              SessionRow.AS_OF_OFFSET) if k in stored}
            for unit in self._native_units:
                view, state = unit.encode(cur.states[unit.key])
                fields[SessionRow.view(unit.key)] = view
                fields[SessionRow.state(unit.key)] = state
                fields[SessionRow.state_version(unit.key)] = str(unit.state_version)
            seed = getattr(self._opener, "seed_length", None)
            if self.extension.load(sid, fields, seed(sid) if seed is not None else None):
                self._py_states[sid] = {u.key: cur.states[u.key] for u in self._py_units}
                self._written[sid] = cur.as_of_offset
                self._py_base[sid] = {u.key: cur.states[u.key] for u in self._py_units
                                      if u.collections}
                # chunks per collection as stored: the next write deletes past them
                self._chunks[sid] = dict(cur.chunks)
            else:
                self._python.add(sid)  # the reference loads and folds it

    # -- replay's deferred fold ----------------------------------------------------------
    async def _fold_deferred(self, batch: Batch, items: list[Any]) -> Folded:
        out = Folded()
        if batch.concurrent:  # off the event loop: a background flush writes meanwhile
            got = await self._on_fold_thread(self.extension.fold, items, batch.progress,
                                             set(self._python))
        else:
            got = self.extension.fold(items, batch.progress, self._python)
        out.skipped += got.skipped
        out.dead, readable = self._dead_letters(batch.records, got.dead)
        if readable:  # Python reads what the extension refused: the batch is Python's
            for sid, _, _ in got.native:
                self.extension.restore(sid)
            out.later = self._sessions_of(batch.records)
            return out
        handed: list[tuple[str, list[int]]] = list(got.handed)
        kept = self._python_units_or_hand_over(list(got.native), dict(got.envelopes), handed)
        for sid in kept:
            self._dirty[sid] = None
        out.sessions = kept
        out.later = list(dict.fromkeys(sid for sid, _ in handed))
        return out

    def _export(self, sid: str) -> None:
        """Move a natively folded session to the reference's cache (deferred)."""
        got = self.extension.export(sid)
        self._dirty.pop(sid, None)
        self.sealer.digests.pop(sid, None)  # the reference writes it from now on
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
        cur = self._codec.load(sid, int(meta[MetaFields.PARTITION]), fields)
        written = self._written.pop(sid, None)
        # the base is the row as written (native chunked units rewritten whole)
        py_base = self._py_base.pop(sid, {})
        chunks = self._chunks.pop(sid, {})
        base = CachedSession(sid, cur.partition, cur.admission, {**cur.states, **py_base},
                             as_of_offset=-1 if written is None else written,
                             stored=written is not None, chunks=chunks,
                             pending=frozenset(u.key for u in self._codec.units
                                               if u.collections and u.key not in py_base))
        self.reference.adopt(cur, base, set(self._all_keys) if written is None else changed)

    # -- the Python units and the writes -------------------------------------------------
    def _python_units_or_hand_over(self, native_s: list[tuple[str, int, list[int]]],
                                   envelopes: Mapping[int, tuple[Any, ...]],
                                   handed: list[tuple[str, list[int]]]) -> list[str]:
        """Run the Python units over each natively folded session; a session they
        cannot fold is put back as before the batch and handed over (appended to
        ``handed``). Returns the sessions kept."""
        kept: list[str] = []
        for sid, _partition, idxs in native_s:
            if idxs and not self._apply_python_units(sid, idxs, envelopes):
                self.extension.restore(sid)
                handed.append((sid, []))
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
        except Exception:  # ProjectionError or a bad record: the reference decides
            return False
        self._py_states[sid] = dict(states)
        changed |= new_changed
        return True

    def _unsealed(self, sid: str) -> SessionWrite:
        """The session's write with its fields in the clear: everything the extension
        and the Python units' states give (the sealer seals them; it touches neither).
        What the write stores of the Python units and the chunks waits in ``_memo``."""
        first = sid not in self._written
        rows = self._codec
        deletes: list[str]
        counts: dict[str, Stored]
        if rows.chunked:
            # the native chunked units' chunk fields and manifests are built in the
            # extension
            got = self.extension.write_fields(sid, not first, rows.chunk,
                                           {} if first else self._chunks.get(sid, {}))
            assert got is not None
            fields, native_changed, deletes, counts = got
        else:  # every unit whole, as before ADR 0013
            whole = self.extension.fields(sid, not first)
            assert whole is not None
            fields, native_changed = whole
            fields.pop(SessionRow.AS_OF_SEQ, None)
            fields.pop(SessionRow.AS_OF_OFFSET, None)
            deletes, counts = [], {}
        py_changed = self._py_changed.pop(sid, set())
        bases: dict[str, Any] = {}
        if self._py_units:
            states = self._py_states.get(sid) or self._py_registry.init_states()
            for unit in self._py_units:
                if not first and unit.key not in py_changed:
                    continue
                state_now = states[unit.key]
                if unit.collections and rows.chunked:
                    counts[unit.key], _ = chunked_fields(
                        unit, None if first else self._py_base.get(sid, {}).get(unit.key),
                        state_now, None if first else self._chunks.get(sid, {}).get(unit.key),
                        fields, deletes, rows.chunk)
                    bases[unit.key] = state_now
                    view, state = unit.heads(state_now)
                else:
                    view, state = unit.encode(state_now)
                fields[SessionRow.view(unit.key)] = view
                fields[SessionRow.state(unit.key)] = state
                fields[SessionRow.state_version(unit.key)] = str(unit.state_version)
        self._memo[sid] = (bases, counts)
        as_of_seq, as_of_offset, last_time, partition = self.extension.position(sid)
        changed = self._all_keys if first else frozenset(native_changed) | py_changed
        return SessionWrite(
            session_id=sid, partition=partition,
            base_offset=self._written.get(sid, -1), last_offset=as_of_offset,
            as_of_seq=as_of_seq, fields=fields, changed=tuple(sorted(changed)),
            activity_ms=last_time or 0, force=False, deletes=tuple(deletes),
        )

    def _wrote(self, w: SessionWrite, memo: tuple[dict[str, Any], dict[str, Stored]]) -> None:
        """``w`` is the session's row from now on (applied, or taken as applied)."""
        sid = w.session_id
        self._written[sid] = w.last_offset
        self._py_base.setdefault(sid, {}).update(memo[0])
        self._chunks.setdefault(sid, {}).update(memo[1])

    # -- sessions and records ------------------------------------------------------------
    def _dead_letters(self, records: Sequence[Record], dead: Iterable[int]
                      ) -> tuple[list[DeadLetter], bool]:
        """The dead letters of the records the extension refused, as the Python codec
        names them; and whether Python reads one of them (then the batch is Python's)."""
        letters: list[DeadLetter] = []
        readable = False
        for i in dead:
            decoded = self.reference.pipeline.decode(records[i])
            if isinstance(decoded, Undecodable):
                letters.append(DeadLetter(records[i], decoded.reason, decoded.detail))
            else:
                readable = True
        return letters, readable

    def _sessions_of(self, records: Sequence[Record]) -> list[str]:
        decode = self.reference.pipeline.decode
        return list(dict.fromkeys(d.session_id for r in records
                                  if not isinstance(d := decode(r), Undecodable)))

    def _on_fold_thread(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the fold's own thread: one thread allocates and frees the
        sessions' state, so its allocator reuses its pages batch after batch."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="native-fold")
        return asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def _to_python(self, sid: str) -> None:
        """The reference owns ``sid`` from now on; a natively folded session was written
        up to its last batch, so the reference continues from its stored row."""
        self._drop(sid)
        self.reference.drop(sid)
        self._python.add(sid)

    def _drop(self, sid: str) -> None:
        self.extension.drop_session(sid)
        self._forget_py(sid)

    def _forget_py(self, sid: str) -> None:
        for d in self._per_session:
            d.pop(sid, None)


__all__ = ["NATIVE_UNITS", "NativeFolder", "NativeUnavailable", "available", "why_not"]
