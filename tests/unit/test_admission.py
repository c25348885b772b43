"""The admission rule: duplicates, zombie epochs, gaps and conflicts; state round trip."""

from __future__ import annotations

import pytest

from sessionstream.core.admission import WINDOW, AdmissionState, Verdict, admit
from sessionstream.core.events import Event, Writer
from tests.unit.strategies import new_session


def log(n: int = 4, epoch: int = 1) -> list[Event]:
    s = new_session("s", writer=Writer("w", epoch))
    for i in range(n - 1):
        s.append("user/message", {"content": str(i)})
    return list(s.events)


def run(events: list[Event], state: AdmissionState | None = None) -> AdmissionState:
    state = state or AdmissionState("s")
    for e in events:
        state = admit(state, e).state
    return state


def test_in_order_events_are_admitted() -> None:
    state = AdmissionState("s")
    for e in log():
        d = admit(state, e)
        assert d.verdict is Verdict.ADMITTED and d.admitted
        state = d.state
    assert state.next_seq == 4 and state.max_epoch == 1


def test_redelivered_event_is_a_duplicate_and_changes_nothing() -> None:
    events = log()
    state = run(events)
    d = admit(state, events[2])
    assert d.verdict is Verdict.DUPLICATE and d.state is state
    assert "seq 2" in d.reason and events[2].event_id in d.reason


def test_lower_epoch_is_a_zombie_writer() -> None:
    events = log()
    state = run(events[:2])
    newer = events[2].replace(writer=Writer("w2", 2))
    state = admit(state, newer).state
    zombie = events[3].replace(writer=Writer("w", 1))
    d = admit(state, zombie)
    assert d.verdict is Verdict.STALE_EPOCH and d.state is state
    assert "epoch 1" in d.reason and "epoch 2" in d.reason and "session s" in d.reason


def test_gap_and_conflict_are_rejected() -> None:
    events = log()
    state = run(events[:2])
    gap = admit(state, events[3])
    assert gap.verdict is Verdict.SEQ_GAP and gap.state is state and "missing" in gap.reason
    other = events[1].replace(event_id="someone-else")
    conflict = admit(state, other)
    assert conflict.verdict is Verdict.SEQ_CONFLICT and conflict.state is state


def test_duplicate_older_than_the_window_is_still_refused() -> None:
    events = log(5)
    state = run(events, AdmissionState("s", window=2))
    assert len(state.recent) == 2
    assert admit(state, events[0]).verdict is Verdict.SEQ_CONFLICT


def test_state_round_trips_through_json() -> None:
    state = run(log())
    assert AdmissionState.loads(state.dumps()) == state
    assert AdmissionState.from_json(state.to_json()) == state
    assert state.window == WINDOW


def test_an_event_of_another_session_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="other"):
        admit(AdmissionState("other"), log()[0])


# -- the history an event continues (prev_event_id, ADR 0001) --------------------------

def _resume(events: list[Event], writer: Writer, n: int) -> list[Event]:
    """What a writer that read ``events`` and took ``writer``'s lease appends."""
    from sessionstream.core.session import Session

    s = Session.from_events(events)
    s.set_writer(writer)
    for i in range(n):
        s.append("user/message", {"content": f"{writer.id}-{i}"})
    return list(s.events[len(events):])


def test_a_racing_resumer_refused_once_is_refused_for_good_as_history_conflict() -> None:
    """The spliced history of the fault-injection run can no longer be admitted."""
    base = log(3)
    first = _resume(base, Writer("a", 2), 2)  # its repair + end-seed land first: admitted
    second = _resume(base, Writer("b", 3), 5)  # the same seqs, a higher epoch, landing after
    state = run(base + first)
    for e in second[:2]:
        d = admit(state, e)
        assert d.verdict is Verdict.SEQ_CONFLICT  # its seq is taken by a's event
    # b's next event is at the next seq with a higher epoch: seq + epoch alone admitted it
    d = admit(state, second[2])
    assert second[2].seq == state.next_seq and second[2].writer.epoch > state.max_epoch
    assert d.verdict is Verdict.HISTORY_CONFLICT and d.rejected and d.state is state
    assert "continues a history that was not admitted" in d.reason
    assert second[1].event_id in d.reason and first[-1].event_id in d.reason
    for e in second[3:]:
        assert admit(state, e).verdict is Verdict.SEQ_GAP


def test_an_event_continuing_the_admitted_history_is_admitted_and_becomes_the_last() -> None:
    base = log(3)
    state = run(base)
    assert state.last_event_id == base[-1].event_id and state.linked
    nxt = _resume(base, Writer("b", 2), 1)[0]
    d = admit(state, nxt)
    assert d.admitted and d.state.last_event_id == nxt.event_id


def test_seq_0_must_continue_nothing() -> None:
    start = log(1)[0]
    assert admit(AdmissionState("s"), start).admitted
    claims = start.replace(prev_event_id="x")
    assert admit(AdmissionState("s"), claims).verdict is Verdict.HISTORY_CONFLICT


def test_records_written_before_v2_fold_as_before() -> None:
    """The upgrade rule: no prev_event_id makes no claim while the history is unlinked."""
    legacy = [e.replace(prev_event_id=None) for e in log(5)]
    state = run(legacy)
    assert state.next_seq == 5 and not state.linked
    # a v2 writer resuming a v1 history links it from there on
    resumed = _resume(legacy, Writer("v2", 2), 2)
    d = admit(state, resumed[0])
    assert d.admitted and d.state.linked
    # once linked, an event claiming nothing is refused
    unlinked = resumed[1].replace(prev_event_id=None)
    assert admit(d.state, unlinked).verdict is Verdict.HISTORY_CONFLICT


def test_a_state_saved_before_last_event_id_loads_and_keeps_admitting() -> None:
    events = log(4)
    state = run(events)
    old_form = {k: v for k, v in state.to_json().items() if k not in ("last_event_id", "linked")}
    loaded = AdmissionState.from_json(old_form)
    assert loaded.last_event_id == events[-1].event_id  # taken from the id window
    nxt = _resume(events, Writer("w", 1), 1)[0]
    assert admit(loaded, nxt).admitted
    # with no window (nothing to take it from) the next claim is accepted once
    bare = AdmissionState.from_json({"session_id": "s", "next_seq": 4, "max_epoch": 1,
                                     "window": 0})
    assert bare.last_event_id is None
    d = admit(bare, nxt)
    assert d.admitted and d.state.last_event_id == nxt.event_id


def test_state_with_history_round_trips_through_json() -> None:
    state = run(log())
    back = AdmissionState.loads(state.dumps())
    assert back == state and back.last_event_id == state.last_event_id and back.linked
