"""The event envelope: frozen values, plus the injected clock and id source.

An :class:`Event` is one fact of one session. ``seq`` is the authority on order
(contiguous from 0 per session); ``time`` is informational (epoch milliseconds,
UTC). ``data`` is lossless JSON frozen into read-only containers. A
:class:`Draft` is what a caller asks to append; :class:`~sessionstream.core.session.Session`
turns it into an Event by stamping seq, event_id, time and writer.
"""

from __future__ import annotations

import os
import time as _time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import FrozenInstanceError, dataclass, field
from enum import StrEnum
from typing import Any, final

from sessionstream.core.jsonvalue import JsonValue, canonical_dumps, check_and_freeze, freeze, thaw
from sessionstream.core.sealed import SealedPart

#: The envelope format this build writes and the newest it reads.
FORMAT_VERSION = 1


class SurfaceOp(StrEnum):
    """How an event enters the model-visible surface (seed §4.4.1)."""

    NONE = "none"
    APPEND = "append"
    REPLACE = "replace"


@dataclass(frozen=True, slots=True)
class Writer:
    """Who wrote an event: a writer id and the lease epoch it held (fencing token)."""

    id: str
    epoch: int


_UNKNOWN_WRITER = Writer("unknown", 0)
_PENDING: Any = object()  # Event._data while the decoded value still needs freezing
_set = object.__setattr__  # the one way to fill a frozen Event's slots
_new = object.__new__


@final
class Event:
    """One immutable fact of a session log.

    A hand-written value class rather than a frozen dataclass so that ``data`` can
    be cached in two forms: the frozen value and its JSON text. An event built in
    memory (make_event, Session.append) renders the text once, on its first
    :meth:`data_json` (the codec's encode); an event decoded from a record keeps
    the record's text, so re-encoding it never serializes ``data`` again. Equality,
    hash and repr are those of the former dataclass: every envelope field including
    ``data`` (compared by value), never ``lossless_checked`` or the caches. Copy
    with changes through :meth:`replace`.
    """

    __slots__ = (
        "_data",
        "_raw",
        "_text",
        "event_id",
        "format_version",
        "ignorable",
        "lossless_checked",
        "prev_event_id",
        "sealed",
        "seq",
        "session_id",
        "source_event_seqs",
        "step_id",
        "surface_op",
        "time",
        "turn_id",
        "type",
        "writer",
    )
    #: The envelope fields, in constructor order.
    __match_args__ = (
        "session_id", "seq", "event_id", "time", "type", "data", "surface_op",
        "source_event_seqs", "writer", "format_version", "ignorable", "turn_id", "step_id",
        "prev_event_id", "sealed",
    )

    session_id: str
    seq: int
    event_id: str
    time: int
    type: str
    surface_op: SurfaceOp
    source_event_seqs: tuple[int, ...]
    writer: Writer
    format_version: int
    ignorable: bool
    turn_id: str | None
    step_id: str | None
    #: The event_id of the event at ``seq - 1`` as this event's writer knew it (None at
    #: seq 0, and for records written before schema v2): the history this event
    #: continues. The admission rule refuses an event continuing another history.
    prev_event_id: str | None
    #: Content taken out of ``data`` and encrypted, per data class (schema v2; empty for
    #: clear content and for older records): ``data`` then holds placeholders at the
    #: parts' paths. Readers open it in the reader pipeline (core/privacy.py).
    sealed: tuple[SealedPart, ...]
    #: True when the constructor that built this event verified ``data`` is lossless
    #: JSON (make_event, Session.append, the codec): readers may skip checking again.
    #: Not part of equality, hash or repr; :meth:`replace` keeps it only when ``data``
    #: is not replaced.
    lossless_checked: bool
    _data: JsonValue  # the value, or _PENDING while only _raw holds it
    _raw: JsonValue  # decoded but not yet frozen (lists need a walk): see data
    _text: str | None  # JSON text of data, once known

    def __init__(
        self,
        session_id: str,
        seq: int,
        event_id: str,
        time: int,
        type: str,
        data: JsonValue,
        surface_op: SurfaceOp = SurfaceOp.NONE,
        source_event_seqs: tuple[int, ...] = (),
        writer: Writer = _UNKNOWN_WRITER,
        format_version: int = FORMAT_VERSION,
        ignorable: bool = False,
        turn_id: str | None = None,
        step_id: str | None = None,
        prev_event_id: str | None = None,
        sealed: tuple[SealedPart, ...] = (),
    ) -> None:
        # Slot stores through object.__setattr__ cost 4x a plain store: fill the slots as
        # a _Filling (same layout, ordinary __setattr__), then become an Event again.
        _set(self, "__class__", _Filling)
        self.session_id = session_id
        self.seq = seq
        self.event_id = event_id
        self.time = time
        self.type = type
        self.surface_op = surface_op
        self.source_event_seqs = source_event_seqs
        self.writer = writer
        self.format_version = format_version
        self.ignorable = ignorable
        self.turn_id = turn_id
        self.step_id = step_id
        self.prev_event_id = prev_event_id
        self.sealed = sealed
        self.lossless_checked = False
        self._data = data
        self._raw = None
        self._text = None
        _set(self, "__class__", Event)

    @property
    def data(self) -> JsonValue:
        """The event's data: lossless JSON in read-only containers."""
        data = self._data
        if data is _PENDING:  # decoded with arrays: freeze on first use, once
            data = freeze(self._raw)
            _set(self, "_data", data)
            _set(self, "_raw", None)
        return data

    def data_json(self) -> str:
        """JSON text of ``data`` (what the Avro record carries), rendered at most once.

        Canonical (sorted keys, no spaces, UTF-8) for every event built in memory and
        every record written by sessionstream; a decoded record keeps the text it
        carried (docs/adr/0002), so re-encoding it is byte-identical.
        """
        text = self._text
        if text is None:
            text = canonical_dumps(self.data)
            _set(self, "_text", text)
        return text

    def replace(self, **changes: Any) -> Event:
        """A copy with the given envelope fields changed (the supported way to copy).

        ``data`` and its caches are shared unless ``data`` is among the changes;
        ``lossless_checked`` carries over only then too (it is a fact about data).
        """
        unknown = changes.keys() - _FIELD_SET
        if unknown:
            raise TypeError(f"Event.replace() got unknown field(s): {sorted(unknown)}")
        new = _new(_Filling)
        for name in _ENVELOPE:
            setattr(new, name, changes[name] if name in changes else getattr(self, name))
        if "data" in changes:
            new.lossless_checked = False
            new._data = changes["data"]
            new._raw = None
            new._text = None
        else:
            new.lossless_checked = self.lossless_checked
            new._data = self._data
            new._raw = self._raw
            new._text = self._text
        _set(new, "__class__", Event)
        return new

    def _key(self) -> tuple[Any, ...]:
        return (
            self.session_id, self.seq, self.event_id, self.time, self.type, self.data,
            self.surface_op, self.source_event_seqs, self.writer, self.format_version,
            self.ignorable, self.turn_id, self.step_id, self.prev_event_id, self.sealed,
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Event:
            return NotImplemented
        if self is other:
            return True
        o = other
        if (
            self.seq != o.seq or self.event_id != o.event_id
            or self.session_id != o.session_id or self.time != o.time
            or self.type != o.type or self.surface_op != o.surface_op
            or self.source_event_seqs != o.source_event_seqs or self.writer != o.writer
            or self.format_version != o.format_version or self.ignorable != o.ignorable
            or self.turn_id != o.turn_id or self.step_id != o.step_id
            or self.prev_event_id != o.prev_event_id or self.sealed != o.sealed
        ):
            return False
        # The same JSON text parses to the same value; different texts may still
        # hold equal values (1 vs 1.0, key order), so fall back to comparing values.
        if self._text is not None and self._text == o._text:
            return True
        return bool(self.data == o.data)

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Event(session_id={self.session_id!r}, seq={self.seq!r}, "
            f"event_id={self.event_id!r}, time={self.time!r}, type={self.type!r}, "
            f"data={self.data!r}, surface_op={self.surface_op!r}, "
            f"source_event_seqs={self.source_event_seqs!r}, writer={self.writer!r}, "
            f"format_version={self.format_version!r}, ignorable={self.ignorable!r}, "
            f"turn_id={self.turn_id!r}, step_id={self.step_id!r}, "
            f"prev_event_id={self.prev_event_id!r}"
            + (f", sealed={self.sealed!r})" if self.sealed else ")")
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Event, self._key())

    def to_json(self) -> dict[str, Any]:
        """The envelope as plain JSON-ready dict (JSONL form, CLI output)."""
        return {
            "session_id": self.session_id,
            "seq": self.seq,
            "event_id": self.event_id,
            "time": self.time,
            "type": self.type,
            "data": thaw(self.data),
            "surface_op": self.surface_op.value,
            "source_event_seqs": list(self.source_event_seqs),
            "writer": {"id": self.writer.id, "epoch": self.writer.epoch},
            "format_version": self.format_version,
            "ignorable": self.ignorable,
            "turn_id": self.turn_id,
            "step_id": self.step_id,
            "prev_event_id": self.prev_event_id,
            **({"sealed": [p.to_json() for p in self.sealed]} if self.sealed else {}),
        }



class _Filling(Event):  # type: ignore[misc]  # the one subclass, never seen outside
    """An Event while its slots are filled: same layout, ordinary (fast) attribute stores.

    Never escapes: every constructor ends with ``_set(obj, "__class__", Event)``.
    """

    __slots__ = ()
    # Both, or CPython keeps the slow generic setattr slot that dispatches to Event's.
    __setattr__ = object.__setattr__  # type: ignore[assignment]
    __delattr__ = object.__delattr__


#: The envelope fields, in constructor order (replace checks against them).
_FIELD_SET = frozenset(Event.__match_args__)
_ENVELOPE = tuple(f for f in Event.__match_args__ if f != "data")


def make_event(
    *,
    session_id: str,
    seq: int,
    event_id: str,
    time: int,
    type: str,
    data: JsonValue,
    surface_op: SurfaceOp | str = SurfaceOp.NONE,
    source_event_seqs: tuple[int, ...] | list[int] = (),
    writer: Writer = _UNKNOWN_WRITER,
    format_version: int = FORMAT_VERSION,
    ignorable: bool = False,
    turn_id: str | None = None,
    step_id: str | None = None,
    prev_event_id: str | None = None,
    sealed: tuple[SealedPart, ...] = (),
) -> Event:
    """Build an Event from untrusted parts: checks data is lossless and freezes it."""
    event = Event(
        session_id=session_id,
        seq=seq,
        event_id=event_id,
        time=time,
        type=type,
        data=check_and_freeze(data),
        surface_op=SurfaceOp(surface_op),
        source_event_seqs=tuple(source_event_seqs),
        writer=writer,
        format_version=format_version,
        ignorable=ignorable,
        turn_id=turn_id,
        step_id=step_id,
        prev_event_id=prev_event_id,
        sealed=sealed,
    )
    mark_lossless(event)
    return event


def mark_lossless(event: Event) -> Event:
    """Record that ``event.data`` was verified lossless JSON (only for code that did so)."""
    _set(event, "lossless_checked", True)
    return event


def cache_text(event: Event, text: str) -> Event:
    """Give ``event`` the JSON text of its data (its canonical text, computed elsewhere:
    the native append path), so :meth:`Event.data_json` does not render it again."""
    _set(event, "_text", text)
    return event


def decoded_event(
    session_id: str,
    seq: int,
    event_id: str,
    time: int,
    type: str,
    text: str,
    value: JsonValue,
    frozen: bool,
    surface_op: SurfaceOp,
    source_event_seqs: tuple[int, ...],
    writer: Writer,
    format_version: int,
    ignorable: bool,
    turn_id: str | None,
    step_id: str | None,
    prev_event_id: str | None = None,
    sealed: tuple[SealedPart, ...] = (),
) -> Event:
    """For the codec: an Event whose data ``value`` was parsed from ``text`` and checked.

    The caller guarantees ``value`` is lossless JSON parsed from ``text``; it is
    frozen already when ``frozen``, else (plain, private) it is frozen on first access
    of ``data``. ``text`` is kept as :meth:`Event.data_json`. Positional, for speed.
    """
    event = _new(_Filling)
    event.session_id = session_id
    event.seq = seq
    event.event_id = event_id
    event.time = time
    event.type = type
    event.surface_op = surface_op
    event.source_event_seqs = source_event_seqs
    event.writer = writer
    event.format_version = format_version
    event.ignorable = ignorable
    event.turn_id = turn_id
    event.step_id = step_id
    event.prev_event_id = prev_event_id
    event.sealed = sealed
    event.lossless_checked = True
    if frozen:
        event._data = value
        event._raw = None
    else:
        event._data = _PENDING
        event._raw = value
    event._text = text
    _set(event, "__class__", Event)
    return event


@dataclass(frozen=True, slots=True)
class Draft:
    """An event a caller wants appended; the session stamps the rest."""

    type: str
    data: JsonValue = field(default_factory=dict)
    surface_op: SurfaceOp | None = None  # None: the catalog's default for the type
    source_event_seqs: tuple[int, ...] = ()
    turn_id: str | None = None  # None: the open turn (or a new id for turn/start)
    step_id: str | None = None

    @classmethod
    def of(cls, type_or_draft: str | Draft, data: JsonValue = None,
           surface_op: SurfaceOp | str | None = None, source_event_seqs: Sequence[int] = (),
           turn_id: str | None = None, step_id: str | None = None) -> Draft:
        """The draft an ``append(type_or_draft, data, ...)`` call means: a Draft as given,
        or one built from a type and its parts."""
        if isinstance(type_or_draft, Draft):
            return type_or_draft
        return cls(type_or_draft, {} if data is None else data,
                   SurfaceOp(surface_op) if surface_op is not None else None,
                   tuple(source_event_seqs), turn_id, step_id)


Clock = Callable[[], int]
"""Returns the current time in epoch milliseconds."""

IdSource = Callable[[], str]
"""Returns a fresh unique id (event ids, turn ids)."""


def system_clock() -> int:
    return _time.time_ns() // 1_000_000


def _random_chunks() -> Iterator[bytes]:
    raw = os.urandom(16 * 256)
    return iter([raw[i:i + 16] for i in range(0, len(raw), 16)])


#: 16-byte pieces of one os.urandom read (one system call per 256 ids, not per id).
#: ``next`` on a list iterator is atomic under the GIL, so two threads never get the
#: same piece; a forked child drops its parent's unused pieces.
_CHUNKS: list[Iterator[bytes]] = [iter(())]
os.register_at_fork(after_in_child=lambda: _CHUNKS.__setitem__(0, iter(())))


def uuid4_ids() -> str:
    """A random (version 4) UUID in its canonical text form, as ``str(uuid.uuid4())``.

    Built from 16 random bytes directly: a third of the cost of going through
    ``uuid.UUID`` on the append hot path.
    """
    piece = next(_CHUNKS[0], None)
    while piece is None:
        _CHUNKS[0] = it = _random_chunks()
        piece = next(it, None)
    b = bytearray(piece)
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class CountingClock:
    """A deterministic clock for tests and offline tools: start, start+step, …"""

    def __init__(self, start: int = 1_767_225_600_000, step: int = 1) -> None:
        self._now = start
        self._step = step

    def __call__(self) -> int:
        now = self._now
        self._now += self._step
        return now


class SequentialIds:
    """Deterministic ids for tests: ``<prefix>-000001`` …"""

    def __init__(self, prefix: str = "id") -> None:
        self._prefix = prefix
        self._n = 0

    def __call__(self) -> str:
        self._n += 1
        return f"{self._prefix}-{self._n:06d}"
