"""Session.forget_data: a session that forgot the data of its handed-on plugin records
appends exactly as one that did not (what the fleet handle of an adapter reading only
through views relies on: a LangGraph thread's writer keeps no checkpoint values)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstream.core.catalog import Catalog, EventType, F, Obj, default_catalog
from sessionstream.core.session import Session
from sessionstream.core.simulate import random_walk
from tests.unit.strategies import new_session

PLUGIN = EventType("plugin/record", Obj({"id": F("str")}), ignorable=True)


def _catalog() -> Catalog:
    cat = default_catalog()
    cat.register_domain(PLUGIN)
    return cat


def _walk(session: Session, rng: random.Random, steps: int) -> None:
    """The core's random walk with plugin records (a large value each) in between."""
    for _ in range(steps):
        if rng.random() < 0.4:
            n = session.next_seq
            session.append("plugin/record", {"id": f"r{n}", "value": "v" * 200})
        else:
            random_walk(session, lambda k: rng.randrange(k), 1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), before=st.integers(1, 60))
def test_a_session_that_forgot_its_plugin_data_goes_on_as_one_that_did_not(
        seed: int, before: int) -> None:
    rng = random.Random(seed)
    session = new_session(catalog=_catalog())
    _walk(session, rng, before)
    twin = Session.from_events(session.events, catalog=session.catalog)
    kept = [e for e in session.events if not e.ignorable]
    session.forget_data(session.next_seq)
    # the plugin records keep their envelope only; every other event is untouched
    assert [e for e in session.events if not e.ignorable] == kept
    assert all(e.data == {} for e in session.events if e.type == "plugin/record")
    assert [e.event_id for e in session.events] == [e.event_id for e in twin.events]
    after = rng.getstate()
    for s in (session, twin):
        rng.setstate(after)
        _walk(s, rng, 30)
    assert [(e.type, e.seq, e.turn_id is None, e.step_id is None, e.prev_event_id is None)
            for e in session.events] == \
        [(e.type, e.seq, e.turn_id is None, e.step_id is None, e.prev_event_id is None)
         for e in twin.events]
    assert [m.seqs for m in session.derive_messages()] == \
        [m.seqs for m in twin.derive_messages()]


def test_forgetting_twice_costs_only_the_new_events_and_a_rollback_below_it_is_safe() -> None:
    session = new_session(catalog=_catalog())
    session.append("plugin/record", {"id": "a", "value": "x"})
    session.forget_data(session.next_seq)
    sp = session.savepoint()
    session.append("plugin/record", {"id": "b", "value": "y"})
    session.rollback(sp)
    session.append("plugin/record", {"id": "c", "value": "z"})
    session.forget_data(session.next_seq - 1)  # the last one is still being written
    assert [e.data for e in session.events[1:]] == [{}, {"id": "c", "value": "z"}]
    session.forget_data(session.next_seq)
    assert session.events[-1].data == {}
