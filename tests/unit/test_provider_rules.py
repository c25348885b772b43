"""What the APIs refuse beyond their SDK types: the per-API rules, the builders' repairs
and named errors, stable id mapping, and a property over generated sessions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.harness import Harness
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT, DataClass, split
from sessionstream.core.providers import APIS, build
from sessionstream.core.providers.convert import export_session, import_conversation, surface_of
from sessionstream.core.providers.errors import ProviderMappingError
from sessionstream.core.providers.rules import (
    BodyRefused,
    EmptyRequest,
    anthropic_id,
    from_anthropic_id,
    problems,
)
from sessionstream.core.providers.scripted import Reply, ScriptedClient, render
from sessionstream.core.session import Session
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import validate

THINKING = {"type": "enabled", "budget_tokens": 1024}
GEMINI_THINKING = {"include_thoughts": True, "thinking_budget": 1024}


def _request(s: Session) -> Any:
    return cases.request_of(s, header=cases.THINKING_HEADER)


def _rules(api: str, body: dict[str, Any]) -> list[str]:
    return [p.rule for p in problems(api, body)]


def _user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def test_each_anthropic_rule_names_the_part_it_refuses() -> None:
    use = {"type": "tool_use", "id": "c1~2", "name": "f", "input": {}}
    body = {"model": "m", "max_tokens": 10, "messages": [
        _user("  "), {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "text", "text": "x"},
                                     {"type": "tool_result", "tool_use_id": "c1~2"}]}]}
    found = problems("anthropic", body)
    assert {(p.path, p.rule) for p in found} == {
        ("/messages/0/content/0", "no-blank-text"), ("/messages/1/content/0/id", "id-pattern"),
        ("/messages/2/content/1/tool_use_id", "id-pattern"),
        ("/messages/2/content", "results-first")}
    assert _rules("anthropic", {"messages": [{"role": "assistant", "content": "a"}]}) == [
        "user-first"]
    unanswered = {"messages": [_user(), {"role": "assistant", "content": [
        {**use, "id": "c1"}]}, _user()]}
    assert _rules("anthropic", unanswered) == ["result-after-call"]
    thinking = {"max_tokens": 1024, "thinking": THINKING, "messages": [
        _user(), {"role": "assistant", "content": [{**use, "id": "c1"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1"}]}]}
    assert _rules("anthropic", thinking) == ["thinking-budget", "thinking-first"]


def test_each_openai_rule_names_the_part_it_refuses() -> None:
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chat = {"messages": [{"role": "user", "content": "x"},
                         {"role": "assistant", "tool_calls": [call, {**call, "id": "b"}]},
                         {"role": "tool", "tool_call_id": "a", "content": "1"},
                         {"role": "user", "content": "y"},
                         {"role": "tool", "tool_call_id": "b", "content": "2"}]}
    assert {(p.path, p.rule) for p in problems("openai-chat", chat)} == {
        ("/messages/1", "calls-answered"), ("/messages/4", "result-after-call")}
    assert _rules("openai-chat", {"messages": [{"role": "system", "content": "s"}]}) == [
        "non-empty"]
    resp = {"input": [{"type": "function_call_output", "call_id": "z", "output": ""},
                      {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                      {"type": "reasoning", "id": "rs", "summary": []}]}
    assert {(p.path, p.rule) for p in problems("openai-responses", resp)} == {
        ("/input/0", "result-after-call"), ("/input/1", "calls-answered"),
        ("/input/2", "reasoning-followed")}


@pytest.mark.parametrize("call_id", ["c1~2", "functions.lookup:0", "ü x", "a_b.c",
                                     "ssx-c1_7e2", "toolu_01AB-c"])
def test_anthropic_ids_are_mapped_stably_and_back(call_id: str) -> None:
    sent = anthropic_id(call_id)
    assert problems("anthropic", {"messages": [_user(), {"role": "assistant", "content": [
        {"type": "tool_use", "id": sent, "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": sent}]}]}) == []
    assert sent == anthropic_id(call_id) and from_anthropic_id(sent) == call_id
    assert (sent == call_id) == (call_id == "toolu_01AB-c")


def _session_with(ids: list[str], *, first: str = "look", blank: str = " \n ") -> Session:
    replies = [Reply(blank, [(cid, "run_sql", {"q": cid})]) for cid in ids] + [Reply("ok")]
    h = Harness(cases.new_session("ids"), ScriptedClient("openai-chat", replies),
                "openai-chat", cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: "  "}, variables={"agent": "Ada"})
    h.turn(first)
    return h.session


def test_duplicate_and_foreign_ids_reach_anthropic_valid_and_come_back_on_import() -> None:
    s = _session_with(["c1", "c1", "functions.lookup:0"])
    ids = [c["call_id"] for e in s.events if e.type == "assistant/message"
           for c in e.data["tool_calls"]]
    assert ids == ["c1", "c1~2", "functions.lookup:0"]
    built = build("anthropic", _request(s))
    validate("anthropic", built.body)
    sent = [b["id"] for m in built.body["messages"] for b in m["content"]
            if b["type"] == "tool_use"]
    assert sent == ["c1", "ssx-c1_7e2", "ssx-functions_2elookup_3a0"]
    assert sum("sent as" in n.note for n in built.notes) == 4  # two uses, two results
    back = import_conversation("anthropic", built.body, session_id="back")
    assert [c for m in surface_of(list(back.events)) for c in m.get("tool_calls", ())] == [
        (cid, "run_sql", {"q": q}) for cid, q in zip(ids, ["c1", "c1", "functions.lookup:0"],
                                                      strict=True)]


def test_whitespace_only_text_never_reaches_anthropic_and_says_so() -> None:
    s = _session_with(["c1"])
    built = build("anthropic", _request(s))
    validate("anthropic", built.body)
    text = [b for m in built.body["messages"] for b in m["content"] if b["type"] == "text"]
    assert all(b["text"].strip() for b in text)
    assert any("whitespace-only text part omitted" in n.note for n in built.notes)
    assert any("whitespace-only tool result" in n.note for n in built.notes)


def test_a_session_with_no_message_yet_is_a_named_error() -> None:
    s = cases.new_session("crashed")
    s.append("turn/start")
    for api in APIS:
        with pytest.raises(EmptyRequest, match="nothing to send"):
            build(api, _request(s))


def test_a_blank_first_user_message_is_refused_by_name_for_anthropic() -> None:
    s = _session_with(["c1"], first="   ")
    with pytest.raises(BodyRefused, match="user-first"):
        build("anthropic", _request(s))
    for api in ("openai-chat", "openai-responses"):
        validate(api, build(api, _request(s)).body)


# ------------------------------------------------------------------------- property

IDS = st.sampled_from(["c1", "call_1", "functions.lookup:0", "toolu_01", "c1~2", "ü", "a.b"])
TEXT = st.sampled_from(["", " ", "\n\t", "ok", "two words", "ü ✓"])


@dataclass
class Generated:
    """A generated session, the API that answered it, and its replies in order."""

    session: Session
    origin: str
    replies: list[Reply]
    variant: str
    hostile: bool = False  # reasoning of the wrong kinds was added to one message


@st.composite
def sessions(draw: st.DrawFn) -> Generated:
    origin = draw(st.sampled_from(APIS))
    turns = draw(st.integers(1, 3))
    s = cases.new_session("gen")
    every: list[Reply] = []
    for t in range(turns):
        steps = draw(st.integers(0, 2))
        # interleaved: a second thought after the text, before the calls (Anthropic,
        # Gemini); the other APIs' scripted replies have none
        replies = [Reply(draw(TEXT), [(draw(IDS), "run_sql", {"n": i}) for i in range(
            draw(st.integers(1, 2)))], thinking=draw(st.sampled_from(["", "hm"])),
            interleaved=draw(st.sampled_from(["", "then"])), response_id=f"r{t}-{k}")
            for k in range(steps)]
        replies.append(Reply(draw(st.sampled_from(["done", " "])), thinking="fin",
                             interleaved=draw(st.sampled_from(["", "so"])),
                             response_id=f"r{t}-last"))
        results = draw(st.sampled_from(["1 row", " ", "", {"rows": 2}]))
        options = {"thinking": THINKING} if origin == "anthropic" and draw(st.booleans()) \
            else {}
        h = Harness(s, ScriptedClient(origin, replies), origin, cases.THINKING_HEADER,
                    cases.registry(),
                    providers=[cases.TOOLS], tools={"run_sql": lambda a, c, r=results: r},
                    variables={"agent": "Ada"}, options=options,
                    stream=draw(st.booleans()))
        h.turn(draw(TEXT) if t else "start")
        every += replies
    hostile = draw(st.lists(st.sampled_from(HOSTILE_REASONING), max_size=2))
    if hostile:  # recorded reasoning no API returned: a builder must not send it
        at = draw(st.sampled_from([e.seq for e in s.events if e.type == "assistant/message"]))
        s = Session.from_events([e.replace(data={**thaw(e.data), "reasoning": [
            *thaw(e.data.get("reasoning") or []), *hostile]}) if e.seq == at else e
            for e in s.events])
    return Generated(s, origin, every,
                     draw(st.sampled_from(["clear", "surface-deleted", "reasoning-deleted"])),
                     bool(hostile))


#: Recorded reasoning of the wrong kinds (the values the issue's hostile bodies carry).
HOSTILE_REASONING: list[dict[str, Any]] = [
    {"api": "gemini", "type": "thought", "text": 5},
    {"api": "gemini", "type": "thought", "text": "x", "thought_signature": 5},
    {"api": "gemini", "type": "signature", "anchor": "call", "index": 0,
     "thought_signature": "not base64!"},
    {"api": "gemini", "type": "signature", "anchor": "text", "index": True,
     "thought_signature": "c2ln"},
    {"api": "gemini", "type": "signature", "anchor": "call", "index": "0",
     "thought_signature": "c2ln"},
    {"api": "anthropic", "type": "thinking", "thinking": "x", "signature": 5},
    {"api": "anthropic", "type": "redacted_thinking", "data": None},
    {"api": "openai-responses", "type": "reasoning", "id": "rs_x",
     "summary": [{"type": "summary_text", "text": 1}]},
    {"api": "openai-responses", "type": "reasoning", "id": "rs_y", "summary": [],
     "encrypted_content": 5},
    {"api": "openai-responses", "type": "reasoning", "id": 5},
]


def _kinds_answered(api: str, reply: Reply) -> list[str]:
    """The kinds of a reply's blocks as the API answered them, without the blank text a
    builder leaves out (and none when only reasoning is left: the message is omitted)."""
    if api == "anthropic":
        kind = {"thinking": "reasoning", "redacted_thinking": "reasoning", "text": "text",
                "tool_use": "call"}
        kinds = [kind[b["type"]] for b in render(api, reply)["content"]
                 if b["type"] != "text" or b["text"].strip()]
    else:
        kinds = ["call" if "functionCall" in p else "reasoning" if p.get("thought")
                 else "text" for p in render(api, reply)["candidates"][0]["content"]["parts"]
                 if "functionCall" in p or p.get("thought") or p["text"].strip()]
    return kinds if set(kinds) - {"reasoning"} else []


def _kinds_sent(api: str, body: dict[str, Any]) -> list[str]:
    if api == "anthropic":
        kind = {"thinking": "reasoning", "redacted_thinking": "reasoning", "text": "text",
                "tool_use": "call"}
        return [kind[b["type"]] for m in body["messages"] if m["role"] == "assistant"
                for b in m["content"]]
    return ["call" if "function_call" in p else "reasoning" if p.get("thought") else "text"
            for c in body["contents"] if c["role"] == "model" for p in c["parts"]]


def _runs(kinds: list[str]) -> list[str]:
    """``kinds`` with each run of adjacent reasoning blocks counted once."""
    return [k for i, k in enumerate(kinds)
            if not (k == "reasoning" and i and kinds[i - 1] == "reasoning")]


def _deleted(s: Session, classes: list[DataClass]) -> Session:
    return Session.from_events([e.replace(data=split(e.type, e.data, None, classes,
                                                     text=DELETED_TEXT).clear)
                                for e in s.events])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.booleans())
def test_every_built_body_passes_the_sdk_types_and_the_api_rules(
        generated: Generated, thinking: bool) -> None:
    s, variant = generated.session, generated.variant
    if variant != "clear":
        s = _deleted(s, [DataClass.SURFACE if variant == "surface-deleted"
                         else DataClass.REASONING])
    request = _request(s)
    for api in APIS:
        options = {"thinking": {"anthropic": THINKING, "gemini": GEMINI_THINKING}[api]} \
            if api in ("anthropic", "gemini") and thinking else {}
        try:
            built = build(api, request, **options)
        except ProviderMappingError as exc:  # named, never a traceback of another kind
            pytest.fail(f"{api}: {exc}")
        validate(api, built.body)
        assert problems(api, built.body) == []
        exported, _notes = export_session(api, list(s.events))
        validate(api, exported.body)
        assert json.dumps(exported.body)  # plain JSON
        if api == generated.origin in ("anthropic", "gemini") and variant != \
                "surface-deleted" and not generated.hostile:
            # each turn goes back to its API in the order it came (its reasoning's places
            # skipped where the reasoning is deleted)
            answered = [k for r in generated.replies for k in _kinds_answered(api, r)
                        if variant == "clear" or k != "reasoning"]
            sent = _kinds_sent(api, built.body)
            if api == "gemini":
                # a streamed Gemini thought arrives in pieces, and a thought chunk after
                # a thought continues it (gemini._Fold): two thoughts with nothing
                # between them (an empty text) are one thought on the wire
                answered, sent = _runs(answered), _runs(sent)
            assert sent == answered
