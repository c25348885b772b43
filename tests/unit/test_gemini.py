"""Gemini generateContent: a tool loop through the google-genai client against a server that
enforces Gemini's rules, thought signatures replayed to Gemini only, call ids Gemini did not
send, the per-API rules, responses the recorder must not trust, and import/export fidelity.

The parametrised suites (test_provider_bodies, test_recorder, test_convert, test_harness,
the property in test_provider_rules) cover Gemini with the other APIs; this file has what
only Gemini has.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from google.genai import errors as genai_errors

from examples.harness import GeminiClient
from sessionstream.core.events import CountingClock, SequentialIds
from sessionstream.core.harness import Harness
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT, DataClass, split
from sessionstream.core.providers import build, parse_response, parse_stream
from sessionstream.core.providers.convert import export_session, import_conversation
from sessionstream.core.providers.errors import IncompleteStream, ProviderResponseError
from sessionstream.core.providers.rules import problems
from sessionstream.core.providers.scripted import Reply, ScriptedClient, gemini_signature, render
from sessionstream.core.session import Session
from tests.fixtures.bodies import GEMINI, SIG1
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import gemini_client, gemini_sse, httpx, validate

LOOP = [Reply("Let me query.", [("c1", "run_sql", {"q": "select 1"}),
                                ("c2", "read_file", {"path": "a"})],
              thinking="I need data.", response_id="r1"),
        Reply("", [("c3", "run_sql", {"q": "select 2"})], thinking="Once more.",
              response_id="r2"),
        Reply("Done: 42.", thinking="That settles it.", response_id="r3")]


class Refused(Exception):
    """What the server answers with a 400 (the SDK raises its ClientError)."""


class GeminiServer:
    """A scripted Gemini that refuses what Gemini refuses, then answers the script.

    Checked on the wire (the REST JSON the SDK sent): every function call turn is
    answered by the next (user) turn with function responses of the same names in the
    same order; a function call it issued comes back with the thought signature it gave
    it, unmodified; with ``ids=False`` it sends calls without ids (as Gemini may) and
    refuses an id it never issued.
    """

    def __init__(self, replies: list[Reply], *, ids: bool = True) -> None:
        self.replies = iter(replies)
        self.ids = ids
        self.signed: dict[str, str] = {}  # call key -> the signature issued with it
        self.bodies: list[dict[str, Any]] = []

    @staticmethod
    def _key(call: dict[str, Any]) -> str:
        return call.get("id") or json.dumps([call["name"], call.get("args")], sort_keys=True)

    def check(self, body: dict[str, Any]) -> None:
        contents = body["contents"]
        for i, content in enumerate(contents):
            calls = [p for p in content["parts"] if "functionCall" in p]
            if not calls:
                continue
            nxt = contents[i + 1] if i + 1 < len(contents) else None
            answers = [p["functionResponse"] for p in (nxt or {}).get("parts", ())
                       if "functionResponse" in p] if nxt and nxt["role"] == "user" else []
            if [a["name"] for a in answers] != [p["functionCall"]["name"] for p in calls]:
                raise Refused("Please ensure that the number of function response parts is "
                              "equal to the number of function call parts of the function "
                              "call turn.")
            for part in calls:
                call = part["functionCall"]
                if not self.ids and "id" in call:
                    raise Refused(f"function call id {call['id']!r} was never issued")
                want = self.signed.get(self._key(call))
                if want is not None and part.get("thoughtSignature") != want:
                    raise Refused("Function call is missing a thought_signature in "
                                  "functionCall parts.")

    def reply(self, body: dict[str, Any], stream: bool) -> Any:
        self.bodies.append(body)
        self.check(body)
        r = next(self.replies)
        out = render("gemini", r, stream=stream)
        for chunk in out if stream else [out]:
            for part in chunk["candidates"][0]["content"]["parts"]:
                call = part.get("functionCall")
                if call is None:
                    continue
                if not self.ids:
                    del call["id"]
                if "thoughtSignature" in part:
                    self.signed[self._key(call)] = part["thoughtSignature"]
        return out

    def handler(self, request: httpx.Request) -> httpx.Response:
        stream = "streamGenerateContent" in request.url.path
        try:
            out = self.reply(json.loads(request.content), stream)
        except Refused as exc:
            return httpx.Response(400, json={"error": {"code": 400, "message": str(exc),
                                                       "status": "INVALID_ARGUMENT"}})
        if stream:
            return httpx.Response(200, content=gemini_sse(out),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=out)


def _harness(server: GeminiServer, stream: bool, sid: str = "gem") -> Harness:
    return Harness(cases.new_session(sid), GeminiClient(gemini_client(server.handler)),
                   "gemini", cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                   tools={"run_sql": lambda a, c: "1 row", "read_file": lambda a, c: {"n": 2}},
                   variables={"agent": "Ada"}, stream=stream)


@pytest.mark.parametrize("ids", [True, False])
@pytest.mark.parametrize("stream", [False, True])
def test_a_thinking_tool_loop_runs_through_the_sdk_against_an_enforcing_server(
        stream: bool, ids: bool) -> None:
    server = GeminiServer(LOOP, ids=ids)
    h = _harness(server, stream)
    result = h.turn("what is it?")
    assert result.reason == "completed" and len(result.steps) == 3
    messages = [e.data for e in h.session.events if e.type == "assistant/message"]
    assert thaw(messages[0]["reasoning"]) == [
        {"api": "gemini", "type": "thought", "text": "I need data."},
        {"api": "gemini", "type": "signature", "anchor": "call", "index": 0,
         "thought_signature": gemini_signature(LOOP[0])}]
    assert messages[2]["reasoning"][-1]["anchor"] == "text"  # no call: the text is signed
    call_ids = [c["call_id"] for m in messages for c in m["tool_calls"]]
    if ids:
        assert call_ids == ["c1", "c2", "c3"]
    else:  # made up by the parser, never sent back (the server refuses unknown ids)
        assert call_ids == ["ssg-r1-0", "ssg-r1-1", "ssg-r2-0"]
    last = server.bodies[2]["contents"]
    assert [c["role"] for c in last] == ["user", "model", "user", "model", "user"]
    assert last[1]["parts"][0] == {"text": "I need data.", "thought": True}
    assert [p["functionResponse"]["name"] for p in last[2]["parts"]] == ["run_sql",
                                                                         "read_file"]
    assert last[2]["parts"][1]["functionResponse"]["response"] == {"output": {"n": 2}}


def test_the_server_refuses_a_loop_without_the_thought_signatures() -> None:
    """The enforcing server is not a pushover: the same loop without replay is refused."""
    server = GeminiServer(LOOP)
    h = _harness(server, False)
    original = h.request
    h.request = lambda: dataclasses.replace(original(), reasoning=())  # type: ignore[method-assign]
    with pytest.raises(genai_errors.ClientError, match="thought_signature"):
        h.turn("what is it?")
    assert h.session.events[-1].data["reason"] == "failed"


def test_the_server_refuses_responses_out_of_order_and_so_do_the_rules() -> None:
    h = Harness(cases.new_session("order"), ScriptedClient("gemini", LOOP), "gemini",
                cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: "1", "read_file": lambda a, c: "x"},
                variables={"agent": "Ada"})
    h.turn("what is it?")
    body = copy.deepcopy(h.client.bodies[1])  # type: ignore[attr-defined]
    body["contents"][2]["parts"].reverse()
    assert [(p.path, p.rule) for p in problems("gemini", body)] == [
        ("/contents/2", "responses-answer-calls")]
    server = GeminiServer([Reply("x")])
    with pytest.raises(genai_errors.ClientError, match="number of function response parts"):
        GeminiClient(gemini_client(server.handler)).create(body)


def test_results_recorded_out_of_order_are_sent_in_the_order_of_their_calls() -> None:
    s = cases.new_session("late")
    s.append("turn/start")
    s.append("user/message", {"content": "go"})
    s.append("step/start")
    calls = [{"call_id": "a", "name": "run_sql", "arguments": {"q": "1"}},
             {"call_id": "b", "name": "read_file", "arguments": {"path": "p"}}]
    s.append("assistant/message", {"content": "", "tool_calls": calls})
    for c in calls:
        s.append("tool/call", c)
    s.append("tool/result", {"call_id": "b", "status": "error", "content": "denied"})
    s.append("tool/result", {"call_id": "a", "status": "ok", "content": "3"})
    built = build("gemini", cases.request_of(s))
    validate("gemini", built.body)
    parts = built.body["contents"][2]["parts"]
    assert [p["function_response"] for p in parts] == [
        {"name": "run_sql", "response": {"output": "3"}, "id": "a"},
        {"name": "read_file", "response": {"error": "denied"}, "id": "b"}]
    assert any("order of their calls" in n.note for n in built.notes)


def _thinking_session(api: str) -> Session:
    h = Harness(cases.new_session(f"t-{api}"), ScriptedClient(api, LOOP), api,
                cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: "1", "read_file": lambda a, c: "x"},
                variables={"agent": "Ada"})
    h.session.append("turn/start")
    h.session.append("user/message", {"content": "what is it?"})
    h.step()
    return h.session


def test_gemini_thoughts_reach_gemini_only_and_other_reasoning_never_reaches_gemini() -> None:
    s = _thinking_session("gemini")
    signature = gemini_signature(LOOP[0])
    own = build("gemini", cases.request_of(s))
    assert own.body["contents"][1]["parts"][-2]["thought_signature"] == signature
    for target in ("anthropic", "openai-chat", "openai-responses"):
        built = build(target, cases.request_of(s, header=cases.THINKING_HEADER))
        validate(target, built.body)
        assert signature not in json.dumps(built.body) and "I need data" not in \
            json.dumps(built.body)
        assert any("reasoning of gemini not sent" in n.note for n in built.notes)
    other = build("gemini", cases.request_of(_thinking_session("anthropic")))
    validate("gemini", other.body)
    assert "thought" not in json.dumps(other.body)
    assert any("reasoning of anthropic not sent" in n.note for n in other.notes)


def test_deleted_reasoning_leaves_a_valid_body_without_signatures() -> None:
    s = _thinking_session("gemini")
    shredded = Session.from_events([e.replace(data=split(
        e.type, e.data, None, [DataClass.REASONING], text=DELETED_TEXT).clear)
        for e in s.events])
    built = build("gemini", cases.request_of(shredded))
    validate("gemini", built.body)
    assert "thought" not in json.dumps(built.body)
    assert [list(p) for p in built.body["contents"][1]["parts"]] == [
        ["text"], ["function_call"], ["function_call"]]


def test_each_gemini_rule_names_the_part_it_refuses() -> None:
    call = {"function_call": {"name": "f", "args": {}}}
    body = {"model": "m", "config": {"system_instruction": {"parts": [{"text": " "}]},
                                     "thinking_config": {"thinking_budget": 10,
                                                         "thinking_level": "LOW"}},
            "contents": [
                {"role": "model", "parts": [call]},
                {"role": "user", "parts": [{"text": ""}, {}]},
                {"role": "system", "parts": []},
                {"role": "user", "parts": [{"function_response": {"name": "f",
                                                                  "response": {}}}]},
                {"role": "model", "parts": [{"text": "", "thought_signature": "c2ln"}]}]}
    assert {(p.path, p.rule) for p in problems("gemini", body)} == {
        ("/config/system_instruction/parts/0", "no-empty-part"),
        ("/config/thinking_config", "thinking-config"),
        ("/contents/0", "call-after-user"),
        ("/contents/1", "responses-answer-calls"),
        ("/contents/1/parts/0/text", "no-empty-part"),
        ("/contents/1/parts/1", "no-empty-part"),
        ("/contents/2/role", "role"), ("/contents/2/parts", "non-empty"),
        ("/contents/3/parts/0", "response-after-call")}
    assert [p.rule for p in problems("gemini", {"contents": []})] == ["non-empty"]
    ids = {"model": "m", "contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"function_call": {"name": "f", "id": "a"}}]},
        {"role": "user", "parts": [{"function_response": {"name": "f", "id": "b",
                                                          "response": {}}}]}]}
    assert [p.rule for p in problems("gemini", ids)] == ["responses-answer-calls"]
    swapped = copy.deepcopy(ids)
    swapped["contents"][2]["parts"][0]["function_call"] = \
        swapped["contents"][2]["parts"][0].pop("function_response")
    assert "role-parts" in [p.rule for p in problems("gemini", swapped)]


def test_a_blocked_answer_is_a_content_filter_stop_and_an_error_body_is_named() -> None:
    blocked = {"candidates": [{"finishReason": "SAFETY", "index": 0}],
               "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 0}}
    out = parse_response("gemini", blocked)
    assert (out.stop_reason, out.provider_stop_reason, out.text) == ("content_filter",
                                                                     "SAFETY", "")
    prompt = parse_response("gemini", {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}})
    assert (prompt.stop_reason, prompt.provider_stop_reason) == ("content_filter",
                                                                 "PROHIBITED_CONTENT")
    with pytest.raises(ProviderResponseError, match="INVALID_ARGUMENT: bad"):
        parse_response("gemini", {"error": {"code": 400, "message": "bad",
                                            "status": "INVALID_ARGUMENT"}})
    with pytest.raises(ProviderResponseError, match=r"parts\[0\].function_call.name"):
        parse_response("gemini", {"candidates": [{"content": {"parts": [
            {"functionCall": {"args": {}}}]}, "finishReason": "STOP"}]})


def test_a_stream_cut_before_its_finish_records_nothing() -> None:
    chunks = render("gemini", LOOP[0], stream=True)
    s = cases.new_session("cut")
    s.append("turn/start")
    s.append("user/message", {"content": "hi"})
    before = len(s.events)
    with pytest.raises(IncompleteStream, match="before a finish_reason"):
        parse_stream("gemini", chunks[:-1])
    assert len(s.events) == before
    assert parse_stream("gemini", chunks) == parse_response("gemini", render("gemini", LOOP[0]))


def test_thoughts_count_as_output_tokens_and_are_reported_as_reasoning_tokens() -> None:
    body = render("gemini", Reply("ok"))
    body["usageMetadata"].update({"thoughtsTokenCount": 7, "cachedContentTokenCount": 40})
    assert parse_response("gemini", body).usage == {
        "input_tokens": 100, "output_tokens": 27, "reasoning_tokens": 7,
        "cached_input_tokens": 40}


# ----------------------------------------------------------------------------- import/export

def _import(body: Any) -> Any:
    return import_conversation("gemini", body, session_id="imp", clock=CountingClock(),
                               ids=SequentialIds("imp"))


def test_a_gemini_body_survives_import_then_export_unchanged() -> None:
    validate("gemini", GEMINI)
    imported = _import(GEMINI)
    assert imported.report == ()
    built, _notes = export_session("gemini", imported.events)
    assert built.body == GEMINI
    message = next(e for e in imported.events if e.type == "assistant/message")
    assert [c["call_id"] for c in message.data["tool_calls"]] == ["ssg-1-0", "ssg-1-1"]
    results = [e.data for e in imported.events if e.type == "tool/result"]
    assert [(r["call_id"], r["status"], thaw(r["content"])) for r in results] == [
        ("ssg-1-0", "ok", {"rows": 1}), ("ssg-1-1", "error", "timeout")]


def test_a_bare_list_of_contents_imports_as_its_body() -> None:
    alone = {"contents": GEMINI["contents"]}
    assert [e.data for e in _import(GEMINI["contents"]).events][1:] == [
        e.data for e in _import(alone).events][1:]


def test_a_camel_case_or_rest_layout_body_imports_as_the_same_session() -> None:
    def camel(value: Any, key: str = "") -> Any:
        if isinstance(value, dict) and key not in ("args", "output", "response"):
            return {(k if k == "parameters_json_schema" else "".join(
                w.capitalize() if i else w for i, w in enumerate(k.split("_")))):
                camel(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [camel(v, key) for v in value]
        return value

    sdk = _import(GEMINI)
    camel_case = {"model": GEMINI["model"], "contents": camel(GEMINI["contents"]),
                  "config": camel(GEMINI["config"])}
    assert camel_case["contents"][1]["parts"][1]["thoughtSignature"] == SIG1
    config = camel(GEMINI["config"])
    rest = {"model": GEMINI["model"], "contents": camel(GEMINI["contents"]),
            "systemInstruction": config.pop("systemInstruction"), "tools": config.pop("tools"),
            "safetySettings": config.pop("safetySettings"), "generationConfig": config}
    for body in (camel_case, rest):
        imported = _import(body)
        assert [e.data for e in imported.events] == [e.data for e in sdk.events]
        assert {n.note[:16] for n in imported.report} == (
            {"REST layout read"} if body is rest else set())
        built, _notes = export_session("gemini", imported.events)
        assert built.body == GEMINI  # the SDK form, whatever was read


def test_what_the_log_cannot_carry_is_reported_on_import_and_export() -> None:
    body = copy.deepcopy(GEMINI)
    body["config"]["tools"].append({"google_search": {}})
    body["contents"][0]["parts"].append({"inline_data": {"mime_type": "image/png",
                                                         "data": "iVBORw0K"}})
    body["contents"][3]["parts"].append({"executable_code": {"code": "print(1)",
                                                             "language": "PYTHON"}})
    imported = _import(body)
    assert [n.path for n in imported.report] == [
        "/contents/0/parts/2", "/contents/3/parts/1", "/config/tools/1"]
    built, notes = export_session("gemini", imported.events)
    validate("gemini", built.body)
    assert any("non-text content part serialised" in n.note for n in notes)
    _other, notes = export_session("openai-chat", imported.events)
    assert any("config" in n.path for n in notes)  # Gemini's own parameters, not carried


def test_a_field_the_reader_does_not_map_is_named_never_dropped_silently() -> None:
    body = copy.deepcopy(GEMINI)
    body["contents"][0]["x_content_extra"] = 1
    body["contents"][0]["parts"][0]["media_resolution"] = {"level": "MEDIA_RESOLUTION_LOW"}
    model = next(i for i, c in enumerate(body["contents"]) if c["role"] == "model")
    body["contents"][model]["parts"][0]["videoMetadata"] = {"fps": 1}
    body["config"]["tools"][0]["function_declarations"][0]["behavior"] = "NON_BLOCKING"
    imported = _import(body)
    named = {n.path for n in imported.report}
    assert {"/contents/0/x_content_extra", "/contents/0/parts/0/media_resolution",
            f"/contents/{model}/parts/0/videoMetadata",
            "/config/tools/0/function_declarations/0/behavior"} <= named
    assert not [n for n in _import(GEMINI).report]  # the mapped fields alone: no note


class _MalformedCall:
    """A Gemini endpoint whose model made a call Gemini could not return."""

    def create(self, body: Any) -> dict[str, Any]:
        return {"response_id": "r-bad", "model_version": "gemini-test", "candidates": [{
            "content": {"role": "model", "parts": [{"text": "Let me look that up."}]},
            "finish_reason": "MALFORMED_FUNCTION_CALL"}]}


def test_a_malformed_function_call_ends_the_turn_failed_not_completed() -> None:
    h = Harness(cases.new_session("malformed"), _MalformedCall(), "gemini",
                cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: "1 row"}, variables={"agent": "Ada"})
    result = h.turn("what is it?")
    assert result.reason == "failed" and "MALFORMED_FUNCTION_CALL" in (result.detail or "")
    (end,) = [e for e in h.session.events if e.type == "turn/end"]
    assert end.data["reason"] == "failed"
    (msg,) = [e for e in h.session.events if e.type == "assistant/message"]
    assert msg.data["content"] == "Let me look that up."  # what came is still recorded


def test_explain_provider_gemini_maps_body_paths_to_their_sources(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from sessionstream.cli.main import main
    from sessionstream.core.jsonl import write_jsonl

    path = tmp_path / "s.jsonl"
    write_jsonl(cases.manual().events, path)
    out = CliRunner().invoke(main, ["explain", "--provider", "gemini", str(path), "--json"])
    assert out.exit_code == 0, out.output
    by_path = {p["path"]: p for p in json.loads(out.output)["parts"]}
    assert by_path["/contents/2/parts/1"]["call_id"] == "c2"
    assert by_path["/contents/3/parts/1"]["seqs"] == [11]  # the error result, in call order
    assert by_path["/config/thinking_config/thinking_level"]["field"] == "reasoning_effort"
