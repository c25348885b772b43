"""The projection seam (seed §4.7): pure, synchronous units folded over a session log.

A unit declares ``key``, ``state_version``, ``init``, ``apply``, ``view`` and, so the
stream processor can keep internal states between batches, ``dump`` / ``load``.
``apply`` returns the *same object* when an event does not concern the unit: the
registry uses ``is`` to tell which views changed. States are immutable values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Collection:
    """A part of a unit's view and/or state that grows with the session (ADR 0013).

    Stored as fixed-size chunks of item texts, so a batch writes only the chunks its
    events changed. ``view_key`` / ``state_key`` name the top-level key of the view /
    dump object it is (None: not part of that side); ``kind`` is ``list`` (items are
    JSON values) or ``object`` (items are ``"key":value`` members; an empty item text is
    left out).
    """

    name: str
    view_key: str | None
    state_key: str | None
    kind: str = "list"


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

    # -- chunked storage (ADR 0013): only units that declare collections -------------------
    #: The growing parts of the view / state, stored in chunks. Empty: stored whole.
    collections: ClassVar[tuple[Collection, ...]] = ()

    def heads(self, state: S) -> tuple[str, str]:
        """Canonical JSON of the view and the dump without the collections' keys.

        The default builds the whole view and dump (O(session)); a unit with
        collections overrides it with an O(head) build.
        """
        view, dump = self.view(state), self.dump(state)
        assert isinstance(view, dict) and isinstance(dump, dict)
        for c in self.collections:
            if c.view_key is not None:
                view = {k: v for k, v in view.items() if k != c.view_key}
            if c.state_key is not None:
                dump = {k: v for k, v in dump.items() if k != c.state_key}
        return canonical_dumps(view), canonical_dumps(dump)

    def length(self, state: S, name: str) -> int:
        """Number of items of collection ``name``."""
        raise NotImplementedError(f"unit {self.key!r} declares collections but no length()")

    def items(self, state: S, name: str, start: int, stop: int) -> Sequence[str]:
        """Canonical JSON texts of items ``start..stop-1`` of collection ``name``."""
        raise NotImplementedError(f"unit {self.key!r} declares collections but no items()")

    def unchanged(self, base: S, new: S, name: str) -> int:
        """How many leading items of ``name`` are the same in ``new`` as in ``base``
        (``new`` folded on from ``base``). 0 is always correct (rewrite all); a unit
        reports the true prefix so a batch writes O(its events), not O(session)."""
        return 0


def opt(value: Any, default: Any = None) -> Any:
    """``value`` unless it is None (data fields marked optional in the catalog)."""
    return default if value is None else value
