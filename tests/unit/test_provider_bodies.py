"""Built provider bodies are valid for the official SDKs and map back to their sources."""

from __future__ import annotations

import pytest

from sessionstream.core.providers import APIS, build, parse_response
from sessionstream.core.providers.errors import ProviderMappingError
from sessionstream.core.providers.scripted import Reply, render
from sessionstream.core.request import assemble
from tests.unit import harness_cases as cases
from tests.unit.sdk_check import send, validate

REQUESTS = cases.requests()
CASES = sorted(REQUESTS)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("case", CASES)
def test_every_built_body_validates_against_the_sdk_types(api: str, case: str) -> None:
    validate(api, build(api, REQUESTS[case]).body)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("case", CASES)
def test_the_sdk_client_sends_the_built_body_unchanged(api: str, case: str) -> None:
    body = build(api, REQUESTS[case]).body
    sent, response = send(api, body, render(api, Reply("ok")))
    assert sent == body
    assert parse_response(api, response).model == "scripted-1"


@pytest.mark.parametrize("api", APIS)
def test_a_streaming_body_is_sent_by_the_sdk_and_its_events_parse(api: str) -> None:
    body = build(api, REQUESTS["manual"], stream=True).body
    sent, events = send(api, body, render(api, Reply("a b c d"), stream=True))
    assert sent == body and sent["stream"] is True
    assert events


@pytest.mark.parametrize("api", APIS)
def test_every_message_and_tool_and_system_section_has_an_origin(api: str) -> None:
    request = REQUESTS["manual"]
    built = build(api, request)
    sources = [o.source for o in built.origins]
    seqs = {s for src in sources for s in src.get("seqs", ())}
    assert seqs >= {m.seqs[0] for m in request.messages}
    assert {src["name"] for src in sources if src["part"] == "tool"} == {"run_sql", "read_file"}
    sections = {x for src in sources if src["part"] == "system" for x in src["sections"]}
    assert sections == {"role", "rules"}
    assert any(src.get("field") == "model" and src["source"] == "call" for src in sources)


def _resolve(body: dict, path: str) -> object:
    node: object = body
    for key in path.strip("/").split("/"):
        if not key:
            continue
        node = node[int(key)] if isinstance(node, list) else node[key]  # type: ignore[index]
    return node


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("case", CASES)
def test_every_origin_path_points_into_the_body(api: str, case: str) -> None:
    built = build(api, REQUESTS[case])
    for origin in built.origins:
        _resolve(built.body, origin.path)


def test_openai_chat_mapping_facts() -> None:
    body = build("openai-chat", REQUESTS["manual"]).body
    msgs = body["messages"]
    assert msgs[0]["role"] == "system" and "You are Ada" in msgs[0]["content"]
    call = next(m for m in msgs if m.get("tool_calls"))
    assert call["tool_calls"][0] == {"id": "c1", "type": "function", "function": {
        "name": "run_sql", "arguments": '{"q":"select 2025"}'}}
    i = msgs.index(call)
    # both results follow the calls directly; the steering message moved after them
    assert [m["role"] for m in msgs[i + 1:i + 4]] == ["tool", "tool", "user"]
    assert msgs[i + 2]["content"] == 'ERROR: {"code":13,"error":"permission denied"}'
    assert body["max_completion_tokens"] == 512 and "max_tokens" not in body
    sql = next(t for t in body["tools"] if t["function"]["name"] == "run_sql")
    assert sql == {"type": "function", "function": {
        "name": "run_sql", "description": "Run a read-only SQL query",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                       "required": ["q"]}}}


def test_anthropic_mapping_facts() -> None:
    body = build("anthropic", REQUESTS["manual"]).body
    assert body["system"][0] == {"type": "text", "text": "You are Ada, a data analyst."}
    msgs = body["messages"]
    i = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    uses = [b for b in msgs[i]["content"] if b["type"] == "tool_use"]
    assert uses[1]["input"] == {"path": "/etc/x", "n": 3}
    results = msgs[i + 1]["content"]
    assert [b["tool_use_id"] for b in results] == ["c1", "c2"]
    assert results[1]["is_error"] is True and "is_error" not in results[0]
    assert msgs[i + 2]["content"] == [{"type": "text", "text": "Also last week"}]
    sql = next(t for t in body["tools"] if t["name"] == "run_sql")
    assert sql["input_schema"]["required"] == ["q"] and "parameters" not in sql
    assert body["max_tokens"] == 512


def test_responses_mapping_facts() -> None:
    body = build("openai-responses", REQUESTS["manual"]).body
    assert body["instructions"].startswith("You are Ada")
    kinds = [(i["type"], i.get("role")) for i in body["input"]]
    assert ("function_call", None) in kinds and ("function_call_output", None) in kinds
    answer = next(i for i in body["input"] if i.get("role") == "assistant")
    assert answer["content"][0]["type"] == "output_text"
    assert body["max_output_tokens"] == 512 and body["reasoning"] == {"effort": "low"}


def test_a_compacted_surface_sends_the_summary_as_a_user_message() -> None:
    request = REQUESTS["compacted"]
    built = build("openai-chat", request)
    summaries = [o for o in built.origins if o.source.get("kind") == "summary"]
    assert summaries, "the fixture has a compaction summary on its surface"


def test_a_truncated_tool_call_never_reaches_a_body() -> None:
    for api in APIS:
        body = build(api, REQUESTS["truncated"]).body
        assert "t1" not in str(body)


def test_anthropic_without_max_tokens_sends_a_default_and_says_so() -> None:
    request = REQUESTS["manual"]
    header = cases.resolve_header(("call", {"provider": "p", "model": "m"}))
    bare = assemble(request.messages, cases.registry(), header=header,
                    variables={"agent": "x"})
    built = build("anthropic", bare)
    assert built.body["max_tokens"] == 4096
    assert any("max_tokens" in n.note for n in built.notes)


def test_a_result_whose_call_is_not_on_the_surface_is_a_named_error() -> None:
    request = REQUESTS["manual"]
    no_calls = tuple(m for m in request.messages if not m.tool_calls)
    broken = assemble(no_calls, cases.registry(), header=cases.HEADER,
                      variables={"agent": "x"})
    for api in APIS:
        with pytest.raises(ProviderMappingError, match="not on the surface"):
            build(api, broken)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("case", CASES)
def test_every_top_level_field_and_every_message_has_an_origin(api: str, case: str) -> None:
    built = build(api, REQUESTS[case], stream=True)
    paths = {o.path for o in built.origins}
    tops = {p.split("/")[1] for p in paths}
    assert set(built.body) - {"stream_options"} <= tops | {"reasoning"}
    seq_key = {"openai-responses": "input", "gemini": "contents"}.get(api, "messages")
    for i in range(len(built.body[seq_key])):
        assert any(p == f"/{seq_key}/{i}" or p.startswith(f"/{seq_key}/{i}/") for p in paths), i
    tools = "/config/tools/0/function_declarations" if api == "gemini" else "/tools"
    body_tools = built.body.get("config", {}).get("tools", [{}])[0].get(
        "function_declarations", ()) if api == "gemini" else built.body.get("tools", ())
    for i in range(len(body_tools)):
        assert f"{tools}/{i}" in paths
