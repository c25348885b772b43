"""Admission rejections of a session, for the writer and the dashboard (brief §4).

Not fed by log events — a rejected event never enters the log — but by the
admission decisions the stream processor computes: it calls :func:`record_rejection`
with ``AdmissionDecision.to_json(event)`` (extra keys such as the Kafka ``offset`` are kept).
``apply`` therefore always returns the state unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.core.admission import REJECTIONS
from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import FrozenMap, JsonValue, freeze, sorted_map, thaw
from sessionstream.core.projections.base import ProjectionUnit

#: Rejections kept in full; older ones only count (a zombie writer can produce many).
RECENT = 50


@dataclass(frozen=True, slots=True)
class RejectionsState:
    total: int
    by_verdict: FrozenMap  # verdict code (admission.REJECTIONS) -> n
    recent: tuple[Any, ...]  # frozen decision JSON, newest last, at most RECENT


_REJECTION_CODES = frozenset(v.value for v in REJECTIONS)
_REQUIRED = ("verdict", "reason", "session_id", "seq", "event_id", "writer")


def record_rejection(state: RejectionsState, decision: Any) -> RejectionsState:
    """Fold one refusal, ``AdmissionDecision.to_json(event)``, into the state; a new state.

    Raises ValueError for anything else — an admitted or duplicate decision (not
    a rejection) or another shape — rather than counting it under a made-up key.
    """
    if not isinstance(decision, dict | FrozenMap):
        raise ValueError("expected AdmissionDecision.to_json(event), got "
                         f"{type(decision).__name__}")
    missing = [k for k in _REQUIRED if k not in decision]
    if missing:
        raise ValueError(f"decision JSON lacks {', '.join(missing)} "
                         "(use AdmissionDecision.to_json)")
    verdict = decision["verdict"]
    if verdict not in _REJECTION_CODES:
        raise ValueError(f"verdict {verdict!r} is not a rejection "
                         f"(one of {', '.join(sorted(_REJECTION_CODES))})")
    recent = (*state.recent, freeze(decision))[-RECENT:]
    counts = FrozenMap({**state.by_verdict, verdict: state.by_verdict.get(verdict, 0) + 1})
    return RejectionsState(state.total + 1, counts, recent)


class RejectionsUnit(ProjectionUnit[RejectionsState]):
    key = "rejections"
    # Not bumped for the by_reason -> by_verdict rename: this state cannot be rebuilt
    # from the log (rejected events never enter it), so load() reads both instead.
    state_version = 1
    types = frozenset[str]()

    def init(self) -> RejectionsState:
        return RejectionsState(0, FrozenMap(), ())

    def apply(self, state: RejectionsState, event: Event) -> RejectionsState:
        return state

    def view(self, state: RejectionsState) -> JsonValue:
        return {
            "total": state.total,
            "by_verdict": sorted_map(state.by_verdict),
            "recent": [thaw(r) for r in state.recent],
        }

    def dump(self, state: RejectionsState) -> JsonValue:
        return self.view(state)

    def load(self, data: Any) -> RejectionsState:
        counts = data["by_verdict"] if "by_verdict" in data else data["by_reason"]
        return RejectionsState(
            data["total"], FrozenMap(counts), tuple(freeze(r) for r in data["recent"])
        )
