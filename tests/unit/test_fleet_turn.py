"""The simulated agent turn is valid under the core session rules."""

from __future__ import annotations

import random
from typing import Any

from producers.fleet import run_turn
from sessionstream.session import Session


class FakeWriter:
    """Stands in for SessionWriter: appends to a core Session only."""

    def __init__(self) -> None:
        self.session = Session.create("s1")
        self.flushed_at: list[int] = []

    @property
    def next_seq(self) -> int:
        return self.session.next_seq

    def append(self, type_: str, data: Any, **kw: Any) -> None:
        self.session.append(type_, data, **kw)

    def flush(self, timeout: float) -> None:
        self.flushed_at.append(self.session.next_seq)


def test_simulated_turns_satisfy_every_session_rule() -> None:
    w = FakeWriter()
    rng = random.Random(1)
    for turn in range(20):
        run_turn(w, rng, turn, large_bytes=1024)  # type: ignore[arg-type]
    types = [e.type for e in w.session.events]
    assert types.count("turn/end") == 20 and w.session.is_stable
    assert {"tool/call", "tool/result", "assistant/chunk", "todo/update"} <= set(types)


def test_a_crash_point_stops_mid_turn() -> None:
    w = FakeWriter()
    crashed = []
    run_turn(w, random.Random(2), 0, crash_at=5,  # type: ignore[arg-type]
             on_crash=lambda: crashed.append(w.next_seq))
    assert crashed and crashed[0] == 6  # session/start + 5 turn events


def test_every_tool_call_is_flushed_before_the_tool_runs() -> None:
    w = FakeWriter()
    run_turn(w, random.Random(3), 0, large_bytes=1024)  # type: ignore[arg-type]
    calls = [e.seq for e in w.session.events if e.type == "tool/call"]
    assert calls and w.flushed_at == [seq + 1 for seq in calls]
