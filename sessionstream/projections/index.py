"""Per-session summary for listing sessions without reading logs (issue: session index).

Status is ``active`` until a ``session/end`` event (reserved for a future catalog
type) makes it ``ended``; the stream processor marks a session ``quarantined`` with
:func:`quarantine` when it meets an event it must not skip.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from sessionstream.events import Event
from sessionstream.jsonvalue import JsonValue, freeze, thaw
from sessionstream.projections.base import ProjectionUnit


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
        t = event.type
        changes: dict[str, object] = {
            "session_id": event.session_id,
            "event_count": state.event_count + 1,
            "last_seq": event.seq,
            "last_time": event.time,
            "last_type": t,
        }
        if state.first_time is None:
            changes["first_time"] = event.time
        if t == "session/start":
            changes["tenant"] = event.data["tenant"]
            changes["lineage"] = event.data.get("lineage")
        elif t == "turn/start":
            changes["open_turn"] = event.turn_id if event.turn_id else f"turn@{event.seq}"
            changes["turns"] = state.turns + 1
        elif t == "turn/end":
            changes["open_turn"] = None
        elif t == "session/end-seed":
            changes["seeds"] = state.seeds + 1
        elif t == "session/end" and state.status == "active":
            changes.update(status="ended", status_reason="session/end", status_seq=event.seq)
        return replace(state, **changes)  # type: ignore[arg-type]

    def view(self, state: IndexState) -> JsonValue:
        return self.dump(state)

    def dump(self, state: IndexState) -> JsonValue:
        out = asdict(state)
        out["lineage"] = thaw(state.lineage)
        return out

    def load(self, data: JsonValue) -> IndexState:
        return IndexState(**{**data, "lineage": freeze(data["lineage"])})
