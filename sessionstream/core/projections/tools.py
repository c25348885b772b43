"""Tool pairing (seed §4.4.2, §4.3.1): declared and executing calls, results, abandonment.

A call is *declared* by ``assistant/message.tool_calls``, *open* once ``tool/call``
starts it, *answered* by ``tool/result`` (status, operation id, version), or
*abandoned* when its turn ends without a result — no result is ever invented.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import FrozenMap, JsonValue, canonical_dumps, sorted_map
from sessionstream.core.projections.base import Collection, ProjectionUnit
from sessionstream.core.projections.vec import Vec


@dataclass(frozen=True, slots=True)
class Call:
    call_id: str
    name: str
    declared_seq: int | None
    call_seq: int | None = None
    idempotency_key: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class Result:
    call_id: str
    name: str
    status: str  # ok | error
    result_seq: int
    call_seq: int | None
    operation_id: str | None
    version: Any


@dataclass(frozen=True, slots=True)
class Abandoned:
    call_id: str
    name: str
    stage: str  # declared (never started) | executing (started, no result observed)
    turn_end_seq: int
    reason: str


@dataclass(frozen=True, slots=True)
class ToolsState:
    declared: FrozenMap  # call_id -> Call, not yet started
    open: FrozenMap  # call_id -> Call, started, no result yet
    results: Vec[Result]
    abandoned: Vec[Abandoned]
    counts: FrozenMap  # ok / error / abandoned -> n


def _row(obj: Call | Result | Abandoned) -> dict[str, Any]:
    """A record's fields as a dict: what ``dataclasses.asdict`` gives for these flat records
    (values are scalars or frozen JSON, which dump the same), without its deep copy."""
    return {name: getattr(obj, name) for name in _FIELDS[type(obj)]}


def _bump(counts: FrozenMap, key: str, by: int = 1) -> FrozenMap:
    return FrozenMap({**counts, key: counts.get(key, 0) + by})


def _without(m: FrozenMap, key: str) -> FrozenMap:
    return FrozenMap({k: v for k, v in m.items() if k != key})


class ToolsUnit(ProjectionUnit[ToolsState]):
    key = "tools"
    state_version = 1
    types = frozenset({"assistant/message", "tool/call", "tool/result", "turn/end"})

    def init(self) -> ToolsState:
        return ToolsState(FrozenMap(), FrozenMap(), Vec(), Vec(), FrozenMap())

    def apply(self, state: ToolsState, event: Event) -> ToolsState:
        t = event.type
        data = event.data
        if t == "assistant/message":
            calls = data.get("tool_calls") or ()
            if not calls:
                return state
            declared = dict(state.declared)
            for c in calls:
                declared[c["call_id"]] = Call(c["call_id"], c["name"], event.seq,
                                              turn_id=event.turn_id)
            return ToolsState(FrozenMap(declared), state.open, state.results, state.abandoned,
                              state.counts)
        if t == "tool/call":
            cid = data["call_id"]
            prior = state.declared.get(cid)
            call = Call(
                cid, data["name"], prior.declared_seq if prior else None, event.seq,
                data.get("idempotency_key"), event.turn_id,
            )
            return ToolsState(
                _without(state.declared, cid) if prior else state.declared,
                FrozenMap({**state.open, cid: call}), state.results, state.abandoned,
                state.counts,
            )
        if t == "tool/result":
            cid = data["call_id"]
            found: Call | None = state.open.get(cid) or state.declared.get(cid)
            result = Result(
                cid, found.name if found else "", data["status"], event.seq,
                found.call_seq if found else None, data.get("operation_id"), data.get("version"),
            )
            return ToolsState(
                _without(state.declared, cid) if cid in state.declared else state.declared,
                _without(state.open, cid) if cid in state.open else state.open,
                state.results.append(result),
                state.abandoned,
                _bump(state.counts, data["status"]),
            )
        if t == "turn/end":
            if not state.declared and not state.open:
                return state
            abandoned = state.abandoned
            reason = data["reason"]
            for stage, calls in (("declared", state.declared), ("executing", state.open)):
                for c in calls.values():
                    abandoned = abandoned.append(
                        Abandoned(c.call_id, c.name, stage, event.seq, reason)
                    )
            n = len(state.declared) + len(state.open)
            return ToolsState(FrozenMap(), FrozenMap(), state.results, abandoned,
                              _bump(state.counts, "abandoned", n))
        return state

    def view(self, state: ToolsState) -> JsonValue:
        return {
            "declared": [_row(c) for c in state.declared.values()],
            "open": [_row(c) for c in state.open.values()],
            "results": {r.call_id: _row(r) for r in state.results},
            "operation_ids": {
                r.operation_id: r.call_id for r in state.results if r.operation_id is not None
            },
            "abandoned": [_row(a) for a in state.abandoned],
            "counts": sorted_map(state.counts),
        }

    def dump(self, state: ToolsState) -> JsonValue:
        return {
            "declared": [_row(c) for c in state.declared.values()],
            "open": [_row(c) for c in state.open.values()],
            "results": [_row(r) for r in state.results],
            "abandoned": [_row(a) for a in state.abandoned],
            "counts": dict(state.counts),
        }

    # -- chunked storage (ADR 0013) --------------------------------------------------------
    #: results by position: the state's list and the view's two objects (an empty item
    #: for a result without an operation id); abandoned calls, the same in view and state
    collections = (
        Collection("results", None, "results"),
        Collection("results_by_id", "results", None, "object"),
        Collection("operation_ids", "operation_ids", None, "object"),
        Collection("abandoned", "abandoned", "abandoned"),
    )

    def heads(self, state: ToolsState) -> tuple[str, str]:
        head = {
            "declared": [_row(c) for c in state.declared.values()],
            "open": [_row(c) for c in state.open.values()],
            "counts": dict(state.counts),
        }
        return canonical_dumps(head), canonical_dumps(head)

    def length(self, state: ToolsState, name: str) -> int:
        return len(state.abandoned) if name == "abandoned" else len(state.results)

    def items(self, state: ToolsState, name: str, start: int, stop: int) -> Sequence[str]:
        if name == "abandoned":
            return [canonical_dumps(_row(a)) for a in state.abandoned.slice(start, stop)]
        rows = state.results.slice(start, stop)
        if name == "results":
            return [canonical_dumps(_row(r)) for r in rows]
        if name == "results_by_id":
            return [f"{canonical_dumps(r.call_id)}:{canonical_dumps(_row(r))}" for r in rows]
        return [f"{canonical_dumps(r.operation_id)}:{canonical_dumps(r.call_id)}"
                if r.operation_id is not None else "" for r in rows]

    def unchanged(self, base: ToolsState, new: ToolsState, name: str) -> int:
        if name == "abandoned":
            return len(base.abandoned) if new.abandoned.extends(base.abandoned) else 0
        return len(base.results) if new.results.extends(base.results) else 0

    def load(self, data: JsonValue) -> ToolsState:
        return ToolsState(
            FrozenMap({c["call_id"]: Call(**c) for c in data["declared"]}),
            FrozenMap({c["call_id"]: Call(**c) for c in data["open"]}),
            Vec(Result(**r) for r in data["results"]),
            Vec(Abandoned(**a) for a in data["abandoned"]),
            FrozenMap(data["counts"]),
        )


_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in (Call, Result, Abandoned)
}
