"""Import and export of provider conversations: round trips per format, reported losses."""

from __future__ import annotations

from typing import Any

import pytest

from sessionstream.core.events import CountingClock, SequentialIds
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.providers import APIS
from sessionstream.core.providers.common import group
from sessionstream.core.providers.convert import export_session, import_conversation
from sessionstream.core.providers.errors import ConversationImportError
from sessionstream.core.session import Session
from tests.fixtures.bodies import REASONING
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import validate

SESSIONS = {name: getattr(cases, name)() for name in
            ("manual", "shredded", "compacted", "truncated", "refused")}


def _import(api: str, body: Any) -> Any:
    return import_conversation(api, body, session_id="imp", clock=CountingClock(),
                               ids=SequentialIds("imp"))


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_export_then_import_then_export_gives_the_same_body(api: str, name: str) -> None:
    built, _ = export_session(api, SESSIONS[name].events)
    validate(api, built.body)
    again, _ = export_session(api, _import(api, built.body).events)
    assert again.body == built.body


def _carried(m: Any) -> tuple[Any, ...]:
    return (m.role, m.content, tuple((c.call_id, c.name, c.arguments) for c in m.tool_calls),
            m.call_id, m.status)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_import_of_an_export_keeps_the_surface_except_what_is_reported(api: str,
                                                                       name: str) -> None:
    events = SESSIONS[name].events
    built, notes = export_session(api, events)
    imported = Session.from_events(_import(api, built.body).events).derive_messages()
    original = [m for item in group(Session.from_events(events).derive_messages())
                for m in item.messages]
    sent = [m for m in original if not (m.role.value == "assistant" and not m.content
                                        and not m.tool_calls)]
    assert len(imported) == len(sent)
    reported = {s for n in notes for s in n.seqs}
    for before, after in zip(sent, imported, strict=True):
        if _carried(before) != _carried(after):
            assert before.seqs[0] in reported, f"unreported change of seq {before.seqs[0]}"


def test_a_session_of_strings_round_trips_exactly_in_every_format() -> None:
    s = cases.truncated()
    for api in APIS:
        built, _ = export_session(api, s.events)
        back = Session.from_events(_import(api, built.body).events).derive_messages()
        assert [_carried(m) for m in back] == [_carried(m) for m in s.derive_messages()]


def test_the_system_prompt_tools_and_params_travel_in_session_start() -> None:
    body = {"model": "gpt-x", "temperature": 0.2, "max_completion_tokens": 99,
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object"}}}]}
    imp = _import("openai-chat", body)
    start = thaw(imp.events[0].data["imported"])
    assert start["system"] == ["Be brief."] and start["params"] == {"temperature": 0.2}
    built, notes = export_session("openai-chat", imp.events)
    assert built.body == body
    other, notes = export_session("anthropic", imp.events)
    assert other.body["system"] == [{"type": "text", "text": "Be brief."}]
    assert any("temperature" in n.note for n in notes)


def test_what_the_log_cannot_carry_is_reported_on_import() -> None:
    body = {"model": "m", "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "message", "role": "assistant", "content": "hello"}]}
    imp = _import("openai-responses", body)
    assert [n.path for n in imp.report] == ["/input/1"]


@pytest.mark.parametrize("api", sorted(REASONING))
def test_reasoning_is_imported_as_its_class_and_exported_back_unchanged(api: str) -> None:
    body = REASONING[api]
    imp = _import(api, body)
    assert not imp.report
    msg = next(e for e in imp.events if e.type == "assistant/message")
    assert msg.data["reasoning"] and all(r["api"] == api for r in msg.data["reasoning"])
    built, _notes = export_session(api, list(imp.events))
    assert built.body == body
    other = "openai-chat" if api == "anthropic" else "anthropic"
    foreign, notes = export_session(other, list(imp.events))
    assert "sig1" not in str(foreign.body) and "enc" not in str(foreign.body["messages"])
    assert any(f"reasoning of {api} not sent" in n.note for n in notes)


def test_an_error_result_and_a_refusal_survive_an_openai_round_trip() -> None:
    body = {"model": "m", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ERROR: boom"},
        {"role": "assistant", "content": None, "refusal": "No."}]}
    events = _import("openai-chat", body).events
    result = next(e for e in events if e.type == "tool/result")
    assert result.data["status"] == "error" and result.data["content"] == "boom"
    assert events[-1].data == {"reason": "refused"}


@pytest.mark.parametrize(("api", "body", "where"), [
    ("openai-chat", {"messages": [{"role": "user", "content": "a"},
                                  {"role": "tool", "tool_call_id": "zz", "content": "x"}]},
     "/messages/1"),
    ("anthropic", {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "zz", "content": "x"}]}]},
     "/messages/0/content/0"),
    ("openai-responses", {"input": [{"type": "function_call_output", "call_id": "zz",
                                     "output": "x"}]}, "/input/0"),
])
def test_a_tool_result_for_an_unknown_call_is_a_named_error(api: str, body: Any,
                                                            where: str) -> None:
    with pytest.raises(ConversationImportError) as info:
        _import(api, body)
    assert info.value.path == where and "zz" in str(info.value)


@pytest.mark.parametrize(("api", "body"), [
    ("openai-chat", {"messages": "hello"}),
    ("openai-chat", {"messages": [{"role": "wizard", "content": "x"}]}),
    ("openai-chat", {"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}),
    ("openai-chat", {"messages": [{"role": "user", "content": "a"}, {
        "role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
    ("anthropic", {"messages": [{"role": "user", "content": 5}]}),
    ("openai-responses", 42),
])
def test_a_body_of_the_wrong_shape_is_a_named_error(api: str, body: Any) -> None:
    with pytest.raises(ConversationImportError):
        _import(api, body)
