"""Provider bodies kept as the model and the caller gave them (issue 34): interleaved
thinking in its place through the log, the live loop, compaction and export; a Responses
refusal kept with its id; Gemini bodies type-checked by their field tables; explain names
a source for every part of an exported body; and every hand-written body of the fixtures
comes back from import → export exactly, or with each difference named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
from click.testing import CliRunner

from examples.harness import GeminiClient
from sessionstream.cli.main import main
from sessionstream.core.events import CountingClock, SequentialIds, SurfaceOp
from sessionstream.core.harness import Harness
from sessionstream.core.jsonl import write_jsonl
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT, DataClass, split
from sessionstream.core.providers import build, parse_response
from sessionstream.core.providers.convert import export_session, import_conversation
from sessionstream.core.providers.errors import FieldTypeError, ProviderResponseError
from sessionstream.core.providers.rules import BodyRefused, problems
from sessionstream.core.providers.scripted import Reply, ScriptedClient, render
from sessionstream.core.session import Session
from tests.fixtures.bodies import ALL, FULL, INTERLEAVED, REFUSAL, SIG
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import gemini_client, httpx, validate


def _import(api: str, body: Any) -> Any:
    return import_conversation(api, body, session_id="imp", clock=CountingClock(),
                               ids=SequentialIds("imp"))


def _round_trip(api: str, body: Any) -> tuple[dict[str, Any], list[Any], list[Any]]:
    imp = _import(api, body)
    built, notes = export_session(api, list(imp.events))
    return built.body, list(imp.report), list(notes)


def _diff(a: Any, b: Any, path: str = "") -> set[str]:
    """JSON pointers where ``a`` and ``b`` differ (the shallowest differing ones)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {p for k in a.keys() | b.keys() for p in _diff(a.get(k), b.get(k),
                                                                f"{path}/{k}")}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {p for i, (x, y) in enumerate(zip(a, b, strict=True))
                for p in _diff(x, y, f"{path}/{i}")}
    return set() if a == b else {path}


# ------------------------------------------------------------------ interleaved thinking


@pytest.mark.parametrize("api", sorted(INTERLEAVED))
def test_interleaved_reasoning_is_imported_in_its_place_and_exported_exactly(api: str) -> None:
    body = INTERLEAVED[api]
    validate(api, body)
    again, report, _notes = _round_trip(api, body)
    assert report == []  # nothing dropped, nothing moved
    assert again == body
    validate(api, again)
    assert problems(api, again) == []


def test_the_open_tool_round_keeps_anthropic_s_sequence_block_for_block() -> None:
    body = INTERLEAVED["anthropic"]
    events = list(_import("anthropic", body).events)
    message = [e for e in events if e.type == "assistant/message"][-1]
    assert list(message.data["blocks"]) == ["reasoning", "text", "reasoning", "call",
                                            "reasoning", "call", "text"]
    assert [r["type"] for r in message.data["reasoning"]] == [
        "thinking", "redacted_thinking", "thinking"]
    built, _notes = export_session("anthropic", events)
    assert built.body["thinking"] == body["thinking"]  # not turned off: the round is signed
    assert built.body["messages"][-2] == body["messages"][-2]


class ExactServer:
    """A scripted provider behind the SDK's client that refuses an assistant turn sent
    back other than exactly as it answered it (Anthropic: "echo the assistant message
    exactly as received"; Gemini: the model content with its thoughts and signatures)."""

    def __init__(self, api: str, replies: list[Reply]) -> None:
        self.api = api
        self.replies = iter(replies)
        self.issued: list[list[dict[str, Any]]] = []  # the content of each answer given
        self.bodies: list[dict[str, Any]] = []

    @staticmethod
    def _clean(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in b.items() if v is not None} for b in blocks]

    def _sent_back(self, body: dict[str, Any]) -> list[list[dict[str, Any]]]:
        if self.api == "anthropic":
            return [self._clean(m["content"]) for m in body["messages"]
                    if m["role"] == "assistant"]
        return [c["parts"] for c in body["contents"] if c["role"] == "model"]

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        if self._sent_back(body) != self.issued:
            error = "the assistant turn was not sent back exactly as received"
            if self.api == "anthropic":
                return httpx.Response(400, json={"type": "error", "error": {
                    "type": "invalid_request_error", "message": error}})
            return httpx.Response(400, json={"error": {"code": 400, "message": error,
                                                       "status": "INVALID_ARGUMENT"}})
        reply = next(self.replies)
        whole = render(self.api, reply)
        self.issued.append(self._clean(whole["content"]) if self.api == "anthropic"
                           else whole["candidates"][0]["content"]["parts"])
        stream = body.get("stream") is True or "streamGenerateContent" in request.url.path
        out = render(self.api, reply, stream=stream)
        if not stream:
            return httpx.Response(200, json=out)
        if self.api == "anthropic":
            text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in out)
        else:
            text = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in out)
        return httpx.Response(200, content=text.encode(),
                              headers={"content-type": "text/event-stream"})

    def client(self) -> Any:
        http = httpx.Client(transport=httpx.MockTransport(self.handler))
        if self.api == "gemini":
            return GeminiClient(gemini_client(self.handler))
        sdk = anthropic.Anthropic(api_key="k", base_url="http://provider.test",
                                  http_client=http, max_retries=0)

        class Client:
            def create(self, body: dict[str, Any]) -> Any:
                result = sdk.messages.create(**body)
                if body.get("stream"):
                    return (e.model_dump(mode="json") for e in result)
                return result.model_dump(mode="json")

        return Client()


INTERLEAVED_LOOP = [
    Reply("Checking Oslo.", [("c1", "run_sql", {"q": "oslo"})], thinking="Oslo first.",
          interleaved="Use the tool.", response_id="r1"),
    Reply("Oslo: rain.", [("c2", "run_sql", {"q": "bergen"}), ("c3", "read_file",
                                                                {"path": "north"})],
          thinking="Two left.", interleaved="Both at once.", response_id="r2"),
    Reply("Rain, sun and snow.", thinking="Done.", interleaved="Say it short.",
          response_id="r3"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["anthropic", "gemini"])
def test_the_live_loop_sends_an_interleaved_turn_back_exactly_as_received(
        api: str, stream: bool) -> None:
    server = ExactServer(api, INTERLEAVED_LOOP)
    options = {"thinking": {"type": "enabled", "budget_tokens": 1024}} \
        if api == "anthropic" else {}
    h = Harness(cases.new_session(f"live-{api}"), server.client(), api,
                cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: "1 row", "read_file": lambda a, c: "x"},
                variables={"agent": "Ada"}, stream=stream, options=options)
    result = h.turn("weather?")
    assert result.reason == "completed" and len(result.steps) == 3
    messages = [e.data for e in h.session.events if e.type == "assistant/message"]
    assert [list(m["blocks"]) for m in messages] == [
        ["reasoning", "text", "reasoning", "call"],
        ["reasoning", "text", "reasoning", "call", "call"],
        ["reasoning", "text", "reasoning"]]
    assert len(server.bodies) == 3 and len(server.issued) == 3


def _interleaved_session(api: str) -> Session:
    replies = [INTERLEAVED_LOOP[0], INTERLEAVED_LOOP[2], INTERLEAVED_LOOP[1]]
    h = Harness(cases.new_session(f"s-{api}"), ScriptedClient(api, replies), api,
                cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: "1", "read_file": lambda a, c: "x"},
                variables={"agent": "Ada"})
    h.turn("first")
    h.session.append("turn/start")
    h.session.append("user/message", {"content": "again"})
    h.step()  # an interleaved answer with calls: its round is open for the next request
    return h.session


def _assistant_kinds(api: str, body: dict[str, Any]) -> list[list[str]]:
    if api == "anthropic":
        kind = {"thinking": "reasoning", "redacted_thinking": "reasoning", "text": "text",
                "tool_use": "call"}
        return [[kind[b["type"]] for b in m["content"]] for m in body["messages"]
                if m["role"] == "assistant"]
    return [["call" if "function_call" in p else "reasoning" if p.get("thought") else "text"
             for p in c["parts"]] for c in body["contents"] if c["role"] == "model"]


@pytest.mark.parametrize("api", ["anthropic", "gemini"])
def test_compaction_keeps_the_order_of_the_messages_it_leaves_on_the_surface(api: str) -> None:
    s = _interleaved_session(api)
    before = build(api, cases.request_of(s, header=cases.THINKING_HEADER))
    assert _assistant_kinds(api, before.body)[-1] == ["reasoning", "text", "reasoning",
                                                      "call", "call"]
    first_turn = [e.seq for e in s.events if e.surface_op is not SurfaceOp.NONE
                  and e.seq < next(e.seq for e in s.events if e.type == "turn/end")]
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "manual"})
    s.append("compaction/summary", {
        "compaction_id": "k1", "first_position": 0, "last_position": len(first_turn) - 1,
        "shadowed_seqs": first_turn, "tokens_before": 900, "tokens_after": 10,
        "summarizer": {"provider": "p", "model": "m", "config": {}}})
    s.append("user/message", {"content": "summary: it checked the weather"},
             surface_op="replace", source_event_seqs=first_turn)
    s.append("compaction/end", {"compaction_id": "k1", "outcome": "completed"})
    after = build(api, cases.request_of(s, header=cases.THINKING_HEADER))
    validate(api, after.body)
    assert _assistant_kinds(api, after.body) == [["reasoning", "text", "reasoning", "call",
                                                  "call"]]
    assert _assistant_kinds(api, after.body)[-1] == _assistant_kinds(api, before.body)[-1]


@pytest.mark.parametrize("api", ["anthropic", "gemini"])
def test_deleted_reasoning_leaves_the_text_and_calls_in_their_order(api: str) -> None:
    s = _interleaved_session(api)
    shredded = Session.from_events([e.replace(data=split(
        e.type, e.data, None, [DataClass.REASONING], text=DELETED_TEXT).clear)
        for e in s.events])
    options = {"thinking": {"type": "enabled", "budget_tokens": 1024}} \
        if api == "anthropic" else {}
    built = build(api, cases.request_of(shredded, header=cases.THINKING_HEADER), **options)
    validate(api, built.body)
    assert problems(api, built.body) == []
    assert _assistant_kinds(api, built.body)[-1] == ["text", "call", "call"]
    if api == "anthropic":
        assert "thinking" not in built.body
        assert any("thinking turned off" in n.note for n in built.notes)


def test_an_api_without_a_place_for_the_order_says_it_did_not_keep_it() -> None:
    events = list(_import("anthropic", INTERLEAVED["anthropic"]).events)
    for api in ("openai-chat", "openai-responses"):
        built, notes = export_session(api, events)
        validate(api, built.body)
        assert any("block order of the assistant message not kept" in n.note for n in notes)
    gemini, notes = export_session("gemini", events)  # text after a call: Gemini keeps it
    assert _assistant_kinds("gemini", gemini.body)[-1] == ["text", "call", "call", "text"]
    assert not any("block order" in n.note for n in notes)


def test_the_docs_no_longer_say_thinking_is_replayed_first() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "harness.md").read_text()
    assert "replayed with every\nthinking block first" not in text
    assert "exactly as received" in text


# ---------------------------------------------------------------- Responses refusal


def test_a_responses_refusal_kept_with_its_id_exports_as_the_refusal_it_was() -> None:
    validate("openai-responses", REFUSAL)
    again, _report, _notes = _round_trip("openai-responses", REFUSAL)
    validate("openai-responses", again)
    assert again == REFUSAL
    events = list(_import("openai-responses", REFUSAL).events)
    other, _notes = export_session("anthropic", events)  # another API: sent as the content
    validate("anthropic", other.body)
    assert other.body["messages"][1]["content"] == [{"type": "text",
                                                    "text": "I can't do that."}]


def test_a_responses_message_with_an_id_and_text_content_goes_as_an_output_message() -> None:
    body = {"model": "m", "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "a", "annotations": []},
                     {"type": "refusal", "refusal": "but not that"}]}]}
    validate("openai-responses", body)
    again, _report, _notes = _round_trip("openai-responses", body)
    validate("openai-responses", again)
    assert again == body


# ------------------------------------------------------------------- Gemini type checks

_MODEL_PART = "/contents/1/parts/0"


def _gemini_with(change: Any) -> dict[str, Any]:
    body = copy.deepcopy(FULL["gemini"])
    change(body)
    return body


GEMINI_BAD = [
    ("thought_signature 5", lambda b: b["contents"][1]["parts"][0].update(
        thought_signature=5), f"{_MODEL_PART}/thought_signature", "got integer"),
    ("signature not base64", lambda b: b["contents"][1]["parts"][0].update(
        thought_signature="not base64!"), f"{_MODEL_PART}/thought_signature",
     "got text that is not base64"),
    ("thought 'yes'", lambda b: b["contents"][1]["parts"][0].update(thought="yes"),
     f"{_MODEL_PART}/thought", "got string"),
    ("model 5", lambda b: b.update(model=5), "/model", "got integer"),
    ("temperature 'hot'", lambda b: b["config"].update(temperature="hot"),
     "/config/temperature", "got string"),
    ("thinking_budget 'lots'", lambda b: b["config"]["thinking_config"].update(
        thinking_budget="lots"), "/config/thinking_config/thinking_budget", "got string"),
    ("max_output_tokens '1'", lambda b: b["config"].update(max_output_tokens="1"),
     "/config/max_output_tokens", "got string"),
    ("a camelCase REST field", lambda b: b.update(generationConfig={"topK": "many"}),
     "/generationConfig/topK", "got string"),
    ("a call's args", lambda b: b["contents"][1]["parts"][1]["function_call"].update(
        args="{}"), "/contents/1/parts/1/function_call/args", "got string"),
    ("a response that is text", lambda b: b["contents"][2]["parts"][0][
        "function_response"].update(response="rain"),
     "/contents/2/parts/0/function_response/response", "got string"),
]


@pytest.mark.parametrize(("change", "pointer", "got"), [c[1:] for c in GEMINI_BAD],
                         ids=[c[0] for c in GEMINI_BAD])
def test_a_gemini_field_of_the_wrong_kind_is_a_named_error(change: Any, pointer: str,
                                                            got: str) -> None:
    with pytest.raises(FieldTypeError) as info:
        _import("gemini", _gemini_with(change))
    assert info.value.path == pointer
    assert f"at {pointer}: expected" in str(info.value) and got in str(info.value)


def test_a_bad_gemini_field_exits_2_on_the_command_line(tmp_path: Path) -> None:
    src = tmp_path / "body.json"
    src.write_text(json.dumps(_gemini_with(lambda b: b["config"].update(temperature="hot"))))
    out = CliRunner().invoke(main, ["log", "import", "--from", "gemini", str(src),
                                    "-o", str(tmp_path / "s.jsonl")])
    assert out.exit_code == 2, out.output
    assert "at /config/temperature: expected number or null, got string" in out.output
    assert "Traceback" not in out.output and not (tmp_path / "s.jsonl").exists()


def test_an_unpadded_signature_is_written_canonically_and_noted() -> None:
    body = _gemini_with(lambda b: b["contents"][1]["parts"][0].update(
        thought_signature=SIG.rstrip("=")))
    again, report, _notes = _round_trip("gemini", body)
    validate("gemini", again)
    assert again == FULL["gemini"]  # the same bytes, as the SDK writes them
    assert [n.path for n in report] == [f"{_MODEL_PART}/thought_signature"]


def test_a_gemini_message_of_calls_only_notes_no_text_part_that_never_existed() -> None:
    s = cases.manual()  # its first assistant message has tool calls and no text
    built, notes = export_session("gemini", s.events)
    validate("gemini", built.body)
    assert not [n for n in notes if "text part omitted" in n.note]


# --------------------------------------------------------------------- smaller losses


def test_a_chat_system_content_of_strings_is_a_named_error_not_an_empty_prompt() -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": ["Be", "brief"]},
                                       {"role": "user", "content": "hi"}]}
    with pytest.raises(FieldTypeError) as info:
        _import("openai-chat", body)
    assert info.value.path == "/messages/0/content/0"


def test_a_system_part_without_text_is_noted() -> None:
    body = {"model": "m", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."},
                                       {"type": "image_url", "image_url": {"url": "u"}}]},
        {"role": "user", "content": "hi"}]}
    assert "/messages/0/content/1" in {n.path for n in _import("openai-chat", body).report}


def test_a_reasoning_summary_text_that_is_not_text_is_a_named_error() -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                                                             "text": 1}]}
    body = {"model": "m", "input": [{"type": "message", "role": "user", "content": "hi"},
                                    item, {"type": "message", "role": "assistant",
                                           "content": "ok"}]}
    with pytest.raises(FieldTypeError) as info:
        _import("openai-responses", body)
    assert info.value.path == "/input/1/summary/0/text"
    response = render("openai-responses", Reply("ok", thinking="hm"))
    response["output"][0]["summary"][0]["text"] = 1
    with pytest.raises(ProviderResponseError, match=r"summary\[0\].text"):
        parse_response("openai-responses", response)


def _leaves(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in _leaves(v, f"{path}/{k}")]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in _leaves(v, f"{path}/{i}")]
    return [path]


@pytest.mark.parametrize("api", sorted(FULL))
def test_explain_names_a_source_for_every_part_of_an_exported_body(api: str,
                                                                   tmp_path: Path) -> None:
    body = {**copy.deepcopy(FULL[api]), "x_unknown_param": {"a": 1}}
    if api == "openai-responses":
        body["tools"].insert(0, {"type": "web_search"})
    log = tmp_path / "s.jsonl"
    write_jsonl(_import(api, body).events, log)
    out = CliRunner().invoke(main, ["explain", "--provider", api, str(log), "--json"])
    assert out.exit_code == 0, out.output
    paths = [p["path"] for p in json.loads(out.output)["parts"]]
    exported, _notes = export_session(api, list(_import(api, body).events))
    assert exported.body == body
    for leaf in _leaves(exported.body):
        assert any(leaf == p or leaf.startswith(p + "/") for p in paths), f"{leaf}: no source"
    sources = {p["path"]: p for p in json.loads(out.output)["parts"]}
    assert sources["/x_unknown_param"]["part"] == "imported"
    kept = {"openai-chat": ["/temperature", "/stream_options", "/metadata", "/store"],
            "openai-responses": ["/store", "/include", "/temperature", "/reasoning/summary",
                                 "/tools/0"],
            "anthropic": ["/stop_sequences", "/metadata", "/stream"],
            "gemini": ["/config/top_k", "/config/temperature", "/stream"]}[api]
    for path in kept:
        assert sources[path]["part"] == "imported", path


@pytest.mark.parametrize(("api", "pointer"), [("anthropic", "/messages/0/content"),
                                              ("gemini", "/contents/0/parts")])
def test_a_whitespace_only_first_message_is_refused_naming_its_pointer(api: str,
                                                                       pointer: str) -> None:
    s = cases.new_session("blank")
    s.append("turn/start")
    s.append("user/message", {"content": "  \n "})
    with pytest.raises(BodyRefused) as info:
        build(api, cases.request_of(s))
    assert [(p.path, p.rule) for p in info.value.problems] == [(pointer, "no-blank-text")]
    assert "seq 2" in str(info.value) and "after turn/start" not in str(info.value)


def test_a_json_null_is_called_null_in_messages() -> None:
    with pytest.raises(ProviderResponseError, match="expected a list, got null"):
        parse_response("anthropic", {"content": None})
    with pytest.raises(ProviderResponseError, match="expected a response object, got null"):
        parse_response("anthropic", None)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="got null") as info:
        _import("openai-chat", None)
    assert "NoneType" not in str(info.value)


# ------------------------------------------------------------------------- fidelity


def _normal_form(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the equivalent forms an export writes (docs/harness.md: "Some forms
    are normalised, with the same meaning and no note")."""
    out = copy.deepcopy(body)
    if api == "anthropic":
        if isinstance(out.get("system"), str):
            out["system"] = [{"type": "text", "text": out["system"]}]
        for m in out["messages"]:
            if isinstance(m["content"], str):
                m["content"] = [{"type": "text", "text": m["content"]}]
    return out


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_hand_written_body_comes_back_exactly_or_with_each_change_named(
        name: str) -> None:
    api, body = ALL[name]
    again, report, notes = _round_trip(api, body)
    named = {n.path for n in [*report, *notes] if n.path}
    for changed in _diff(_normal_form(api, body), again):
        assert any(changed == r or changed.startswith(r + "/") or r.startswith(changed + "/")
                   for r in named), f"{name}: {changed} changed without a note"
    validate(api, again)
    assert problems(api, again) == []


def test_the_fidelity_test_is_not_a_pushover() -> None:
    """A change nobody names fails it: the first check of the test above, by hand."""
    api, body = ALL["interleaved-anthropic"]
    again, report, notes = _round_trip(api, body)
    again["messages"][1]["content"].reverse()
    named = {n.path for n in [*report, *notes] if n.path}
    assert [c for c in _diff(body, again)
            if not any(c == r or c.startswith(r + "/") for r in named)]


def test_a_thought_of_the_fixture_s_gemini_body_keeps_its_place_in_the_log() -> None:
    events = list(_import("gemini", INTERLEAVED["gemini"]).events)
    messages = [e.data for e in events if e.type == "assistant/message"]
    assert [list(m.get("blocks", ())) for m in messages] == [
        ["text", "reasoning", "call", "reasoning", "call"], ["text", "reasoning", "text"]]
    assert thaw(messages[1]["reasoning"])[0] == {
        "api": "gemini", "type": "signature", "anchor": "text", "index": 0,
        "thought_signature": INTERLEAVED["gemini"]["contents"][3]["parts"][0][
            "thought_signature"]}
