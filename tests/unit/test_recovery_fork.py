"""Recovery repairs, the seed boundary, resume, and fork from a stable prefix."""

from __future__ import annotations

import pytest

from sessionstream.core.errors import ForkError
from sessionstream.core.events import CountingClock, SequentialIds, Writer
from sessionstream.core.fork import fork, stable_tail
from sessionstream.core.recovery import (
    ABANDONED_COMPACTION_REASON,
    recover,
    resume,
    seed_boundary,
)
from sessionstream.core.session import Session
from tests.unit.strategies import new_session

CALL = {"call_id": "c1", "name": "search", "arguments": {}}


def crashed_after_tool_call() -> Session:
    s = new_session()
    s.append("user/message", {"content": "before"})
    s.append("turn/start", turn_id="T1")
    s.append("step/start")
    s.append("assistant/message", {"content": "", "tool_calls": [CALL]})
    s.append("tool/call", CALL)
    return s


def test_recover_a_clean_log_needs_no_repair() -> None:
    s = new_session()
    s.append("turn/start")
    s.append("turn/end", {"reason": "completed"})
    assert recover(s) == []


def test_recover_after_tool_call_interrupts_the_turn_and_invents_no_result() -> None:
    s = crashed_after_tool_call()
    drafts = recover(s.events)
    assert [(d.type, d.data["reason"]) for d in drafts] == [("turn/end", "interrupted")]
    for d in drafts:
        s.append(d)
    assert s.open_turn is None and s.open_step is None and s.pending_calls == ()
    assert all(not m.tool_calls for m in s.derive_messages())
    assert not any(e.type == "tool/result" for e in s.events)


@pytest.mark.parametrize("cut", [2, 3])  # after turn/start, inside a step
def test_recover_truncated_turns(cut: int) -> None:
    s = Session.from_events(crashed_after_tool_call().events[: cut + 1])
    (draft,) = recover(s)
    s.append(draft)
    assert s.is_stable


def test_recover_abandons_an_open_compaction_first() -> None:
    s = crashed_after_tool_call()
    s.append("compaction/start", {"compaction_id": "k9", "trigger": "pressure"})
    drafts = recover(s)
    assert [d.type for d in drafts] == ["compaction/end", "turn/end"]
    assert drafts[0].data == {"compaction_id": "k9", "outcome": "abandoned",
                              "reason": ABANDONED_COMPACTION_REASON}
    for d in drafts:
        s.append(d)
    assert s.is_stable


def test_seed_boundary_is_a_session_end_seed_draft() -> None:
    d = seed_boundary("replay", 7)
    assert d.type == "session/end-seed" and d.data == {"reason": "replay", "seed_length": 7}


def test_resume_repairs_takes_the_lease_and_marks_the_seed() -> None:
    old = crashed_after_tool_call()
    s = resume(old.events, Writer("node-2", 1), clock=CountingClock(), ids=SequentialIds())
    tail = s.events[len(old.events):]
    assert [e.type for e in tail] == ["turn/end", "session/end-seed"]
    assert tail[-1].data == {"reason": "resume", "seed_length": tail[-1].seq}
    assert all(e.writer == Writer("node-2", 1) for e in tail)
    assert s.is_stable and s.session_id == old.session_id


def lab() -> Session:
    s = new_session("parent", tenant="acme")
    s.append("user/message", {"content": "u1"})  # 1
    s.append("turn/start", turn_id="T1")  # 2
    s.append("step/start")  # 3
    s.append("assistant/message", {"content": "a1"})  # 4
    s.append("step/end")  # 5
    s.append("turn/end", {"reason": "completed"})  # 6
    s.append("turn/start", turn_id="T2")  # 7
    s.append("step/start")  # 8
    return s


def test_fork_defaults_to_the_stable_tail() -> None:
    parent = lab()
    assert stable_tail(parent) == 7
    child = fork(parent, "child", clock=CountingClock(), ids=SequentialIds("c"))
    assert child.lineage == {"parent_session": "parent", "seed_length": 7,
                             "delegation_depth": 1}
    assert child.tenant == "acme"
    types = [e.type for e in child.events]
    assert types[0] == "session/start" and types[-1] == "session/end-seed"
    assert types[1:7] == [e.type for e in parent.events[1:7]]
    assert child.events[-1].data == {"reason": "fork", "seed_length": 7}
    assert all(e.session_id == "child" for e in child.events)
    assert [e.seq for e in child.events] == list(range(8))
    prefix = Session.from_events(parent.events[:7])
    assert child.derive_messages() == prefix.derive_messages()


def test_fork_inside_an_open_turn_names_the_turn() -> None:
    with pytest.raises(ForkError, match=r"open turn T2 \(turn/start at seq 7\)"):
        fork(lab(), "child", at=8)
    with pytest.raises(ForkError, match="T1"):
        fork(lab(), "child", at=4)


def test_fork_out_of_range_is_refused() -> None:
    for at in (0, 10):
        with pytest.raises(ForkError, match="out of range"):
            fork(lab(), "child", at=at)


def test_fork_inside_an_open_compaction_is_refused() -> None:
    s = new_session()
    s.append("compaction/start", {"compaction_id": "k", "trigger": "manual"})
    with pytest.raises(ForkError, match="compaction k"):
        fork(s, "child", at=2)
    assert stable_tail(s) == 1


def test_fork_of_a_fork_increments_delegation_depth() -> None:
    child = fork(lab(), "child", at=2)
    grandchild = fork(child, "grandchild")
    assert grandchild.lineage["delegation_depth"] == 2
    assert grandchild.lineage["seed_length"] == len(child.events)


def test_fork_keeps_seqs_so_compaction_replaces_stay_valid() -> None:
    s = new_session()
    s.append("user/message", {"content": "a"})
    s.append("user/message", {"content": "b"})
    s.append("compaction/start", {"compaction_id": "k", "trigger": "manual"})
    s.append("compaction/summary", {
        "compaction_id": "k", "first_position": 0, "last_position": 1,
        "shadowed_seqs": [1, 2], "tokens_before": 2, "tokens_after": 1,
        "summarizer": {"provider": "p", "model": "m", "config": {}}})
    s.append("user/message", {"content": "S"}, surface_op="replace", source_event_seqs=[1, 2])
    s.append("compaction/end", {"compaction_id": "k", "outcome": "completed"})
    child = fork(s, "child")
    assert child.derive_messages() == s.derive_messages()
