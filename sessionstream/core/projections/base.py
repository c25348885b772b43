"""The projection seam (seed §4.7): pure, synchronous units folded over a session log.

A unit declares ``key``, ``state_version``, ``init``, ``apply``, ``view`` and, so the
stream processor can keep internal states between batches, ``dump`` / ``load``.
``apply`` returns the *same object* when an event does not concern the unit: the
registry uses ``is`` to tell which views changed. States are immutable values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps

S = TypeVar("S")


class ProjectionUnit(ABC, Generic[S]):
    """One projection: ``state_n = apply(state_{n-1}, event_n)``; ``view(state)`` is the wire value.

    Bump ``state_version`` whenever the internal state or the folding rules change:
    cached states of the old version are then rebuilt from the log (seed §4.7.3).
    ``types`` lists the event types the unit reads (``None``: all); the registry skips
    the unit for other types, which is only an optimization — ``apply`` must still
    return the same state for them.
    """

    key: ClassVar[str]
    state_version: ClassVar[int]
    types: ClassVar[frozenset[str] | None] = None

    @abstractmethod
    def init(self) -> S:
        """The state before any event."""

    @abstractmethod
    def apply(self, state: S, event: Event) -> S:
        """Fold one event; the very same ``state`` object when the event is not relevant."""

    @abstractmethod
    def view(self, state: S) -> JsonValue:
        """The JSON value dashboards and services read."""

    @abstractmethod
    def dump(self, state: S) -> JsonValue:
        """The internal state as JSON; ``load(dump(s))`` folds on identically."""

    @abstractmethod
    def load(self, data: JsonValue) -> S:
        """Rebuild a state from :meth:`dump` output."""

    def encode(self, state: S) -> tuple[str, str]:
        """Canonical JSON text of ``(view(state), dump(state))``: what the processor stores.

        A unit may override it to build shared parts once or reuse cached text; the
        result must stay equal to this default (a unit test checks every unit).
        """
        return canonical_dumps(self.view(state)), canonical_dumps(self.dump(state))


def opt(value: Any, default: Any = None) -> Any:
    """``value`` unless it is None (data fields marked optional in the catalog)."""
    return default if value is None else value
