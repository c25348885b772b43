"""The native fold's hand-overs: Python units, sessions moved to the Python processor, loads.

A custom unit of the registry stays Python: the extension returns the record indices
(and envelopes) of the admitted events of the types it reads, and only those records
become Python events (:meth:`HandOverFold._python_units_or_hand_over`). The Python
processor stays the reference and takes over whatever the extension does not fold
exactly: records it cannot decode (dead letters, with the Python codec's message; a
record it refuses but Python decodes, e.g. a schema version it does not know yet, sends
the whole batch to the Python fold), and sessions whose events it cannot fold (a
quarantine, data of an unexpected shape, a compaction replace whose range the surface
refuses, a Python unit that raises, a deletion's audit event): their state moves to the
Python processor through the same fields the sink stores (:meth:`HandOverFold._export`).
The other way, a session met for the first time is started or loaded into the extension
from its stored row (:meth:`HandOverFold._resume`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sessionstream.core import codec
from sessionstream.core.pipeline import Record, Undecodable
from sessionstream.core.rows import MetaFields, SessionRow
from sessionstream.streams.native_flush import FlushingFold
from sessionstream.streams.native_state import is_of
from sessionstream.streams.ports import SessionWrite
from sessionstream.streams.processor import BatchReport
from sessionstream.streams.session_row import CachedSession

#: The Python event of an envelope tuple of ``Folder.fold`` (data checked lossless
#: there, with the codec's rules).
_event = codec.event_from_envelope


class HandOverFold(FlushingFold):
    """Moves sessions between the extension and the Python processor (see the module)."""

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
                                     if is_of(r, sid, self.proc.pipeline)]))
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


__all__ = ["HandOverFold"]
