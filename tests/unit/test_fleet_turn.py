"""The simulated agent turn is valid under the core session rules."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sessionstream.core.session import Session
from sessionstream.producers.errors import UnconfirmedEvents
from sessionstream.producers.fleet import flush_durably, run_turn


class FakeWriter:
    """Stands in for SessionWriter: appends to a core Session only."""

    def __init__(self) -> None:
        self.session = Session.create("s1")
        self.flushed_at: list[int] = []

    @property
    def next_seq(self) -> int:
        return self.session.next_seq

    def append(self, type_: Any, data: Any = None, **kw: Any) -> Any:
        return self.session.append(type_, data, **kw)

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
    assert calls and all(seq + 1 in w.flushed_at for seq in calls)


class StallingWriter(FakeWriter):
    """A broker that answers late: the first flushes time out with records pending."""

    def __init__(self, stalls: int, state: str = "pending") -> None:
        super().__init__()
        self.stalls, self.state, self.resent = stalls, state, 0

    def flush(self, timeout: float) -> None:
        super().flush(timeout)
        if self.stalls:
            self.stalls -= 1
            raise UnconfirmedEvents({"e1": self.state}, timeout=timeout)

    def unconfirmed(self) -> dict[str, str]:
        return {"e1": self.state}

    def resend_unconfirmed(self) -> list[str]:
        self.resent += 1
        return ["e1"]


def test_a_stalled_barrier_is_waited_for_again_without_resending_pending_records() -> None:
    w = StallingWriter(stalls=2)
    flush_durably(w, timeout=0.01)
    assert len(w.flushed_at) == 3 and w.resent == 0


def test_records_reported_failed_are_resent_with_their_event_ids() -> None:
    w = StallingWriter(stalls=1, state="possibly_persisted")
    flush_durably(w, timeout=0.01)
    assert w.resent == 1


def test_a_barrier_that_never_confirms_raises_after_the_last_attempt() -> None:
    w = StallingWriter(stalls=5)
    with pytest.raises(UnconfirmedEvents):
        flush_durably(w, attempts=3, timeout=0.01)
    assert len(w.flushed_at) == 3


def test_the_simulated_model_is_asked_with_real_provider_bodies() -> None:
    w = FakeWriter()
    run_turn(w, random.Random(4), 0, large_bytes=1024)  # type: ignore[arg-type]
    headers = [e.data for e in w.session.events if e.type == "request/header"]
    assert len(headers) == 2 and {h["api"] for h in headers} <= {
        "openai-chat", "openai-responses", "anthropic"}
    message = next(e for e in w.session.events if e.type == "assistant/message")
    assert message.data["tool_calls"] and message.data["usage"]["input_tokens"] >= 500
