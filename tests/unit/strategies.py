"""Shared generators for property tests: random valid sessions and lab sessions.

``sessions()`` drives a Session through any valid next event (turns, steps, tool
calls answered in any order, steering, failed/cancelled turns with calls pending,
compactions inside and across turns); Hypothesis shrinks the choices.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import strategies as st

from sessionstream.errors import InvariantViolation
from sessionstream.events import CountingClock, Event, SequentialIds
from sessionstream.session import Session
from sessionstream.simulate import random_walk, simulate_session


def new_session(session_id: str = "s1", **kwargs: Any) -> Session:
    """A session with a deterministic clock and ids, holding its session/start."""
    kwargs.setdefault("clock", CountingClock())
    kwargs.setdefault("ids", SequentialIds(session_id))
    return Session.create(session_id, **kwargs)


@st.composite
def sessions(draw: st.DrawFn, *, min_steps: int = 0, max_steps: int = 120) -> Session:
    """A session after a random walk of valid events."""
    steps = draw(st.integers(min_steps, max_steps))
    session = new_session("walk")

    def choose(n: int) -> int:
        return draw(st.integers(0, n - 1)) if n > 1 else 0

    return random_walk(session, choose, steps)


@st.composite
def lab_sessions(draw: st.DrawFn, *, max_turns: int = 6) -> list[Event]:
    """A simulated lab session (two-step tool tasks), maybe with compactions."""
    seed = draw(st.integers(0, 2**32 - 1))
    turns = draw(st.integers(1, max_turns))
    compact_every = draw(st.none() | st.integers(1, 3))
    return simulate_session(
        random.Random(seed), "lab", turns=turns, compact_every=compact_every, failures=0.2
    )


def snapshot(session: Session) -> tuple[object, ...]:
    """Everything observable about a session's state (to prove a refusal changed nothing)."""
    return (
        session.events,
        tuple(session.derive_messages()),
        session.next_seq,
        session.open_turn,
        session.open_step,
        session.pending_calls,
        session.open_compaction,
        session.surface.node_seqs(),
        session.max_epoch,
    )


def assert_refused(session: Session, rule: str, *args: Any, **kwargs: Any) -> InvariantViolation:
    """Append must raise InvariantViolation(rule) and leave the session unchanged."""
    before = snapshot(session)
    with pytest.raises(InvariantViolation) as info:
        session.append(*args, **kwargs)
    assert info.value.rule == rule, str(info.value)
    assert info.value.seq == session.next_seq
    assert snapshot(session) == before
    return info.value
