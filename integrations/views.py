"""What a framework backend reads without the log: inline views (docs/adr/0024).

An :class:`InlineView` is a pure fold of a session's events into a list of entries and
a few named fields — the SDK's items, an ADK session's events and state, a LangGraph
thread's checkpoints. The store keeps it beside the session as it writes
(:meth:`~sessionstream.integrations.store.SessionHandle.write`): in memory for the
in-process stores, and in Redis for the fleet, in the same call that settles the write's
flush (``producers.views``), so the next request on any node reads it in one call.

The fold mutates a :class:`ViewState` through its methods, which record what changed
since the last publish (the lowest entry position, the fields set or deleted): a write
sends only that, whatever the length of the session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import JsonValue, thaw

__all__ = ["InlineView", "ViewGather", "ViewSnapshot", "ViewState"]


class ViewState:
    """The state of one inline view: ``entries`` (JSON values, in order), ``fields``
    (name → JSON value) and ``aux`` (the fold's own bookkeeping, never stored: rebuilt
    by folding the log again). Change it only through the methods, which track what a
    write must send."""

    __slots__ = ("_dirty", "_gone", "_low", "aux", "entries", "fields")

    def __init__(self) -> None:
        self.entries: list[JsonValue] = []
        self.fields: dict[str, JsonValue] = {}
        self.aux: Any = None
        self._low: int | None = None  # the lowest entry position changed since published
        self._dirty: set[str] = set()
        self._gone: set[str] = set()

    # -- entries --------------------------------------------------------------------------
    def push(self, *values: JsonValue) -> None:
        self._touch(len(self.entries))
        self.entries.extend(values)

    def pop(self) -> JsonValue:
        self._touch(len(self.entries) - 1)
        return self.entries.pop()

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` entries."""
        if n < len(self.entries):
            self._touch(n)
            del self.entries[n:]

    def splice(self, at: int, values: Iterable[JsonValue]) -> None:
        """Replace the entries from ``at`` to the end with ``values``."""
        self._touch(at)
        self.entries[at:] = list(values)

    def replace(self, at: int, value: JsonValue) -> None:
        self._touch(at)
        self.entries[at] = value

    def _touch(self, at: int) -> None:
        at = max(at, 0)
        if self._low is None or at < self._low:
            self._low = at

    # -- fields ---------------------------------------------------------------------------
    def set(self, name: str, value: JsonValue) -> None:
        self.fields[name] = value
        self._dirty.add(name)
        self._gone.discard(name)

    def delete(self, name: str) -> None:
        """Delete field ``name`` (also one this state no longer holds in memory: a view
        that keeps no fields, :attr:`InlineView.keeps_fields`)."""
        self.fields.pop(name, None)
        self._gone.add(name)
        self._dirty.discard(name)

    # -- what changed ---------------------------------------------------------------------
    def changes(self) -> tuple[int | None, frozenset[str], frozenset[str]]:
        """(lowest entry position changed or None, fields set, fields deleted)."""
        return self._low, frozenset(self._dirty), frozenset(self._gone)

    def published(self) -> None:
        """Everything so far is stored: track from here."""
        self._low = None
        self._dirty.clear()
        self._gone.clear()


class InlineView(ABC):
    """A view kept beside the log: a name, and a pure fold of events into a state."""

    #: The view's name (a plugin namespace of its own: ``<framework>/<what>``).
    name: str
    #: Prefixes of the field names whose values are metadata only (ids, versions,
    #: names): stored in the clear, so that a :class:`ViewGather` can follow the pointers
    #: they hold inside Redis. Every other field and every entry is sealed as content.
    clear_fields: tuple[str, ...] = ()
    #: Whether a writer keeps the view's field values in memory once they are stored.
    #: False suits a view of many large fields read back by name, whose fold never reads
    #: a field (it keeps what it needs in ``aux``): the fleet then forgets each value once
    #: it is stored, so a handle holds the fold's bookkeeping, not the view; a view found
    #: behind the log is rebuilt from the log, and a write held with ``durable=False`` is
    #: flushed before the view is read.
    keeps_fields: bool = True

    def is_clear(self, field: str) -> bool:
        """Is ``field`` stored in the clear (see :attr:`clear_fields`)?"""
        return bool(self.clear_fields) and field.startswith(self.clear_fields)

    @abstractmethod
    def fold(self, state: ViewState, event: Event) -> None:
        """Fold one admitted event (every event of the session, in seq order)."""

    def build(self, events: Iterable[Event]) -> ViewState:
        """The view of a whole log (what a reader without the view rebuilds)."""
        state = ViewState()
        for event in events:
            self.fold(state, event)
        state.published()
        return state


@dataclass(frozen=True)
class ViewGather:
    """A read of the fields of a view that a walk over its pointers needs, in one call.

    ``lua`` is the body of a Redis script (``producers.views.gather_script`` wraps it):
    it calls ``take(name)`` for each field the read needs, which returns the stored
    text (nil: no such field) — JSON for a clear field (``cjson.decode`` it to follow
    what it names), sealed otherwise — and may read ``ARGV``. ``collect`` is the same
    walk in Python, over ``get(name)`` returning the field's value (None: absent): the
    read of a store in memory and of a view rebuilt from the log. The two must take the
    same fields; the store returns exactly those (opened) in ``ViewSnapshot.fields``.
    """

    lua: str
    collect: Callable[[Callable[[str], JsonValue | None], Sequence[str]], None]


@dataclass(frozen=True)
class ViewSnapshot:
    """A view as read: the last ``len(entries)`` of ``count`` entries, and its fields,
    at the session's event ``seq`` (-1: the session does not exist)."""

    seq: int
    count: int
    entries: Sequence[JsonValue] = ()
    fields: dict[str, JsonValue] = field(default_factory=dict)
    #: Where it came from: "memory" (a store in this process), "redis" (the fleet's
    #: inline view), "log" (the view was behind the log and was rebuilt from it).
    source: str = "memory"

    @classmethod
    def of(cls, state: ViewState, seq: int, last: int | None,
           source: str = "memory", *, fields: bool = True) -> ViewSnapshot:
        entries = state.entries if last is None else (
            state.entries[-last:] if last > 0 else [])
        # copies: what a caller does with what it read must not reach the state
        return cls(seq, len(state.entries), [thaw(e) for e in entries],
                   {k: thaw(v) for k, v in state.fields.items()} if fields else {}, source)

    @classmethod
    def gathered(cls, state: ViewState, seq: int, gather: ViewGather, args: Sequence[str],
                 source: str = "memory") -> ViewSnapshot:
        """The fields ``gather`` takes from ``state`` (copies), no entries."""
        taken: dict[str, JsonValue] = {}

        def get(name: str) -> JsonValue | None:
            if name not in taken:
                value = state.fields.get(name)
                if value is None:
                    return None
                taken[name] = thaw(value)
            return taken[name]

        gather.collect(get, args)
        return cls(seq, len(state.entries), (), taken, source)
