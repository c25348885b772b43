"""The reader pipeline: each stage's outcome, typed, and the content-opener seam."""

from __future__ import annotations

import random

from sessionstream.core.admission import Verdict
from sessionstream.core.codec import encode
from sessionstream.core.events import Event, make_event
from sessionstream.core.pipeline import (
    ContentUnavailable,
    DeadLetterReason,
    Outcome,
    QuarantineKind,
    ReaderPipeline,
    Record,
    Undecodable,
)
from sessionstream.core.simulate import simulate_session

PIPE = ReaderPipeline.default()


def _log(sid: str = "s1") -> list[Event]:
    return list(simulate_session(random.Random(4), sid, turns=2))


def _record(value: bytes | None, key: bytes | None = b"s1", offset: int = 0) -> Record:
    return Record("t", 0, offset, key, value)


def test_decode_names_empty_corrupt_and_misaddressed_records() -> None:
    ev = _log()[0]
    assert PIPE.decode(_record(encode(ev))) == ev
    assert PIPE.decode(_record(None)) == Undecodable(DeadLetterReason.EMPTY, "record has no value")
    corrupt = PIPE.decode(_record(b"garbage"))
    assert isinstance(corrupt, Undecodable) and corrupt.reason is DeadLetterReason.CORRUPT
    other = PIPE.decode(_record(encode(ev), key=b"s2"))
    assert isinstance(other, Undecodable) and other.reason is DeadLetterReason.KEY_MISMATCH


def test_a_log_folds_to_the_registry_fold_and_each_step_carries_the_admission_verdict() -> None:
    log = _log()
    reading = PIPE.start("s1")
    steps = [reading.read(ev, i) for i, ev in enumerate(log)]
    assert {s.outcome for s in steps} == {Outcome.FOLDED}
    assert all(s.decision is not None and s.decision.verdict is Verdict.ADMITTED for s in steps)
    assert reading.states == PIPE.registry.fold(log).states
    assert reading.admission.next_seq == len(log)


def test_a_redelivery_is_dropped_and_a_gap_is_rejected_and_recorded() -> None:
    log = _log()
    reading = PIPE.start("s1")
    reading.read(log[0], 0)
    assert reading.read(log[0], 1).outcome is Outcome.DROPPED
    gap = reading.read(log[2], 2)
    assert gap.outcome is Outcome.REJECTED and gap.changed == ("rejections",)
    assert gap.decision is not None and gap.decision.verdict is Verdict.SEQ_GAP
    assert PIPE.registry.unit("rejections").view(reading.states["rejections"])["total"] == 1


def test_an_unknown_required_type_quarantines_and_holds_every_later_record() -> None:
    log = _log()
    reading = PIPE.start("s1")
    reading.read(log[0], 0)
    odd = make_event(session_id="s1", seq=1, event_id="x", time=1, type="zz/unknown",
                     data={}, writer=log[0].writer)
    step = reading.read(odd, 1)
    assert step.outcome is Outcome.QUARANTINED and step.changed == ("index",)
    assert step.quarantine is not None and step.quarantine.kind is QuarantineKind.UNKNOWN_EVENT
    assert (step.quarantine.seq, step.quarantine.offset) == (1, 1)
    assert reading.read(log[1], 2).outcome is Outcome.HELD


def test_an_ignorable_unknown_type_is_admitted_and_skipped() -> None:
    log = _log()
    reading = PIPE.start("s1")
    reading.read(log[0], 0)
    odd = make_event(session_id="s1", seq=1, event_id="x", time=1, type="zz/unknown",
                     data={}, writer=log[0].writer, ignorable=True)
    before = reading.states
    assert reading.read(odd, 1).outcome is Outcome.IGNORED
    assert reading.states is before and reading.admission.next_seq == 2


class _Opener:
    """Test opener: records what it opened, has no key for the event at seq 3."""

    def __init__(self) -> None:
        self.opened: list[int] = []

    def open(self, event: Event) -> Event:
        if event.seq == 3:
            raise ContentUnavailable("no key for this session")
        self.opened.append(event.seq)
        return event


def test_the_opener_runs_after_admission_and_a_refusal_to_open_quarantines() -> None:
    log = _log()
    opener = _Opener()
    reading = ReaderPipeline.default(opener=opener).start("s1")
    reading.read(log[0], 0)
    reading.read(log[0], 1)  # a duplicate is never opened
    reading.read(log[1], 2)
    assert reading.read(log[6], 3).outcome is Outcome.REJECTED  # a refused record is not opened
    reading.read(log[2], 4)
    step = reading.read(log[3], 5)
    assert opener.opened == [0, 1, 2]
    assert step.outcome is Outcome.QUARANTINED
    assert step.quarantine is not None
    assert step.quarantine.kind is QuarantineKind.CONTENT_UNAVAILABLE
    assert reading.read(log[4], 6).outcome is Outcome.HELD


def test_a_restricted_pipeline_folds_only_its_units() -> None:
    log = _log()
    reading = PIPE.restricted(["todo", "rejections"]).start("s1")
    for i, ev in enumerate(log):
        reading.read(ev, i)
    assert set(reading.states) == {"todo", "rejections"}
    assert reading.states["todo"] == PIPE.registry.fold(log).states["todo"]
