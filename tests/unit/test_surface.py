"""The message surface: what becomes a message, replace, abandoned calls, immutability."""

from __future__ import annotations

import pytest

from sessionstream.core.messages import Kind, Role
from sessionstream.core.surface import Messages, derive_from_scratch, message_tokens, token_estimate
from tests.unit.strategies import new_session

CALL = {"call_id": "c1", "name": "search", "arguments": {"q": "x"}}


def lab_turn():  # type: ignore[no-untyped-def]
    s = new_session()
    s.append("context/snapshot", {"snapshot_id": "w1", "content": "workspace"})  # 1
    s.append("turn/start")  # 2
    s.append("step/start")  # 3
    s.append("user/message", {"content": "compare"})  # 4
    s.append("request/header", {"provider": "p", "model": "m"})  # 5
    s.append("assistant/chunk", {"text": "let me"})  # 6
    s.append("assistant/message", {"content": "let me", "tool_calls": [CALL]})  # 7
    s.append("tool/call", CALL)  # 8
    s.append("tool/result", {"call_id": "c1", "status": "ok", "content": "rows"})  # 9
    s.append("step/end")  # 10
    s.append("todo/add", {"id": "t", "text": "x"})  # 11
    s.append("step/start")  # 12
    s.append("request/header", {"provider": "p", "model": "m"})  # 13
    s.append("assistant/message", {"content": "done"})  # 14
    s.append("step/end")  # 15
    s.append("turn/end", {"reason": "completed"})  # 16
    return s


def test_only_model_relevant_events_become_messages() -> None:
    msgs = lab_turn().derive_messages()
    assert [(m.role, m.kind, m.seqs) for m in msgs] == [
        (Role.USER, Kind.CONTEXT, (1,)),
        (Role.USER, Kind.USER, (4,)),
        (Role.ASSISTANT, Kind.ASSISTANT, (7,)),
        (Role.TOOL, Kind.TOOL_RESULT, (9,)),
        (Role.ASSISTANT, Kind.ASSISTANT, (14,)),
    ]
    assert msgs[2].tool_calls[0].call_id == "c1"
    assert msgs[3].call_id == "c1" and msgs[3].status == "ok" and msgs[3].content == "rows"


def test_tool_result_with_attachment_shows_the_reference() -> None:
    s = new_session()
    s.append("turn/start")
    s.append("step/start")
    s.append("assistant/message", {"content": "", "tool_calls": [CALL]})
    s.append("tool/call", CALL)
    att = {"sha256": "ab", "size": 10, "media_type": "text/plain", "head": "h", "tail": "t"}
    s.append("tool/result", {"call_id": "c1", "status": "ok", "attachment": att})
    assert s.derive_messages()[-1].content == {"attachment": att}


def test_derived_messages_are_immutable_and_stable_after_later_appends() -> None:
    s = lab_turn()
    first = s.derive_messages()
    assert isinstance(first, Messages)
    with pytest.raises(TypeError):
        first[0].content["x"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        first[0].content = "y"  # type: ignore[misc]
    s.append("user/message", {"content": "more"})
    assert len(first) == 5 and len(s.derive_messages()) == 6
    assert s.derive_messages()[:5] == tuple(first)


def test_old_views_survive_a_replace() -> None:
    s = lab_turn()
    before = s.derive_messages()
    copy = tuple(before)
    s.append("compaction/start", {"compaction_id": "k", "trigger": "manual"})
    s.append("compaction/summary", {
        "compaction_id": "k", "first_position": 1, "last_position": 3,
        "shadowed_seqs": [4, 7, 9], "tokens_before": 9, "tokens_after": 2,
        "summarizer": {"provider": "p", "model": "m", "config": {}}})
    s.append("user/message", {"content": "S"}, surface_op="replace", source_event_seqs=[4, 7, 9])
    assert tuple(before) == copy
    after = s.derive_messages()
    assert [m.kind for m in after] == [Kind.CONTEXT, Kind.SUMMARY, Kind.ASSISTANT]
    assert after[1].seqs == (19,)
    assert s.surface.position_of(19) == 1 and s.surface.position_of(14) == 2
    assert s.surface.position_of(4) is None
    assert len(s.events) == 20 and s.events[4].seq == 4  # the shadowed events stay in the log


def test_messages_view_behaves_like_a_tuple() -> None:
    msgs = lab_turn().derive_messages()
    t = tuple(msgs)
    assert msgs == t and t == msgs and msgs == list(t) and hash(msgs) == hash(t)
    assert msgs[-1] is t[-1] and msgs[1:3] == t[1:3] and msgs.__add__(()) == t
    with pytest.raises(IndexError):
        msgs[len(t)]


def test_unchanged_surface_returns_the_same_view() -> None:
    s = lab_turn()
    assert s.derive_messages() is s.derive_messages()
    s.append("todo/add", {"id": "z", "text": "x"})
    assert len(s.derive_messages()) == 5


def test_abandoned_call_leaves_the_surface_but_keeps_the_text() -> None:
    s = new_session()
    s.append("turn/start")
    s.append("step/start")
    s.append("assistant/message", {"content": "trying", "tool_calls": [
        CALL, {**CALL, "call_id": "c2"}]})  # 3
    s.append("tool/call", CALL)
    s.append("tool/result", {"call_id": "c1", "status": "ok"})
    s.append("turn/end", {"reason": "cancelled"})  # 6
    msg = s.derive_messages()[0]
    assert [c.call_id for c in msg.tool_calls] == ["c1"]
    assert msg.content == "trying" and msg.seqs == (3, 6)


def test_assistant_message_left_empty_by_abandonment_is_dropped() -> None:
    s = new_session()
    s.append("user/message", {"content": "u"})
    s.append("turn/start")
    s.append("step/start")
    s.append("assistant/message", {"content": "", "tool_calls": [CALL]})
    s.append("tool/call", CALL)
    pending_view = s.derive_messages()
    assert pending_view[-1].tool_calls  # a pending call inside the open turn is shown
    s.append("turn/end", {"reason": "interrupted"})
    assert [m.kind for m in s.derive_messages()] == [Kind.USER]
    assert s.surface.position_of(4) is None
    assert len(pending_view) == 2  # a view handed out earlier is not rewritten


def test_from_scratch_derivation_matches_the_incremental_one() -> None:
    s = lab_turn()
    assert derive_from_scratch(s.events) == s.derive_messages()


def test_token_estimate_is_deterministic_and_additive() -> None:
    msgs = lab_turn().derive_messages()
    total = token_estimate(msgs)
    assert total == sum(message_tokens(m) for m in msgs) == token_estimate(tuple(msgs))
    assert total > 0 and token_estimate(()) == 0
