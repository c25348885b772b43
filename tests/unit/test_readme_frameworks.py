"""The README's framework examples run as printed (offline: the memory store; the Agents
SDK's model is its own OpenAI client over a mock transport, since no endpoint is reachable)
and print what their last comment says."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _example(heading: str) -> tuple[str, str]:
    """The first python block under ``heading`` and what its last ``print`` comment says."""
    section = README.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, f"no python example under {heading!r}"
    expected = re.findall(r"print\(.*\)\s+# (.*)", code.group(1))
    assert expected, f"the example under {heading!r} prints nothing it promises"
    return code.group(1), expected[-1].strip()


def _run(code: str) -> str:
    """Run ``code`` as a module of its own (typing resolves its annotations there)."""
    module = types.ModuleType("readme_example")
    sys.modules[module.__name__] = module
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return out.getvalue().strip()


def test_the_adk_example_runs() -> None:
    code, expected = _example("Google ADK sessions on sessionstream")
    assert _run(code) == expected


def test_the_langgraph_example_runs() -> None:
    code, expected = _example("LangGraph checkpoints on sessionstream")
    assert _run(code) == expected


@pytest.fixture
def responses_model() -> Iterator[list[dict[str, Any]]]:
    """The Agents SDK's default client answering from a mock transport: "Paris." then
    "Rome."; yields the request bodies it received."""
    from agents import set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    seen: list[dict[str, Any]] = []

    def reply(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        n = len(seen)
        return httpx.Response(200, json={
            "id": f"resp_{n}", "object": "response", "created_at": 0, "status": "completed",
            "model": body["model"], "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "output": [{
                "type": "message", "id": f"msg_{n}", "status": "completed",
                "role": "assistant", "content": [{
                    "type": "output_text", "text": "Paris." if n == 1 else "Rome.",
                    "annotations": []}]}],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}})

    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(
        api_key="test", http_client=httpx.AsyncClient(transport=httpx.MockTransport(reply))))
    yield seen
    set_default_openai_client(AsyncOpenAI(api_key="unused"))


def test_the_openai_agents_example_runs_and_its_second_turn_sees_the_first(
        responses_model: list[dict[str, Any]]) -> None:
    code, expected = _example("Under an agent framework: the OpenAI Agents SDK")
    assert _run(code) == expected
    second = responses_model[1]["input"]
    assert [i.get("role") for i in second] == ["user", "assistant", "user"]
    assert second[1]["content"][0]["text"] == "Paris."  # read back from the session
