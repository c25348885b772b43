"""Hypothesis properties of the core over random valid sessions (and the surface unit)."""

from __future__ import annotations

import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.admission import AdmissionState, Verdict, admit
from sessionstream.core.events import Event, Writer
from sessionstream.core.fork import fork, stable_tail
from sessionstream.core.projections.surface import SurfaceUnit
from sessionstream.core.recovery import recover
from sessionstream.core.session import Session
from sessionstream.core.surface import derive_from_scratch, token_estimate
from tests.unit.strategies import lab_sessions, logs, random_log, sessions

PROFILE = settings(max_examples=120, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def no_orphan_calls(messages: object) -> bool:
    """Every tool call on the surface has a result, except calls pending in the open turn."""
    calls = {c.call_id for m in messages for c in m.tool_calls}  # type: ignore[attr-defined]
    results = {m.call_id for m in messages if m.call_id is not None}  # type: ignore[attr-defined]
    return results <= calls


@PROFILE
@given(sessions())
def test_incremental_surface_equals_full_rebuild(session: Session) -> None:
    incremental = session.derive_messages()
    assert Session.from_events(session.events).derive_messages() == incremental
    assert derive_from_scratch(session.events) == incremental


@PROFILE
@given(lab_sessions())
def test_lab_sessions_rebuild_to_the_same_surface(events: list[Event]) -> None:
    s = Session.from_events(events)
    assert s.derive_messages() == derive_from_scratch(events)


@PROFILE
@given(sessions(min_steps=1), st.data())
def test_recovery_closes_a_truncated_log_without_inventing_results(
    session: Session, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(session.events)))
    s = Session.from_events(session.events[:cut])
    drafts = recover(s)
    assert all(d.type != "tool/result" for d in drafts)
    for d in drafts:
        s.append(d)
    assert s.open_turn is None and s.open_step is None
    assert s.pending_calls == () and s.open_compaction is None
    assert recover(s) == []
    # closed session: every call on the surface is answered
    calls = {c.call_id for m in s.derive_messages() for c in m.tool_calls}
    results = {m.call_id for m in s.derive_messages() if m.call_id is not None}
    assert calls == results


@PROFILE
@given(sessions())
def test_compaction_never_leaves_an_orphan_tool_call(session: Session) -> None:
    msgs = session.derive_messages()
    assert no_orphan_calls(msgs)
    pending = {p.call_id for p in session.pending_calls}
    calls = {c.call_id for m in msgs for c in m.tool_calls}
    results = {m.call_id for m in msgs if m.call_id is not None}
    assert calls - results <= pending  # unanswered calls only in the open turn
    # and every result sits after its call
    seen: set[str] = set()
    for m in msgs:
        seen.update(c.call_id for c in m.tool_calls)
        if m.call_id is not None:
            assert m.call_id in seen


@PROFILE
@given(sessions(min_steps=1), st.data())
def test_fork_child_surface_equals_parent_prefix(session: Session, data: st.DataObject) -> None:
    tail = stable_tail(session)
    at = data.draw(st.sampled_from([n for n in range(1, tail + 1)
                                    if stable_tail(session.events[:n]) == n] or [1]))
    child = fork(session, "child", at=at)
    assert child.derive_messages() == Session.from_events(session.events[:at]).derive_messages()


@PROFILE
@given(sessions(max_steps=40), st.data())
def test_admission_is_independent_of_duplicate_deliveries(
    session: Session, data: st.DataObject
) -> None:
    events = list(session.events)
    # partition order, plus producer retries: copies of an event anywhere after the original
    deliveries: list[Event] = list(events)
    for e in data.draw(st.lists(st.sampled_from(events), max_size=12)):
        first = deliveries.index(e)
        deliveries.insert(data.draw(st.integers(first + 1, len(deliveries))), e)
    state = AdmissionState("walk")
    admitted = []
    for e in deliveries:
        d = admit(state, e)
        assert d.verdict in (Verdict.ADMITTED, Verdict.DUPLICATE)
        if d.admitted:
            admitted.append(e)
        state = d.state
    assert admitted == events


@PROFILE
@given(sessions(min_steps=2, max_steps=30), st.data())
def test_stale_epochs_are_rejected_after_a_takeover(session: Session, data: st.DataObject) -> None:
    events = list(session.events)
    k = data.draw(st.integers(1, len(events) - 1))
    new_writer = [e.replace(writer=Writer("new", 1)) for e in events[k:]]
    zombie = events[k].replace(event_id="zombie", writer=Writer("old", 0))
    state = AdmissionState("walk")
    for e in events[:k] + new_writer[:1]:
        state = admit(state, e).state
    assert admit(state, zombie).verdict is Verdict.STALE_EPOCH


def _assert_surface_unit_follows_the_session(events: list[Event], cuts: set[int]) -> None:
    """Fold the surface unit event by event beside a Session admitting the same events;
    at every prefix the unit's view is derive_messages() as JSON, with its token estimate.
    At the seqs in ``cuts`` the unit's state goes through dump → JSON text → load."""
    unit = SurfaceUnit()
    state = unit.init()
    session = Session(events[0].session_id)
    for e in events:
        session.admit(e)
        state = unit.apply(state, e)
        if e.seq in cuts:
            state = unit.load(json.loads(json.dumps(unit.dump(state))))
        view = unit.view(state)
        expected = session.derive_messages()
        assert view["messages"] == expected.to_json(), f"after seq {e.seq} ({e.type})"
        assert view["count"] == len(expected)
        assert view["token_estimate"] == token_estimate(expected)


@PROFILE
@given(logs(), st.data())
def test_surface_unit_view_equals_derive_messages_at_every_prefix(
    events: list[Event], data: st.DataObject
) -> None:
    cuts = set(data.draw(st.lists(st.integers(0, len(events) - 1), max_size=4)))
    _assert_surface_unit_follows_the_session(events, cuts)


@PROFILE
@given(lab_sessions(), st.data())
def test_surface_unit_view_equals_derive_messages_on_lab_sessions(
    events: list[Event], data: st.DataObject
) -> None:
    cuts = set(data.draw(st.lists(st.integers(0, len(events) - 1), max_size=4)))
    _assert_surface_unit_follows_the_session(events, cuts)


def test_the_property_sees_compactions_and_abandoned_calls() -> None:
    """The generator behind the properties above reaches the rules they must compare."""
    replaced = abandoned = 0
    for seed in range(30):
        events = random_log(seed, 200)
        _assert_surface_unit_follows_the_session(events, {len(events) // 2})
        replaced += sum(e.surface_op.value == "replace" for e in events)
        s = Session.from_events(events)
        abandoned += sum(len(m.seqs) > 1 for m in s.derive_messages())
    assert replaced > 0 and abandoned > 0


# -- one history under racing writers (ADR 0001) --------------------------------------

def _racing_writers(data: st.DataObject) -> tuple[list[Event], list[list[Event]]]:
    """A base log, then writers that each read a prefix of it, took a lease with their
    own epoch and appended; returns the base and every writer's events in its order."""
    from sessionstream.core.session import Session

    base = list(data.draw(sessions(min_steps=1, max_steps=12)).events)
    n = data.draw(st.integers(1, 4))
    epochs = data.draw(st.permutations(list(range(2, 2 + n))))
    writers = []
    for i, epoch in enumerate(epochs):
        read = data.draw(st.integers(1, len(base)))
        s = Session.from_events(base[:read])
        s.set_writer(Writer(f"w{i}", epoch))
        for k in range(data.draw(st.integers(1, 5))):
            s.append("user/message", {"content": f"w{i}-{k}"})
        writers.append(list(s.events[read:]))
    return base, writers


@PROFILE
@given(st.data())
def test_racing_writers_leave_exactly_one_history_and_no_splice(data: st.DataObject) -> None:
    """Any interleaving (each producer's order kept): the admitted log is one chain, and
    each writer's admitted events are a prefix of what it wrote — once refused, never
    admitted again on top of someone else's events."""
    base, writers = _racing_writers(data)
    streams = [list(base), *map(list, writers)]
    merged: list[Event] = []
    while any(streams):
        live = [s for s in streams if s]
        merged.append(data.draw(st.sampled_from(live)).pop(0))
    state = AdmissionState("walk")
    admitted: list[Event] = []
    for e in merged:
        d = admit(state, e)
        assert d.verdict is not Verdict.DUPLICATE
        if d.admitted:
            admitted.append(e)
        state = d.state
    assert [e.seq for e in admitted] == list(range(len(admitted)))
    for before, after in itertools.pairwise(admitted):
        assert after.prev_event_id == before.event_id  # one chain: exactly one history
    ids = {e.event_id for e in admitted}
    for events in writers:
        flags = [e.event_id in ids for e in events]
        assert flags == sorted(flags, reverse=True), "a refused writer continued later"
    Session.from_events(admitted)  # and the session rules accept the history


@PROFILE
@given(sessions(min_steps=1, max_steps=30))
def test_a_log_written_before_v2_is_admitted_in_full(session: Session) -> None:
    legacy = [e.replace(prev_event_id=None) for e in session.events]
    state = AdmissionState("walk")
    for e in legacy:
        d = admit(state, e)
        assert d.admitted, d.reason
        state = d.state
