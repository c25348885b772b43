"""One registry drives every projection unit from one subscription (seed §4.7).

``apply`` folds an event through all units in one pass and reports which views
changed (by identity). ``fold`` produces a :class:`Snapshot`: all states at one
``as_of_seq`` watermark, so every view of a session is read at the same point.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.errors import ProjectionError
from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.projections.base import ProjectionUnit
from sessionstream.core.projections.business import BusinessUnit
from sessionstream.core.projections.compaction import CompactionUnit
from sessionstream.core.projections.domain import GoalUnit, PlanUnit, TodoUnit
from sessionstream.core.projections.index import IndexUnit
from sessionstream.core.projections.rejections import RejectionsUnit
from sessionstream.core.projections.surface import SurfaceUnit
from sessionstream.core.projections.tools import ToolsUnit
from sessionstream.core.projections.turns import TurnsUnit
from sessionstream.core.projections.usage import UsageUnit

States = Mapping[str, Any]


@dataclass(frozen=True)
class Snapshot:
    """Every unit's state after folding up to and including ``as_of_seq`` (-1: nothing)."""

    registry: Registry
    as_of_seq: int
    states: States

    def views(self) -> dict[str, JsonValue]:
        return self.registry.views(self.states)

    def view(self, key: str) -> JsonValue:
        return self.registry.unit(key).view(self.states[key])

    def dump(self) -> dict[str, JsonValue]:
        return self.registry.dump(self.states)


class Registry:
    """A fixed set of projection units with distinct keys."""

    def __init__(self, units: Iterable[ProjectionUnit[Any]]) -> None:
        self._units: tuple[ProjectionUnit[Any], ...] = tuple(units)
        seen: set[str] = set()
        for unit in self._units:
            if unit.key in seen:
                raise ValueError(f"two projection units share the key {unit.key!r}")
            seen.add(unit.key)
        self._by_key = {u.key: u for u in self._units}
        self._all_types = tuple(u for u in self._units if u.types is None)
        self._by_type: dict[str, tuple[ProjectionUnit[Any], ...]] = {}

    @property
    def units(self) -> tuple[ProjectionUnit[Any], ...]:
        return self._units

    def unit_keys(self) -> tuple[str, ...]:
        return tuple(u.key for u in self._units)

    def unit(self, key: str) -> ProjectionUnit[Any]:
        return self._by_key[key]

    def versions(self) -> dict[str, int]:
        """key → state_version: a cached state of another version must be rebuilt."""
        return {u.key: u.state_version for u in self._units}

    def init_states(self) -> dict[str, Any]:
        return {u.key: u.init() for u in self._units}

    def _units_for(self, event_type: str) -> tuple[ProjectionUnit[Any], ...]:
        units = self._by_type.get(event_type)
        if units is None:
            units = tuple(
                u for u in self._units if u.types is None or event_type in u.types
            )
            self._by_type[event_type] = units
        return units

    def apply(self, states: States, event: Event) -> tuple[States, tuple[str, ...]]:
        """Fold ``event`` through every unit; returns (states, keys whose state changed).

        ``states`` itself is returned when nothing changed. If a unit raises, a
        :class:`ProjectionError` names it and the seq, and ``states`` is untouched.
        """
        changed: list[str] = []
        new: dict[str, Any] | None = None
        for unit in self._units_for(event.type):
            key = unit.key
            old = states[key]
            try:
                state = unit.apply(old, event)
            except Exception as exc:
                raise ProjectionError(key, event.seq, exc) from exc
            if state is not old:
                if new is None:
                    new = dict(states)
                new[key] = state
                changed.append(key)
        if new is None:
            return states, ()
        return new, tuple(changed)

    def fold(
        self, events: Iterable[Event], states: States | Snapshot | None = None
    ) -> Snapshot:
        """Fold ``events`` from ``states`` (default: ``init_states()``).

        Continuing from a :class:`Snapshot` skips events at or below its ``as_of_seq``,
        so a redelivered event does not change the projection.
        """
        as_of = -1
        skip_to = None  # continuing from a Snapshot: skip seqs at or below its as_of_seq
        if states is None:
            current: States = self.init_states()
        elif isinstance(states, Snapshot):
            current, as_of = states.states, states.as_of_seq
            skip_to = as_of
        else:
            current = states
        # Inlines apply(): one private dict is copied on the first change and then
        # updated in place (nobody else sees it until the Snapshot is built), instead
        # of a new dict and a changed-keys tuple per event. Same result, same errors,
        # and the input states are never touched.
        owned: dict[str, Any] | None = None
        by_type = self._by_type
        for event in events:
            seq = event.seq
            if skip_to is not None and seq <= skip_to:
                continue
            units = by_type.get(event.type)
            if units is None:
                units = self._units_for(event.type)
            for unit in units:
                key = unit.key
                old = current[key]
                try:
                    state = unit.apply(old, event)
                except Exception as exc:
                    raise ProjectionError(key, seq, exc) from exc
                if state is not old:
                    if owned is None:
                        owned = dict(current)
                        current = owned
                    owned[key] = state
            as_of = seq
        return Snapshot(self, as_of, current)

    def views(self, states: States) -> dict[str, JsonValue]:
        return {u.key: u.view(states[u.key]) for u in self._units}

    def dump(self, states: States) -> dict[str, JsonValue]:
        return {u.key: u.dump(states[u.key]) for u in self._units}

    def load(self, dumped: Mapping[str, JsonValue]) -> dict[str, Any]:
        """States from :meth:`dump` output; a missing key starts from ``init()``."""
        return {
            u.key: u.load(dumped[u.key]) if u.key in dumped else u.init() for u in self._units
        }

    def snapshot(self, dumped: Mapping[str, JsonValue], as_of_seq: int) -> Snapshot:
        return Snapshot(self, as_of_seq, self.load(dumped))


def default_units() -> Sequence[ProjectionUnit[Any]]:
    """Fresh instances of every built-in unit, in view order."""
    return (
        IndexUnit(),
        TurnsUnit(),
        ToolsUnit(),
        SurfaceUnit(),
        UsageUnit(),
        TodoUnit(),
        PlanUnit(),
        GoalUnit(),
        BusinessUnit(),
        CompactionUnit(),
        RejectionsUnit(),
    )


def default_registry() -> Registry:
    """A registry of all built-in units."""
    return Registry(default_units())
