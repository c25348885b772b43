"""Turn status: open / completed / refused / cancelled / failed / interrupted (seed §4.1).

Answers "did this turn finish naturally, get refused, cancelled, fail or crash?"
without reading the log: per-turn records with reason and steps, the open turn and
step, and counts per status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import FrozenMap, JsonValue, canonical_dumps, sorted_map
from sessionstream.core.projections.base import Collection, ProjectionUnit
from sessionstream.core.projections.vec import Vec


@dataclass(frozen=True, slots=True)
class Turn:
    turn_id: str
    status: str  # open | completed | refused | cancelled | failed | interrupted
    start_seq: int
    end_seq: int | None = None
    detail: str | None = None
    steps: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "status": self.status,
            "start_seq": self.start_seq,
            "end_seq": self.end_seq,
            "detail": self.detail,
            "steps": self.steps,
        }


@dataclass(frozen=True, slots=True)
class TurnsState:
    closed: Vec[Turn]
    open: Turn | None
    open_step: str | None
    open_step_seq: int | None
    counts: FrozenMap  # status -> number of closed turns


def _turn_id(event: Event) -> str:
    return event.turn_id if event.turn_id is not None else f"turn@{event.seq}"


class TurnsUnit(ProjectionUnit[TurnsState]):
    key = "turns"
    state_version = 1
    types = frozenset({"turn/start", "turn/end", "step/start", "step/end"})

    def init(self) -> TurnsState:
        return TurnsState(Vec(), None, None, None, FrozenMap())

    def apply(self, state: TurnsState, event: Event) -> TurnsState:
        # Hot path: states are built with their constructors, not dataclasses.replace
        # (several times slower per call).
        t = event.type
        if t == "turn/start":
            if state.open is not None:  # a log the session invariants would refuse
                state = self._close(state, "interrupted", event.seq, "turn/start while open")
            return TurnsState(state.closed, Turn(_turn_id(event), "open", event.seq), None, None,
                              state.counts)
        if t == "turn/end":
            if state.open is None:
                return state
            return self._close(state, event.data["reason"], event.seq, event.data.get("detail"))
        if t == "step/start":
            if state.open is None:
                return state
            step_id = event.step_id if event.step_id is not None else f"step@{event.seq}"
            o = state.open
            opened = Turn(o.turn_id, o.status, o.start_seq, o.end_seq, o.detail, o.steps + 1)
            return TurnsState(state.closed, opened, step_id, event.seq, state.counts)
        if t == "step/end":
            if state.open_step is None:
                return state
            return TurnsState(state.closed, state.open, None, None, state.counts)
        return state

    @staticmethod
    def _close(state: TurnsState, reason: str, seq: int, detail: str | None) -> TurnsState:
        assert state.open is not None
        o = state.open
        done = Turn(o.turn_id, reason, o.start_seq, seq, detail, o.steps)
        counts = FrozenMap({**state.counts, reason: state.counts.get(reason, 0) + 1})
        return TurnsState(state.closed.append(done), None, None, None, counts)

    def view(self, state: TurnsState) -> JsonValue:
        turns = [t.to_json() for t in state.closed]
        if state.open is not None:
            turns.append(state.open.to_json())
        return {
            "open_turn": state.open.turn_id if state.open else None,
            "open_step": state.open_step,
            "counts": sorted_map(state.counts),
            "total": len(turns),
            "turns": turns,
        }

    def dump(self, state: TurnsState) -> JsonValue:
        return {
            "closed": [t.to_json() for t in state.closed],
            "open": state.open.to_json() if state.open else None,
            "open_step": state.open_step,
            "open_step_seq": state.open_step_seq,
            "counts": dict(state.counts),
        }

    # -- chunked storage (ADR 0013) --------------------------------------------------------
    #: the view's turns (closed ones, then the open one) and the state's closed turns
    collections = (Collection("turns", "turns", None), Collection("closed", None, "closed"))

    def heads(self, state: TurnsState) -> tuple[str, str]:
        total = len(state.closed) + (1 if state.open is not None else 0)
        return (canonical_dumps({
            "open_turn": state.open.turn_id if state.open else None,
            "open_step": state.open_step, "counts": dict(state.counts), "total": total,
        }), canonical_dumps({
            "open": state.open.to_json() if state.open else None,
            "open_step": state.open_step, "open_step_seq": state.open_step_seq,
            "counts": dict(state.counts),
        }))

    def length(self, state: TurnsState, name: str) -> int:
        n = len(state.closed)
        return n + 1 if name == "turns" and state.open is not None else n

    def items(self, state: TurnsState, name: str, start: int, stop: int) -> Sequence[str]:
        out = [canonical_dumps(t.to_json()) for t in state.closed.slice(start, stop)]
        if (name == "turns" and state.open is not None
                and start <= len(state.closed) < stop):
            out.append(canonical_dumps(state.open.to_json()))
        return out

    def unchanged(self, base: TurnsState, new: TurnsState, name: str) -> int:
        return len(base.closed) if new.closed.extends(base.closed) else 0

    def load(self, data: JsonValue) -> TurnsState:
        return TurnsState(
            Vec(Turn(**t) for t in data["closed"]),
            Turn(**data["open"]) if data["open"] else None,
            data["open_step"],
            data["open_step_seq"],
            FrozenMap(data["counts"]),
        )
