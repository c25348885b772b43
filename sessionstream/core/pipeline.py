"""The reader pipeline: what every reader does with a session's records, written once.

The live stream processor, its state_version rebuilds, replay and the writer's
read-back (resume, confirm, diagnose) all read a session the same way, in partition
order. The stages, in order:

1. **decode** (:func:`decode_record`) — a :class:`Record`'s bytes to an :class:`Event`. An empty
   value, bytes that are no sessionstream record, or a record keyed by another session
   is :class:`Undecodable` (the processor dead-letters it, read-back records it); a
   schema the registry cannot give right now raises :class:`SchemaUnavailable` (the
   caller retries: nothing is dead-lettered for an outage). A
   readable envelope in a newer format is :class:`UnsupportedFormat`: it quarantines
   the session at stage 6 instead of being lost.
2. **admission** (:func:`sessionstream.core.admission.admit`) — the admission
   :class:`AdmissionDecision`: a duplicate is dropped, ``stale_epoch`` / ``seq_gap`` /
   ``seq_conflict`` are refused and recorded in the ``rejections`` unit, an admitted
   event advances the :class:`AdmissionState`. Read-back stops here
   (:meth:`ReaderPipeline.admit`).
3. **readability** (:func:`sessionstream.core.codec.check_readable`) — a newer
   ``format_version`` or an unknown type that is not ignorable quarantines the session;
   an unknown ignorable type is skipped (:attr:`Outcome.IGNORED`).
4. **open** (optional :class:`ContentOpener`) — THE SEAM FOR SEALED CONTENT. An opener
   turns an admitted, readable event whose ``data`` is sealed (encrypted) into the
   event the projections read; it runs after admission, so refused and duplicate
   records are never opened. It raises :class:`ContentUnavailable` (or the core's
   ``SealedContentError``) when it cannot (no key, key destroyed, tampered
   ciphertext): the session is quarantined with kind
   ``content_unavailable``, never folded half-way. Without an opener events pass as
   they are.
5. **fold** (:meth:`Registry.apply` over the projection units) — a unit that raises
   (:class:`ProjectionError`) quarantines the session; the other sessions go on.
6. **quarantine decision** — a :class:`Quarantine` value (kind, reason, seq, offset);
   the ``index`` unit is marked (:func:`projections.quarantine`) and every later record
   of the session is :attr:`Outcome.HELD`, unread, until an operator acts.

One pass over one session is a :class:`Reading` (start it with
:meth:`ReaderPipeline.start` or resume a stored one with :meth:`ReaderPipeline.resume`);
:meth:`Reading.read` takes one decoded record and returns a :class:`Step`. The
pipeline is pure: no I/O, no clock; the edges bring the records and store the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from sessionstream.core import codec
from sessionstream.core.admission import AdmissionDecision, AdmissionState, Verdict, admit
from sessionstream.core.catalog import Catalog, default_catalog
from sessionstream.core.errors import (
    CorruptRecord,
    SchemaUnavailable,
    SealedContentError,
    SessionStreamError,
    UnknownRequiredEvent,
    UnsupportedFormat,
)
from sessionstream.core.events import Event
from sessionstream.core.projections import Registry, default_registry, quarantine, record_rejection

#: The unit a quarantine marks, and the unit refusals are recorded in (when present).
INDEX_UNIT = "index"
REJECTIONS_UNIT = "rejections"


# -- stage 1: decode ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Record:
    """One record of an events topic, as consumed (value still encoded)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None


class DeadLetterReason(StrEnum):
    """Why a record cannot be decoded (the dead-letter topic's ``sessionstream.reason``)."""

    CORRUPT = "corrupt"
    EMPTY = "empty"
    KEY_MISMATCH = "key_mismatch"


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A record that is not a readable event of the session its key names."""

    reason: DeadLetterReason
    detail: str  # what is wrong, for an operator (never the record's content)


#: What decoding a record gives: an event, a newer-format envelope, or nothing readable.
Decoded = Event | UnsupportedFormat | Undecodable


def decode_record(decode: Callable[[bytes], Event], key: bytes | None,
                  value: bytes | None) -> Decoded:
    """Stage 1: one record's bytes to an event (the key, when given, must be its session)."""
    if value is None:
        return Undecodable(DeadLetterReason.EMPTY, "record has no value")
    try:
        event = decode(value)
    except UnsupportedFormat as exc:
        return exc  # a readable envelope in a newer format: quarantine, not dead letter
    except SchemaUnavailable:
        raise  # temporary (registry away): the caller retries; the record is not corrupt
    except CorruptRecord as exc:
        return Undecodable(DeadLetterReason.CORRUPT, str(exc)[:500])
    except Exception as exc:  # a codec bug must not stop the partition
        return Undecodable(DeadLetterReason.CORRUPT,
                           f"decoder failed: {type(exc).__name__}: {exc}"[:500])
    if key is not None:
        text = key.decode("utf-8", "replace")
        if text != event.session_id:
            return Undecodable(
                DeadLetterReason.KEY_MISMATCH,
                f"record key {text!r} is not the event's session id "
                f"{event.session_id!r}; a writer bug (key by session id)")
    return event


# -- stage 4: the content-opener seam ---------------------------------------------------------

class ContentUnavailable(SessionStreamError):
    """An opener cannot turn a sealed event into a readable one (no key, bad ciphertext)."""


class ContentOpener(Protocol):
    """Turns an admitted, readable event into the event the projections fold."""

    def open(self, event: Event) -> Event:
        """The event with readable ``data``; raises :class:`ContentUnavailable`."""
        ...


# -- stage 6: the quarantine decision ----------------------------------------------------------

class QuarantineKind(StrEnum):
    NEWER_FORMAT = "newer_format"
    UNKNOWN_EVENT = "unknown_event"
    CONTENT_UNAVAILABLE = "content_unavailable"
    PROJECTION_ERROR = "projection_error"


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Why and where a session stopped being read (stored in the row's ``meta``)."""

    kind: QuarantineKind
    reason: str
    seq: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "reason": self.reason, "seq": self.seq,
                "offset": self.offset}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Quarantine:
        return cls(QuarantineKind(value["kind"]), str(value["reason"]), int(value["seq"]),
                   int(value["offset"]))


class Outcome(StrEnum):
    """What one record did to the session."""

    FOLDED = "folded"  # admitted, readable, folded by the units
    IGNORED = "ignored"  # admitted, an unknown but ignorable type: skipped
    DROPPED = "dropped"  # a duplicate event_id (admission verdict ``duplicate``)
    REJECTED = "rejected"  # refused by admission, recorded in ``rejections``
    QUARANTINED = "quarantined"  # this record stopped the session
    HELD = "held"  # the session was already quarantined: not read


@dataclass(frozen=True, slots=True)
class Step:
    """One record through the pipeline.

    ``decision`` is the admission decision (None for a newer-format envelope and for a
    held record, which never reach admission); ``changed`` the unit keys whose state
    changed; ``quarantine`` set on :attr:`Outcome.QUARANTINED`.
    """

    outcome: Outcome
    decision: AdmissionDecision | None = None
    changed: tuple[str, ...] = ()
    quarantine: Quarantine | None = None


_HELD = Step(Outcome.HELD)


# -- the pipeline ---------------------------------------------------------------------------

class ReaderPipeline:
    """The stages above over one registry and catalog; shared by every reader."""

    def __init__(
        self,
        registry: Registry,
        catalog: Catalog,
        *,
        decode: Callable[[bytes], Event] = codec.decode,
        check_readable: Callable[[Event, Catalog], bool] = codec.check_readable,
        opener: ContentOpener | None = None,
    ) -> None:
        self.registry = registry
        self.catalog = catalog
        self._decode = decode
        self._check_readable = check_readable
        self.opener = opener

    @classmethod
    def default(cls, *, registry: Registry | None = None,
                opener: ContentOpener | None = None) -> ReaderPipeline:
        """The built-in units and catalog (``registry``: e.g. a unit with a bumped version)."""
        return cls(registry or default_registry(), default_catalog(), opener=opener)

    def restricted(self, unit_keys: Iterable[str]) -> ReaderPipeline:
        """The same stages over only these units (a state_version rebuild)."""
        keys = set(unit_keys)
        return ReaderPipeline(
            Registry(u for u in self.registry.units if u.key in keys), self.catalog,
            decode=self._decode, check_readable=self._check_readable, opener=self.opener)

    # stage 1 ---------------------------------------------------------------------------
    def decode(self, record: Record) -> Decoded:
        """Stage 1 for one record (:func:`decode_record` with this pipeline's codec)."""
        return decode_record(self._decode, record.key, record.value)

    # stage 2 ---------------------------------------------------------------------------
    @staticmethod
    def admit(state: AdmissionState, event: Event) -> AdmissionDecision:
        """The admission stage alone (read-back: the log, not the projections)."""
        return admit(state, event)

    # passes ----------------------------------------------------------------------------
    def start(self, session_id: str) -> Reading:
        """A pass over a session from its first record."""
        return Reading(self, AdmissionState(session_id), self.registry.init_states())

    def resume(self, admission: AdmissionState, states: Mapping[str, Any],
               quarantine: Quarantine | None = None) -> Reading:
        """A pass continuing from a stored point."""
        return Reading(self, admission, states, quarantine)


class Reading:
    """One pass of the pipeline over one session's records, in partition order.

    Holds the admission state, the unit states and the quarantine as they are after
    the records read so far; :meth:`read` is the only way they change.
    """

    __slots__ = ("admission", "pipeline", "quarantine", "states")

    def __init__(self, pipeline: ReaderPipeline, admission: AdmissionState,
                 states: Mapping[str, Any], quarantine: Quarantine | None = None) -> None:
        self.pipeline = pipeline
        self.admission = admission
        self.states = states
        self.quarantine = quarantine

    def read(self, item: Event | UnsupportedFormat, offset: int) -> Step:
        """Stages 2-6 for one decoded record at ``offset``."""
        if self.quarantine is not None:
            return _HELD
        if isinstance(item, UnsupportedFormat):
            return self._stop(QuarantineKind.NEWER_FORMAT, str(item), item.seq, offset, None)
        event = item
        p = self.pipeline
        decision = admit(self.admission, event)
        verdict = decision.verdict
        if verdict is not Verdict.ADMITTED:
            if not decision.rejected:
                return Step(Outcome.DROPPED, decision)
            if REJECTIONS_UNIT not in self.states:
                return Step(Outcome.REJECTED, decision)
            self._set(REJECTIONS_UNIT, record_rejection(
                self.states[REJECTIONS_UNIT], {**decision.to_json(event), "offset": offset}))
            return Step(Outcome.REJECTED, decision, (REJECTIONS_UNIT,))
        self.admission = decision.state
        try:
            readable = p._check_readable(event, p.catalog)
        except (UnknownRequiredEvent, UnsupportedFormat) as exc:
            kind = (QuarantineKind.UNKNOWN_EVENT if isinstance(exc, UnknownRequiredEvent)
                    else QuarantineKind.NEWER_FORMAT)
            return self._stop(kind, str(exc), event.seq, offset, decision)
        if not readable:
            return Step(Outcome.IGNORED, decision)
        if p.opener is not None:
            try:
                event = p.opener.open(event)
            except (ContentUnavailable, SealedContentError) as exc:
                return self._stop(QuarantineKind.CONTENT_UNAVAILABLE, str(exc)[:500],
                                  event.seq, offset, decision)
        try:
            self.states, changed = p.registry.apply(self.states, event)
        except Exception as exc:  # ProjectionError: a unit bug stops only this session
            return self._stop(QuarantineKind.PROJECTION_ERROR,
                              f"projection failed: {exc}"[:500], event.seq, offset, decision)
        return Step(Outcome.FOLDED, decision, changed)

    def _stop(self, kind: QuarantineKind, reason: str, seq: int, offset: int,
              decision: AdmissionDecision | None) -> Step:
        q = Quarantine(kind, reason, seq, offset)
        self.quarantine = q
        if INDEX_UNIT not in self.states:
            return Step(Outcome.QUARANTINED, decision, (), q)
        self._set(INDEX_UNIT, quarantine(self.states[INDEX_UNIT], reason, seq))
        return Step(Outcome.QUARANTINED, decision, (INDEX_UNIT,), q)

    def _set(self, key: str, value: Any) -> None:
        states = dict(self.states)
        states[key] = value
        self.states = states
