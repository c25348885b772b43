"""Token usage and request counts per provider/model (seed §4.5.4, §4.1).

Tokens come from ``assistant/message.usage``, attributed to the message's own
provider/model or else to the route of the last ``request/header``; requests are
counted from ``request/header``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import FrozenMap, JsonValue
from sessionstream.core.projections.base import ProjectionUnit

_FIELDS = ("requests", "messages", "input_tokens", "output_tokens")
_UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class UsageState:
    route: tuple[str, str] | None  # (provider, model) of the last request/header
    by_model: FrozenMap  # "provider\x00model" -> (requests, messages, input, output)


def _add(by_model: FrozenMap, route: tuple[str, str], delta: tuple[int, ...]) -> FrozenMap:
    key = f"{route[0]}\x00{route[1]}"
    old = by_model.get(key, (0, 0, 0, 0))
    return FrozenMap({**by_model, key: tuple(a + b for a, b in zip(old, delta, strict=True))})


class UsageUnit(ProjectionUnit[UsageState]):
    key = "usage"
    state_version = 1
    types = frozenset({"request/header", "assistant/message"})

    def init(self) -> UsageState:
        return UsageState(None, FrozenMap())

    def apply(self, state: UsageState, event: Event) -> UsageState:
        data = event.data
        if event.type == "request/header":
            route = (data["provider"], data["model"])
            return UsageState(route, _add(state.by_model, route, (1, 0, 0, 0)))
        if event.type == "assistant/message":
            usage = data.get("usage")
            if usage is None:
                return state
            fallback = state.route or (_UNKNOWN, _UNKNOWN)
            route = (data.get("provider") or fallback[0], data.get("model") or fallback[1])
            delta = (0, 1, usage["input_tokens"], usage["output_tokens"])
            return UsageState(state.route, _add(state.by_model, route, delta))
        return state

    def view(self, state: UsageState) -> JsonValue:
        rows: list[dict[str, Any]] = []
        total = [0, 0, 0, 0]
        for key in sorted(state.by_model):
            provider, model = key.split("\x00", 1)
            values = state.by_model[key]
            counts = dict(zip(_FIELDS, values, strict=True))
            rows.append({"provider": provider, "model": model, **counts})
            total = [a + b for a, b in zip(total, values, strict=True)]
        return {"by_model": rows, "total": dict(zip(_FIELDS, total, strict=True))}

    def dump(self, state: UsageState) -> JsonValue:
        return {
            "route": list(state.route) if state.route else None,
            "by_model": {k: list(v) for k, v in state.by_model.items()},
        }

    def load(self, data: JsonValue) -> UsageState:
        route = data["route"]
        return UsageState(
            (route[0], route[1]) if route else None,
            FrozenMap({k: tuple(v) for k, v in data["by_model"].items()}),
        )
