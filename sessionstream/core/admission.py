"""The admission rule every reader applies, in partition order (brief §4, ADR 0001).

Pure: ``admit(state, event) -> AdmissionDecision``. Checked in this order:

1. ``duplicate``        the event_id is in the window of recently admitted ids → dropped;
2. ``stale_epoch``      writer epoch below the highest admitted epoch → a zombie writer;
3. ``seq_gap``          seq above the next expected (something is missing);
   ``seq_conflict``     seq below it with an unknown event_id (another write won that seq);
4. ``history_conflict`` seq is the next one, but the event continues a history that was
   not admitted: its ``prev_event_id`` is not the id of the last admitted event;
5. ``admitted``         otherwise: next_seq advances, max_epoch may rise, the event's id
   becomes the one the next event must name.

Only ``admitted`` changes the state. Seq says *where* an event goes; ``prev_event_id``
says *which history* it continues. Together: once one of a writer's events is refused,
none of its later events can be admitted on top of someone else's (each names its
predecessor, which was not admitted). The upgrade rule: ``prev_event_id`` None makes no
claim — accepted at seq 0, and for records written before schema v2 while the session's
history is not yet linked (the last admitted event carried no ``prev_event_id``); once
a history is linked, an unlinked event is refused. A state saved before this rule (no
``last_event_id``) takes the last id from its window, or, with none, accepts the next
event's claim (one event, once, at the upgrade).

Safety rests on seq and history alone: a redelivery older than the id window is still
refused, as ``seq_conflict``. The window only makes the reason honest for the
redeliveries that actually happen — a producer retrying its un-acknowledged tail — so
it is small (:data:`WINDOW`).
"""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, dataclass, field
from enum import StrEnum
from typing import Any

from sessionstream.core.events import Event

#: Recent event ids remembered per session. A producer re-sends only what it has
#: not seen acknowledged (librdkafka: at most max.in.flight requests, each a batch);
#: for one session that is far below 256 events. 256 ids ≈ 10 KB of JSON per
#: session in Redis, which keeps fleet-wide state small.
WINDOW = 256


class Verdict(StrEnum):
    ADMITTED = "admitted"
    DUPLICATE = "duplicate"
    STALE_EPOCH = "stale_epoch"
    SEQ_GAP = "seq_gap"
    SEQ_CONFLICT = "seq_conflict"
    HISTORY_CONFLICT = "history_conflict"


#: The verdicts that refuse an event (a duplicate is dropped, not refused).
REJECTIONS = frozenset({
    Verdict.STALE_EPOCH, Verdict.SEQ_GAP, Verdict.SEQ_CONFLICT, Verdict.HISTORY_CONFLICT,
})

#: What each verdict means, in one line (dashboards, diagnose, docs).
MEANING: dict[Verdict, str] = {
    Verdict.ADMITTED: "the next fact of the session",
    Verdict.DUPLICATE: "an event already admitted (a redelivery); dropped",
    Verdict.STALE_EPOCH: "a writer whose lease epoch was superseded (zombie writer)",
    Verdict.SEQ_GAP: "seqs are missing before it (a write went missing)",
    Verdict.SEQ_CONFLICT: "its seq is taken by another admitted event",
    Verdict.HISTORY_CONFLICT: "continues a history that was not admitted (a writer that "
                              "lost a race kept writing after its refused event)",
}


_Slots = dict[str, tuple[int, int]]  # event_id -> (position in its generation, seq)


class AdmissionState:
    """What a reader remembers of one session to admit its next event.

    An immutable value: ``session_id``, ``next_seq``, ``max_epoch``, ``recent``
    ((event_id, seq) pairs, oldest first, at most ``window`` after an admission),
    ``window``, ``last_event_id`` (the id of the last admitted event, None before the
    first or when unknown) and ``linked`` (that event named its predecessor);
    equality, hash and JSON form are over those seven.

    ``recent`` is kept as two generations of at most ``window`` ids each so that
    :meth:`seq_of` and :func:`admit` are O(1) instead of O(window): ``_old`` (a
    full generation, never changed again) and ``_new`` (the filling one) of which
    this state sees the first ``_n`` entries. States of one history share
    ``_new``: an admission from the newest state appends to it in place (older
    states do not see entries at or past their ``_n``); an admission from an
    older state copies what it sees first, so every state stays the value it was.
    """

    __slots__ = ("_n", "_new", "_old", "_raw", "last_event_id", "linked", "max_epoch",
                 "next_seq", "session_id", "window")

    session_id: str
    next_seq: int
    max_epoch: int
    window: int
    last_event_id: str | None
    linked: bool
    _old: _Slots  # visible entries: position >= _n (all of them while _n == 0)
    _new: _Slots  # visible entries: position < _n
    _n: int
    # A loaded ``recent`` that repeats an id (never written by admit) is kept as given
    # while it is the old generation; seq_of then scans it (exact, rare, slow).
    _raw: tuple[tuple[str, int], ...] | None

    def __init__(
        self,
        session_id: str,
        next_seq: int = 0,
        max_epoch: int = 0,
        recent: tuple[tuple[str, int], ...] = (),
        window: int = WINDOW,
        last_event_id: str | None = None,
        linked: bool = False,
    ) -> None:
        recent = tuple(recent)
        offset = window - len(recent)  # loaded ids take the last positions of a generation
        old = {eid: (offset + i, seq) for i, (eid, seq) in enumerate(recent)}
        raw = recent if len(old) != len(recent) else None
        if last_event_id is None and recent and recent[-1][1] == next_seq - 1:
            last_event_id = recent[-1][0]  # a state saved before last_event_id existed
        self._init(session_id, next_seq, max_epoch, window, old, {}, 0, raw,
                   last_event_id, linked)

    def _init(
        self, session_id: str, next_seq: int, max_epoch: int, window: int,
        old: _Slots, new: _Slots, n: int, raw: tuple[tuple[str, int], ...] | None,
        last_event_id: str | None, linked: bool,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "session_id", session_id)
        set_(self, "next_seq", next_seq)
        set_(self, "max_epoch", max_epoch)
        set_(self, "window", window)
        set_(self, "last_event_id", last_event_id)
        set_(self, "linked", linked)
        set_(self, "_old", old)
        set_(self, "_new", new)
        set_(self, "_n", n)
        set_(self, "_raw", raw)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    @property
    def recent(self) -> tuple[tuple[str, int], ...]:
        """(event_id, seq) of the recently admitted events, oldest first."""
        n = self._n
        if self._raw is not None:
            offset = self.window - len(self._raw)
            old = [p for i, p in enumerate(self._raw) if n == 0 or offset + i >= n]
        else:
            old = [(eid, seq) for eid, (pos, seq) in self._old.items() if n == 0 or pos >= n]
        new = [(eid, seq) for eid, (pos, seq) in self._new.items() if pos < n]
        return (*old, *new)

    def seq_of(self, event_id: str) -> int | None:
        """The seq at which ``event_id`` was admitted, if it is in the recent window."""
        if self._raw is not None:
            for eid, seq in self.recent:
                if eid == event_id:
                    return seq
            return None
        n = self._n
        hit = self._new.get(event_id)
        if hit is not None and hit[0] < n:
            return hit[1]
        hit = self._old.get(event_id)
        if hit is not None and (n == 0 or hit[0] >= n):
            return hit[1]
        return None

    def _admitted(
        self, event_id: str, seq: int, max_epoch: int, linked: bool
    ) -> AdmissionState:
        """The state after admitting ``event_id`` at ``seq`` (the caller checked the rule)."""
        window, n = self.window, self._n
        raw = self._raw
        if window <= 0:
            old: _Slots = {}
            new: _Slots = {}
            n = 0
            raw = None
        elif n >= window:  # this generation is full: it becomes the old one
            old, new, n, raw = self._new, {event_id: (0, seq)}, 1, None
        else:
            old, new = self._old, self._new
            if len(new) != n:  # not the newest state of this history: copy what it sees
                new = {eid: slot for eid, slot in new.items() if slot[0] < n}
            new[event_id] = (n, seq)
            n += 1
        state = AdmissionState.__new__(AdmissionState)
        state._init(self.session_id, seq + 1, max_epoch, window, old, new, n, raw,
                    event_id, linked)
        return state

    def _key(self) -> tuple[Any, ...]:
        return (self.session_id, self.next_seq, self.max_epoch, self.recent, self.window,
                self.last_event_id, self.linked)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not AdmissionState:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"AdmissionState(session_id={self.session_id!r}, next_seq={self.next_seq!r}, "
            f"max_epoch={self.max_epoch!r}, recent={self.recent!r}, window={self.window!r}, "
            f"last_event_id={self.last_event_id!r}, linked={self.linked!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (AdmissionState, self._key())

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "next_seq": self.next_seq,
            "max_epoch": self.max_epoch,
            "recent": [[eid, seq] for eid, seq in self.recent],
            "window": self.window,
            "last_event_id": self.last_event_id,
            "linked": self.linked,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> AdmissionState:
        """Load a state; one saved before ``last_event_id``/``linked`` existed loads too."""
        last = value.get("last_event_id")
        return cls(
            session_id=str(value["session_id"]),
            next_seq=int(value["next_seq"]),
            max_epoch=int(value["max_epoch"]),
            recent=tuple((str(eid), int(seq)) for eid, seq in value.get("recent", ())),
            window=int(value.get("window", WINDOW)),
            last_event_id=str(last) if last is not None else None,
            linked=bool(value.get("linked", False)),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str | bytes) -> AdmissionState:
        return cls.from_json(json.loads(text))


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    verdict: Verdict
    # The sentence for a refusal; None for an admission, whose sentence ``reason``
    # formats from ``event`` only when asked (the admitted path is per event and hot).
    text: str | None
    state: AdmissionState
    event: Event | None = field(default=None, repr=False, compare=False)

    @property
    def reason(self) -> str:
        """Why: the stable verdict explained for humans."""
        if self.text is not None:
            return self.text
        ev = self.event
        assert ev is not None
        return (f"session {self.state.session_id} seq {ev.seq}: admitted "
                f"(writer {ev.writer.id!r} epoch {ev.writer.epoch})")

    @property
    def admitted(self) -> bool:
        return self.verdict is Verdict.ADMITTED

    @property
    def rejected(self) -> bool:
        return self.verdict in REJECTIONS

    def to_json(self, event: Event) -> dict[str, Any]:
        """The decision about ``event`` as JSON (what ``record_rejection`` consumes).

        ``verdict`` is the stable code, ``reason`` the sentence for humans;
        ``next_seq`` / ``max_epoch`` are the session's admission state after the
        decision (for a refusal: the seq that was expected, the epoch that won).
        """
        return {
            "verdict": self.verdict.value,
            "reason": self.reason,
            "session_id": event.session_id,
            "seq": event.seq,
            "event_id": event.event_id,
            "type": event.type,
            "writer": {"id": event.writer.id, "epoch": event.writer.epoch},
            "next_seq": self.state.next_seq,
            "max_epoch": self.state.max_epoch,
        }


def admit(state: AdmissionState, event: Event) -> AdmissionDecision:
    """Decide whether ``event`` is the next fact of the session ``state`` describes."""
    if event.session_id != state.session_id:
        raise ValueError(
            f"admission state of session {state.session_id!r} got an event of "
            f"{event.session_id!r}"
        )
    seen = state.seq_of(event.event_id)
    epoch = event.writer.epoch
    prev = event.prev_event_id
    if seen is None and epoch >= state.max_epoch and event.seq == state.next_seq and (
        prev == state.last_event_id
        or (prev is None and not state.linked)  # seq 0, or a record from before v2
        or (state.last_event_id is None and event.seq > 0)  # a state from before v2
    ):
        # the common case first; the sentence is formatted only if someone reads it
        new = state._admitted(event.event_id, event.seq, max(state.max_epoch, epoch),
                              prev is not None)
        return AdmissionDecision(Verdict.ADMITTED, None, new, event)
    where = f"session {state.session_id} seq {event.seq}"
    if seen is not None:
        return AdmissionDecision(
            Verdict.DUPLICATE,
            f"{where}: event {event.event_id} was already admitted at seq {seen}; dropped",
            state,
        )
    if epoch < state.max_epoch:
        return AdmissionDecision(
            Verdict.STALE_EPOCH,
            f"{where}: writer {event.writer.id!r} epoch {epoch} is below the admitted "
            f"epoch {state.max_epoch} (zombie writer); rejected",
            state,
        )
    if event.seq > state.next_seq:
        return AdmissionDecision(
            Verdict.SEQ_GAP,
            f"{where}: expected seq {state.next_seq}, seqs {state.next_seq}..{event.seq - 1} "
            f"are missing (writer {event.writer.id!r} epoch {epoch}); rejected",
            state,
        )
    if event.seq < state.next_seq:
        return AdmissionDecision(
            Verdict.SEQ_CONFLICT,
            f"{where}: seq {event.seq} is already taken (next is {state.next_seq}) and "
            f"event {event.event_id} is not the admitted one (writer {event.writer.id!r} "
            f"epoch {epoch}); rejected",
            state,
        )
    # event.seq == state.next_seq: it continues another history than the admitted one
    claim = "no previous event" if prev is None else f"event {prev}"
    return AdmissionDecision(
        Verdict.HISTORY_CONFLICT,
        f"{where}: continues a history that was not admitted — it was written after "
        f"{claim}, but the admitted event at seq {event.seq - 1} is "
        f"{state.last_event_id or 'none'} (writer {event.writer.id!r} epoch {epoch}); "
        "rejected",
        state,
    )
