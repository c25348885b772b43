"""The watcher's de-duplication and cooldown (pure: a fake clock, no servers)."""

from __future__ import annotations

import pytest

from sessionstream.streams.compaction_watch import AttemptLedger, WatchSummary, _session_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_session_never_attempted_may_be_attempted() -> None:
    assert AttemptLedger(clock=Clock()).check("s", 0) is None


def test_no_second_attempt_until_the_seq_moves_past_the_attempts_end() -> None:
    clock = Clock()
    ledger = AttemptLedger(cooldown_s=10, clock=clock)
    ledger.record("s", 40)
    clock.now += 1000  # cooldown long over: the seq alone holds it back
    assert ledger.check("s", 37) == "same-seq"
    assert ledger.check("s", 40) == "same-seq"
    assert ledger.check("s", 41) is None


def test_a_newer_seq_waits_for_the_cooldown() -> None:
    clock = Clock()
    ledger = AttemptLedger(cooldown_s=10, clock=clock)
    ledger.record("s", 40)
    assert ledger.check("s", 50) == "cooldown"
    assert ledger.ready_at("s") == 110.0
    clock.now = 110.0
    assert ledger.check("s", 50) is None


def test_sessions_are_independent() -> None:
    ledger = AttemptLedger(cooldown_s=10, clock=Clock())
    ledger.record("a", 5)
    assert ledger.check("b", 0) is None


def test_the_ledger_forgets_the_oldest_attempts_past_its_bound() -> None:
    ledger = AttemptLedger(cooldown_s=10, clock=Clock(), max_sessions=2)
    ledger.record("a", 1)
    ledger.record("b", 1)
    ledger.record("a", 2)  # a is now the newest
    ledger.record("c", 1)
    assert ledger.ready_at("b") is None
    assert ledger.check("a", 2) == "same-seq" and ledger.check("c", 1) == "same-seq"


@pytest.mark.parametrize("fields, sid", [
    ({"change": '{"session": "s-1", "as_of_seq": 3}'}, "s-1"),
    ({"change": "not json"}, None),
    ({"change": '{"as_of_seq": 3}'}, None),
    ({}, None),
])
def test_a_feed_entry_names_its_session_or_is_ignored(fields: dict[str, str],
                                                      sid: str | None) -> None:
    assert _session_of(fields) == sid


def test_summaries_add_up() -> None:
    total = WatchSummary()
    total.add(WatchSummary(entries=3, sessions=2, compacted=1, not_needed=1))
    total.add(WatchSummary(entries=1, sessions=1, failed=1, reports=[{"session_id": "s"}]))
    assert total.to_json() == {"entries": 4, "sessions": 3, "compacted": 1, "not_needed": 1,
                               "skipped": 0, "failed": 1, "reports": [{"session_id": "s"}]}
