"""The admission rule every reader applies, in partition order (brief §4).

Pure: ``admit(state, event) -> Decision``. Checked in this order:

1. ``duplicate``    the event_id is in the window of recently admitted ids → dropped;
2. ``stale_epoch``  writer epoch below the highest admitted epoch → a zombie writer;
3. ``seq_gap``      seq above the next expected (something is missing);
   ``seq_conflict`` seq below it with an unknown event_id (another write won that seq);
4. ``admitted``     otherwise: next_seq advances, max_epoch may rise.

Only ``admitted`` changes the state. Safety rests on seq alone: a redelivery
older than the id window is still refused, as ``seq_conflict``. The window only
makes the reason honest for the redeliveries that actually happen — a producer
retrying its un-acknowledged tail — so it is small (:data:`WINDOW`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sessionstream.events import Event

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


#: The verdicts that refuse an event (a duplicate is dropped, not refused).
REJECTIONS = frozenset({Verdict.STALE_EPOCH, Verdict.SEQ_GAP, Verdict.SEQ_CONFLICT})


@dataclass(frozen=True, slots=True)
class AdmissionState:
    """What a reader remembers of one session to admit its next event."""

    session_id: str
    next_seq: int = 0
    max_epoch: int = 0
    recent: tuple[tuple[str, int], ...] = ()  # (event_id, seq), oldest first, ≤ window
    window: int = WINDOW

    def seq_of(self, event_id: str) -> int | None:
        for eid, seq in self.recent:
            if eid == event_id:
                return seq
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "next_seq": self.next_seq,
            "max_epoch": self.max_epoch,
            "recent": [[eid, seq] for eid, seq in self.recent],
            "window": self.window,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> AdmissionState:
        return cls(
            session_id=str(value["session_id"]),
            next_seq=int(value["next_seq"]),
            max_epoch=int(value["max_epoch"]),
            recent=tuple((str(eid), int(seq)) for eid, seq in value.get("recent", ())),
            window=int(value.get("window", WINDOW)),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str | bytes) -> AdmissionState:
        return cls.from_json(json.loads(text))


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    state: AdmissionState

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


def admit(state: AdmissionState, event: Event) -> Decision:
    """Decide whether ``event`` is the next fact of the session ``state`` describes."""
    if event.session_id != state.session_id:
        raise ValueError(
            f"admission state of session {state.session_id!r} got an event of "
            f"{event.session_id!r}"
        )
    where = f"session {state.session_id} seq {event.seq}"
    seen = state.seq_of(event.event_id)
    if seen is not None:
        return Decision(
            Verdict.DUPLICATE,
            f"{where}: event {event.event_id} was already admitted at seq {seen}; dropped",
            state,
        )
    epoch = event.writer.epoch
    if epoch < state.max_epoch:
        return Decision(
            Verdict.STALE_EPOCH,
            f"{where}: writer {event.writer.id!r} epoch {epoch} is below the admitted "
            f"epoch {state.max_epoch} (zombie writer); rejected",
            state,
        )
    if event.seq > state.next_seq:
        return Decision(
            Verdict.SEQ_GAP,
            f"{where}: expected seq {state.next_seq}, seqs {state.next_seq}..{event.seq - 1} "
            f"are missing (writer {event.writer.id!r} epoch {epoch}); rejected",
            state,
        )
    if event.seq < state.next_seq:
        return Decision(
            Verdict.SEQ_CONFLICT,
            f"{where}: seq {event.seq} is already taken (next is {state.next_seq}) and "
            f"event {event.event_id} is not the admitted one (writer {event.writer.id!r} "
            f"epoch {epoch}); rejected",
            state,
        )
    recent = (*state.recent, (event.event_id, event.seq))
    if len(recent) > state.window:
        recent = recent[len(recent) - state.window :]
    new = AdmissionState(
        state.session_id, state.next_seq + 1, max(state.max_epoch, epoch), recent, state.window
    )
    return Decision(
        Verdict.ADMITTED,
        f"{where}: admitted (writer {event.writer.id!r} epoch {epoch})",
        new,
    )
