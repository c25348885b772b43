"""The harness loop: model steps through the builders and recorders, tools flushed first."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessionstream.core.events import Draft, Event
from sessionstream.core.harness import Harness, ToolContext, ToolOutcome
from sessionstream.core.providers import APIS
from sessionstream.core.providers.errors import IncompleteStream, StreamInterrupted
from sessionstream.core.providers.scripted import Reply, ScriptedClient, render
from sessionstream.core.session import Session
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import validate


class FlushingLog:
    """A Session with a flush barrier that remembers how far each flush reached."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.flushed_upto = 0
        self.flushes = 0

    def append(self, draft: Draft) -> Event:
        return self.session.append(draft)

    def flush(self, timeout: float) -> None:
        self.flushes += 1
        self.flushed_upto = len(self.session.events)


def _harness(log: Any, replies: list[Reply], api: str = "openai-chat", *,
             stream: bool = False, tools: dict[str, Any] | None = None) -> Harness:
    return Harness(log, ScriptedClient(api, replies), api, cases.HEADER, cases.registry(),
                   tools=tools if tools is not None else {}, providers=[cases.TOOLS],
                   variables={"agent": "Ada"}, stream=stream)


PARALLEL = [Reply("Looking.", [("c1", "run_sql", {"q": "a"}), ("c2", "read_file", {"path": "x"})]),
            Reply("Both done.")]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_turn_runs_tools_and_every_request_body_is_valid(api: str, stream: bool) -> None:
    log = FlushingLog(cases.new_session("h"))
    seen: list[str] = []

    def sql(args: Any, ctx: ToolContext) -> ToolOutcome:
        seen.append(ctx.call_id)
        return ToolOutcome("2 rows", operation_id="op-sql-1")

    h = _harness(log, PARALLEL, api, stream=stream,
                 tools={"run_sql": sql, "read_file": lambda a, c: {"lines": 3}})
    result = h.turn("count it")
    assert result.reason == "completed" and len(result.steps) == 2
    assert seen == ["c1"]
    for body in h.client.bodies:  # type: ignore[attr-defined]
        validate(api, body)
    types = [e.type for e in log.session.events]
    assert types.count("tool/result") == 2 and types[-1] == "turn/end"
    assert ("assistant/chunk" in types) is stream
    second = h.client.bodies[1]  # type: ignore[attr-defined]
    # a JSON result is JSON text in the other formats; Gemini's response takes the object
    lines = "{'output': {'lines': 3}}" if api == "gemini" else '{"lines":3}'
    assert "2 rows" in str(second) and lines in str(second)


def test_each_tool_call_is_flushed_before_the_tool_runs() -> None:
    log = FlushingLog(cases.new_session("h"))
    at_run: list[tuple[int, int]] = []

    def tool(args: Any, ctx: ToolContext) -> str:
        call_seq = next(e.seq for e in log.session.events if e.type == "tool/call"
                        and e.data["call_id"] == ctx.call_id)
        at_run.append((call_seq, log.flushed_upto))
        return "ok"

    _harness(log, PARALLEL, tools={"run_sql": tool, "read_file": tool}).turn("go")
    assert len(at_run) == 2
    assert all(flushed > seq for seq, flushed in at_run)


def test_results_carry_operation_ids_and_calls_idempotency_keys() -> None:
    s = cases.new_session("idem")
    _harness(s, PARALLEL, tools={"run_sql": lambda a, c: ToolOutcome("x", operation_id="op-9"),
                                 "read_file": lambda a, c: "y"}).turn("go")
    calls = {e.data["call_id"]: e.data for e in s.events if e.type == "tool/call"}
    results = {e.data["call_id"]: e.data for e in s.events if e.type == "tool/result"}
    assert calls["c1"]["idempotency_key"] == "idem/c1"
    assert results["c1"]["operation_id"] == "op-9"
    assert results["c2"]["operation_id"] == "idem/c2"  # the key when the tool names none


def test_an_unknown_tool_and_a_raising_tool_become_error_results() -> None:
    s = cases.new_session("err")

    def boom(args: Any, ctx: ToolContext) -> str:
        raise RuntimeError("disk full")

    _harness(s, PARALLEL, tools={"run_sql": boom}).turn("go")
    results = {e.data["call_id"]: e.data for e in s.events if e.type == "tool/result"}
    assert results["c1"]["status"] == "error" and "disk full" in results["c1"]["content"]
    assert results["c2"]["status"] == "error" and "no tool named" in results["c2"]["content"]


def test_a_truncated_answer_ends_the_turn_failed_and_runs_nothing() -> None:
    s = cases.new_session("trunc")
    ran: list[str] = []
    r = _harness(s, [Reply("x", [("t1", "run_sql", {"q": "long"})], stop="max_tokens")],
                 tools={"run_sql": lambda a, c: ran.append("run") or "x"}).turn("go")
    assert r.reason == "failed" and ran == []
    assert not [e for e in s.events if e.type == "tool/call"]


def test_a_refusal_ends_the_turn_refused() -> None:
    s = cases.new_session("ref")
    r = _harness(s, [Reply(refusal="No.", stop="refusal")]).turn("do it")
    assert r.reason == "refused"
    assert s.events[-1].data == {"reason": "refused"}


def test_a_stream_cut_mid_tool_call_ends_the_turn_failed_with_nothing_recorded() -> None:
    class CutClient:
        def create(self, body: Any) -> Any:
            events = render("anthropic", PARALLEL[0], stream=True)
            cut = next(i for i, e in enumerate(events) if e.get("delta", {}).get("type")
                       == "input_json_delta")
            return iter(events[:cut + 1])

    s = cases.new_session("cut")
    h = Harness(s, CutClient(), "anthropic", cases.HEADER, cases.registry(),
                variables={"agent": "Ada"}, stream=True)
    with pytest.raises(IncompleteStream):
        h.turn("go")
    types = [e.type for e in s.events]
    assert "assistant/message" not in types and "request/header" not in types
    assert s.events[-1].type == "turn/end" and s.events[-1].data["reason"] == "failed"


def test_the_step_limit_ends_the_turn_failed() -> None:
    s = cases.new_session("loop")
    replies = [Reply("", [(f"l{i}", "read_file", {"path": "x"})]) for i in range(3)]
    h = _harness(s, replies, tools={"read_file": lambda a, c: "again"})
    h.max_steps = 2
    r = h.turn("go")
    assert r.reason == "failed" and "step limit" in (r.detail or "")


def test_a_harness_can_run_the_calls_itself_and_a_result_for_an_unknown_call_is_refused(
) -> None:
    from sessionstream.core.providers.errors import ToolResultError

    s = cases.new_session("ext")
    h = _harness(s, PARALLEL)
    s.append("turn/start")
    s.append("user/message", {"content": "go"})
    h.step(run_tools=False)
    before = len(s.events)
    with pytest.raises(ToolResultError, match="no unanswered call 'zz'"):
        h.record_result("zz", "made up")
    with pytest.raises(ToolResultError, match="never started"):
        h.record_result("c1", "too early")
    assert len(s.events) == before  # nothing invalid recorded
    ctx = h.start_tool("c1")
    assert ctx.idempotency_key == "ext/c1"
    h.record_result("c1", ToolOutcome({"rows": 2}, operation_id="op-1"))
    h.start_tool("c2")
    h.record_result("c2", 7)
    h.end_step()
    assert h.step().output.text == "Both done."
    results = [e.data for e in s.events if e.type == "tool/result"]
    assert [r["content"] for r in results] == [{"rows": 2}, "7"]


class BadArgsClient:
    """Answers first with a call whose arguments are not JSON, then as scripted."""

    def __init__(self, api: str, then: list[Reply]) -> None:
        self.api = api
        self.inner = ScriptedClient(api, then)
        self.first = True
        self.bodies: list[Any] = []

    def create(self, body: Any) -> Any:
        self.bodies.append(body)
        if not self.first:
            return self.inner.create(body)
        self.first = False
        out = render(self.api, Reply("", [("b1", "run_sql", {"q": "x"})]))
        if self.api == "openai-chat":
            out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json"
        elif self.api == "openai-responses":
            out["output"][-1]["arguments"] = "{not json"
        else:
            out["content"][-1]["input"] = "{not json"
        return out


@pytest.mark.parametrize("api", [a for a in APIS if a != "gemini"])
def test_unparseable_arguments_are_answered_as_an_error_the_model_sees_never_run(
        api: str) -> None:
    """(Gemini's call arguments are always an object: it has no unparseable ones.)"""
    ran: list[Any] = []
    s = cases.new_session("bad")
    client = BadArgsClient(api, [Reply("Retried.", [("b2", "run_sql", {"q": "y"})]),
                                 Reply("Done.")])
    h = Harness(s, client, api, cases.HEADER, cases.registry(), providers=[cases.TOOLS],
                tools={"run_sql": lambda a, c: ran.append(a) or "1 row"},
                variables={"agent": "Ada"})
    r = h.turn("go")
    assert r.reason == "completed" and len(r.steps) == 3
    assert ran == [{"q": "y"}]  # the unparseable call never ran
    first = next(e for e in s.events if e.type == "assistant/message")
    assert first.data["withheld_tool_calls"][0]["arguments_text"] == "{not json"
    skipped = next(e for e in s.events if e.type == "tool/call")
    assert skipped.data["skipped"] == "invalid-arguments"
    result = next(e for e in s.events if e.type == "tool/result")
    assert result.data["status"] == "error" and "not valid JSON" in result.data["content"]
    validate(api, client.bodies[1])
    assert "not valid JSON" in json.dumps(client.bodies[1])  # the model was told


class BrokenStream:
    """A stream whose transport fails after a few events (as the SDKs raise it)."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def create(self, body: Any) -> Any:
        def events() -> Any:
            yield from render("anthropic", PARALLEL[0], stream=True)[:4]
            raise self.exc
        return events()


def test_a_transport_error_mid_stream_is_the_named_stream_error_and_records_nothing() -> None:
    import anthropic

    from tests.unit.sdk_check import httpx

    request = httpx.Request("POST", "http://provider.test/v1/messages")
    for exc in (anthropic.APIConnectionError(request=request),
                httpx.ReadError("connection reset", request=request)):
        s = cases.new_session("reset")
        h = Harness(s, BrokenStream(exc), "anthropic", cases.HEADER, cases.registry(),
                    variables={"agent": "Ada"}, stream=True)
        with pytest.raises(StreamInterrupted, match="connection broke mid-stream") as info:
            h.turn("go")
        assert info.value.__cause__ is exc
        types = [e.type for e in s.events]
        assert "assistant/message" not in types and "request/header" not in types
        assert "assistant/chunk" not in types
        assert s.events[-1].data["reason"] == "failed"


def test_a_read_error_through_the_sdk_client_is_the_named_stream_error() -> None:
    import anthropic

    from tests.unit.sdk_check import httpx

    events = render("anthropic", PARALLEL[0], stream=True)
    head = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events[:3])

    class Cut(httpx.SyncByteStream):
        def __iter__(self) -> Any:
            yield head.encode()
            raise httpx.ReadError("connection reset by peer")

    def handler(request: Any) -> Any:
        return httpx.Response(200, stream=Cut(), headers={"content-type": "text/event-stream"})

    sdk = anthropic.Anthropic(api_key="k", base_url="http://provider.test", max_retries=0,
                              http_client=httpx.Client(transport=httpx.MockTransport(handler)))

    class Client:
        def create(self, body: Any) -> Any:
            return (e.model_dump(mode="json") for e in sdk.messages.create(**body))

    s = cases.new_session("sdk-reset")
    h = Harness(s, Client(), "anthropic", cases.HEADER, cases.registry(),
                variables={"agent": "Ada"}, stream=True)
    with pytest.raises(StreamInterrupted):
        h.turn("go")
    assert [e.type for e in s.events][-1] == "turn/end"
    assert "assistant/message" not in [e.type for e in s.events]
