"""Built-in domain projections: todo list, plan, goal (seed §4.7).

Fed by the ignorable domain types ``todo/add``, ``todo/update``, ``plan/set`` and
``goal/set``; a client reads the current value instead of folding the log itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import FrozenMap, JsonValue, canonical_dumps, sorted_map
from sessionstream.core.projections.base import Collection, ProjectionUnit


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


#: Items per block of a todo list (a block is replaced, never the whole list).
_BLOCK = 32


@dataclass(frozen=True, slots=True, eq=False)
class TodoState:
    """The todo list in insertion order, as blocks of :data:`_BLOCK` items: an add or an
    update copies one block and the block index (O(n / 32)), not the whole list."""

    blocks: tuple[tuple[TodoItem, ...], ...]
    n: int  # items
    unknown_updates: int  # todo/update naming an id never added
    counts: FrozenMap  # status -> items with it
    #: id -> position, shared by the versions of one lineage and only ever extended by
    #: the newest (``len(positions) == n``); entries below ``n`` are this version's.
    positions: dict[str, int]

    def __iter__(self) -> Iterator[TodoItem]:
        for block in self.blocks:
            yield from block

    def item(self, position: int) -> TodoItem:
        return self.blocks[position // _BLOCK][position % _BLOCK]

    def position(self, item_id: str) -> int | None:
        p = self.positions.get(item_id)
        return p if p is not None and p < self.n else None

    def get(self, item_id: str) -> TodoItem | None:
        p = self.position(item_id)
        return None if p is None else self.item(p)

    def slice(self, start: int, stop: int) -> list[TodoItem]:
        return [self.item(i) for i in range(max(0, start), min(stop, self.n))]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TodoState):
            return NotImplemented
        return (self.n, self.unknown_updates) == (other.n, other.unknown_updates) and \
            list(self) == list(other)

    def __hash__(self) -> int:
        return hash((self.unknown_updates, tuple(self)))


def _todo_state(items: Sequence[TodoItem], unknown_updates: int) -> TodoState:
    counts: dict[str, int] = {}
    for i in items:
        counts[i.status] = counts.get(i.status, 0) + 1
    return TodoState(tuple(tuple(items[i:i + _BLOCK]) for i in range(0, len(items), _BLOCK)),
                     len(items), unknown_updates, FrozenMap(counts),
                     {item.id: p for p, item in enumerate(items)})


def _put(state: TodoState, position: int | None, item: TodoItem) -> TodoState:
    """``state`` with ``item`` at ``position`` (None: appended)."""
    blocks = state.blocks
    counts = dict(state.counts)
    positions = state.positions
    n = state.n
    if position is None:
        if len(positions) != n:  # an older version: branch off the shared positions
            positions = {it.id: p for p, it in enumerate(state)}
        positions[item.id] = n
        grown = (item,) if n % _BLOCK == 0 else (*blocks[-1], item)
        blocks = (*blocks, grown) if n % _BLOCK == 0 else (*blocks[:-1], grown)
        n += 1
    else:
        b, i = divmod(position, _BLOCK)
        block = blocks[b]
        old = block[i].status
        counts[old] -= 1
        if not counts[old]:
            del counts[old]
        blocks = (*blocks[:b], (*block[:i], item, *block[i + 1:]), *blocks[b + 1:])
    counts[item.status] = counts.get(item.status, 0) + 1
    return TodoState(blocks, n, state.unknown_updates, FrozenMap(counts), positions)


class TodoUnit(ProjectionUnit[TodoState]):
    key = "todo"
    state_version = 1
    types = frozenset({"todo/add", "todo/update"})

    def init(self) -> TodoState:
        return _todo_state((), 0)

    def apply(self, state: TodoState, event: Event) -> TodoState:
        data = event.data
        if event.type == "todo/add":
            pos = state.position(data["id"])
            old = None if pos is None else state.item(pos)
            item = TodoItem(
                data["id"], data["text"], data.get("status") or (old.status if old else "pending"),
                old.added_seq if old else event.seq, event.seq,
            )
            return _put(state, pos, item)
        if event.type == "todo/update":
            pos = state.position(data["id"])
            if pos is None:
                return TodoState(state.blocks, state.n, state.unknown_updates + 1, state.counts,
                                 state.positions)
            old = state.item(pos)
            if old.status == data["status"]:
                return state
            return _put(state, pos, TodoItem(old.id, old.text, data["status"], old.added_seq,
                                             event.seq))
        return state

    def view(self, state: TodoState) -> JsonValue:
        return {
            "items": [i.to_json() for i in state],
            "counts": sorted_map(state.counts),
            "unknown_updates": state.unknown_updates,
        }

    def dump(self, state: TodoState) -> JsonValue:
        return {"items": [i.to_json() for i in state],
                "unknown_updates": state.unknown_updates}

    def load(self, data: JsonValue) -> TodoState:
        return _todo_state([TodoItem(**i) for i in data["items"]], data["unknown_updates"])

    # -- chunked storage (ADR 0013): the items, the same in view and state ---------------
    collections = (Collection("items", "items", "items"),)

    def heads(self, state: TodoState) -> tuple[str, str]:
        return (canonical_dumps({"counts": dict(state.counts),
                                 "unknown_updates": state.unknown_updates}),
                canonical_dumps({"unknown_updates": state.unknown_updates}))

    def length(self, state: TodoState, name: str) -> int:
        return state.n

    def items(self, state: TodoState, name: str, start: int, stop: int) -> Sequence[str]:
        return [canonical_dumps(i.to_json()) for i in state.slice(start, stop)]

    def unchanged(self, base: TodoState, new: TodoState, name: str) -> int:
        for b, (old, now) in enumerate(zip(base.blocks, new.blocks, strict=False)):
            if old is not now:
                return b * _BLOCK
        return min(base.n, new.n)


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
