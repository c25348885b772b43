"""A session as the processor caches it, and the mapping to and from its row in the sink.

:class:`CachedSession` is what a worker knows of one session between batches (admission
state, unit states, watermarks, quarantine). :class:`SessionRowCodec` turns a stored row
(the fields of ``sessionstream.core.rows.SessionRow``) into one — marking units whose
stored ``state_version`` differs as stale — and a fold's result back into the one
script call (:class:`streams.ports.SessionWrite`) that stores it. Content-bearing
fields pass through an optional :class:`RowSealer` (``sessionstream.governance.rows``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sessionstream.core.admission import AdmissionState
from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.core.pipeline import Quarantine
from sessionstream.core.projections import ProjectionUnit
from sessionstream.core.rows import (
    CHUNK_ITEMS,
    SessionRow,
    Stored,
    assemble,
    chunk_count,
    manifest,
)
from sessionstream.core.rows import MetaFields as M
from sessionstream.core.rows import stored_chunks as stored_chunk_counts
from sessionstream.streams.ports import SessionWrite

#: collection -> (index of its last chunk, that chunk's item texts) as last written
ChunkMemo = dict[str, tuple[int, list[str]]]


def dumps(value: Any) -> str:
    return canonical_dumps(value)


@dataclass
class CachedSession:
    """What the processor knows of one session between batches (cached per worker)."""

    session_id: str
    partition: int
    admission: AdmissionState
    states: dict[str, Any]
    as_of_seq: int = -1
    as_of_offset: int = -1
    first_offset: int | None = None
    last_time: int | None = None
    quarantine: Quarantine | None = None
    counts: dict[str, int] = field(default_factory=dict)
    stale: tuple[str, ...] = ()  # units whose stored state_version differs: rebuild first
    pending: frozenset[str] = frozenset()  # units to write even if no record changes them
    stored: bool = False
    #: chunked units (ADR 0013) as stored: unit key -> {collection: chunks in the row};
    #: a unit absent here has no manifest in the row (new, or written whole before)
    chunks: dict[str, Stored] = field(default_factory=dict, compare=False)
    #: per chunked unit, the texts of each collection's last chunk as written (a cache)
    memo: dict[str, ChunkMemo] = field(default_factory=dict, compare=False, repr=False)

    def meta(self) -> dict[str, Any]:
        return {
            M.SESSION_ID: self.session_id,
            M.PARTITION: self.partition,
            M.AS_OF_SEQ: self.as_of_seq,
            M.AS_OF_OFFSET: self.as_of_offset,
            M.FIRST_OFFSET: self.first_offset,
            M.LAST_TIME: self.last_time,
            M.QUARANTINE: self.quarantine.to_json() if self.quarantine else None,
            M.COUNTS: dict(sorted(self.counts.items())),
        }


class RowSealer(Protocol):
    """Seals and opens row fields that hold content (``sessionstream.governance.rows``)."""

    def seal(self, session_id: str, unit: str, field: str, text: str) -> str: ...

    def open(self, session_id: str, unit: str, field: str, stored: str) -> str | None: ...


class SessionRowCodec:
    """Stored row → :class:`CachedSession` → the script call writing it back."""

    def __init__(self, units: Sequence[ProjectionUnit[Any]], rows: RowSealer | None = None,
                 *, chunked: bool = True) -> None:
        self.units = tuple(units)
        #: False: every unit written whole, as before ADR 0013 (the benches' baseline)
        self.chunked = chunked
        self.chunk = CHUNK_ITEMS  # items per chunk of the rows this codec writes
        self.versions: dict[str, int] = {u.key: u.state_version for u in self.units}
        self.rows = rows

    def fresh(self, sid: str, partition: int) -> CachedSession:
        return CachedSession(sid, partition, AdmissionState(sid),
                             {u.key: u.init() for u in self.units})

    def load(self, sid: str, partition: int, stored: Mapping[str, str] | None
             ) -> CachedSession:
        """The cached form of a stored row (a fresh session when nothing is stored)."""
        if not stored or SessionRow.AS_OF_OFFSET not in stored:
            return self.fresh(sid, partition)
        meta = SessionRow.meta(stored)
        chunks = stored_chunk_counts(stored)
        stored = assemble(self._opened_states(sid, stored), unavailable="null",
                          sides=("state",))
        states: dict[str, Any] = {}
        stale: list[str] = []
        for unit in self.units:
            # a state that cannot be opened (key shredded) is rebuilt from the log
            raw = stored.get(SessionRow.state(unit.key))
            sv = stored.get(SessionRow.state_version(unit.key))
            if raw is None or sv is None or int(sv) != unit.state_version:
                stale.append(unit.key)
                states[unit.key] = unit.init()
            else:
                states[unit.key] = unit.load(json.loads(raw))
        return CachedSession(
            session_id=sid,
            partition=int(meta.get(M.PARTITION, partition)),
            admission=AdmissionState.from_json(json.loads(stored[SessionRow.ADMISSION])),
            states=states,
            as_of_seq=SessionRow.as_of_seq(stored),
            as_of_offset=SessionRow.as_of_offset(stored),
            first_offset=meta.get(M.FIRST_OFFSET),
            last_time=meta.get(M.LAST_TIME),
            quarantine=Quarantine.from_json(meta[M.QUARANTINE]) if meta.get(M.QUARANTINE)
            else None,
            counts=dict(meta.get(M.COUNTS, {})),
            stale=tuple(stale),
            stored=True,
            chunks=chunks,
        )

    def _opened_states(self, sid: str, stored: Mapping[str, str]) -> dict[str, str]:
        """The row without its views, sealed states and chunks opened (a field that does
        not open is left out: its unit is rebuilt from the log)."""
        out: dict[str, str] = {}
        for name, value in stored.items():
            if name.startswith(SessionRow.VIEW):
                continue
            if self.rows is not None and name.startswith((SessionRow.STATE, SessionRow.PART)):
                unit = (SessionRow.part_unit(name) if name.startswith(SessionRow.PART)
                        else name[len(SessionRow.STATE):])
                opened = self.rows.open(sid, unit, name, value)
                if opened is None:
                    continue
                value = opened
            out[name] = value
        return out

    def is_stale(self, row: Mapping[str, str]) -> bool:
        """Whether a row's stored state versions differ from the code's."""
        return any(row.get(SessionRow.state_version(k)) != str(v)
                   for k, v in self.versions.items())

    def write(self, base: CachedSession, new: CachedSession, changed: set[str],
              touched: bool) -> SessionWrite:
        """The script call taking the session from ``base`` (as stored) to ``new``."""
        if not base.stored:
            changed = {u.key for u in self.units}
        fields: dict[str, str] = {}
        deletes: list[str] = []
        states = new.states
        chunks = dict(base.chunks) if base.stored else {}
        memo = dict(base.memo) if base.stored else {}
        for unit in self.units:
            if unit.key in changed:
                if unit.collections and self.chunked:
                    # a rebuilt unit (pending) is not the stored one: rewrite every chunk
                    usable = base.stored and unit.key not in base.pending
                    chunks[unit.key], memo[unit.key] = chunked_fields(
                        unit, base.states[unit.key] if usable else None,
                        states[unit.key], chunks.get(unit.key), fields, deletes, self.chunk,
                        memo=base.memo.get(unit.key) if usable else None)
                    view, state = unit.heads(states[unit.key])
                else:
                    view, state = unit.encode(states[unit.key])
                vf, sf = SessionRow.view(unit.key), SessionRow.state(unit.key)
                fields[vf] = view
                fields[sf] = state
                fields[SessionRow.state_version(unit.key)] = str(unit.state_version)
        if self.rows is not None:
            for name, text in fields.items():
                if name.startswith((SessionRow.VIEW, SessionRow.STATE, SessionRow.PART)):
                    owner = (SessionRow.part_unit(name) if name.startswith(SessionRow.PART)
                             else name.split(":", 1)[1])
                    fields[name] = self.rows.seal(new.session_id, owner, name, text)
        new.chunks = chunks
        new.memo = memo
        fields[SessionRow.ADMISSION] = dumps(new.admission.to_json())
        fields[SessionRow.META] = dumps(new.meta())
        return SessionWrite(
            session_id=new.session_id,
            partition=new.partition,
            base_offset=base.as_of_offset if base.stored else -1,
            last_offset=new.as_of_offset,
            as_of_seq=new.as_of_seq,
            fields=fields,
            deletes=tuple(deletes),
            changed=tuple(sorted(k for k in changed if k in self.versions)),
            activity_ms=new.last_time or 0,
            force=not touched,
        )


def chunked_fields(unit: ProjectionUnit[Any], base: Any, new: Any,
                   stored: Stored | None, fields: dict[str, str],
                   deletes: list[str], chunk: int = CHUNK_ITEMS,
                   memo: ChunkMemo | None = None) -> tuple[Stored, ChunkMemo]:
    """Add to ``fields`` the manifest and the changed chunks of a chunked unit going from
    ``base`` (its state as stored; None: nothing usable stored) to ``new``; add to
    ``deletes`` the chunks past the new counts. ``stored``: the chunk size and chunks
    per collection in the row (None: the row has no manifest for the unit; either None
    or another chunk size: every chunk is written).
    ``memo`` (what the previous call returned for the same base) saves re-encoding the
    unchanged items of a rewritten last chunk. Returns the new chunk counts and memo.
    O(changed items + chunk), not O(session)."""
    key = unit.key
    lists: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    out: ChunkMemo = {}
    size, had = stored if stored is not None else (0, {})
    for c in unit.collections:
        n = unit.length(new, c.name)
        k = chunk_count(n, chunk)
        same = 0 if base is None or size != chunk or c.name not in had else min(
            unit.unchanged(base, new, c.name), n)
        last = (memo or {}).get(c.name) if same else None
        for i in range(same // chunk, k):
            lo, hi = i * chunk, min(n, (i + 1) * chunk)
            if last is not None and last[0] == i and same > lo:
                keep = min(same, lo + len(last[1])) - lo
                texts = [*last[1][:keep], *unit.items(new, c.name, lo + keep, hi)]
            else:
                texts = list(unit.items(new, c.name, lo, hi))
            fields[SessionRow.part(key, c.name, i)] = ",".join(t for t in texts if t)
            if i == k - 1:
                out[c.name] = (i, texts)
        if c.name not in out and last is not None and last[0] == k - 1:
            out[c.name] = last  # nothing rewritten: the last chunk is as it was
        deletes.extend(SessionRow.part(key, c.name, i) for i in range(k, had.get(c.name, 0)))
        lists[c.name] = (c.kind, n)
        counts[c.name] = k
    fields[SessionRow.parts(key)] = manifest(
        lists, {c.view_key: c.name for c in unit.collections if c.view_key is not None},
        {c.state_key: c.name for c in unit.collections if c.state_key is not None}, chunk)
    return (chunk, counts), out
