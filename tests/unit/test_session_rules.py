"""Write-time rules of Session.append/admit: each refusal names its rule, log unchanged."""

from __future__ import annotations

import pytest

from sessionstream.core.errors import (
    InvalidData,
    InvariantViolation,
    SchemaViolation,
    UnknownEventType,
    UnsupportedFormat,
)
from sessionstream.core.events import FORMAT_VERSION, Draft, SurfaceOp, Writer
from sessionstream.core.jsonvalue import FrozenMap
from sessionstream.core.session import Session
from tests.unit.strategies import assert_refused, new_session, snapshot

CALL = {"call_id": "c1", "name": "search", "arguments": {"q": "x"}}


def in_step() -> Session:
    s = new_session()
    s.append("turn/start")
    s.append("step/start")
    return s


def with_call(executed: bool = True) -> Session:
    s = in_step()
    s.append("assistant/message", {"content": "", "tool_calls": [CALL]})
    if executed:
        s.append("tool/call", CALL)
    return s


def test_create_writes_session_start_with_tenant_and_lineage() -> None:
    s = new_session(tenant="acme")
    (start,) = s.events
    assert start.type == "session/start" and start.seq == 0
    assert start.data == {"format_version": FORMAT_VERSION, "tenant": "acme", "lineage": None}
    assert s.tenant == "acme" and s.lineage is None


def test_append_stamps_seq_ids_writer_and_freezes_data() -> None:
    s = in_step()
    data = {"content": "hi", "steering": False}
    e = s.append("user/message", data)
    data["content"] = "changed"
    assert e.seq == 3 and e.data["content"] == "hi" and isinstance(e.data, FrozenMap)
    assert e.turn_id == s.open_turn and e.step_id == s.open_step
    assert e.writer == Writer("local", 0) and e.surface_op is SurfaceOp.APPEND
    assert s.events[-1] is e


def test_append_stamps_the_id_of_the_previous_event_as_prev_event_id() -> None:
    s = in_step()
    s.append("user/message", {"content": "hi", "steering": False})
    assert s.events[0].prev_event_id is None  # seq 0 continues nothing
    for before, after in zip(s.events, s.events[1:], strict=False):
        assert after.prev_event_id == before.event_id


def test_a_jsonl_file_carries_prev_event_id_and_a_file_without_it_still_reads() -> None:
    from sessionstream.core.jsonl import dumps_line, parse_jsonl

    s = in_step()
    text = "".join(dumps_line(e) + "\n" for e in s.events)
    assert '"prev_event_id":' in text
    assert list(parse_jsonl(text)) == list(s.events)
    legacy = "".join(dumps_line(e.replace(prev_event_id=None)).replace(
        ',"prev_event_id":null', "") + "\n" for e in s.events)
    assert '"prev_event_id"' not in legacy
    assert [e.prev_event_id for e in parse_jsonl(legacy)] == [None] * len(s.events)


def test_append_accepts_a_draft() -> None:
    s = new_session()
    e = s.append(Draft("turn/start", turn_id="T1"))
    assert e.turn_id == "T1" and s.open_turn == "T1"


def test_first_event_must_be_session_start() -> None:
    s = Session("s", ids=lambda: "x", clock=lambda: 0)
    assert_refused(s, "first-is-session-start", "turn/start")


def test_session_starts_only_once() -> None:
    s = new_session()
    assert_refused(s, "first-is-session-start", "session/start",
                   {"format_version": 1, "tenant": "t"})


def test_lossy_data_is_refused_naming_the_path() -> None:
    s = new_session()
    before = snapshot(s)
    with pytest.raises(InvalidData) as info:
        s.append("todo/add", {"id": "a", "text": float("nan")})
    assert info.value.path == "$.text"
    assert snapshot(s) == before


def test_schema_violation_is_refused() -> None:
    s = new_session()
    before = snapshot(s)
    with pytest.raises(SchemaViolation):
        s.append("turn/end", {"reason": "tired"})
    assert snapshot(s) == before


def test_unknown_type_is_refused_on_append() -> None:
    s = new_session()
    with pytest.raises(UnknownEventType):
        s.append("mystery/thing", {})
    assert s.next_seq == 1


def test_turn_cannot_open_twice() -> None:
    s = new_session()
    s.append("turn/start")
    assert_refused(s, "turn-already-open", "turn/start")


def test_turn_id_cannot_be_reused() -> None:
    s = new_session()
    s.append("turn/start", turn_id="T")
    s.append("turn/end", {"reason": "completed"})
    assert_refused(s, "turn-id-reused", "turn/start", turn_id="T")


def test_step_outside_turn_is_refused() -> None:
    s = new_session()
    assert_refused(s, "step-outside-turn", "step/start")


def test_one_open_step_at_a_time() -> None:
    s = in_step()
    assert_refused(s, "step-already-open", "step/start")


def test_step_id_cannot_be_reused() -> None:
    s = new_session()
    s.append("turn/start")
    s.append("step/start", step_id="S")
    s.append("step/end")
    assert_refused(s, "step-id-reused", "step/start", step_id="S")


def test_turn_scoped_event_needs_open_turn() -> None:
    s = new_session()
    assert_refused(s, "outside-turn", "turn/end", {"reason": "completed"})


def test_step_scoped_event_needs_open_step() -> None:
    s = new_session()
    s.append("turn/start")
    assert_refused(s, "outside-step", "request/header", {"provider": "p", "model": "m"})
    assert_refused(s, "outside-step", "assistant/chunk", {"text": "x"})
    assert_refused(s, "outside-step", "step/end")


def test_step_scoped_event_outside_turn_names_the_turn_rule() -> None:
    s = new_session()
    assert_refused(s, "outside-turn", "assistant/message", {"content": "x"})


def test_user_message_and_domain_events_may_appear_anywhere() -> None:
    s = new_session()
    assert s.append("user/message", {"content": "hi"}).turn_id is None
    assert s.append("todo/add", {"id": "1", "text": "x"}).turn_id is None
    s.append("turn/start")
    assert s.append("user/message", {"content": "steer"}).turn_id == s.open_turn


def test_event_naming_a_closed_turn_is_refused() -> None:
    s = new_session()
    s.append("turn/start", turn_id="T1")
    s.append("turn/end", {"reason": "completed"})
    assert_refused(s, "closed-turn", "user/message", {"content": "x"}, turn_id="T1")


def test_event_naming_another_turn_is_refused() -> None:
    s = new_session()
    s.append("turn/start", turn_id="T1")
    assert_refused(s, "turn-mismatch", "user/message", {"content": "x"}, turn_id="T9")


def test_event_naming_another_step_is_refused() -> None:
    s = in_step()
    assert_refused(s, "step-mismatch", "assistant/chunk", {"text": "x"}, step_id="nope")


def test_surface_op_must_be_allowed_for_the_type() -> None:
    s = in_step()
    assert_refused(s, "surface-op-not-allowed", "assistant/chunk", {"text": "x"},
                   surface_op="append")
    assert_refused(s, "surface-op-not-allowed", "assistant/message", {"content": "x"},
                   surface_op="replace", source_event_seqs=[1])


def test_source_seqs_only_on_a_replace() -> None:
    s = new_session()
    assert_refused(s, "source-seqs-without-replace", "user/message", {"content": "x"},
                   source_event_seqs=[0])


def test_duplicate_call_ids_are_refused() -> None:
    s = with_call()
    s.append("tool/result", {"call_id": "c1", "status": "ok", "content": "r"})
    assert_refused(s, "duplicate-call-id", "assistant/message",
                   {"content": "", "tool_calls": [CALL]})
    assert_refused(s, "duplicate-call-id", "assistant/message",
                   {"content": "", "tool_calls": [{**CALL, "call_id": "c2"},
                                                  {**CALL, "call_id": "c2"}]})


def test_tool_call_must_match_a_declared_call() -> None:
    s = in_step()
    assert_refused(s, "undeclared-tool-call", "tool/call", CALL)


def test_tool_call_cannot_execute_twice() -> None:
    s = with_call()
    assert_refused(s, "undeclared-tool-call", "tool/call", CALL)


def test_tool_call_must_use_the_declared_name() -> None:
    s = with_call(executed=False)
    assert_refused(s, "tool-name-mismatch", "tool/call", {**CALL, "name": "delete_all"})


def test_tool_result_without_call_is_an_orphan() -> None:
    s = in_step()
    err = assert_refused(s, "orphan-tool-result", "tool/result",
                         {"call_id": "zz", "status": "ok"})
    assert "never called" in err.detail


def test_tool_result_for_unexecuted_call_is_an_orphan() -> None:
    s = with_call(executed=False)
    assert_refused(s, "orphan-tool-result", "tool/result", {"call_id": "c1", "status": "ok"})


def test_tool_result_answers_only_once() -> None:
    s = with_call()
    s.append("tool/result", {"call_id": "c1", "status": "ok"})
    err = assert_refused(s, "orphan-tool-result", "tool/result",
                         {"call_id": "c1", "status": "ok"})
    assert "already answered" in err.detail


def test_no_model_request_while_a_call_is_pending() -> None:
    s = with_call()
    err = assert_refused(s, "request-with-pending-tool-call", "request/header",
                         {"provider": "p", "model": "m"})
    assert "c1" in err.detail
    s.append("tool/result", {"call_id": "c1", "status": "ok"})
    s.append("request/header", {"provider": "p", "model": "m"})


def test_declared_but_unexecuted_call_also_blocks_a_request() -> None:
    s = with_call(executed=False)
    assert_refused(s, "request-with-pending-tool-call", "request/header",
                   {"provider": "p", "model": "m"})


def test_completed_turn_needs_its_step_closed() -> None:
    s = in_step()
    assert_refused(s, "turn-end-open-step", "turn/end", {"reason": "completed"})


def test_completed_or_refused_turn_needs_every_call_answered() -> None:
    s = with_call()
    s.append("step/end")
    assert_refused(s, "turn-end-pending-calls", "turn/end", {"reason": "completed"})
    assert_refused(s, "turn-end-pending-calls", "turn/end", {"reason": "refused"})


@pytest.mark.parametrize("reason", ["failed", "cancelled", "interrupted"])
def test_failed_turn_closes_step_and_abandons_calls(reason: str) -> None:
    s = with_call()
    s.append("turn/end", {"reason": reason})
    assert s.open_turn is None and s.open_step is None and s.pending_calls == ()
    assert all(not m.tool_calls for m in s.derive_messages())


def test_result_of_an_abandoned_call_names_the_closed_turn() -> None:
    s = with_call()
    turn = s.open_turn
    s.append("turn/end", {"reason": "failed"})
    s.append("turn/start")
    s.append("step/start")
    err = assert_refused(s, "closed-turn", "tool/result", {"call_id": "c1", "status": "ok"})
    assert str(turn) in err.detail
    assert_refused(s, "closed-turn", "tool/call", CALL)


def test_compaction_cannot_open_twice() -> None:
    s = new_session()
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "manual"})
    assert_refused(s, "compaction-already-open", "compaction/start",
                   {"compaction_id": "k2", "trigger": "manual"})


def test_compaction_summary_and_end_need_the_open_compaction() -> None:
    s = new_session()
    assert_refused(s, "compaction-not-open", "compaction/end",
                   {"compaction_id": "k1", "outcome": "failed"})
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "manual"})
    assert_refused(s, "compaction-not-open", "compaction/end",
                   {"compaction_id": "k2", "outcome": "failed"})


def summary(first: int, last: int, seqs: list[int], cid: str = "k1") -> dict[str, object]:
    return {"compaction_id": cid, "first_position": first, "last_position": last,
            "shadowed_seqs": seqs, "tokens_before": 10, "tokens_after": 2,
            "summarizer": {"provider": "p", "model": "m", "config": {}}}


def compacting() -> Session:
    s = new_session()
    for i in range(3):
        s.append("user/message", {"content": f"m{i}"})  # seqs 1, 2, 3
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "pressure"})
    return s


def test_summary_must_name_a_contiguous_surface_run() -> None:
    s = compacting()
    assert_refused(s, "summary-range", "compaction/summary", summary(0, 1, [1, 3]))
    assert_refused(s, "summary-range", "compaction/summary", summary(0, 0, []))
    assert_refused(s, "summary-range", "compaction/summary", summary(0, 1, [0, 1]))


def test_summary_positions_must_match_its_seqs() -> None:
    s = compacting()
    assert_refused(s, "summary-range", "compaction/summary", summary(1, 2, [1, 2]))


def test_one_summary_per_compaction() -> None:
    s = compacting()
    s.append("compaction/summary", summary(0, 1, [1, 2]))
    assert_refused(s, "summary-twice", "compaction/summary", summary(0, 1, [1, 2]))


def test_replace_outside_compaction_is_refused() -> None:
    s = new_session()
    s.append("user/message", {"content": "a"})
    assert_refused(s, "replace-outside-compaction", "user/message", {"content": "S"},
                   surface_op="replace", source_event_seqs=[1])


def test_replace_before_summary_is_refused() -> None:
    s = compacting()
    assert_refused(s, "replace-without-summary", "user/message", {"content": "S"},
                   surface_op="replace", source_event_seqs=[1])


def test_replace_must_shadow_exactly_the_summary_seqs() -> None:
    s = compacting()
    s.append("compaction/summary", summary(0, 1, [1, 2]))
    assert_refused(s, "replace-mismatch", "user/message", {"content": "S"},
                   surface_op="replace", source_event_seqs=[1, 2, 3])


def test_one_replace_per_compaction() -> None:
    s = compacting()
    s.append("compaction/summary", summary(0, 1, [1, 2]))
    s.append("user/message", {"content": "S"}, surface_op="replace", source_event_seqs=[1, 2])
    assert_refused(s, "replace-twice", "user/message", {"content": "S"},
                   surface_op="replace", source_event_seqs=[1, 2])


def test_replace_must_not_split_a_call_from_its_result() -> None:
    s = with_call()  # assistant at seq 3, tool/call 4
    s.append("tool/result", {"call_id": "c1", "status": "ok"})  # seq 5
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "pressure"})
    err = assert_refused(s, "summary-range", "compaction/summary", summary(0, 0, [3]))
    assert "c1" in err.detail
    assert_refused(s, "summary-range", "compaction/summary", summary(1, 1, [5]))
    s.append("compaction/summary", summary(0, 1, [3, 5]))


def test_pending_call_cannot_be_shadowed() -> None:
    s = with_call()
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "pressure"})
    err = assert_refused(s, "summary-range", "compaction/summary", summary(0, 0, [3]))
    assert "no result yet" in err.detail


def test_replace_range_is_rechecked_when_the_surface_changed() -> None:
    s = new_session()
    s.append("user/message", {"content": "u"})  # 1
    s.append("turn/start")
    s.append("step/start")
    s.append("assistant/message", {"content": "", "tool_calls": [CALL]})  # 4
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "pressure"})
    s.append("compaction/summary", summary(0, 0, [1]))
    s.append("turn/end", {"reason": "failed"})  # drops the empty assistant node
    s.append("user/message", {"content": "S"}, surface_op="replace", source_event_seqs=[1])
    assert [m.kind.value for m in s.derive_messages()] == ["summary"]


def test_completed_compaction_needs_a_replace() -> None:
    s = compacting()
    assert_refused(s, "compaction-incomplete", "compaction/end",
                   {"compaction_id": "k1", "outcome": "completed"})
    s.append("compaction/end", {"compaction_id": "k1", "outcome": "failed"})
    assert s.open_compaction is None


def test_set_writer_takes_a_new_epoch_and_refuses_an_older_one() -> None:
    s = new_session(writer=Writer("a", 3))
    s.set_writer(Writer("b", 4))
    assert s.append("user/message", {"content": "x"}).writer == Writer("b", 4)
    with pytest.raises(InvariantViolation) as info:
        s.set_writer(Writer("a", 3))
    assert info.value.rule == "stale-epoch"


# -- admit --------------------------------------------------------------------------------

def rebuild_all(s: Session) -> Session:
    return Session.from_events(s.events)


def test_from_events_rebuilds_the_same_state() -> None:
    s = with_call()
    r = rebuild_all(s)
    assert snapshot(r) == snapshot(s)


def test_admit_requires_the_next_seq() -> None:
    s = with_call()
    r = Session.from_events(s.events[:3])
    with pytest.raises(InvariantViolation) as info:
        r.admit(s.events[4])
    assert info.value.rule == "seq-contiguous" and r.next_seq == 3


def test_admit_refuses_another_session() -> None:
    s = new_session()
    r = Session.from_events(s.events)
    with pytest.raises(InvariantViolation) as info:
        r.admit(s.append("turn/start").replace(session_id="other"))
    assert info.value.rule == "session-mismatch"


def test_admit_refuses_a_stale_epoch() -> None:
    s = new_session(writer=Writer("w", 5))
    e = s.append("turn/start")
    r = Session.from_events(s.events[:1])
    with pytest.raises(InvariantViolation) as info:
        r.admit(e.replace(writer=Writer("zombie", 4)))
    assert info.value.rule == "stale-epoch" and r.next_seq == 1


def test_admit_applies_the_same_rules_as_append() -> None:
    s = in_step()
    e = s.append("assistant/chunk", {"text": "x"})
    r = Session.from_events(s.events[:2])  # turn open, no step
    with pytest.raises(InvariantViolation) as info:
        r.admit(e.replace(seq=2, step_id=None, prev_event_id=s.events[1].event_id))
    assert info.value.rule == "outside-step"


def test_admit_checks_stamped_turn_and_step_ids() -> None:
    s = in_step()
    e = s.append("assistant/chunk", {"text": "x"})
    r = Session.from_events(s.events[:3])
    with pytest.raises(InvariantViolation) as info:
        r.admit(e.replace(turn_id="other"))
    assert info.value.rule == "turn-mismatch"
    with pytest.raises(InvariantViolation) as info:
        r.admit(e.replace(step_id=None))
    assert info.value.rule == "step-mismatch"


def test_admit_keeps_unknown_ignorable_events_outside_the_rules() -> None:
    s = new_session()
    base = s.append("turn/start")
    r = Session.from_events(s.events)
    r.admit(base.replace(seq=2, type="future/thing", ignorable=True, turn_id=None,
                         data=FrozenMap({"x": 1}), prev_event_id=base.event_id))
    assert r.next_seq == 3 and r.events[-1].type == "future/thing"
    assert r.open_turn == base.turn_id


def test_admit_refuses_an_event_written_after_another_history() -> None:
    s = in_step()
    e = s.append("assistant/chunk", {"text": "x"})
    r = Session.from_events(s.events[:3])
    with pytest.raises(InvariantViolation) as info:
        r.admit(e.replace(prev_event_id="someone-elses"))
    assert info.value.rule == "history-mismatch" and "someone-elses" in str(info.value)
    r.admit(e)  # the event as written continues this history
    assert r.admit(e.replace(seq=4, event_id="legacy", prev_event_id=None)) is None


def test_admit_refuses_unknown_required_events() -> None:
    s = new_session()
    base = s.append("turn/start")
    r = Session.from_events(s.events[:1])
    with pytest.raises(UnknownEventType):
        r.admit(base.replace(type="future/thing", ignorable=False))
    assert r.next_seq == 1


def test_admit_refuses_a_newer_format_version() -> None:
    s = new_session()
    e = s.append("turn/start")
    r = Session.from_events(s.events[:1])
    with pytest.raises(UnsupportedFormat):
        r.admit(e.replace(format_version=FORMAT_VERSION + 1))


def test_admit_refuses_lossy_data() -> None:
    s = new_session()
    e = s.append("user/message", {"content": "x"})
    r = Session.from_events(s.events[:1])
    with pytest.raises(InvalidData):
        r.admit(e.replace(data=FrozenMap({"content": float("inf")})))
    assert r.next_seq == 1
