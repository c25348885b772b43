"""The native fold's session writes: built from the folder, sealed, flushed in the background.

A session's write is its fields as the extension gives them (chunked units as heads plus
the chunk fields from the first chunk changed, ADR 0013) with the Python units' states,
then sealed (:class:`~sessionstream.streams.native_seal.RowSealer`). Replay's deferred
flush (:meth:`FlushingFold.flush`) can go on in the background: the rows are taken out
of the extension at once, and sealing, digests and the Redis writes overlap the next
batches' fold (ADR 0015). :class:`InFlight` is a live batch whose one write call is
sent while the next batch is folded (ADR 0014).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sessionstream.core.pipeline import Record
from sessionstream.core.projections.base import ProjectionUnit
from sessionstream.core.rows import CHUNK_ITEMS, SessionRow, Stored, chunk_count, manifest
from sessionstream.streams.native_state import FoldState
from sessionstream.streams.ports import BatchOutcome, SessionWrite
from sessionstream.streams.processor import BatchReport
from sessionstream.streams.session_row import chunked_fields

if TYPE_CHECKING:
    from sessionstream.streams.native_fold import NativeFold

#: Sessions per slice of a deferred flush (the sink's call size).
FLUSH_SLICE = 256


class FlushingFold(FoldState):
    """Builds, seals and writes the sessions the folder folded (see the module)."""

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
            return [self.sealer.sealed(w) for w in part]

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
                    self.sealer.digested(w)
                    done.append(w)
                else:
                    report.conflicts += 1
                    self.sealer.refused(w.session_id)
                    self._rewrites.append(w.session_id)
            writes = upcoming
        await proc.sink.write_tenant(gen, done, proc.group, {})
        return report

    def _write(self, sid: str) -> SessionWrite:
        return self.sealer.sealed(self._unsealed(sid))

    def _unsealed(self, sid: str) -> SessionWrite:
        """The session's write with its fields in the clear: everything the folder and
        the Python units' states give (the sealer seals them; it touches neither)."""
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


class PreviousBatch:
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




__all__ = ["FLUSH_SLICE", "FlushingFold", "InFlight", "PreviousBatch", "native_chunks"]
