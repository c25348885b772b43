"""Per-session summary for listing sessions without reading logs (issue: session index).

Status is ``active`` until a ``session/end`` event (reserved for a future catalog
type) makes it ``ended``; the stream processor marks a session ``quarantined`` with
:func:`quarantine` when it meets an event it must not skip.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps, freeze, thaw
from sessionstream.core.projections.base import ProjectionUnit


@dataclass(frozen=True, slots=True)
class IndexState:
    session_id: str | None = None
    tenant: str | None = None
    lineage: JsonValue = None  # frozen {parent_session, seed_length, delegation_depth}
    status: str = "active"  # active | ended | quarantined
    status_reason: str | None = None
    status_seq: int | None = None
    event_count: int = 0
    last_seq: int = -1
    first_time: int | None = None
    last_time: int | None = None
    last_type: str | None = None
    open_turn: str | None = None
    turns: int = 0
    seeds: int = 0  # session/end-seed events: resumed, forked or replayed lifecycles


def quarantine(state: IndexState, reason: str, seq: int) -> IndexState:
    """Mark the session quarantined: its projections stop at ``seq - 1`` (pure helper)."""
    return replace(state, status="quarantined", status_reason=reason, status_seq=seq)


class IndexUnit(ProjectionUnit[IndexState]):
    key = "index"
    state_version = 1

    def init(self) -> IndexState:
        return IndexState()

    def apply(self, state: IndexState, event: Event) -> IndexState:
        # Every event changes the index, so this is on the hot path: build the new
        # state directly rather than through dataclasses.replace (several times slower).
        t = event.type
        tenant, lineage, status = state.tenant, state.lineage, state.status
        status_reason, status_seq = state.status_reason, state.status_seq
        open_turn, turns, seeds = state.open_turn, state.turns, state.seeds
        if t == "session/start":
            tenant = event.data["tenant"]
            lineage = event.data.get("lineage")
        elif t == "turn/start":
            open_turn = event.turn_id if event.turn_id else f"turn@{event.seq}"
            turns += 1
        elif t == "turn/end":
            open_turn = None
        elif t == "session/end-seed":
            seeds += 1
        elif t == "session/end" and status == "active":
            status, status_reason, status_seq = "ended", "session/end", event.seq
        return IndexState(
            event.session_id, tenant, lineage, status, status_reason, status_seq,
            state.event_count + 1, event.seq,
            event.time if state.first_time is None else state.first_time,
            event.time, t, open_turn, turns, seeds,
        )

    def view(self, state: IndexState) -> JsonValue:
        return self.dump(state)

    def encode(self, state: IndexState) -> tuple[str, str]:
        text = canonical_dumps(self.dump(state))  # the view is the dump: encode it once
        return text, text

    def dump(self, state: IndexState) -> JsonValue:
        # Field by field (asdict deep-copies, and the index is dumped on every batch).
        out = {name: getattr(state, name) for name in _FIELDS}
        out["lineage"] = thaw(state.lineage)
        return out

    def load(self, data: JsonValue) -> IndexState:
        return IndexState(**{**data, "lineage": freeze(data["lineage"])})


_FIELDS = tuple(f.name for f in fields(IndexState))
