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
from sessionstream.core.rows import MetaFields as M
from sessionstream.core.rows import SessionRow
from streams.ports import SessionWrite


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

    def __init__(self, units: Sequence[ProjectionUnit[Any]], rows: RowSealer | None = None
                 ) -> None:
        self.units = tuple(units)
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
        states: dict[str, Any] = {}
        stale: list[str] = []
        for unit in self.units:
            raw = stored.get(SessionRow.state(unit.key))
            if raw is not None and self.rows is not None:
                # a state that cannot be opened (key shredded) is rebuilt from the log
                raw = self.rows.open(sid, unit.key, SessionRow.state(unit.key), raw)
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
        )

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
        states = new.states
        for unit in self.units:
            if unit.key in changed:
                view, state = unit.encode(states[unit.key])
                vf, sf = SessionRow.view(unit.key), SessionRow.state(unit.key)
                if self.rows is not None:
                    view = self.rows.seal(new.session_id, unit.key, vf, view)
                    state = self.rows.seal(new.session_id, unit.key, sf, state)
                fields[vf] = view
                fields[sf] = state
                fields[SessionRow.state_version(unit.key)] = str(unit.state_version)
        fields[SessionRow.ADMISSION] = dumps(new.admission.to_json())
        fields[SessionRow.META] = dumps(new.meta())
        return SessionWrite(
            session_id=new.session_id,
            partition=new.partition,
            base_offset=base.as_of_offset if base.stored else -1,
            last_offset=new.as_of_offset,
            as_of_seq=new.as_of_seq,
            fields=fields,
            changed=tuple(sorted(k for k in changed if k in self.versions)),
            activity_ms=new.last_time or 0,
            force=not touched,
        )
