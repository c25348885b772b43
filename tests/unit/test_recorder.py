"""Provider responses — whole or streamed — become the right events, through the rules."""

from __future__ import annotations

from typing import Any

import pytest

from sessionstream.core.errors import SchemaViolation
from sessionstream.core.events import Event
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.providers import APIS, parse_response, parse_stream
from sessionstream.core.providers.errors import IncompleteStream, ProviderResponseError
from sessionstream.core.providers.scripted import Reply, render
from sessionstream.core.recorder import parse, record
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import send

REPLIES = {
    "text": Reply("The answer is 42, as the table shows.", input_tokens=321, output_tokens=12),
    "parallel": Reply("Checking both.", [("c1", "run_sql", {"q": "select 1"}),
                                         ("c2", "read_file", {"path": "a.txt", "n": 2})]),
    "calls-only": Reply("", [("c3", "run_sql", {"q": "select ü"})]),
    "refusal": Reply(refusal="I can't help with that.", stop="refusal"),
    "truncated": Reply("Let me run", [("c4", "run_sql", {"q": "select * from big"})],
                       stop="max_tokens"),
}


def _session_in_step() -> Any:
    s = cases.new_session("rec")
    s.append("turn/start")
    s.append("user/message", {"content": "hi"})
    s.append("step/start")
    return s


def _recorded(output: Any) -> list[Event]:
    s = _session_in_step()
    before = len(s.events)
    record(s, output, cases.HEADER, session=s)
    return list(s.events[before:])


def _without_chunks(events: list[Event]) -> list[tuple[str, Any]]:
    return [(e.type, e.data) for e in events if e.type != "assistant/chunk"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", sorted(REPLIES))
def test_a_recorded_stream_equals_the_recorded_whole_response(api: str, name: str) -> None:
    reply = REPLIES[name]
    # both go through the SDK first: its parsed objects, dumped, are what a harness has
    _, whole = send(api, {"model": "m", **_minimal(api)}, render(api, reply))
    _, events = send(api, {"model": "m", "stream": True, **_minimal(api)},
                     render(api, reply, stream=True))
    from_whole = _recorded(parse_response(api, whole))
    from_stream = _recorded(parse_stream(api, events))
    assert _without_chunks(from_stream) == _without_chunks(from_whole)
    chunks = [e.data["text"] for e in from_stream if e.type == "assistant/chunk"]
    # Anthropic streams a refusal as text; OpenAI streams it as refusal deltas
    assert "".join(chunks) == (reply.text or reply.refusal if api == "anthropic" else reply.text)
    assert not [e for e in from_whole if e.type == "assistant/chunk"]


def _minimal(api: str) -> dict[str, Any]:
    msg = {"role": "user", "content": "hi"}
    if api == "openai-responses":
        return {"input": [msg]}
    if api == "anthropic":
        return {"messages": [msg], "max_tokens": 10}
    if api == "gemini":
        return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    return {"messages": [msg]}


@pytest.mark.parametrize("api", APIS)
def test_the_header_records_the_routing_actually_used(api: str) -> None:
    events = _recorded(parse_response(api, render(api, REPLIES["text"])))
    header = events[0]
    assert header.type == "request/header"
    assert header.data["model"] == "scripted-1"  # what the provider says it ran
    assert header.data["requested_model"] == "model-x"
    assert header.data["defaults_source"]["model"] == "response"
    assert header.data["api"] == api and header.data["response_id"] == "resp_scripted"
    message = events[-1]
    assert message.data["usage"]["input_tokens"] == 321
    assert message.data["usage"]["output_tokens"] == 12
    assert message.data["stop_reason"] == "end_turn"


@pytest.mark.parametrize("api", APIS)
def test_parallel_calls_are_declared_with_object_arguments(api: str) -> None:
    events = _recorded(parse_response(api, render(api, REPLIES["parallel"])))
    msg = events[-1]
    assert [(c["call_id"], c["name"], c["arguments"]) for c in msg.data["tool_calls"]] == [
        ("c1", "run_sql", {"q": "select 1"}), ("c2", "read_file", {"path": "a.txt", "n": 2})]
    assert msg.data["stop_reason"] == "tool_use"


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_at_max_tokens_is_withheld_never_declared(api: str, stream: bool) -> None:
    output = parse(api, render(api, REPLIES["truncated"], stream=stream))
    s = _session_in_step()
    record(s, output, cases.HEADER, session=s)
    msg = s.events[-1]
    assert list(msg.data["tool_calls"]) == []
    assert msg.data["stop_reason"] == "max_tokens"
    assert [w["call_id"] for w in msg.data["withheld_tool_calls"]] == ["c4"]
    assert msg.data["withheld_tool_calls"][0]["reason"] == "truncated"
    assert s.pending_calls == ()  # nothing a harness could run
    s.append("step/end")
    s.append("turn/end", {"reason": "failed", "detail": "cut at max_tokens"})


@pytest.mark.parametrize("api", [a for a in APIS if a != "gemini"])
def test_a_refusal_is_recorded_as_text_with_its_stop_reason(api: str) -> None:
    """(Gemini has no refusal: a blocked answer is finish_reason SAFETY, content_filter.)"""
    msg = _recorded(parse_response(api, render(api, REPLIES["refusal"])))[-1]
    assert msg.data["stop_reason"] == "refusal"
    assert msg.data["refusal"] == "I can't help with that."
    assert msg.data["content"] == "I can't help with that."


@pytest.mark.parametrize("api", [a for a in APIS if a != "gemini"])
def test_a_stream_cut_mid_tool_call_is_a_named_error_and_records_nothing(api: str) -> None:
    """(Gemini streams each call whole: its cut stream is tested in test_gemini.py.)"""
    events = render(api, REPLIES["parallel"], stream=True)
    # cut right after the first tool-argument fragment
    cut = next(i for i, e in enumerate(events) if ("arguments" in str(e) and i > 2)
               or "input_json_delta" in str(e)) + 1
    s = _session_in_step()
    before = len(s.events)
    with pytest.raises(IncompleteStream) as info:
        record(s, parse(api, iter(events[:cut])), cases.HEADER, session=s)
    assert info.value.open_tool_calls
    assert "c1" in str(info.value)
    assert len(s.events) == before


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("body", [
    {"choices": "nope", "content": 3, "output": {}},
    {"choices": [{"message": {"content": 5}}], "content": [{"type": 7}],
     "output": [{"type": "function_call", "call_id": 1}]},
    [],
])
def test_a_body_of_the_wrong_shape_is_a_named_error_naming_where(api: str, body: Any) -> None:
    with pytest.raises(ProviderResponseError) as info:
        parse_response(api, body)
    assert info.value.api == api and info.value.path.startswith("$")


def test_a_duplicate_call_id_from_the_provider_is_made_unique_not_refused() -> None:
    s = _session_in_step()
    record(s, parse_response("openai-chat", render("openai-chat", REPLIES["calls-only"])),
           cases.HEADER, session=s)
    s.append("tool/call", {"call_id": "c3", "name": "run_sql", "arguments": {}})
    s.append("tool/result", {"call_id": "c3", "status": "ok", "content": "x"})
    s.append("step/end")
    s.append("step/start")
    record(s, parse_response("openai-chat", render("openai-chat", REPLIES["calls-only"])),
           cases.HEADER, session=s)
    call = s.events[-1].data["tool_calls"][0]
    assert call["call_id"] == "c3~2" and call["provider_call_id"] == "c3"


def test_invalid_arguments_are_withheld_with_their_text() -> None:
    body = render("openai-chat", REPLIES["calls-only"])
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json"
    out = parse_response("openai-chat", body)
    assert out.tool_calls == ()
    assert out.withheld[0].reason == "invalid-arguments"
    assert out.withheld[0].arguments_text == "{not json"


def test_usage_without_both_counts_is_not_recorded_half() -> None:
    body = render("anthropic", REPLIES["text"])
    body["usage"] = {"input_tokens": 3}
    out = parse_response("anthropic", body)
    assert out.usage is None
    msg = _recorded(out)[-1]
    assert "usage" not in msg.data


def test_recording_checks_the_schema_before_appending_anything() -> None:
    out = parse_response("anthropic", render("anthropic", REPLIES["text"]))
    bad = type(out)(**{**out.__dict__, "chunks": (3,)})  # type: ignore[arg-type]
    s = _session_in_step()
    before = len(s.events)
    with pytest.raises(SchemaViolation):
        record(s, bad, cases.HEADER, session=s)
    assert len(s.events) == before


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_and_reasoning_are_recorded_and_server_tool_parts_counted(stream: bool) -> None:
    body = render("anthropic", REPLIES["text"], stream=stream)
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    if stream:
        body[1:1] = [{"type": "content_block_start", "index": 8, "content_block": thinking},
                     {"type": "content_block_stop", "index": 8},
                     {"type": "content_block_start", "index": 9, "content_block": server},
                     {"type": "content_block_stop", "index": 9}]
    else:
        body["content"][:0] = [thinking, server]
    msg = _recorded(parse("anthropic", body))[-1]
    assert thaw(msg.data["reasoning"]) == [{"api": "anthropic", **thinking}]
    assert msg.data["omitted_output"] == {"server_tool_use": 1}
    resp = render("openai-responses", REPLIES["text"])
    resp["output"].insert(0, {"type": "reasoning", "id": "rs_1", "summary": []})
    recorded = _recorded(parse("openai-responses", resp))[-1].data
    assert thaw(recorded["reasoning"]) == [{"api": "openai-responses", "type": "reasoning",
                                      "id": "rs_1", "summary": []}]
    assert "omitted_output" not in recorded
