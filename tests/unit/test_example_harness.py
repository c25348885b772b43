"""examples/harness.py runs against the official SDK clients (over a mock transport)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from examples.harness import harness, make_client
from sessionstream.core.providers import APIS
from sessionstream.core.providers.scripted import Reply, render
from sessionstream.core.session import Session
from tests.unit.sdk_check import _sse, gemini_sse, gemini_wire_to_body, httpx, validate


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_the_example_harness_runs_a_tool_turn_through_the_sdk(api: str, stream: bool,
                                                              monkeypatch: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://provider.test/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://provider.test")
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://provider.test")
    replies = iter([Reply("", [("c1", "add", {"a": 17, "b": 25})]), Reply("It is 42.")])
    sent: list[dict[str, Any]] = []

    def handler(request: Any) -> Any:
        body = gemini_wire_to_body(request) if api == "gemini" else json.loads(request.content)
        sent.append(body)
        reply = render(api, next(replies), stream=stream)
        if stream:
            wire = gemini_sse(reply) if api == "gemini" else _sse(reply, api)
            return httpx.Response(200, content=wire,
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=reply)

    client = make_client(api, httpx.Client(transport=httpx.MockTransport(handler)))
    session = Session.create("example")
    result = harness(session, client, api, "some-model", stream=stream).turn("17 + 25?")
    assert result.reason == "completed"
    result_event = next(e for e in session.events if e.type == "tool/result")
    assert result_event.data["content"] == "42"
    assert len(sent) == 2
    for body in sent:
        validate(api, {k: v for k, v in body.items()})
    assert session.derive_messages()[-1].content == "It is 42."


def test_the_readme_harness_snippet_runs(monkeypatch: Any) -> None:
    """The README's dozen lines, run as written (the SDK client over a mock transport)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Running a model step")
    block = readme[readme.index("```python", start) + len("```python"):]
    code = block[:block.index("```")]
    assert "OpenAI()" in code
    replies = iter([Reply("", [("c1", "add", {"a": 17, "b": 25})]), Reply("42.")])

    def handler(request: Any) -> Any:
        return httpx.Response(200, json=render("openai-chat", next(replies)))

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://provider.test/v1")
    namespace: dict[str, Any] = {"HTTP": httpx.Client(transport=httpx.MockTransport(handler))}
    exec(code.replace("OpenAI()", "OpenAI(http_client=HTTP)"), namespace)
    session = namespace["session"]
    assert session.events[-1].data == {"reason": "completed"}
    result = next(e for e in session.events if e.type == "tool/result")
    assert result.data["content"] == "42"
