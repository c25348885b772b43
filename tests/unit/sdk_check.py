"""Checks of built bodies against the official SDKs (test-only: the core never imports them).

``validate(api, body)`` validates every message / input item / system block / tool with
the SDK's own request types through a pydantic ``TypeAdapter``, one by one (whole
bodies crashed pydantic-core), drains the lazily validated iterables, and requires the
validated value to equal the item — so an unknown key the SDK would drop fails too.
``send(api, body, reply)`` sends the body through the SDK's client over an
``httpx`` mock transport and returns the JSON the SDK put on the wire, plus the SDK's
parsed response (or the list of its stream events, dumped to JSON).
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Callable, Iterable
from typing import Any

import anthropic
import openai
from google import genai
from google.genai import types as gtypes

try:  # the SDKs' HTTP client: httpx2 in current releases, httpx before
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]
from anthropic.types import MessageParam, TextBlockParam, ToolParam
from anthropic.types import message_create_params as mcp
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from openai.types.chat import completion_create_params as ccp
from openai.types.responses import FunctionToolParam, ResponseInputItemParam
from openai.types.responses import response_create_params as rcp
from pydantic import TypeAdapter

_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(t: Any) -> TypeAdapter[Any]:
    if t not in _ADAPTERS:
        _ADAPTERS[t] = TypeAdapter(t)
    return _ADAPTERS[t]


def drain(value: Any) -> Any:
    """A validated value with every lazy iterable validated and turned into a list."""
    if isinstance(value, dict):
        return {k: drain(v) for k, v in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if isinstance(value, Iterable):
        return [drain(v) for v in value]
    return value


def check(t: Any, item: Any, where: str) -> None:
    out = drain(_adapter(t).validate_python(item))
    assert out == item, f"{where}: the SDK type drops or changes parts:\n{out}\n!=\n{item}"


def check_model(model: type[Any], item: Any, where: str) -> None:
    """``item`` is a google-genai model's JSON form exactly (python and JSON validation)."""
    for value in (model.model_validate(item), model.model_validate_json(json.dumps(item))):
        out = value.model_dump(mode="json", exclude_none=True)
        assert out == item, f"{where}: the SDK type drops or changes parts:\n{out}\n!=\n{item}"


def _validate_gemini(body: dict[str, Any]) -> None:
    assert set(body) <= {"model", "contents", "config", "stream"}, sorted(body)
    assert isinstance(body["model"], str)
    for i, c in enumerate(body["contents"]):
        check_model(gtypes.Content, c, f"/contents/{i}")
    if "config" in body:
        check_model(gtypes.GenerateContentConfig, body["config"], "/config")


#: The SDKs' own types of a create call's arguments (the body's top-level keys).
_CREATE_PARAMS = {"openai-chat": ccp.CompletionCreateParamsBase,
                  "openai-responses": rcp.ResponseCreateParamsBase,
                  "anthropic": mcp.MessageCreateParamsBase}
#: Keys validated item by item below.
_ITEMS = {"messages", "input", "tools", "system"}
#: Messages API parameters of earlier versions the installed SDK has no argument for
#: (it sends them only through ``extra_body``): a body may still carry them as sent.
EARLIER_PARAMS = {"anthropic": {"temperature", "top_p", "top_k", "mcp_servers"}}


def check_params(api: str, body: dict[str, Any]) -> None:
    """Every top-level key is an argument of the SDK's create call, of its type."""
    hints = typing.get_type_hints(_CREATE_PARAMS[api])
    for key, value in body.items():
        if key in _ITEMS or key in EARLIER_PARAMS.get(api, ()):
            continue
        if key == "stream":
            assert isinstance(value, bool), f"/stream: {value!r}"
            continue
        assert key in hints, f"/{key}: not an argument of the SDK's create call"
        check(hints[key], value, f"/{key}")


def validate(api: str, body: dict[str, Any]) -> None:
    if api == "gemini":
        _validate_gemini(body)
        return
    check_params(api, body)
    if api == "openai-chat":
        for i, m in enumerate(body["messages"]):
            check(ChatCompletionMessageParam, m, f"/messages/{i}")
        for i, t in enumerate(body.get("tools", ())):
            check(ChatCompletionFunctionToolParam, t, f"/tools/{i}")
    elif api == "openai-responses":
        for i, item in enumerate(body["input"]):
            check(ResponseInputItemParam, item, f"/input/{i}")
        for i, t in enumerate(body.get("tools", ())):
            check(FunctionToolParam, t, f"/tools/{i}")
    else:
        for i, m in enumerate(body["messages"]):
            check(MessageParam, m, f"/messages/{i}")
        for i, b in enumerate(body.get("system", ())):
            check(TextBlockParam, b, f"/system/{i}")
        for i, t in enumerate(body.get("tools", ())):
            check(ToolParam, t, f"/tools/{i}")
        roles = [m["role"] for m in body["messages"]]
        assert roles[0] == "user", "Anthropic needs the first message to be the user's"
        _check_anthropic_rounds(body["messages"])


def _check_anthropic_rounds(messages: list[dict[str, Any]]) -> None:
    """Every tool_use is answered in the very next message, which is a user message."""
    for i, m in enumerate(messages):
        uses = [b["id"] for b in m["content"] if m["role"] == "assistant"
                and b["type"] == "tool_use"]
        if not uses:
            continue
        nxt = messages[i + 1]
        assert nxt["role"] == "user"
        answered = [b["tool_use_id"] for b in nxt["content"] if b["type"] == "tool_result"]
        assert sorted(answered) == sorted(uses), (uses, answered)
        kinds = [b["type"] for b in nxt["content"]]
        assert kinds[: len(uses)] == ["tool_result"] * len(uses)


def _sse(events: list[dict[str, Any]], api: str) -> bytes:
    lines = []
    for e in events:
        if api == "openai-chat":
            lines.append(f"data: {json.dumps(e)}\n\n")
        else:
            lines.append(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n")
    if api == "openai-chat":
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def gemini_client(handler: Callable[[httpx.Request], httpx.Response]) -> genai.Client:
    """The google-genai client over an ``httpx`` mock transport (no retries)."""
    http = httpx.Client(transport=httpx.MockTransport(handler))
    return genai.Client(api_key="test-key", http_options=gtypes.HttpOptions(
        base_url="http://provider.test", httpx_client=http,
        retry_options=gtypes.HttpRetryOptions(attempts=1)))


def gemini_call(client: genai.Client, body: dict[str, Any]) -> Any:
    """``body`` sent as the SDK call it is (``stream`` picks the streaming method);
    the answer dumped to JSON (a list of chunks for a stream)."""
    kwargs = {k: v for k, v in body.items() if k != "stream"}
    if body.get("stream"):
        return [e.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})
                for e in client.models.generate_content_stream(**kwargs)]
    result = client.models.generate_content(**kwargs)
    return result.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})


_GEMINI_URL = re.compile(r"/models/([^/:]+):(generateContent|streamGenerateContent)")


def gemini_wire_to_body(request: httpx.Request) -> dict[str, Any]:
    """The REST request the SDK sent, read back into the builder's form with the SDK's
    own models (so ``== body`` means the SDK carried every part unchanged)."""
    wire = json.loads(request.content)
    found = _GEMINI_URL.search(request.url.path)
    assert found, request.url
    dump = {"mode": "json", "exclude_none": True}
    back: dict[str, Any] = {"model": found.group(1), "contents": [
        gtypes.Content.model_validate(c).model_dump(**dump) for c in wire.pop("contents")]}
    config: dict[str, Any] = {}
    if "systemInstruction" in wire:
        config["system_instruction"] = gtypes.Content.model_validate(
            wire.pop("systemInstruction")).model_dump(**dump)
    if "tools" in wire:
        config["tools"] = [gtypes.Tool.model_validate(t).model_dump(**dump)
                           for t in wire.pop("tools")]
    if "generationConfig" in wire:
        config.update(gtypes.GenerationConfig.model_validate(
            wire.pop("generationConfig")).model_dump(**dump))
    assert not wire, f"the SDK sent fields the builder's form has no place for: {wire}"
    if config:
        back["config"] = config
    if found.group(2) == "streamGenerateContent":
        back["stream"] = True
    return back


def gemini_sse(chunks: list[dict[str, Any]]) -> bytes:
    return "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks).encode()


def _send_gemini(body: dict[str, Any], reply: Any) -> tuple[dict[str, Any], Any]:
    sent: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        sent.update(gemini_wire_to_body(request))
        if isinstance(reply, list):
            return httpx.Response(200, content=gemini_sse(reply),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=reply)

    return sent, gemini_call(gemini_client(handler), body)


def send(api: str, body: dict[str, Any], reply: Any) -> tuple[dict[str, Any], Any]:
    """(the JSON the SDK sent, the SDK's response or stream events dumped to JSON)."""
    if api == "gemini":
        return _send_gemini(body, reply)
    sent: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        sent.update(json.loads(request.content))
        if isinstance(reply, list):
            return httpx.Response(200, content=_sse(reply, api),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=reply)

    http = httpx.Client(transport=httpx.MockTransport(handler))
    if api == "anthropic":
        client = anthropic.Anthropic(api_key="test-key", base_url="http://provider.test",
                                     http_client=http, max_retries=0)
        result: Any = client.messages.create(**body)
    else:
        oclient = openai.OpenAI(api_key="test-key", base_url="http://provider.test/v1",
                                http_client=http, max_retries=0)
        if api == "openai-chat":
            result = oclient.chat.completions.create(**body)
        else:
            result = oclient.responses.create(**body)
    if isinstance(reply, list):
        return sent, [e.model_dump(mode="json") for e in result]
    return sent, result.model_dump(mode="json")
