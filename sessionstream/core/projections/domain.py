"""Built-in domain projections: todo list, plan, goal (seed §4.7).

Fed by the ignorable domain types ``todo/add``, ``todo/update``, ``plan/set`` and
``goal/set``; a client reads the current value instead of folding the log itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import FrozenMap, JsonValue
from sessionstream.core.projections.base import ProjectionUnit


@dataclass(frozen=True, slots=True)
class TodoItem:
    id: str
    text: str
    status: str
    added_seq: int
    updated_seq: int

    def to_json(self) -> dict[str, Any]:
        # by hand: dataclasses.asdict deep-copies and costs ~10x for these flat fields
        return {"id": self.id, "text": self.text, "status": self.status,
                "added_seq": self.added_seq, "updated_seq": self.updated_seq}


@dataclass(frozen=True, slots=True)
class TodoState:
    items: FrozenMap  # id -> TodoItem, in insertion order
    unknown_updates: int  # todo/update naming an id never added


class TodoUnit(ProjectionUnit[TodoState]):
    key = "todo"
    state_version = 1
    types = frozenset({"todo/add", "todo/update"})

    def init(self) -> TodoState:
        return TodoState(FrozenMap(), 0)

    def apply(self, state: TodoState, event: Event) -> TodoState:
        data = event.data
        if event.type == "todo/add":
            old = state.items.get(data["id"])
            item = TodoItem(
                data["id"], data["text"], data.get("status") or (old.status if old else "pending"),
                old.added_seq if old else event.seq, event.seq,
            )
            return TodoState(FrozenMap({**state.items, item.id: item}), state.unknown_updates)
        if event.type == "todo/update":
            old = state.items.get(data["id"])
            if old is None:
                return TodoState(state.items, state.unknown_updates + 1)
            if old.status == data["status"]:
                return state
            item = TodoItem(old.id, old.text, data["status"], old.added_seq, event.seq)
            return TodoState(FrozenMap({**state.items, item.id: item}), state.unknown_updates)
        return state

    def view(self, state: TodoState) -> JsonValue:
        counts: dict[str, int] = {}
        for item in state.items.values():
            counts[item.status] = counts.get(item.status, 0) + 1
        return {
            "items": [i.to_json() for i in state.items.values()],
            "counts": dict(sorted(counts.items())),
            "unknown_updates": state.unknown_updates,
        }

    def dump(self, state: TodoState) -> JsonValue:
        return {"items": [i.to_json() for i in state.items.values()],
                "unknown_updates": state.unknown_updates}

    def load(self, data: JsonValue) -> TodoState:
        return TodoState(
            FrozenMap({i["id"]: TodoItem(**i) for i in data["items"]}), data["unknown_updates"]
        )


@dataclass(frozen=True, slots=True)
class PlanState:
    steps: tuple[str, ...] | None
    plan_hash: str | None
    seq: int | None
    revisions: int


class PlanUnit(ProjectionUnit[PlanState]):
    key = "plan"
    state_version = 1
    types = frozenset({"plan/set"})

    def init(self) -> PlanState:
        return PlanState(None, None, None, 0)

    def apply(self, state: PlanState, event: Event) -> PlanState:
        if event.type != "plan/set":
            return state
        data = event.data
        return PlanState(tuple(data["steps"]), data.get("plan_hash"), event.seq,
                         state.revisions + 1)

    def view(self, state: PlanState) -> JsonValue:
        return self.dump(state)

    def dump(self, state: PlanState) -> JsonValue:
        return {
            "steps": list(state.steps) if state.steps is not None else None,
            "plan_hash": state.plan_hash,
            "seq": state.seq,
            "revisions": state.revisions,
        }

    def load(self, data: JsonValue) -> PlanState:
        steps = data["steps"]
        return PlanState(tuple(steps) if steps is not None else None, data["plan_hash"],
                         data["seq"], data["revisions"])


@dataclass(frozen=True, slots=True)
class GoalState:
    goal: str | None
    seq: int | None
    history: tuple[tuple[int, str], ...]  # (seq, goal) of every change, oldest first


class GoalUnit(ProjectionUnit[GoalState]):
    key = "goal"
    state_version = 1
    types = frozenset({"goal/set"})

    def init(self) -> GoalState:
        return GoalState(None, None, ())

    def apply(self, state: GoalState, event: Event) -> GoalState:
        if event.type != "goal/set":
            return state
        goal = event.data["goal"]
        if goal == state.goal:
            return state
        return GoalState(goal, event.seq, (*state.history, (event.seq, goal)))

    def view(self, state: GoalState) -> JsonValue:
        return {"goal": state.goal, "seq": state.seq, "changes": len(state.history)}

    def dump(self, state: GoalState) -> JsonValue:
        return {"goal": state.goal, "seq": state.seq,
                "history": [list(h) for h in state.history]}

    def load(self, data: JsonValue) -> GoalState:
        return GoalState(data["goal"], data["seq"], tuple((s, g) for s, g in data["history"]))


__all__ = ["GoalUnit", "PlanUnit", "TodoUnit"]
