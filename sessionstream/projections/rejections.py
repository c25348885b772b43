"""Admission rejections of a session, for the writer and the dashboard (brief §4).

Not fed by log events — a rejected event never enters the log — but by the
admission verdicts the stream processor computes: it calls :func:`record_rejection`
with the verdict as JSON. ``apply`` therefore always returns the state unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.events import Event
from sessionstream.jsonvalue import FrozenMap, JsonValue, freeze, thaw
from sessionstream.projections.base import ProjectionUnit

#: Rejections kept in full; older ones only count (a zombie writer can produce many).
RECENT = 50


@dataclass(frozen=True, slots=True)
class RejectionsState:
    total: int
    by_reason: FrozenMap  # reason -> n
    recent: tuple[Any, ...]  # frozen verdict JSON, newest last, at most RECENT


def record_rejection(state: RejectionsState, decision: JsonValue) -> RejectionsState:
    """Fold one admission verdict (a JSON object with at least ``reason``) into the state.

    Verdicts that admitted or dropped a duplicate are not rejections: pass only
    rejected ones. Returns a new state.
    """
    reason = str(decision.get("reason") or decision.get("verdict") or "unknown")
    recent = (*state.recent, freeze(decision))[-RECENT:]
    by_reason = FrozenMap({**state.by_reason, reason: state.by_reason.get(reason, 0) + 1})
    return RejectionsState(state.total + 1, by_reason, recent)


class RejectionsUnit(ProjectionUnit[RejectionsState]):
    key = "rejections"
    state_version = 1
    types = frozenset[str]()

    def init(self) -> RejectionsState:
        return RejectionsState(0, FrozenMap(), ())

    def apply(self, state: RejectionsState, event: Event) -> RejectionsState:
        return state

    def view(self, state: RejectionsState) -> JsonValue:
        return {
            "total": state.total,
            "by_reason": dict(sorted(state.by_reason.items())),
            "recent": [thaw(r) for r in state.recent],
        }

    def dump(self, state: RejectionsState) -> JsonValue:
        return self.view(state)

    def load(self, data: JsonValue) -> RejectionsState:
        return RejectionsState(
            data["total"], FrozenMap(data["by_reason"]), tuple(freeze(r) for r in data["recent"])
        )
