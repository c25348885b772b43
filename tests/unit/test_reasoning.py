"""Reasoning content: recorded as its own data class, replayed only to the API that made it.

A thinking tool loop runs through the harness against a scripted server behind each
SDK's own client (``httpx`` mock transport) that enforces what the real APIs require:
Anthropic refuses a tool loop whose last assistant message does not start with the
thinking block it signed (unmodified); Responses in stateless use needs each reasoning
item it returned, with its encrypted content, before the items that followed it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import anthropic
import openai
import pytest

from sessionstream.core.events import SurfaceOp
from sessionstream.core.harness import Harness, ToolOutcome
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT, DataClass, split
from sessionstream.core.providers import build
from sessionstream.core.providers.scripted import Reply, ScriptedClient, reasoning_of, render
from sessionstream.core.session import Session
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import httpx, send, validate

THINKING = {"type": "enabled", "budget_tokens": 1024}


def _request(s: Session) -> Any:
    return cases.request_of(s, header=cases.THINKING_HEADER)
LOOP = [Reply("Let me query.", [("c1", "run_sql", {"q": "select 1"})], thinking="I need data.",
              response_id="r1"),
        Reply("", [("c2", "read_file", {"path": "a"})], thinking="Now the file.",
              response_id="r2", redacted=True),
        Reply("Done: 42.", thinking="That settles it.", response_id="r3")]


class RuleViolation(Exception):
    """What the scripted server answers with a 400 (the test sees it as the SDK's error)."""


class EnforcingServer:
    """A scripted provider that refuses what the real API refuses, then answers the script."""

    def __init__(self, api: str, replies: list[Reply]) -> None:
        self.api = api
        self.replies = iter(replies)
        self.issued: dict[str, dict[str, Any]] = {}  # call id -> the reasoning that preceded it
        self.bodies: list[dict[str, Any]] = []

    def check(self, body: dict[str, Any]) -> None:
        validate(self.api, {k: v for k, v in body.items()})
        if self.api == "anthropic":
            self._check_anthropic(body)
        else:
            self._check_responses(body)

    def _check_anthropic(self, body: dict[str, Any]) -> None:
        last = next((m for m in reversed(body["messages"]) if m["role"] == "assistant"), None)
        if body.get("thinking", {}).get("type") != "enabled" or last is None:
            return
        uses = [b for b in last["content"] if b["type"] == "tool_use"]
        if not uses:
            return
        first = last["content"][0]
        if first["type"] not in ("thinking", "redacted_thinking"):
            raise RuleViolation("When `thinking` is enabled, a final `assistant` message must "
                                f"start with a thinking block (found `{first['type']}`)")
        if first != self.issued.get(uses[0]["id"]):
            raise RuleViolation("thinking block was modified: signature does not verify")

    def _check_responses(self, body: dict[str, Any]) -> None:
        if body.get("store") is not False:
            raise RuleViolation("this test runs stateless: store must be false")
        items = body["input"]
        for i, item in enumerate(items):
            if item["type"] == "reasoning":
                following = items[i + 1] if i + 1 < len(items) else None
                if following is None or following["type"] == "reasoning":
                    raise RuleViolation(f"Item '{item['id']}' of type 'reasoning' was provided "
                                        "without its required following item")
                if not item.get("encrypted_content"):
                    raise RuleViolation(f"Item with id '{item['id']}' not found: items are not "
                                        "persisted when store is false")
            if item["type"] == "function_call" and item["call_id"] in self.issued:
                before = [x for x in items[:i] if x["type"] == "reasoning"]
                want = self.issued[item["call_id"]]
                if not before or {k: before[-1].get(k) for k in want} != want:
                    raise RuleViolation(f"function_call {item['call_id']} without the "
                                        "reasoning item that preceded it")

    def reply(self, body: dict[str, Any]) -> Any:
        self.bodies.append(body)
        self.check(body)
        r = next(self.replies)
        if self.api == "anthropic":
            block = render(self.api, r)["content"][0]
            for cid, _n, _a in r.tool_calls:
                self.issued[cid] = block
        elif "reasoning.encrypted_content" in (body.get("include") or ()):
            item = reasoning_of(r)
            for cid, _n, _a in r.tool_calls:
                self.issued[cid] = {"id": item["id"],
                                    "encrypted_content": item["encrypted_content"]}
        return render(self.api, r, stream=body.get("stream") is True)

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        try:
            out = self.reply(body)
        except RuleViolation as exc:
            return httpx.Response(400, json={"type": "error", "error": {
                "type": "invalid_request_error", "message": str(exc)}})
        if isinstance(out, list):
            lines = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in out]
            return httpx.Response(200, content="".join(lines).encode(),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=out)


class SdkClient:
    """The harness's provider port over the official SDK client (as examples/harness.py)."""

    def __init__(self, api: str, server: EnforcingServer) -> None:
        http = httpx.Client(transport=httpx.MockTransport(server.handler))
        self.api = api
        if api == "anthropic":
            self.sdk: Any = anthropic.Anthropic(api_key="k", base_url="http://provider.test",
                                                http_client=http, max_retries=0)
        else:
            self.sdk = openai.OpenAI(api_key="k", base_url="http://provider.test/v1",
                                     http_client=http, max_retries=0)

    def create(self, body: dict[str, Any]) -> Any:
        call = self.sdk.messages.create if self.api == "anthropic" else self.sdk.responses.create
        result = call(**body)
        if body.get("stream"):
            return (e.model_dump(mode="json") for e in result)
        return result.model_dump(mode="json")


def _harness(api: str, server: EnforcingServer, stream: bool, **options: Any) -> Harness:
    return Harness(cases.new_session(f"think-{api}"), SdkClient(api, server), api,
                   cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                   tools={"run_sql": lambda a, c: ToolOutcome("1 row"),
                          "read_file": lambda a, c: "x"},
                   variables={"agent": "Ada"}, stream=stream, options=options)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_a_thinking_tool_loop_runs_through_the_harness(api: str, stream: bool) -> None:
    server = EnforcingServer(api, LOOP)
    options = {"thinking": THINKING} if api == "anthropic" else {"stateless": True}
    h = _harness(api, server, stream, **options)
    result = h.turn("what is it?")
    assert result.reason == "completed" and len(result.steps) == 3
    messages = [e for e in h.session.events if e.type == "assistant/message"]
    recorded = [thaw(m.data["reasoning"]) for m in messages]
    if api == "anthropic":
        assert recorded[0] == [{"api": api, "type": "thinking", "thinking": "I need data.",
                                "signature": LOOP[0].signature}]
        assert recorded[1] == [{"api": api, "type": "redacted_thinking",
                                "data": "redacted_" + LOOP[1].signature}]
        # every request of the loop kept thinking on, its last round signed
        assert all(b["thinking"] == THINKING for b in server.bodies)
        assert server.bodies[2]["messages"][-2]["content"][0]["type"] == "redacted_thinking"
    else:
        assert [r[0]["encrypted_content"] for r in recorded] == [
            "enc_" + r.signature for r in LOOP]
        assert [i["type"] for i in server.bodies[2]["input"]][1:] == [
            "reasoning", "message", "function_call", "function_call_output",
            "reasoning", "function_call", "function_call_output"]
    assert all("omitted_output" not in m.data for m in messages)


def test_the_server_refuses_a_loop_without_the_replayed_thinking() -> None:
    """The enforcing server is not a pushover: a loop that drops the thinking is refused."""
    server = EnforcingServer("anthropic", LOOP)
    h = _harness("anthropic", server, False)  # thinking set by the client, not the builder
    original = h.request
    h.request = lambda: dataclasses.replace(original(), reasoning=())  # type: ignore[method-assign]
    sdk_create = h.client.create
    h.client.create = lambda body: sdk_create({**body, "thinking": THINKING})  # type: ignore
    with pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        h.turn("what is it?")


def _thinking_session(api: str) -> Session:
    h = Harness(cases.new_session(f"s-{api}"), ScriptedClient(api, LOOP), api,
                cases.THINKING_HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: "1", "read_file": lambda a, c: "x"},
                variables={"agent": "Ada"})
    h.session.append("turn/start")
    h.session.append("user/message", {"content": "what is it?"})
    h.step()  # thinking, a call, its result: the round is open for the next request
    return h.session


def test_reasoning_is_not_shown_to_another_api_and_the_note_says_so() -> None:
    for source, target in [("anthropic", "openai-responses"), ("anthropic", "openai-chat"),
                           ("openai-responses", "anthropic")]:
        s = _thinking_session(source)
        built = build(target, _request(s))
        validate(target, built.body)
        text = json.dumps(built.body)
        assert "I need data." not in text and LOOP[0].signature not in text
        assert any(f"reasoning of {source} not sent" in n.note for n in built.notes)


def test_reasoning_is_sealed_in_its_own_class() -> None:
    s = _thinking_session("anthropic")
    msg = next(e for e in s.events if e.type == "assistant/message")
    parts = {p.data_class: p for p in split(msg.type, msg.data).parts}
    assert parts[DataClass.REASONING].paths == ("/reasoning",)
    assert LOOP[0].signature in json.dumps(list(parts[DataClass.REASONING].values))
    assert LOOP[0].signature not in json.dumps(parts[DataClass.SURFACE].values)


def _with_reasoning_deleted(s: Session) -> Session:
    events = [e.replace(data=split(e.type, e.data, None, [DataClass.REASONING],
                                   text=DELETED_TEXT).clear) for e in s.events]
    return Session.from_events(events)


def test_deleted_reasoning_turns_thinking_off_for_the_open_round_with_a_note() -> None:
    s = _thinking_session("anthropic")
    whole = build("anthropic", _request(s), thinking=THINKING)
    assert whole.body["thinking"] == THINKING
    assert whole.body["messages"][-2]["content"][0]["signature"] == LOOP[0].signature
    shredded = _with_reasoning_deleted(s)
    built = build("anthropic", _request(shredded), thinking=THINKING)
    validate("anthropic", built.body)
    assert "thinking" not in built.body
    assert any("thinking turned off" in n.note for n in built.notes)
    assert [b["type"] for b in built.body["messages"][-2]["content"]] == ["text", "tool_use"]


def test_a_compacted_message_takes_its_reasoning_with_it() -> None:
    s = _thinking_session("openai-responses")
    s.append("turn/end", {"reason": "completed"})
    before = build("openai-responses", _request(s), stateless=True)
    assert [i["id"] for i in before.body["input"] if i["type"] == "reasoning"] == ["rs_r1"]
    seqs = [e.seq for e in s.events if e.surface_op is not SurfaceOp.NONE]
    s.append("compaction/start", {"compaction_id": "k1", "trigger": "manual"})
    s.append("compaction/summary", {
        "compaction_id": "k1", "first_position": 0, "last_position": len(seqs) - 1,
        "shadowed_seqs": seqs, "tokens_before": 900, "tokens_after": 10,
        "summarizer": {"provider": "p", "model": "m", "config": {}}})
    s.append("user/message", {"content": "summary: it queried"}, surface_op="replace",
             source_event_seqs=seqs)
    s.append("compaction/end", {"compaction_id": "k1", "outcome": "completed"})
    built = build("openai-responses", _request(s), stateless=True)
    assert not [i for i in built.body["input"] if i["type"] == "reasoning"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_scripted_reasoning_parses_through_the_sdk(api: str, stream: bool) -> None:
    """The scripted server's reasoning shapes are the SDK's (its models parse them)."""
    body = build(api, _request(_thinking_session(api)), stream=stream).body
    _sent, parsed = send(api, body, render(api, LOOP[0], stream=stream))
    kinds = json.dumps(parsed)
    assert ("signature_delta" in kinds or LOOP[0].signature in kinds) if api == "anthropic" \
        else "enc_" + LOOP[0].signature in kinds

