"""Compaction history (seed §4.10): every attempt with its evidence, the open one visible.

An attempt records trigger, the surface range chosen, shadowed seqs, token estimates
before/after, the summarizer, the replacement message seq and the outcome. An
attempt still open at ``session/end-seed`` belongs to an earlier lifecycle (a
leftover, seed §4.9.1) and is marked so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sessionstream.core.events import Event, SurfaceOp
from sessionstream.core.jsonvalue import (
    FrozenMap,
    JsonValue,
    canonical_dumps,
    freeze,
    sorted_map,
    thaw,
)
from sessionstream.core.projections.base import Collection, ProjectionUnit
from sessionstream.core.projections.vec import Vec


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    compaction_id: str
    trigger: str
    start_seq: int
    first_position: int | None = None
    last_position: int | None = None
    shadowed_seqs: tuple[int, ...] = ()
    tokens_before: int | None = None
    tokens_after: int | None = None
    summarizer: Any = None  # frozen JSON {provider, model, config}
    summary_seq: int | None = None
    replacement_seq: int | None = None
    outcome: str | None = None  # None while open: completed | failed | abandoned
    reason: str | None = None
    end_seq: int | None = None
    from_seed: bool = False  # open when the seeded history ended: a leftover attempt

    def to_json(self) -> dict[str, Any]:
        return {
            "compaction_id": self.compaction_id,
            "trigger": self.trigger,
            "start_seq": self.start_seq,
            "first_position": self.first_position,
            "last_position": self.last_position,
            "shadowed_seqs": list(self.shadowed_seqs),
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "summarizer": thaw(self.summarizer),
            "summary_seq": self.summary_seq,
            "replacement_seq": self.replacement_seq,
            "outcome": self.outcome,
            "reason": self.reason,
            "end_seq": self.end_seq,
            "from_seed": self.from_seed,
        }

    @classmethod
    def from_json(cls, d: Any) -> AttemptRecord:
        return cls(**{**d, "shadowed_seqs": tuple(d["shadowed_seqs"]),
                      "summarizer": freeze(d["summarizer"])})


@dataclass(frozen=True, slots=True)
class CompactionState:
    attempts: Vec[AttemptRecord]  # closed attempts, oldest first
    open: AttemptRecord | None
    outcomes: FrozenMap  # outcome -> n


def _with_open(state: CompactionState, attempt: AttemptRecord) -> CompactionState:
    return CompactionState(state.attempts, attempt, state.outcomes)


class CompactionUnit(ProjectionUnit[CompactionState]):
    key = "compaction"
    state_version = 1
    types = frozenset({
        "compaction/start", "compaction/summary", "compaction/end", "user/message",
        "session/end-seed",
    })

    def init(self) -> CompactionState:
        return CompactionState(Vec(), None, FrozenMap())

    def apply(self, state: CompactionState, event: Event) -> CompactionState:
        t = event.type
        data = event.data
        if t == "compaction/start":
            if state.open is not None:  # unmatched start: keep it visible as abandoned
                state = self._close(state, "abandoned", "superseded by a new start", event.seq)
            return CompactionState(state.attempts,
                                   AttemptRecord(data["compaction_id"], data["trigger"], event.seq),
                                   state.outcomes)
        opened = state.open
        if opened is None or (t.startswith("compaction/")
                              and data["compaction_id"] != opened.compaction_id):
            return state
        if t == "compaction/summary":
            return _with_open(state, replace(
                opened,
                first_position=data["first_position"],
                last_position=data["last_position"],
                shadowed_seqs=tuple(data["shadowed_seqs"]),
                tokens_before=data["tokens_before"],
                tokens_after=data["tokens_after"],
                summarizer=data["summarizer"],
                summary_seq=event.seq,
            ))
        if t == "user/message":
            if event.surface_op is not SurfaceOp.REPLACE:
                return state
            return _with_open(state, replace(opened, replacement_seq=event.seq))
        if t == "compaction/end":
            return self._close(state, data["outcome"], data.get("reason"), event.seq)
        if t == "session/end-seed":
            return _with_open(state, replace(opened, from_seed=True))
        return state

    @staticmethod
    def _close(state: CompactionState, outcome: str, reason: str | None,
               seq: int) -> CompactionState:
        assert state.open is not None
        done = replace(state.open, outcome=outcome, reason=reason, end_seq=seq)
        outcomes = FrozenMap({**state.outcomes, outcome: state.outcomes.get(outcome, 0) + 1})
        return CompactionState(state.attempts.append(done), None, outcomes)

    def view(self, state: CompactionState) -> JsonValue:
        return {
            "open": state.open.to_json() if state.open else None,
            "attempts": [a.to_json() for a in state.attempts],
            "outcomes": sorted_map(state.outcomes),
        }

    def dump(self, state: CompactionState) -> JsonValue:
        return {
            "open": state.open.to_json() if state.open else None,
            "attempts": [a.to_json() for a in state.attempts],
            "outcomes": dict(state.outcomes),
        }

    # -- chunked storage (ADR 0013): closed attempts, the same in view and state --------
    collections = (Collection("attempts", "attempts", "attempts"),)

    def heads(self, state: CompactionState) -> tuple[str, str]:
        head = {"open": state.open.to_json() if state.open else None,
                "outcomes": dict(state.outcomes)}
        return canonical_dumps(head), canonical_dumps(head)

    def length(self, state: CompactionState, name: str) -> int:
        return len(state.attempts)

    def items(self, state: CompactionState, name: str, start: int, stop: int
              ) -> Sequence[str]:
        return [canonical_dumps(a.to_json()) for a in state.attempts.slice(start, stop)]

    def unchanged(self, base: CompactionState, new: CompactionState, name: str) -> int:
        return len(base.attempts) if new.attempts.extends(base.attempts) else 0

    def load(self, data: JsonValue) -> CompactionState:
        return CompactionState(
            Vec(AttemptRecord.from_json(a) for a in data["attempts"]),
            AttemptRecord.from_json(data["open"]) if data["open"] else None,
            FrozenMap(data["outcomes"]),
        )
