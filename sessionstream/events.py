"""The event envelope: frozen values, plus the injected clock and id source.

An :class:`Event` is one fact of one session. ``seq`` is the authority on order
(contiguous from 0 per session); ``time`` is informational (epoch milliseconds,
UTC). ``data`` is lossless JSON frozen into read-only containers. A
:class:`Draft` is what a caller asks to append; :class:`~sessionstream.session.Session`
turns it into an Event by stamping seq, event_id, time and writer.
"""

from __future__ import annotations

import os
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sessionstream.jsonvalue import JsonValue, canonical_dumps, check_and_freeze, thaw

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


@dataclass(frozen=True, slots=True)
class Event:
    """One immutable fact of a session log."""

    session_id: str
    seq: int
    event_id: str
    time: int
    type: str
    data: JsonValue
    surface_op: SurfaceOp = SurfaceOp.NONE
    source_event_seqs: tuple[int, ...] = ()
    writer: Writer = Writer("unknown", 0)
    format_version: int = FORMAT_VERSION
    ignorable: bool = False
    turn_id: str | None = None
    step_id: str | None = None
    #: True when the constructor that built this event verified ``data`` is lossless
    #: JSON (make_event, Session.append, the codec): readers may skip checking again.
    #: Not part of equality, hash or repr; ``dataclasses.replace`` resets it.
    lossless_checked: bool = field(default=False, init=False, repr=False, compare=False)

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
        }

    def data_json(self) -> str:
        """Canonical JSON text of ``data`` (what the Avro record carries)."""
        return canonical_dumps(self.data)


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
    writer: Writer = Writer("unknown", 0),
    format_version: int = FORMAT_VERSION,
    ignorable: bool = False,
    turn_id: str | None = None,
    step_id: str | None = None,
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
    )
    mark_lossless(event)
    return event


def mark_lossless(event: Event) -> Event:
    """Record that ``event.data`` was verified lossless JSON (only for code that did so)."""
    object.__setattr__(event, "lossless_checked", True)
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


Clock = Callable[[], int]
"""Returns the current time in epoch milliseconds."""

IdSource = Callable[[], str]
"""Returns a fresh unique id (event ids, turn ids)."""


def system_clock() -> int:
    return _time.time_ns() // 1_000_000


def uuid4_ids() -> str:
    """A random (version 4) UUID in its canonical text form, as ``str(uuid.uuid4())``.

    Built from 16 random bytes directly: a third of the cost of going through
    ``uuid.UUID`` on the append hot path.
    """
    b = bytearray(os.urandom(16))
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
