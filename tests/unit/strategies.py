"""Shared generators for property tests: random valid sessions and lab sessions.

``sessions()`` drives a Session through any valid next event (turns, steps, tool
calls answered in any order, steering, failed/cancelled turns with calls pending,
compactions inside and across turns, domain and business/* events); Hypothesis
shrinks the choices. ``logs()`` / :func:`random_log` add events of a plugin type
the catalog does not know (ignorable), admitted through the same Session: every
generated log is one the write-time rules accept.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import strategies as st

from sessionstream.core.errors import InvariantViolation
from sessionstream.core.events import CountingClock, Event, SequentialIds, make_event
from sessionstream.core.session import Session
from sessionstream.core.simulate import Choose, random_walk, simulate_session

#: A type no catalog knows, marked ignorable: readers keep it and skip it.
PLUGIN_TYPE = "plugin/thing"


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


def admit_plugin_event(session: Session, type: str = PLUGIN_TYPE,
                       data: dict[str, Any] | None = None) -> Event:
    """Admit an event of an unknown ignorable type (as a reader of a newer log would)."""
    last = session.events[-1]
    event = make_event(
        session_id=session.session_id, seq=session.next_seq,
        event_id=f"{session.session_id}-plugin-{session.next_seq}", time=last.time + 1,
        type=type, data=data if data is not None else {"x": session.next_seq},
        writer=session.writer, ignorable=True,
        turn_id=session.open_turn, step_id=session.open_step,
    )
    session.admit(event)
    return event


def walk_with_plugins(session: Session, choose: Choose, steps: int) -> Session:
    """:func:`random_walk`, with an unknown ignorable event now and then (1 in 12)."""
    for _ in range(steps):
        if choose(12) == 0:
            admit_plugin_event(session)
        else:
            random_walk(session, choose, 1)
    return session


@st.composite
def logs(draw: st.DrawFn, *, min_steps: int = 0, max_steps: int = 120) -> list[Event]:
    """A valid log after a random walk that also admits unknown ignorable events."""
    steps = draw(st.integers(min_steps, max_steps))

    def choose(n: int) -> int:
        return draw(st.integers(0, n - 1)) if n > 1 else 0

    return list(walk_with_plugins(new_session("log"), choose, steps).events)


def random_log(seed: int, steps: int = 120) -> list[Event]:
    """Like :func:`logs`, driven by ``random.Random(seed)`` (benches, fixed examples)."""
    rng = random.Random(seed)
    return list(walk_with_plugins(new_session(f"s{seed % 97}"), rng.randrange, steps).events)


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
