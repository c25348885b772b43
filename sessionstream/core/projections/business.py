"""Structured business state (seed §4.12): what the session currently commits to execute.

The transcript keeps how the user phrased things; this keeps goal, metric (id,
definition version, status, source turn), filters, time semantics, ambiguities,
the query plan hash and its approval — each with the seq of the event it came
from. Changing the metric (id or definition version) or the filters invalidates
the plan and its approval: ``plan_hash`` back to None, ``approval`` back to pending.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import FrozenList, FrozenMap, JsonValue, freeze, thaw
from sessionstream.core.projections.base import ProjectionUnit

FIELDS = ("goal", "metric", "filters", "time", "ambiguities", "plan_hash", "approval")
_INITIAL: dict[str, Any] = {
    "goal": None, "metric": None, "filters": FrozenMap(), "time": None,
    "ambiguities": FrozenList(), "plan_hash": None, "approval": "pending",
}


@dataclass(frozen=True, slots=True)
class BusinessState:
    values: FrozenMap  # field -> value (frozen JSON)
    sources: FrozenMap  # field -> seq of the event that set it (absent: initial value)
    invalidations: tuple[tuple[int, str], ...]  # (seq, why) when plan/approval were reset


def _metric_identity(metric: Any) -> tuple[Any, Any] | None:
    return None if metric is None else (metric["id"], metric["definition_version"])


class BusinessUnit(ProjectionUnit[BusinessState]):
    key = "business"
    state_version = 1
    types = frozenset({
        "goal/set", "business/metric", "business/filters", "business/time",
        "business/ambiguities", "business/plan", "business/approval",
    })

    def init(self) -> BusinessState:
        return BusinessState(FrozenMap(_INITIAL), FrozenMap(), ())

    def apply(self, state: BusinessState, event: Event) -> BusinessState:
        t = event.type
        data = event.data
        if t == "goal/set":
            return self._set(state, event.seq, {"goal": data["goal"]})
        if t == "business/metric":
            metric = FrozenMap({
                "id": data["id"],
                "definition_version": data["definition_version"],
                "status": data["status"],
                "source_turn": data.get("source_turn"),
            })
            changed = _metric_identity(metric) != _metric_identity(state.values["metric"])
            return self._set(state, event.seq, {"metric": metric},
                             invalidate="metric changed" if changed else None)
        if t == "business/filters":
            changed = data["filters"] != state.values["filters"]
            return self._set(state, event.seq, {"filters": data["filters"]},
                             invalidate="filters changed" if changed else None)
        if t == "business/time":
            return self._set(state, event.seq, {"time": data["time"]})
        if t == "business/ambiguities":
            return self._set(state, event.seq, {"ambiguities": data["ambiguities"]})
        if t == "business/plan":
            return self._set(state, event.seq, {"plan_hash": data["plan_hash"]})
        if t == "business/approval":
            return self._set(state, event.seq, {"approval": data["approval"]})
        return state

    @staticmethod
    def _set(
        state: BusinessState, seq: int, updates: dict[str, Any], invalidate: str | None = None
    ) -> BusinessState:
        if invalidate is not None:
            updates = {**updates, "plan_hash": None, "approval": "pending"}
        if invalidate is None and all(
            state.values[k] == v and k in state.sources for k, v in updates.items()
        ):
            return state  # the same value asserted again: nothing changes
        values = FrozenMap({**state.values, **updates})
        sources = FrozenMap({**state.sources, **{k: seq for k in updates}})
        invalidations = state.invalidations
        if invalidate is not None:
            invalidations = (*invalidations, (seq, invalidate))
        return BusinessState(values, sources, invalidations)

    def view(self, state: BusinessState) -> JsonValue:
        out: dict[str, Any] = {k: thaw(state.values[k]) for k in FIELDS}
        out["sources"] = {k: state.sources[k] for k in FIELDS if k in state.sources}
        out["invalidations"] = [{"seq": s, "reason": r} for s, r in state.invalidations]
        return out

    def dump(self, state: BusinessState) -> JsonValue:
        return {
            "values": thaw(state.values),
            "sources": dict(state.sources),
            "invalidations": [list(i) for i in state.invalidations],
        }

    def load(self, data: JsonValue) -> BusinessState:
        return BusinessState(
            freeze(data["values"]),
            FrozenMap(data["sources"]),
            tuple((s, r) for s, r in data["invalidations"]),
        )
