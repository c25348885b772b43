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
