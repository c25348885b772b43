"""Session savepoints: a batch refused at any event leaves the session exactly as it was.

``SessionWriter.append_many`` and the framework stores rely on this: a refused batch
stores nothing, so the session the next batch continues must be the one before it —
its log, its rules' state (open turn and step, pending calls, every id used, abandoned
calls, the open compaction) and its surface, to the order of its indexes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstream.core.errors import InvariantViolation
from sessionstream.core.events import Draft
from sessionstream.core.session import Session
from sessionstream.core.simulate import random_walk
from tests.unit.strategies import new_session, snapshot


def deep(session: Session) -> tuple[object, ...]:
    """Every piece of a session's state, private ones included, in a comparable form."""
    s: Any = session
    surface: Any = s._surface
    return (
        snapshot(session),
        sorted(s._turn_ids), sorted(s._step_ids), sorted(s._used_call_ids),
        list(s._abandoned.items()), list(s._calls.items()), s._compaction,
        s._writer, s._tenant, s._lineage, s._open_turn_seq,
        list(surface._nodes), sorted(surface._pos.items()),
        sorted(surface._call_node.items()), sorted(surface._result_node.items()),
        list(surface._unanswered), surface._revision, list(surface._edits),
    )


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), before=st.integers(0, 60), during=st.integers(1, 40))
def test_rollback_restores_every_part_of_the_session(seed: int, before: int,
                                                     during: int) -> None:
    rng = random.Random(seed)
    session = random_walk(new_session(), lambda n: rng.randrange(n), before)
    expected = deep(session)
    sp = session.savepoint()
    random_walk(session, lambda n: rng.randrange(n), during)
    session.rollback(sp)
    assert deep(session) == expected


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), before=st.integers(0, 60), during=st.integers(0, 30))
def test_a_rolled_back_session_goes_on_as_if_the_batch_never_happened(
        seed: int, before: int, during: int) -> None:
    """After a rollback the session accepts and refuses exactly what a session that never
    saw the batch does (same walk, same choices, same rules)."""
    rng = random.Random(seed)
    session = random_walk(new_session(), lambda n: rng.randrange(n), before)
    twin = Session.from_events(session.events, catalog=session.catalog)
    sp = session.savepoint()
    random_walk(session, lambda n: rng.randrange(n), during)
    session.rollback(sp)
    after = rng.getstate()
    for s in (session, twin):
        rng.setstate(after)
        random_walk(s, lambda n: rng.randrange(n), 25)
    assert [(e.type, e.seq, e.turn_id is None, e.step_id is None) for e in session.events] \
        == [(e.type, e.seq, e.turn_id is None, e.step_id is None) for e in twin.events]
    assert [m.seqs for m in session.derive_messages()] == \
        [m.seqs for m in twin.derive_messages()]


def test_ids_used_inside_a_rolled_back_batch_can_be_used_again() -> None:
    """The batch's turn, step and call ids were never part of the session."""
    s = new_session()
    sp = s.savepoint()
    s.append("turn/start", turn_id="t1")
    s.append("step/start", step_id="p1")
    s.append("assistant/message", {"content": "", "tool_calls": [
        {"call_id": "c1", "name": "run", "arguments": {}}]})
    with pytest.raises(InvariantViolation):
        s.append("turn/end", {"reason": "completed"})  # a call is unanswered
    s.rollback(sp)
    s.append("turn/start", turn_id="t1")
    s.append("step/start", step_id="p1")
    s.append("assistant/message", {"content": "", "tool_calls": [
        {"call_id": "c1", "name": "run", "arguments": {}}]})
    assert [c.call_id for c in s.pending_calls] == ["c1"]


def test_a_rollback_undoes_an_abandonment_and_a_compaction_replace() -> None:
    """The surface rewrites (a turn ending with calls unanswered, a summary replacing a
    run) are undone too, from the copy the first rewrite takes."""
    s = new_session()
    for d in [Draft("user/message", {"content": "a"}), Draft("turn/start", {}),
              Draft("step/start", {}),
              Draft("assistant/message", {"content": "x", "tool_calls": [
                  {"call_id": "c1", "name": "run", "arguments": {}}]})]:
        s.append(d)
    expected = deep(s)
    sp = s.savepoint()
    s.append("turn/end", {"reason": "failed"})  # abandons c1: the node loses its call
    s.append("user/message", {"content": "b"})
    s.append("compaction/start", {"compaction_id": "k", "trigger": "manual"})
    assert deep(s) != expected
    s.rollback(sp)
    assert deep(s) == expected
    s.append("step/end", {})  # the turn is open again, its step too
    assert s.open_turn is not None


def test_one_savepoint_at_a_time() -> None:
    s = new_session()
    sp = s.savepoint()
    with pytest.raises(RuntimeError):
        s.savepoint()
    s.release(sp)
    s.rollback(s.savepoint())
